"""A study's goals as records: what it aimed at, what its run measured, under which protocol, and whether the goal
was met. The notebook's verdict prints them (`goal_line`) and the front page counts them (labkit.studies.front), from
the same list, so the two cannot say different things.

A goal is a dict: goal (the verdict's words), brief (the front page's), measured (text, numbers from the record;
short: the front page's),
target (text), protocol (a bench.PROTOCOL_NAMES value, "host time per call", or None where no timing is involved),
met (True, False, or None where the run holds nothing to judge it on).
"""
from __future__ import annotations

import math

from labkit.studies.bench import PROTOCOL_NAMES

HOST = "host time per call"  # wall-clock loops (labkit.studies.measure.host_us_per_call), neither protocol A nor B


def goal(what: str, measured: str, target: str, met, protocol: str | None = None, brief: str | None = None,
         short: str | None = None) -> dict:
    """`brief` and `short`: the goal and its measurement as the front page lists a missed goal (default: `what` and
    `measured`)."""
    return {"goal": what, "brief": brief or what, "measured": measured, "short": short or measured, "target": target,
            "protocol": protocol, "met": None if met is None else bool(met)}


def met_word(met) -> str:
    return "not judged" if met is None else "met" if met else "missed"


def goal_line(g: dict, indent: str = "  ") -> str:
    """The verdict's line for one goal: '<goal>, <protocol>: <measured> (goal <target>: met|missed|not judged)'
    (the protocol named where the goal is a time under protocol A or B)."""
    timed = g["protocol"] in PROTOCOL_NAMES.values()
    return (f"{indent}{g['goal']}{', ' + g['protocol'] if timed else ''}: {g['measured']} (goal {g['target']}: "
            f"{met_word(g['met'])})")


def tally(goals: list[dict]) -> dict:
    """{"met": k, "missed": m, "not judged": u, "judged": k + m}."""
    out = {w: sum(met_word(g["met"]) == w for g in goals) for w in ("met", "missed", "not judged")}
    return {**out, "judged": out["met"] + out["missed"]}


def beside(value: float | None, limit: float, unit: str = "x") -> str:
    """`value` as a line of text says it (a ratio as labkit.records.text.ratio: 0.86x, 24.9x; other units with three
    significant figures), with more digits where that would read as the limit it misses or meets by less (1.1536
    against 1.15 reads 1.154x, not 1.15x); 'n/a' for None."""
    if value is None:
        return "n/a"
    decimals = (1 if abs(value) >= 10 else 2) if unit == "x" else max(0, 2 - math.floor(math.log10(abs(value) or 1)))
    while decimals < 8 and value != limit and round(value, decimals) == limit:
        decimals += 1
    return f"{value:.{decimals}f}" + ("x" if unit == "x" else f" {unit}" if unit else "")


def listed(ratios, empty: str = "none", limit: float | None = None) -> str:
    """(shape, ratio) pairs as a verdict names them: '4096x768 0.81x, 8192x1024 0.93x'; `empty` for none. With the
    goal's `limit`, a ratio that two decimals would round onto it gets the digits `beside` gives (0.9486 against
    0.95 reads 0.949x)."""
    return ", ".join(f"{k} {beside(v, limit) if limit is not None else f'{v:.2f}x'}" for k, v in ratios) or empty


def tally_text(goals: list[dict]) -> str:
    """'; goals k of n met' for a page's result line, '' where none is judged."""
    t = tally(goals)
    return f"; goals {t['met']} of {t['judged']} met" if t["judged"] else ""
