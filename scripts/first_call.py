"""The drop-in's first use as a new user meets it: wall time of the first three calls in a fresh process, with cold
caches (an empty torch extensions folder and an empty cubin cache) and then warm (the same folders, now filled),
and what each process printed. GPU only.

    python scripts/first_call.py [--shape 16 64 256 256] [--out first_call.json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
import torch
t0 = time.perf_counter()
import labkit
shape = tuple(json.loads(sys.argv[1]))
x = torch.randn(shape, device="cuda", requires_grad=True)
w = torch.randn(shape[1:], device="cuda", requires_grad=True)
b = torch.randn(shape[1:], device="cuda", requires_grad=True)
torch.cuda.synchronize()
times = []
for _ in range(3):
    t = time.perf_counter()
    y = labkit.layer_norm(x, shape[1:], w, b)
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t)
print("RESULT " + json.dumps({"calls_s": times, "path": labkit.explain(x, shape[1:], w, b)["path"]}))
"""


def one(shape, env) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(list(shape))], env=env, capture_output=True,
                       text=True, timeout=900)
    result = next((json.loads(line[7:]) for line in p.stdout.splitlines() if line.startswith("RESULT ")), None)
    printed = [line for line in (p.stdout + p.stderr).splitlines() if not line.startswith("RESULT ")]
    return {"returncode": p.returncode, "result": result, "printed": printed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", type=int, nargs="+", default=[16, 64, 256, 256])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as ext, tempfile.TemporaryDirectory() as cubins:
        env = dict(os.environ, TORCH_EXTENSIONS_DIR=ext, LABKIT_CACHE_DIR=cubins)
        report = {"shape": args.shape, "cold": one(args.shape, env), "warm": one(args.shape, env)}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
