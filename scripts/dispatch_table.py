"""Measure the drop-in's dispatch grid on a GPU and write the device's table, labkit/ops/dispatch/tables/<device>.py.

    LABKIT_RUNS_ROOT=build/runs python scripts/dispatch_table.py [--rounds 9]

Every candidate path (torch's own kernel and each of labkit.ops.paths) is timed at each shape of
labkit.studies.dispatch.grid_shapes() under the eager per-call protocol (and graph replay, for the record) into a
run named "dispatch_table"; each path's time / native's per point (derive_scores) is written into the package,
citing the run. The GPU is warmed up first and the shapes are visited in a seeded random order, so that clocks
ramping up do not bias the first shapes measured. About a minute on an H200. Curate the run into data/runs and commit both: tests/test_dispatch.py checks that the
committed module is what the committed run derives. Not part of scripts/h200_pass.sh: the rule should change only
when someone decides to re-measure it (and the run it cites must then be kept).

    LABKIT_RUNS_ROOT=build/runs python scripts/dispatch_table.py --dtypes bfloat16,float16

measures the same grid with x, weight and bias of each dtype (the paths built for it) into a run named
"dispatch_low_precision" (a `dropin_sweep_<dtype>` record each) and writes no module: the rule picks among the paths
built for a 2-byte dtype by the float32 scores, and notebook 08 shows, from this run, where that pick is the fastest
measured.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from labkit.records.run import Run  # noqa: E402
from labkit.studies import dispatch, dropin_sweep  # noqa: E402

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9, help="samples per path, shape and protocol")
    ap.add_argument("--warmup-s", type=float, default=3.0, help="seconds of torch LayerNorm before measuring")
    ap.add_argument("--seed", type=int, default=16, help="seeds the order the shapes are visited in")
    ap.add_argument("--module", default=None, help="where to write the generated table (default: the device's "
                    "module in labkit/ops/dispatch/tables/)")
    ap.add_argument("--copy-to", default=os.environ.get("OUT"), help="also copy the module here (a GPU machine's $OUT)")
    ap.add_argument("--backward", action="store_true", help="measure the backward's paths instead (a run of its own; "
                    "the module keeps its forward tables and gains BACKWARD and BACKWARD_GRAPH)")
    ap.add_argument("--dtypes", default=None, help="comma-separated 2-byte dtypes (bfloat16,float16): measure the "
                    "forward grid for each into a dispatch_low_precision run, and write no module")
    args = ap.parse_args(argv)
    if args.dtypes and args.backward:
        ap.error("--dtypes measures the forward grid only: drop --backward")
    if args.dtypes:
        from labkit.ops.dtypes import LOW_PRECISION

        bad = [d for d in args.dtypes.split(",") if d.strip() not in LOW_PRECISION]
        if bad:
            ap.error(f"--dtypes takes {', '.join(LOW_PRECISION)}, got {', '.join(bad)}")
    root = Path(os.environ.get("LABKIT_RUNS_ROOT", "build/runs"))
    if args.dtypes:
        return low_precision(args, root)
    run = Run.create(root, "dispatch_table", vars(args), device="cuda")
    t0 = time.perf_counter()
    warm = dispatch.warm_up(args.warmup_s)
    shapes = dispatch.grid_shapes()
    random.Random(args.seed).shuffle(shapes)
    if args.backward:
        from labkit.ops.dispatch import tables
        from labkit.ops.dispatch.rule import BACKWARD_ORDER

        sweep = dispatch.backward_sweep(shapes, args.rounds, log=print)
        run.write("backward_sweep", sweep)
        scores, backward_graph = dispatch.derive_protocols(sweep, BACKWARD_ORDER)
        table, _ = tables.for_device(sweep["device"]["arch"], sweep["device"]["sm_count"])
        forward = (table.SCORES, table.RUN_ID, {"device": table.DEVICE})
        graph = getattr(table, "GRAPH", None)
    else:
        from labkit.ops.dispatch import tables

        sweep = dropin_sweep.sweep(shapes, args.rounds, compiled=False, log=print)
        run.write("dropin_sweep", sweep)
        scores, graph = dispatch.derive_protocols(sweep)
        table, _ = tables.for_device(sweep["device"]["arch"], sweep["device"]["sm_count"])
        # the device's backward table stays (a run of its own), as --backward keeps the forward's
        same_device = table is not None and (table.DEVICE["arch"], table.DEVICE["sm_count"]) == (
            sweep["device"]["arch"], sweep["device"]["sm_count"])  # not another GPU's table, carried over
        kept = (getattr(table, "BACKWARD", None), getattr(table, "BACKWARD_RUN_ID", None),
                getattr(table, "BACKWARD_GRAPH", None)) if same_device else (None, None, None)
    run.write("dispatch_table", {"warm_up": warm, "order_seed": args.seed, "seconds": time.perf_counter() - t0,
                                 "backward": args.backward,
                                 "scores": {repr(x): {str(y): p for y, p in level.items()}
                                            for x, level in scores.items()}})
    run.close()
    module = Path(args.module) if args.module else dispatch.module_path(sweep)
    if args.backward:
        module.write_text(dispatch.module_source(*forward, backward=scores, backward_run_id=run.run_id, graph=graph,
                                                 backward_graph=backward_graph))
    else:
        module.write_text(dispatch.module_source(scores, run.run_id, sweep, backward=kept[0], backward_run_id=kept[1],
                                                 graph=graph, backward_graph=kept[2]))
    if args.copy_to:
        shutil.copy(module, Path(args.copy_to) / module.name)
    print(f"run {run.path}; table written to {module}")
    return 0


def low_precision(args, root: Path) -> int:
    """The forward grid for each of `args.dtypes`, one record each, in one run; no module is written."""
    names = [d.strip() for d in args.dtypes.split(",")]
    run = Run.create(root, "dispatch_low_precision", vars(args), device="cuda")
    t0 = time.perf_counter()
    warm = dispatch.warm_up(args.warmup_s)
    shapes = dispatch.grid_shapes()
    random.Random(args.seed).shuffle(shapes)
    for d in names:
        run.write(f"dropin_sweep_{d}", dropin_sweep.sweep(shapes, args.rounds, compiled=False, log=print, dtype=d))
    run.write("dispatch_low_precision", {"warm_up": warm, "order_seed": args.seed, "dtypes": names,
                                         "seconds": time.perf_counter() - t0})
    run.close()
    print(f"run {run.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
