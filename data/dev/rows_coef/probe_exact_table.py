"""Prints the Markdown table of probe_exact.json that README.md's probe_exact section shows (run from here)."""
import json
from pathlib import Path

d = json.loads((Path(__file__).resolve().parent / "probe_exact.json").read_text())
cols = ["native", "base", "c", "c7", "c8", "inductor", "liger"]
print("| rows x N | served | bits (variants) | " + " | ".join(cols) + " | best count pass / faster peer |")
print("|---|---|---|" + "---|" * len(cols) + "---|")
for r in d["rows"]:
    g = r["graph"]
    cells = [f"{g[c]:.2f}" if c in g else "" for c in cols]
    bits = "all identical" if all(r["identical"].values()) else ", ".join(k for k, v in r["identical"].items() if not v)
    peers = [g[p] for p in ("inductor", "liger") if p in g]
    count = [g[c] for c in ("c", "c7", "c8") if c in g]
    ratio = f"{min(peers) / min(count):.3f} (base {min(peers) / g['base']:.3f})" if peers else ""
    print(f"| {r['rows']} x {r['n']} | {r['served']} | {bits} | " + " | ".join(cells) + f" | {ratio} |")
