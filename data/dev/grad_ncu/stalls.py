"""Prints what the README quotes from ncu's stall sampling (ncu_source.csv: grad_chain_sums_split8 with shuffles,
ncu_tile_source.csv: with the tile exchange (commit 8e568fa), ncu_prep_source.csv: grad_prep's grad_chain_sums_prep8;
all at 1 x 2^24; SASS lines without samples dropped from the files): samples by
opcode and stall reason, the mbarrier wait loops (BRA) apart. Run: python3 data/dev/grad_ncu/stalls.py"""
import collections
import csv
import io
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent


def samples(name: str):
    lines = [ln for ln in (HERE / name).read_text().splitlines()
             if ln.strip() and not ln.startswith("==") and not ln.startswith("identical")]
    rows = list(csv.reader(io.StringIO("\n".join(lines[1:]))))
    hdr, data = rows[0], rows[1:]
    ix = {h: i for i, h in enumerate(hdr)}
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    by = collections.defaultdict(collections.Counter)
    for r in data:
        op = re.sub(r"^@!?U?P\w+\s+", "", r[ix["Source"]].strip()).split(" ")[0].split(".")[0]
        for k in reasons:
            v = int(r[ix[k]] or 0)
            if v:
                by[op][k[6:]] += v
    return by


for name in ("ncu_source.csv", "ncu_tile_source.csv", "ncu_prep_source.csv"):
    by = samples(name)
    total = sum(sum(c.values()) for c in by.values())
    waits = sum(by["BRA"].values())
    print(f"{name}: {total} samples, {waits} on branches (the mbarrier wait loops), {total - waits} elsewhere")
    for op, c in sorted(by.items(), key=lambda kv: -sum(kv[1].values()))[:8]:
        if op != "BRA":
            print(f"  {op}: {sum(c.values())} ({', '.join(f'{k} {v}' for k, v in c.most_common(3))})")
