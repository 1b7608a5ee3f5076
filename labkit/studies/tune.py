"""`labkit tune`: the dispatch table measured on the reader's own GPU.

Every candidate path is timed as the committed tables were (labkit.studies.dropin_sweep.sweep for the forward,
labkit.studies.dispatch.backward_sweep for the backward: eager per call, CUDA events around one call, L2 flushed, and
graph replay), over a grid of (rows, N), reduced to each path's time / torch's per grid point
(labkit.studies.dispatch.derive_scores),
and written to the user's table cache (labkit.ops.dispatch.tables.table_dir(), never the package). From then on the
rule reads it for this GPU (tables.for_device: a tuned table of the same GPU name, arch and SM count wins over the
committed ones while the kernel sources are those it was measured with), and labkit.explain's rule_source names it.

The short grid (the default, about a minute on an H200) keeps every other row level and log2 N of the committed
grid's corners; `full=True` times the committed table's whole grid (labkit.studies.dispatch.grid_shapes).
"""
from __future__ import annotations

import random
import time

from labkit.studies import dispatch

SHORT_ROWS = (1, 16, 128, 1024, 16384)
SHORT_LOG2_N = (8, 10, 12, 14, 16, 18, 20, 22, 24)


def grid(full: bool = False) -> list[tuple[int, int]]:
    """The (rows, N) shapes `tune` times: the committed grid, or (default) its short subset."""
    shapes = dispatch.grid_shapes()
    if full:
        return shapes
    return [(r, n) for r, n in shapes if r in SHORT_ROWS and n.bit_length() - 1 in SHORT_LOG2_N]


def tune(full: bool = False, rounds: int | None = None, backward: bool = True, progress: bool = True,
         seed: int = 16, warmup_s: float = 2.0, device: str = "cuda") -> dict:
    """Measure every candidate path on the present GPU, write its table to the user's cache and make the rule use
    it in this process from the next call on. Returns what was done: {"path", "device", "grid", "shapes",
    "rounds", "seconds", "forward_picks", "backward_picks", "rule_source"}."""
    from labkit.ops.dropin.aten import refuse_while_enabled

    refuse_while_enabled("labkit tune")
    import torch

    from labkit.core.device import current_index, device_info
    from labkit.ops.dispatch import rule, tables
    from labkit.ops.dispatch.rule import BACKWARD_ORDER
    from labkit.ops.dropin import plan
    from labkit.studies import dropin_sweep

    rounds = rounds or (9 if full else 7)
    if rounds < 3:
        raise ValueError(f"rounds must be at least 3 (a median of fewer says little), got {rounds}")
    if not torch.cuda.is_available():
        raise ValueError("labkit tune measures the present GPU, and torch sees no CUDA device")
    dev = device_info(current_index(torch.device(device)))
    t0 = time.perf_counter()
    warm = dispatch.warm_up(warmup_s, device)
    shapes = grid(full)
    random.Random(seed).shuffle(shapes)  # clocks that still ramp up must not bias one corner of the grid
    plan.clear()  # plans made before this call must not decide what is timed as "the drop-in"
    steps = [("forward", s) for s in shapes] + ([("backward", s) for s in shapes] if backward else [])
    fwd, bwd = [], []
    for what, shape in _progress(steps, progress, f"labkit tune on {dev.label}"):
        if what == "forward":
            fwd += dropin_sweep.sweep([shape], rounds, compiled=False, device=device)["shapes"]
        else:
            bwd += dispatch.backward_sweep([shape], rounds, device=device)["shapes"]
    described = {"name": dev.name, "arch": dev.arch, "sm_count": dev.sm_count, "target": dev.target}
    scores, graph = dispatch.derive_protocols({"device": described, "shapes": fwd})
    back, back_graph = dispatch.derive_protocols({"device": described, "shapes": bwd}, BACKWARD_ORDER) \
        if backward else (None, None)
    seconds = round(time.perf_counter() - t0, 1)
    path = tables.write_tuned(described, scores, back, {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "grid": "full" if full else "short", "rounds": rounds, "seconds": seconds, "warm_up": warm,
        "shapes": [list(s) for s in sorted(shapes)]}, graph, back_graph)
    plan.clear()  # the next call plans again, by the new table
    from labkit.ops import chain

    chain.schedule_launches.cache_clear()  # chain_layer_norm's automatic schedule asks the rule too
    return {"path": str(path), "device": dev.label, "grid": "full" if full else "short", "shapes": len(shapes),
            "rounds": rounds, "seconds": seconds,
            "forward_picks": dispatch.table_rows(scores, dev.sm_count, graph=graph),
            "backward_picks": dispatch.table_rows(back, dev.sm_count, backward=True, graph=back_graph) if back else [],
            "rule_source": rule.table_source(dev)}


def _progress(items, show: bool, desc: str):
    if not show:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, unit="shape")
