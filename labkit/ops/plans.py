"""What every op's launch plan has, and the one way a plan runs on tensors.

Each kernel path (labkit.ops.reference_order, chain, rows_fused, rows_counted, rows_counted_block, rows_staged,
rows_cluster) exports `plan(rows, n, device)`: a frozen description of its launches computed from the shape and the
device's limits (kernel functions, grid, block, shared memory, scratch layout, tensor-map geometry), raising
ValueError where the path cannot take the shape. `plan.program(device_index)` is that call as data
(labkit.core.program: slots x, weight, bias, y, mean, rstd, scratch; memsets and launches in stages
"stats"/"output", or "fused"), and `plan.bind(device_index)` prepares it on a device as a BoundProgram (function
handles, shared-memory opt-in), called on raw pointers:

    bound((x, weight, bias, y, mean, rstd, scratch), eps, stream)

The drop-in's host extension runs the same programs from C++ (labkit.ops.dropin.host).
The public kernel functions run a plan through `execute` (fresh outputs, scratch from torch's allocator on the
call's stream); the drop-in's per-signature plans hold the same bound plan (`bound`, shared per plan and device)
and call it with their own buffers. Callers make the device current around a bound call (`device_scope`).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from labkit.core.device import current_index
from labkit.core.launch import device_scope, stream

_lock = threading.Lock()
_bound: dict[tuple, object] = {}
MAX_BOUND = 1024  # bound plans kept (a model's few shapes fit; a sweep of row counts does not grow it forever)


@dataclass(frozen=True)
class Scratch:
    """Device scratch a plan's launches need per call: `nbytes` in all, of which [zeroed_at, zeroed_at +
    zeroed_bytes) the bound plan zeroes on the call's stream before its first launch."""

    nbytes: int = 0
    zeroed_at: int = 0
    zeroed_bytes: int = 0


NO_SCRATCH = Scratch()


def bound(plan, device_index: int):
    """`plan.bind(device_index)`, made once per (plan, device) and shared by every caller."""
    key = (plan, device_index)
    b = _bound.get(key)
    if b is None:
        b = plan.bind(device_index)
        with _lock:
            if len(_bound) >= MAX_BOUND:
                _bound.clear()  # function handles stay loaded (labkit.core.launch); only the small bound objects go
            b = _bound.setdefault(key, b)
    return b


def bound_plans() -> int:
    return len(_bound)


def scratch_for(plan, device):
    """A fresh scratch buffer for one call (None when the plan needs none), from torch's caching allocator on the
    current stream: calls overlapping on other streams or threads never share it, and under graph capture it comes
    from the graph's private pool and lives as long as the graph."""
    import torch

    if not plan.scratch.nbytes:
        return None
    return torch.empty(plan.scratch.nbytes, device=device, dtype=torch.uint8)


def _ptr(t) -> int:
    return t.data_ptr() if t is not None else 0


def execute(plan, x, weight, bias, eps: float, out=None):
    """(y, mean, rstd) of `plan` on validated tensors: y is `out` or a fresh tensor like x; mean and rstd [rows]."""
    import torch

    index = current_index(x.device)
    y = torch.empty_like(x) if out is None else out
    mean = torch.empty(plan.rows, device=x.device, dtype=torch.float32)
    rstd = torch.empty(plan.rows, device=x.device, dtype=torch.float32)
    scratch = scratch_for(plan, x.device)
    b = bound(plan, index)
    with device_scope(index):
        b((x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(), mean.data_ptr(), rstd.data_ptr(),
           _ptr(scratch)), np.float32(eps), stream(index))
    return y, mean, rstd


def run(plan_for, x, weight, bias, eps: float, out=None, return_stats: bool = False):
    """A path's public function: validate the input as torch's vectorized path would take it
    (labkit.ops.eligibility.check, ValueError naming the condition before any launch), plan it with
    `plan_for(rows, n, device)` (the path's plan, which raises its own ValueError), execute. y, or (y, mean, rstd)."""
    from labkit.core.device import device_info
    from labkit.ops import eligibility

    layout = eligibility.check(x, weight, bias, eps, out=out)
    p = plan_for(layout.rows, layout.n, device_info(current_index(x.device)))
    y, mean, rstd = execute(p, x, weight, bias, eps, out)
    return (y, mean, rstd) if return_stats else y


def stats_only(plan, x, mean, rstd, eps: float) -> None:
    """The plan's statistics launch alone (stage-breakdown and sanitizer experiments)."""
    index = current_index(x.device)
    scratch = scratch_for(plan, x.device)
    b = bound(plan, index)
    with device_scope(index):
        b((x.data_ptr(), 0, 0, 0, mean.data_ptr(), rstd.data_ptr(), _ptr(scratch)), np.float32(eps), stream(index),
          stage="stats")


def output_only(plan, x, mean, rstd, weight, bias, y) -> None:
    """The plan's output launch alone, from given statistics."""
    index = current_index(x.device)
    b = bound(plan, index)
    with device_scope(index):
        b((x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(), mean.data_ptr(), rstd.data_ptr(), 0),
          np.float32(0.0), stream(index), stage="output")
