"""Issues 15 and 22's H200 step (see reliability.sh): sanitizer invocations (forward and backward kernels), the racecheck experiment, fuzz and soak,
written as one run directory. Every part is guarded: a failure is recorded in the run, and the run is closed."""
import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

from labkit.records.run import Run
from labkit.studies.reliability import reliability_block
from labkit.studies import reliability as rel

SMALL_SHAPES = [tuple(s) for s in rel.SANITIZER_SMALL_SHAPES]
L1_40 = (16, 64, 256, 256)
EVIDENCE_SHAPES = [(2, 64, 64, 64), (3, 512 * 17)]
# seconds per invocation; L1/40 runs 256 MiB through every kernel under the tool
TIMEOUTS = {"small": {"memcheck": 40, "racecheck": 45, "initcheck": 40, "synccheck": 30},
            "l1_40": {"memcheck": 45, "racecheck": 70, "initcheck": 45, "synccheck": 35}}
RESERVE_S = 40  # kept for fuzz and soak


def specs(shapes, names):
    return [{"target": t, "shape": list(s)} for s in shapes for t in rel.targets_for(s, names)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-s", type=float, default=235)
    ap.add_argument("--fuzz-cases", type=int, default=600)
    ap.add_argument("--fuzz-seconds", type=float, default=25)
    ap.add_argument("--soak-calls", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=15)
    args = ap.parse_args()
    start = time.monotonic()
    deadline = start + args.budget_s
    root = Path(os.environ.get("LABKIT_RUNS_ROOT", "build/runs"))
    run = Run.create(root, "reliability", vars(args), device="cuda")
    logs = run.path / "sanitizer"
    logs.mkdir()
    failures = []
    target = str(Path(__file__).with_name("reliability_target.py"))

    passes = [("product:small", specs(SMALL_SHAPES, rel.PRODUCT_TARGETS), rel.TOOLS, TIMEOUTS["small"]),
              ("evidence:rings", specs(EVIDENCE_SHAPES, rel.RING_VARIANTS + ("chain_tma_loads_only",)),
               ("racecheck", "memcheck"), TIMEOUTS["small"]),
              ("product:l1_40", specs([L1_40], ("reference_order", "chain_tma", "chain_w4", "rows_fused")),
               ("memcheck", "initcheck", "synccheck"), TIMEOUTS["l1_40"]),
              # racecheck apart: the chain kernels' shared-memory rings are the slow part, so a timeout there does
              # not cost the other kernels' report
              ("product:l1_40_rows", specs([L1_40], ("reference_order", "rows_fused")), ("racecheck",),
               TIMEOUTS["l1_40"]),
              ("product:l1_40_chain", specs([L1_40], ("chain_tma", "chain_w4")), ("racecheck",), TIMEOUTS["l1_40"]),
              # the backward's schedules at L1/40 (those whose launches take it), every tool
              ("product:backward_l1_40", specs([L1_40], rel.BACKWARD_TARGETS), rel.TOOLS, TIMEOUTS["l1_40"])]
    # Without a sanitizer first: compiles every kernel into the cache (so no tool times NVRTC) and gives the
    # ring checksums and bits as the hardware computes them at full speed.
    plain = []
    try:
        plain = rel.run_targets([s for _, sp, _, _ in passes for s in sp])
        run.write("targets_plain", plain)
    except Exception:
        failures.append({"part": "targets_plain", "error": traceback.format_exc()})

    invocations, kernel_filter, skipped = [], True, []
    for label, sp, tools, timeouts in passes:
        spec_path = logs / f"{label.replace(':', '_')}.specs.json"
        spec_path.write_text(json.dumps(sp))
        run.add_file(spec_path)
        for tool in tools:
            left = deadline - time.monotonic() - RESERVE_S
            if left < 10:
                skipped.append({"label": label, "tool": tool, "reason": f"budget: {left:.0f} s left"})
                continue
            stem = f"{label.replace(':', '_')}.{tool}"
            argv = [sys.executable, target, str(spec_path), str(logs / f"{stem}.results.json")]
            try:
                inv = rel.run_sanitizer(tool, argv, min(timeouts[tool], left), logs / f"{stem}.log", label,
                                        kernel_filter)
                if inv["filter_rejected"]:
                    kernel_filter = False
                    inv = rel.run_sanitizer(tool, argv, min(timeouts[tool], left), logs / f"{stem}.log", label, False)
                res = logs / f"{stem}.results.json"
                inv["targets"] = json.loads(res.read_text()) if res.is_file() else None
                if res.is_file():
                    run.add_file(res)
                invocations.append(inv)
                run.add_file(logs / f"{stem}.log")
            except Exception:
                failures.append({"part": stem, "error": traceback.format_exc()})
    run.write("sanitizer", {"product_kernels": rel.PRODUCT_KERNELS, "our_kernels": rel.OUR_KERNELS,
                            "kernel_filter": kernel_filter, "invocations": invocations, "skipped": skipped,
                            "plans": [{"label": p[0], "tools": list(p[2]), "timeouts_s": p[3]} for p in passes]})
    try:
        run.write("racecheck_evidence", rel.racecheck_evidence([i for i in invocations if i["tool"] == "racecheck"],
                                                               plain))
    except Exception:
        failures.append({"part": "racecheck_evidence", "error": traceback.format_exc()})
    try:
        fuzz_s = max(5.0, min(args.fuzz_seconds, deadline - time.monotonic() - 15))
        run.write("fuzz", rel.fuzz(args.fuzz_cases, args.seed, fuzz_s))
    except Exception:
        failures.append({"part": "fuzz", "error": traceback.format_exc()})
    try:
        run.write("soak", rel.soak(args.soak_calls, args.seed))
    except Exception:
        failures.append({"part": "soak", "error": traceback.format_exc()})
    records = {name: json.loads((run.path / f"{name}.json").read_text())
               for name in ("sanitizer", "racecheck_evidence", "fuzz", "soak") if (run.path / f"{name}.json").is_file()}
    block = reliability_block(records)
    run.write("reliability", {"block": block, "failures": failures, "seconds": round(time.monotonic() - start, 1)})
    run.close()  # complete as a record: the failures are in it, and the exit status says so
    print(json.dumps({"run": str(run.path), "reliability": block, "failures": len(failures),
                      "seconds": round(time.monotonic() - start, 1)}, indent=1))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
