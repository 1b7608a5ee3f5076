"""L1/40's forward + backward under KernelBench's own cuda_event timing (notebook 10): the
`training_kernelbench` record and the figures and rows the verdict reads from it. Apart from the sweep because
it is a second protocol at one shape, with its own block-by-block reading."""
from __future__ import annotations

import statistics

from labkit.studies.training_sweep import _tensors, methods
from labkit.tasks import L1_40


# --- L1/40 under KernelBench's own timing ---------------------------------------------------------------------------

KB_METHODS = ("native", "dropin", "native_compiled")
KB_LABELS = {"native": "torch eager F.layer_norm", "dropin": "drop-in",
             "native_compiled": "torch.compile(F.layer_norm)"}


def kernelbench_fwdbwd(shape=L1_40, blocks: int = 3, num_trials: int = 100, seed: int = 0, eps: float = 1e-5,
                       device="cuda") -> dict:
    """The `training_kernelbench` record: one shape's forward + backward (`methods`: a forward with grad on and
    torch.autograd.grad for x, weight and bias) timed by KernelBench's cuda_event method
    (labkit.studies.kernelbench_timing.cuda_event_times: each program's trials back to back, a fresh 256 MiB
    thrash filled before each trial's start event with no synchronize between them, the first trial dropped; it
    reports the mean), for torch eager, the drop-in and torch.compile(F.layer_norm), `blocks` times over with the
    programs' order rotated. Protocol B as the forward goals define it; the sweep's interleaved rounds (a method's call
    after another method's, the GPU idle at each start event) stand beside it."""
    import torch

    from labkit.studies.kernelbench_timing import DISCARD_FIRST, EVAL_WARMUP, rotated_blocks

    if blocks < 1 or num_trials < 1:
        raise ValueError(f"blocks and num_trials must be at least 1, got {blocks} and {num_trials}")
    x, w, b, dy = _tensors(shape, seed, device)
    fns = methods(x, w, b, dy, eps, compiled=True)
    samples, orders = rotated_blocks({n: (fns[n], EVAL_WARMUP) for n in KB_METHODS}, blocks, num_trials)
    x = w = b = dy = fns = None
    torch.cuda.empty_cache()
    return {"shape": list(shape), "blocks": blocks, "num_trials": num_trials, "discard_first": DISCARD_FIRST,
            "warmup": EVAL_WARMUP, "orders": orders, "samples_ms": samples}


KB_PROTOCOL = "KernelBench's cuda_event timing (protocol B): means over all trials"
INTERLEAVED_PROTOCOL = "eager per call, methods interleaved per round (medians; paired per-round ratios)"


def judged_by_kernelbench(t: dict) -> bool:
    """Whether a `training` block's L1/40 figures are KernelBench's timing (else the sweep's interleaved rounds)."""
    return t.get("l1_40_protocol") == KB_PROTOCOL


def kernelbench_figures(record: dict | None) -> dict | None:
    """From a `training_kernelbench` record at L1/40: every program's mean over all trials (as KernelBench reports),
    the drop-in's slowest block, and its worst block's ratios (their mean / the drop-in's, block by block: one block
    where a program runs slow as a whole must not carry a pooled mean). None for a record at another shape (quick
    mode's), which no L1/40 goal may read."""
    from labkit.studies.kernelbench_timing import block_means, pooled_means

    if not record or tuple(record["shape"]) != tuple(L1_40):
        return None
    samples = {n: record["samples_ms"][n] for n in KB_METHODS}
    block, pooled = block_means(samples), pooled_means(samples)
    per = {n: [o / d for o, d in zip(block[n], block["dropin"])] for n in ("native", "native_compiled")}
    return {"mean_ms": pooled, "block_means_ms": block, "dropin_slowest_block_ms": max(block["dropin"]),
            "vs_compiled_worst_block": min(per["native_compiled"]), "vs_native_worst_block": min(per["native"]),
            "vs_compiled_per_block": per["native_compiled"], "vs_native_per_block": per["native"]}


def kernelbench_rows(record: dict | None) -> list[dict]:
    """Per program: KernelBench's mean per block and over all trials, the median and quartiles."""
    from labkit.studies.kernelbench_timing import stats

    if not record:
        return []
    out = []
    for name in KB_METHODS:
        blocks = record["samples_ms"][name]
        s = stats([t for b in blocks for t in b])
        out.append({"method": KB_LABELS[name],
                    "mean ms per block": " / ".join(f"{statistics.fmean(b):#.3g}" for b in blocks),
                    "mean ms": s["mean_ms"],
                    "median ms [q1, q3]": f"{s['median_ms']:#.3g} [{s['q1_ms']:#.3g}, {s['q3_ms']:#.3g}]"})
    return out
