"""Prints the few-row backward probes' tables (data/dev/grad_pairs, grad_prep, grad_cpasync: probe.json each) as the
README shows them: per shape, the whole backward under graph replay (us, medians of 15) per variant, the chain floor,
and whether every variant's bits were equal. Run: python3 data/dev/grad_pairs/table.py"""
import json
from pathlib import Path

DEV = Path(__file__).resolve().parents[1]


def table(name: str, columns: list[str]) -> str:
    rec = json.loads((DEV / name / "probe.json").read_text())
    m = rec["meta"]
    out = [f"{name} (commit {m['commit']}, {m['gpu']}, torch {m['torch']}, SM clock {m['sm_clock_ghz']:.2f} GHz):", "",
           "| shape | " + " | ".join(columns) + " | chain floor | bits equal |",
           "|---|" + "---:|" * (len(columns) + 1) + "---|"]
    for r in rec["rows"]:
        g = r["graph_us"]
        cells = [f"{g[c]:.1f}" if c in g else "" for c in columns]
        same = "all" if all(v is True for v in r["identical"].values()) else \
            ", ".join(k for k, v in r["identical"].items() if v is not True) + " differ"
        out.append(f"| {r['rows']}x{r['n']} | " + " | ".join(cells) + f" | {r.get('chain_floor_us', 0):.1f} | {same} |")
    return "\n".join(out)


if __name__ == "__main__":
    print(table("grad_pairs", ["native", "before_s2", "split1", "split2", "split4", "split8"]))
    print()
    print(table("grad_prep", ["auto", "split4", "prep4", "split8", "prep8"]))
    print()
    print(table("grad_cpasync", ["auto", "split2", "cpasync2", "split4", "cpasync4", "split8", "cpasync8"]))
