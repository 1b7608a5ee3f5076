"""Parallel statistics under the reference contract: the floors, the stage breakdown and the optimization log
behind the chain-parallel kernel (labkit.ops.chain). Records in, tables and figures out; notebook 07 shows them."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from labkit.core.compile import REPO_ROOT
from labkit.records.check import identical_count
from labkit.studies.bench import PROTOCOL_NAMES
from labkit.studies.goals import tally
from labkit.tasks import EXTRA_SHAPES, L1_40, shape_key

# The chain kernel's development measurements that the optimization log reads (predictions.json and the raw outputs it
# points at; the probe itself: docs/decisions.md#chain).
CHAIN_LOG = REPO_ROOT / "data" / "probes" / "chain"
# What notebook 07 measures needs (labkit.records.session.RunSession.open): on an older GPU it replays the H200 run.
NEEDS_ARCH = 90  # labkit.ops.chain.BULK_ARCH: the stage breakdown times the tma kernel (the study reads no op at import)
NEEDS = "the tma chain kernel's bulk copies, mbarrier transaction counts and tensor maps (sm_90 and later)"
# The methods timed beside the chain kernel: native, the post's design, split statistics and Inductor.
TIMED_METHODS = ("native", "reference_order", "split_interleaved", "inductor", "chain")


# Ring shapes timed beside the default in the stage breakdown: the previous default (16-step stages) and a
# middle one, to show what stage length does to the statistics pass.
RING_VARIANTS = ((16, 24, 4), (32, 12, 8))


def stage_methods(x, w, b, eps: float) -> dict:
    """Each stage alone, variants that drop a stage's work (loads only / chains only), other ring shapes and
    output kernels, stages doubled, and the whole kernel: zero-argument callables on preallocated buffers."""
    import torch

    from labkit.core.device import current_index, device_info
    from labkit.ops import chain, reference_order
    from labkit.lab.stages import output_only, stats_only

    rows, n = x.numel() // w.numel(), w.numel()
    dev = device_info(current_index(x.device))
    mean = torch.empty(rows, device=x.device)
    rstd = torch.empty(rows, device=x.device)
    y = torch.empty_like(x)
    main = chain.choose_blocking(n, dev)

    def stats(blocking=main, options=(), tma=None):
        p = chain.launches(rows, n, dev, chain.ChainSettings("chain", blocking, tma, options))
        return lambda: stats_only(p, x, mean, rstd, eps)

    default_launches = chain.launches(rows, n, dev, chain.ChainSettings("chain"))
    columns = lambda: output_only(default_launches, x, mean, rstd, w, b, y)  # noqa: E731
    rows_launches = reference_order.launches(rows, n, dev)
    statistics = stats()
    m = {
        "chain (whole kernel)": lambda: chain.chain_layer_norm(x, w, b, eps),
        f"stats ({main})": statistics,
        "output pass (columns, last columns first)": columns,
        "output pass (affine_rows: the post's design)": lambda: output_only(rows_launches, x, mean, rstd, w, b, y),
        "output pass twice": lambda: (columns(), columns()),
        f"stats twice ({main})": lambda: (stats()(), stats()()),
        "stats (w4: whole-row blocks)": stats("w4"),
        "stats (w1: per-step copies)": stats("w1"),
        "native torch LayerNorm": lambda: torch.nn.functional.layer_norm(x, tuple(w.shape), w, b, eps),
        WRITES: lambda: y.fill_(0.0),
    }
    m.update(carry_methods(default_launches, statistics, x, mean, rstd, w, b, y))
    if main == "tma":
        default = chain.TmaConfig()
        m["stats, loads only (tma)"] = stats("tma", ("-DCHAIN_VARIANT=1",))
        m["stats, chains only (tma)"] = stats("tma", ("-DCHAIN_VARIANT=2",))
        for steps, stages, ahead in RING_VARIANTS:
            c = chain.TmaConfig(steps, stages, ahead)
            if c != default:
                m[f"stats (tma ring {steps} steps x {stages} stages, {ahead} ahead)"] = stats("tma", (), c)
    return m


# What L2 carries from the statistics pass to the output pass: the statistics, then the output pass over a part of
# every row's columns: the part the statistics read last (what L2 could still hold) or the part they read first.
# An eighth of L1/40's x is 32 MiB, half the H200's L2: small enough to be held whole, large enough to time.
CARRY_PART = 8  # the part: 1/CARRY_PART of every row's columns (rounded down to whole blocks)
CARRY_LAST = f"stats, then the output pass over the rows' last 1/{CARRY_PART}"
CARRY_FIRST = f"stats, then the output pass over the rows' first 1/{CARRY_PART}"
# the same parts alone: the two parts' own times differ (by about a microsecond at L1/40), so the carry is the
# difference of the differences
PART_LAST = f"output pass over the rows' last 1/{CARRY_PART} alone"
PART_FIRST = f"output pass over the rows' first 1/{CARRY_PART} alone"
CARRY_KEYS = (CARRY_LAST, CARRY_FIRST, PART_LAST, PART_FIRST)
WRITES = "y written alone (fill)"  # the output pass's writes without its reads: its time with x held on chip


def carry_methods(launches, statistics, x, mean, rstd, w, b, y) -> dict:
    """CARRY_KEYS as callables: `statistics` (the statistics stage of `launches`) then, or alone, their output kernel
    on a grid covering 1/CARRY_PART of the float4 columns (whole blocks, rounded down), given pointers offset to the
    part's first column (the kernel indexes rows by its n / 4 argument, so an offset base pointer selects columns).
    {} where a part is less than one block of columns."""
    from dataclasses import replace

    from labkit.lab.stages import output_only

    threads = launches.output.block[0]
    blocks = launches.n // 4 // CARRY_PART // threads
    if not blocks:
        return {}
    part = replace(launches, output=replace(launches.output, grid=(blocks,)))
    first = launches.n - 4 * threads * blocks  # floats into the row: the last part's first column
    flat_x, flat_y, flat_w, flat_b = x.view(-1), y.view(-1), w.view(-1), b.view(-1)

    def last():
        output_only(part, flat_x[first:], mean, rstd, flat_w[first:], flat_b[first:], flat_y[first:])

    def head():
        output_only(part, x, mean, rstd, w, b, y)

    return {CARRY_LAST: lambda: (statistics(), last()), CARRY_FIRST: lambda: (statistics(), head()),
            PART_LAST: last, PART_FIRST: head}


def carried_ms(stats: dict) -> float:
    """What L2 carried into the output pass over the rows' last part, from a breakdown's medians: how much more the
    first part costs after the statistics than alone, less the same for the last part."""
    return ((stats[CARRY_FIRST]["median_ms"] - stats[PART_FIRST]["median_ms"])
            - (stats[CARRY_LAST]["median_ms"] - stats[PART_LAST]["median_ms"]))


def stage_breakdown(shape=L1_40, rounds: int = 35, seed: int = 0, eps: float = 1e-5, device="cuda") -> dict:
    """Protocol A timings of every stage variant at one shape, with the bytes each moves, the device's on-chip
    storage (labkit.core.device.on_chip_storage) and the SMs the statistics kernel occupies (one block each: its
    ring takes most of an SM's shared memory)."""
    from labkit.core.device import current_index, device_info, on_chip_storage
    from labkit.ops import chain
    from labkit.studies.bench import PROTOCOL_A, time_methods
    from labkit.inputs import make_affine, make_input
    from dataclasses import replace

    x = make_input("uniform", shape, seed, device)
    w, b = make_affine("random_normal", shape[1:], seed, device)
    rec = time_methods(stage_methods(x, w, b, eps), replace(PROTOCOL_A, rounds=rounds),
                       baseline="native torch LayerNorm")
    nbytes = x.numel() * 4
    index = current_index(x.device)
    grid = chain.launches(x.numel() // w.numel(), w.numel(), device_info(index),
                          chain.ChainSettings("chain")).stats.grid
    return {"shape": list(shape), "x_bytes": nbytes, "affine_bytes": 2 * nbytes + 2 * w.numel() * 4,
            "timing": rec.to_json(), "on_chip": {**on_chip_storage(index), "stats_blocks": int(np.prod(grid))}}


def chain_candidate(x, w, b, eps):
    """The chain kernel as a bit-identity candidate: output, mean and rstd (the chain schedule forced: the dispatch
    rule may prefer rows_fused where no table says otherwise, e.g. under the arch override before `labkit tune`)."""
    from labkit.ops.chain import ChainSettings, chain_layer_norm

    return chain_layer_norm(x, w, b, eps, return_stats=True, settings=ChainSettings("chain"))


def bit_identity(shape, seeds, device="cuda") -> dict:
    """Notebook 01's matrix (seeds x affines x distributions) at `shape` with the chain kernel as the candidate:
    the `bit_identity` record."""
    from labkit.studies.bit_identity import run_matrix

    return run_matrix(shape, seeds, device=device, candidate=chain_candidate)


def timing_study(shapes, mode: str, rounds: int, device="cuda", log=None) -> dict:
    """The timing study of TIMED_METHODS at `shapes` under protocol A (rounds capped in quick mode): the `timing`
    record. `log` receives progress lines (default: none)."""
    from labkit.studies import methods, timing

    chosen = [methods.get(n) for n in TIMED_METHODS]
    return timing.run_study(timing.cases_for(shapes), timing.protocols_for(mode, ("A",), rounds), device=device,
                            methods=chosen, log=log or (lambda _line: None))


def timing_rows(timing_record: dict | None) -> list[dict]:
    """The timing study's per-shape table (protocol A); no rows without a record."""
    from labkit.studies.timing import shape_rows

    return shape_rows(timing_record, "A") if timing_record else []


def speedup_figure(timing_record: dict | None, label: str = ""):
    """Paired speedups vs native (protocol A); without a record, a figure that says there is none."""
    import matplotlib.pyplot as plt

    from labkit.studies.timing import plot_speedups

    fig = plot_speedups(timing_record, "A", label) if timing_record else None
    if fig is None:
        fig, ax = plt.subplots(figsize=(6, 1))
        ax.text(0.5, 0.5, f"no protocol A timing {label}".strip(), ha="center", va="center")
        ax.axis("off")
    return fig


FLOOR_ROW = "faster chain row + output pass (what statistics-then-output can reach)"


def floors(breakdown: dict | None, floor: dict | None, ceiling: dict | None) -> list[dict]:
    """The three floors of this contract at the breakdown's shape, next to what the kernel achieves (no rows
    without the three records)."""
    if not (breakdown and floor and ceiling):
        return []
    stats = breakdown["timing"]["stats"]
    aff = stats["output pass (columns, last columns first)"]["median_ms"]
    whole = stats["chain (whole kernel)"]["median_ms"]
    chain_floor_ms = floor["ms"] * (int(np.prod(breakdown["shape"][1:])) // 128) / floor["pushes"]
    chains_only = stats.get("stats, chains only (tma)", {}).get("median_ms")
    best_chain = min(chain_floor_ms, chains_only) if chains_only else chain_floor_ms
    bw_floor_ms = (breakdown["x_bytes"] + breakdown["affine_bytes"]) / (ceiling["read_plus_write_gbps"] * 1e6)
    rows = [
        {"floor": "dependent push chain (no loads)", "ms": chain_floor_ms,
         "how": f"chain_floor.cu, {floor['cycles_per_push']:.2f} cycles/push at "
                f"~{floor['sm_clock_ghz_implied']:.2f} GHz"},
    ]
    if chains_only:
        rows.append({"floor": "the statistics kernel with its loads removed (chains only)", "ms": chains_only,
                     "how": "CHAIN_VARIANT=2: the same loop, ring bookkeeping and merge, values from registers"})
    rows += [
        {"floor": "output pass alone (columns kernel)", "ms": aff,
         "how": f"{breakdown['affine_bytes'] / aff / 1e6:.0f} GB/s on read x + write y + gamma/beta"},
        {"floor": "all bytes at the copy ceiling (x once for stats, x + y for output)", "ms": bw_floor_ms,
         "how": f"{ceiling['read_plus_write_gbps']:.0f} GB/s device copy, measured in this run"},
        {"floor": FLOOR_ROW, "ms": best_chain + aff, "how": "sum: each pass at its own floor, one after the other",
         "chain_ms": best_chain, "chain_from": "chain_floor.cu" if best_chain == chain_floor_ms else "chains only",
         "output_ms": aff},
        *held_rows(breakdown, best_chain + aff),
        {"floor": "achieved: whole chain kernel", "ms": whole, "how": "protocol A median"},
    ]
    return rows


HELD_ROW = "x held on chip between the passes"  # the start of both held rows' names (the idle SMs, all SMs)


def held_rows(breakdown: dict, floor_ms: float) -> list[dict]:
    """Schedules that keep part of x on chip from the statistics to the output pass, bounded from this run's
    records (none where the breakdown predates them): what L2 carried (carried_ms), the writes alone (WRITES: the
    output pass with every read gone), and FLOOR_ROW less what holding x in shared memory and registers could save
    at most: the output pass's time beyond its writes, times the fraction of x held, plus L2's carry where
    positive. Two capacities: the SMs the statistics kernel leaves idle (`held` "idle"; the SMs it runs on keep
    some room too, so this is not a limit) and all SMs (`held` "all": an upper bound, the chains need theirs). Each
    held row keeps `saved_ms`, `held_bytes` and `beyond_writes_ms`."""
    stats, chip = breakdown["timing"]["stats"], breakdown.get("on_chip")
    if not chip or not all(k in stats for k in (*CARRY_KEYS, WRITES)):
        return []
    aff = stats["output pass (columns, last columns first)"]["median_ms"]
    writes = stats[WRITES]["median_ms"]
    beyond = max(0.0, aff - writes)  # what the output pass spends beyond its writes: what holding x could save
    carried = carried_ms(stats)
    per_sm = chip["smem_per_sm"] + chip["registers_per_sm"]
    idle = max(0, chip["sm_count"] - chip["stats_blocks"])  # the statistics kernel: one block per SM
    rows = [{"floor": "what L2 carries between the passes", "ms": carried,
             "how": f"{CARRY_FIRST} minus alone, less the same over the last 1/{CARRY_PART} (read last by the "
                    "statistics)"},
            {"floor": WRITES, "ms": writes,
             "how": f"{breakdown['x_bytes'] / writes / 1e6:.0f} GB/s: the output pass with none of x left to read"}]
    for key, who, sms in (("idle", f"the {idle} SMs the statistics leave idle", idle),
                          ("all", f"all {chip['sm_count']} SMs", chip["sm_count"])):
        held = sms * per_sm
        saved = beyond * min(1.0, held / breakdown["x_bytes"]) + max(0.0, carried)
        rows.append({"floor": f"{HELD_ROW}, in the shared memory and registers of {who}", "ms": floor_ms - saved,
                     "how": f"{held / 1e6:.1f} MB of {breakdown['x_bytes'] / 1e6:.0f} MB held: the output pass "
                            f"saves that share of its {beyond * 1e3:.1f} us beyond the writes",
                     "held": key, "saved_ms": saved, "held_bytes": held, "beyond_writes_ms": beyond,
                     "carried_ms": carried})
    return rows


def _tightest_block(ours: list[float], baseline: list[float], ratio: float) -> tuple[float, float] | None:
    """A per-block ratio goal (ModelNew >= `ratio`x the baseline in every block) as a time: of the blocks that miss
    it, the one asking the least time, as (baseline / ratio, ModelNew's time there); None where every block meets
    it."""
    missed = [(b / ratio, o) for o, b in zip(ours, baseline) if o > b / ratio]
    return min(missed, default=None)


def floor_verdict_lines(breakdown: dict | None, chain_floor: dict | None, ceiling: dict | None,
                        kb_record: dict | None, kb_source: str) -> list[str]:
    """The forward's L1/40 goals beside the floor this run measured for the schedule at L1/40 (`floors`' row: the
    faster chain row plus the output pass), from the newest run holding KernelBench's timing (kernelbench_timing.newest_run). Time goals as its goals judge them (graph
    replay's median, KernelBench's timing in its slowest block); ratio goals as the times they ask for (ModelNew at
    most torch.compile's median / 1.10 under graph replay; under KernelBench's timing the baseline's block mean /
    the ratio, in the missed block asking the least). The lines say which missed goals lie below that floor, and
    what it is made of. Floors measured at another shape (quick mode) are not compared."""
    from labkit.studies import kernelbench_timing as kb

    rows = floors(breakdown, chain_floor, ceiling)
    row = next((r for r in rows if r["floor"] == FLOOR_ROW), None)
    if row is None or tuple(breakdown["shape"]) != tuple(L1_40) or not kb_record:
        where = "none measured" if row is None else f"measured at {shape_key(breakdown['shape'])}, not L1/40"
        return [f"the forward's L1/40 time goals: not judged against a floor here (floors: {where}; KernelBench's "
                f"timing: {kb_source})"]
    g = kb_record["graph"]["stats"]
    graph, compile_graph = g[kb.OURS]["median_ms"], g["torch.compile"]["median_ms"]
    block, _, _ = kb._per_block(kb_record)
    floor = row["ms"]
    head = (f"the forward's L1/40 time goals beside the floor this run measured for the schedule: the faster chain row "
            f"({row['chain_from']}) {row['chain_ms']:#.3g} ms + the output pass {row['output_ms']:#.3g} ms = "
            f"{floor:#.3g} ms; achieved under graph replay {graph:#.3g} ms ({kb_source})")
    asked = [("graph replay", kb.A_MS_GOAL, graph),
             (f"graph replay at >= {kb.A_COMPILE_GOAL}x torch.compile ({compile_graph:#.3g} ms / {kb.A_COMPILE_GOAL})",
              compile_graph / kb.A_COMPILE_GOAL, graph),
             ("KernelBench's timing, slowest block", kb.B_MS_GOAL, max(block[kb.OURS]))]
    for name, baseline, ratio in (("torch.compile", "torch.compile", kb.B_COMPILE_GOAL),
                                  ("the reference", "reference", kb.B_NATIVE_GOAL)):
        tight = _tightest_block(block[kb.OURS], block[baseline], ratio)
        if tight is not None:
            asked.append((f"KernelBench's timing at >= {ratio}x {name} ({tight[0] * ratio:#.3g} ms / {ratio}, the "
                          f"missed block asking the least)", *tight))
    missed = [(what, target, got) for what, target, got in asked if got > target]
    above = [f"{what}: at most {target:#.3g} ms, measured {got:#.3g}" for what, target, got in missed
             if target >= floor]
    if above:
        head += f"; missed above the floor (within this schedule's reach): {'; '.join(above)}"
    below = [m for m in missed if m[1] < floor]
    if not below:
        return [head + "; no missed time goal lies below it"]
    held = {r["held"]: r for r in rows if "held" in r}
    cycles = f"{chain_floor['cycles_per_push']:.2f} cycles per push chain_floor.cu measured"
    notes = "; ".join(_below_note(*m, floor, held, breakdown["x_bytes"]) for m in below)
    if not held:
        return [head, f"  below that floor: {notes}. Meeting these needs a dependent chain faster than the {cycles}, "
                      "or part of x kept on chip between the passes (not measured in this run)"]
    return [head, f"  below that floor: {notes}", held_line(breakdown, held, cycles)]


def _below_note(what: str, target: float, got: float, floor: float, held: dict, x_bytes: int) -> str:
    """One missed goal under the schedule's floor and, beside the held rows (held_rows, by their `held` key),
    whether it lies under even the all-SM bound or how much of x a schedule would have to hold on chip to reach
    it: the time it asks off the floor, less L2's carry, as a share of the output pass's time beyond its writes.
    Bounds in 4 significant figures: a target and a bound can agree to 3."""
    line = f"{what}: at most {target:#.3g} ms, measured {got:#.3g} ({100 * (1 - target / floor):.0f}% under the floor)"
    if not held:
        return line
    every, idle = held["all"], held["idle"]
    if target < every["ms"]:
        return f"{line}, under even the bound with x held in all SMs ({every['ms']:#.4g} ms)"
    need = x_bytes * (floor - target - max(0.0, every["carried_ms"])) / every["beyond_writes_ms"]
    if need <= 0:
        return f"{line}, within what L2 carried"
    return (f"{line}, reachable only holding >= {need / 1e6:.0f} MB of x on chip (the idle SMs hold "
            f"{idle['held_bytes'] / 1e6:.0f} MB: {idle['ms']:#.4g} ms)")


def held_line(breakdown: dict, held: dict, cycles: str) -> str:
    """What this run measured of keeping x on chip between the passes, as the verdict says it."""
    carried, l2 = held["all"]["carried_ms"], breakdown["on_chip"].get("l2")
    said = (f"{carried * 1e3:.1f} us" if carried > 0 else f"nothing ({carried * 1e3:.1f} us, within the spread)")
    return (f"  between the passes, this run: L2{f' ({l2 / 2**20:.0f} MiB)' if l2 else ''} carried {said} of the "
            f"output pass over the rows' last 1/{CARRY_PART} (what the statistics read last, against their first "
            f"1/{CARRY_PART}); holding x in shared memory and registers saves at most the output pass's time beyond "
            f"its writes, in proportion to the share held: {held['idle']['ms']:#.4g} ms in the idle SMs, "
            f"{held['all']['ms']:#.4g} ms in all SMs. Below those bounds only a dependent chain faster than the "
            f"{cycles} (the statistics kernel runs at it) would help; no schedule of statistics then output can")


def breakdown_rows(breakdown: dict | None) -> list[dict]:
    if not breakdown:
        return []
    t = breakdown["timing"]
    return [{"variant": k, "median ms": v["median_ms"], "q25 ms": v["q25_ms"], "q75 ms": v["q75_ms"],
             "x torch eager (graph replay)": t["ratio_vs_baseline"][k]["median"]} for k, v in t["stats"].items()]


def _dig(obj, path):
    for key in path:
        obj = obj[key]
    return obj


def optimization_log(root: Path = CHAIN_LOG) -> list[dict]:
    """Predictions written before each change, next to the measurements read from the development outputs
    (data/probes/chain/)."""
    doc = json.loads((Path(root) / "predictions.json").read_text())
    rows = []
    for step in doc["steps"]:
        measured = {}
        for what, (fname, path) in step["measured"].items():
            measured[what] = _dig(json.loads((Path(root) / fname).read_text()), path)
        fmt = lambda d: ", ".join(f"{k} {v:.3g}" for k, v in d.items())  # noqa: E731
        rows.append({"step": step["step"], "change": step["change"], "prediction": step["prediction"],
                     "predicted (ms)": fmt(step["predicted_ms"]) or "—", "measured": fmt(measured),
                     "source": ", ".join(sorted({f for f, _ in step["measured"].values()}))})
    return rows


def idea_figure():
    """Where torch runs a row's 128 chains (one block on one SM) and where the chain schedule runs them."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
    for ax, title, blocks in ((axes[0], "torch: one 128-thread block per row (16 SMs busy at L1/40)", 1),
                              (axes[1], "chain schedule: one block per warp of chains (64 SMs at L1/40)", 4)):
        for warp in range(4):
            block = warp if blocks == 4 else 0
            ax.add_patch(plt.Rectangle((block * 1.2, 3 - warp), 1.0, 0.8, color=f"C{warp}", alpha=0.6))
            ax.text(block * 1.2 + 0.5, 3.4 - warp, f"warp {warp}: 32 chains", ha="center", va="center", fontsize=8)
        for block in range(blocks):
            ax.text(block * 1.2 + 0.5, -0.4, f"SM {block}", ha="center", fontsize=8)
        ax.text(2.4, 4.3, "then: shuffle-down merge per warp, torch's 4-warp tree, rsqrtf(m2/N + eps)",
                ha="center", fontsize=8)
        ax.set_xlim(-0.2, 5.0)
        ax.set_ylim(-0.8, 4.6)
        ax.set_title(title, fontsize=9)
        ax.axis("off")
    fig.tight_layout()
    return fig


def _chain_ratio(t) -> float:
    return t["ratio_vs_baseline"]["chain"]["median"]


# The chain schedule's goals, by shape: at L1/40 the chain's median; at the first of the post's other shapes a 20x
# speed-up; at the rest, never slower than native.
_TWENTY_X_SHAPE, *_NOT_SLOWER_SHAPES = EXTRA_SHAPES
L1_40_GOAL_MS = 0.33  # the chain's median at L1/40 under graph replay
GOALS = {  # timing case keys are "<shape>/<affine init>": (what, test on protocol A stats)
    shape_key(L1_40): [(f"median <= {L1_40_GOAL_MS} ms (goal)",
                        lambda t: t["stats"]["chain"]["median_ms"] <= L1_40_GOAL_MS),
                       ("median <= 0.30 ms (stretch)", lambda t: t["stats"]["chain"]["median_ms"] <= 0.30),
                       ("faster than Inductor (stretch)",
                        lambda t: "inductor" in t["stats"]
                        and t["stats"]["chain"]["median_ms"] < t["stats"]["inductor"]["median_ms"])],
    shape_key(_TWENTY_X_SHAPE): [(">= 20x native (paired median)", lambda t: _chain_ratio(t) >= 20)],
    **{shape_key(s): [("not slower than native (paired median)", lambda t: _chain_ratio(t) >= 1)]
       for s in _NOT_SLOWER_SHAPES},
}


def goal_rows(timing_record: dict | None) -> list[dict]:
    """The chain schedule's goals judged on every timing case of their shape (protocol A); a shape not timed says so."""
    if not timing_record:
        return []
    rows = []
    for shape, goals in GOALS.items():
        cases = [c for c in timing_record["cases"] if c["key"].split("/")[0] == shape]
        for what, test in goals:
            if not cases:
                rows.append({"case": shape, "goal": what, "chain ms": None, "met": "not timed in this run"})
            for c in cases:
                t = c.get("timing", {}).get("A")
                if not t or "chain" not in t["stats"]:
                    rows.append({"case": c["key"], "goal": what, "chain ms": None, "met": "chain not timed"})
                    continue
                ind = t["stats"].get("inductor", {}).get("median_ms")
                rows.append({"case": c["key"], "goal": what, "chain ms": t["stats"]["chain"]["median_ms"],
                             "vs native": t["ratio_vs_baseline"]["chain"]["median"],
                             "Inductor ms": ind, "met": bool(test(t))})
    return rows


def goals(records: dict) -> list[dict]:
    """goal_rows as goals (labkit.studies.goals), all under graph replay (protocol A): one per goal and timing case
    of its shape; a case the run did not time is not judged."""
    from labkit.studies.bench import PROTOCOL_NAMES
    from labkit.studies.goals import goal

    out = []
    for r in goal_rows(records.get("timing")):
        timed = isinstance(r["met"], bool)
        measured = (f"chain {r['chain ms']:.3g} ms, {r['vs native']:.3g}x native"
                    + (f", Inductor {r['Inductor ms']:.3g} ms" if r.get("Inductor ms") else "")) if timed else r["met"]
        what, target = r["goal"].split(" (")[0], r["goal"]
        out.append(goal(f"{r['case']}: {what}", measured, target, r["met"] if timed else None, PROTOCOL_NAMES["A"],
                        f"chain at {r['case']}: {what}"))  # the full case: one shape has two inputs
    return out


def repeat_rows(runs_root=None, shape: str = shape_key(L1_40)) -> list[dict]:
    """The chain and Inductor medians at one shape in every committed run that timed both (notebook 03's timing
    runs and notebook 07's), oldest first: how much a median moves from run to run on the same machine."""
    from labkit.records import run as results

    root = Path(runs_root) if runs_root else results.DATA_RUNS
    rows = []
    for path in results.committed_runs(None, root):
        run = results.load_run(path)
        tim = run["records"].get("timing")
        if not run["complete"] or not tim or "cases" not in tim:
            continue
        prov = run["records"]["run"]["provenance"]
        for case in tim["cases"]:
            t = case.get("timing", {}).get("A")
            if case["key"].split("/")[0] != shape or not t or "chain" not in t["stats"]:
                continue
            ind = t["stats"].get("inductor", {}).get("median_ms")
            chain = t["stats"]["chain"]
            rows.append({"run": path.name, "commit": (prov.get("git_commit") or "")[:10], "case": case["key"],
                         "chain ms (median)": chain["median_ms"], "chain q25": chain["q25_ms"],
                         "chain q75": chain["q75_ms"], "Inductor ms": ind,
                         "Inductor / chain": ind / chain["median_ms"] if ind else None})
    return rows


def verdict_lines(timing_record: dict | None, breakdown: dict | None, prov: dict, source: str,
                  bits_record: dict | None = None) -> list[str]:
    """What the run shows about the goal (<= 0.33 ms at L1/40, bit identical, >= 20x at 8x32x128x256, never
    slower than native on the small shapes); without a timing record, only where the records would come from."""
    if not timing_record or not breakdown:
        return [source]
    lines = [f"{source}: {prov.get('gpu')} with torch {prov.get('torch')}; clocks left alone; every time and ratio "
             f"below is {PROTOCOL_NAMES['A']}."]
    for case in timing_record["cases"]:
        t = case["timing"].get("A")
        if not t or "chain" not in t["stats"]:
            lines.append(f"{case['key']}: chain not timed ({case['methods'].get('chain', {}).get('status')})")
            continue
        r = t["ratio_vs_baseline"]
        ind = t["stats"].get("inductor", {}).get("median_ms")
        ratio_ind = (f"{ind / t['stats']['chain']['median_ms']:.2f}x Inductor's speed" if ind else "Inductor not timed")
        bits = case["methods"]["chain"].get("check", {}).get("bit_equal_fraction")
        lines.append(f"{case['key']}: chain {t['stats']['chain']['median_ms']:#.3g} ms, {r['chain']['median']:.3g}x "
                     f"native (paired median), {ratio_ind}, bit-equal fraction vs native {bits}")
    judged = goals({"timing": timing_record})
    count = tally(judged)
    missed = [f"{g['goal']} ({g['measured']})" for g in judged if g["met"] is False]
    lines.append(f"goals: {count['met']} of {count['judged']} met"
                 + (f"; missed: {'; '.join(missed)}" if missed else "")
                 + (f"; {count['not judged']} not judged (not timed)" if count["not judged"] else ""))
    if bits_record:
        n_ok, n = identical_count(bits_record["cases"])
        lines.append(f"bit identity: {n_ok}/{n} cases identical (output, mean, rstd) at "
                     f"{shape_key(bits_record['shape'])}")
    lines.append("Not shown here: other GPUs, other torch versions, non-float32 dtypes.")
    return lines


# --- the run's summary and headline (labkit.studies.catalog dispatches here) -------------------------------------

RUN_NAME = "parallel_stats"
NOTEBOOK = "07_parallel_statistics"


def summary(records: dict, prov: dict) -> dict:
    """The chain run's blocks: its bit-identity matrix, its timing cases and the post beside them."""
    from labkit.studies import bit_identity, timing

    out = timing.summary(records, prov)
    if block := bit_identity.identity_block(records, prov):
        out["bit_identity"] = block
    return out


def summary_lines(s: dict) -> list[str]:
    from labkit.studies import bit_identity, timing

    return bit_identity.summary_lines(s) + timing.summary_lines(s)


def page_headline(records: dict, summary: dict) -> str:
    from labkit.records.text import on_gpu, ratio
    from labkit.studies.timing import case_name, l1_40_case

    case = l1_40_case(records["timing"])
    t = case["timing"].get("A") if case else None
    if not t or "chain" not in t["stats"]:
        return f"chain not timed in the record {on_gpu(summary)}"
    chain = t["stats"]["chain"]["median_ms"]
    parts = [f"chain {chain:.3g} ms at {case_name(case)} under {PROTOCOL_NAMES['A']}",
             f"{ratio(t['ratio_vs_baseline']['chain']['median'])} native"]
    inductor = t["stats"].get("inductor", {}).get("median_ms")
    if inductor:
        parts.append(f"{ratio(inductor / chain)} Inductor")
    b = summary.get("bit_identity")
    if b:
        parts.append(f"{b['identical']}/{b['cases']} bit-identical")
    return ", ".join(parts) + f" {on_gpu(summary)}"


def plain_verdict(timing_record: dict | None, bits_record: dict | None = None) -> list[str]:
    """The page's short verdict: a few plain sentences from the records, every ratio under graph replay (protocol
    A) with its baseline named."""
    from labkit.records.text import ratio
    from labkit.studies.timing import case_name, l1_40_case

    if not timing_record or not (case := l1_40_case(timing_record)):
        return ["No chain timing run to judge."]
    out = []
    if bits_record:
        n_ok, n = identical_count(bits_record["cases"])
        out.append(f"Spreading torch's Welford chains over the GPU keeps torch's bits: output, mean and rstd are "
                   f"identical in {n_ok} of {n} cases at {shape_key(bits_record['shape'])}.")
    t = case["timing"].get("A")
    if t and "chain" in t["stats"]:
        chain = t["stats"]["chain"]["median_ms"]
        ind = t["stats"].get("inductor", {}).get("median_ms")
        out.append(f"At {case_name(case)} the chain kernel takes {chain:.3g} ms under {PROTOCOL_NAMES['A']}: "
                   f"{ratio(t['ratio_vs_baseline']['chain']['median'])} faster than native torch (paired median)"
                   + (f", and {ratio(ind / chain)} Inductor's speed (baseline torch.compile)" if ind else "") + ".")
    slower = []
    for c in timing_record["cases"]:
        tc = c["timing"].get("A") or {}
        st = tc.get("stats", {})
        if "chain" in st and "inductor" in st and st["inductor"]["median_ms"] < st["chain"]["median_ms"]:
            slower.append(f"{c['key'].split('/')[0]} ({ratio(st['inductor']['median_ms'] / st['chain']['median_ms'])})")
    if slower:
        out.append(f"Inductor, which does not keep torch's bits, is faster at {', '.join(dict.fromkeys(slower))} "
                   f"(chain / Inductor speed, same protocol).")
    count = tally(goals({"timing": timing_record}))
    out.append(f"The chain schedule meets {count['met']} of its {count['judged']} goals in this run.")
    return out[:5]
