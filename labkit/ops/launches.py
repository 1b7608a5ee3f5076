"""What every path's launches have, and the one way they run on tensors.

Three words, one meaning each:
- "launches": a kernel path's launch list for one shape. Each path (labkit.ops.reference_order, chain, rows_fused,
  rows_counted, rows_counted_block, rows_staged, rows_cluster; the backward's schedules in labkit.ops.backward)
  exports `launches(rows, n, device)`: a frozen description computed from the shape and the device's limits (kernel
  functions, grid, block, shared memory, scratch layout, tensor-map geometry), raising ValueError where the path
  cannot take the shape. The classes it returns are named for it (ChainLaunches, RowsFusedLaunches, ...).
- "Program" (labkit.core.program): those launches bound as data for a runner. `launches.program(device_index)` is
  the call as slots x, weight, bias, y, mean, rstd, scratch, with memsets and launches in stages "stats"/"output",
  or "fused"; `launches.bind(device_index)` prepares it on a device as a BoundProgram (function handles,
  shared-memory opt-in), called on raw pointers:

      bound((x, weight, bias, y, mean, rstd, scratch), eps, stream)

  The drop-in's host extension runs the same Programs from C++ (labkit.ops.dropin.host).
- "plan" (labkit.ops.dropin.plan): the drop-in's per-signature choice only: which path serves an input signature,
  holding that path's launches bound, and the backward's choice.

The public kernel functions run their launches through `execute` (fresh outputs, scratch from torch's allocator on
the call's stream); the drop-in's plans hold the same bound launches (`bound`, shared per launches and device) and
call them with their own buffers. Callers make the device current around a bound call (`device_scope`).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from labkit.core.device import current_index
from labkit.core.launch import device_scope, stream

_lock = threading.Lock()
_bound: dict[tuple, object] = {}
MAX_BOUND = 1024  # bound launches kept (a model's few shapes fit; a sweep of row counts does not grow it forever)


@dataclass(frozen=True)
class Scratch:
    """Device scratch a path's launches need per call: `nbytes` in all, of which [zeroed_at, zeroed_at +
    zeroed_bytes) the bound launches zero on the call's stream before its first launch."""

    nbytes: int = 0
    zeroed_at: int = 0
    zeroed_bytes: int = 0


NO_SCRATCH = Scratch()


def bound(launches, device_index: int):
    """`launches.bind(device_index)`, made once per (launches, device) and shared by every caller."""
    key = (launches, device_index)
    b = _bound.get(key)
    if b is None:
        b = launches.bind(device_index)
        with _lock:
            if len(_bound) >= MAX_BOUND:
                _bound.clear()  # function handles stay loaded (labkit.core.launch); only the small bound objects go
            b = _bound.setdefault(key, b)
    return b


def bound_launches() -> int:
    return len(_bound)


def scratch_for(launches, device):
    """A fresh scratch buffer for one call (None when the launches need none), from torch's caching allocator on the
    current stream: calls overlapping on other streams or threads never share it, and under graph capture it comes
    from the graph's private pool and lives as long as the graph."""
    import torch

    if not launches.scratch.nbytes:
        return None
    return torch.empty(launches.scratch.nbytes, device=device, dtype=torch.uint8)


def _ptr(t) -> int:
    return t.data_ptr() if t is not None else 0


def execute(launches, x, weight, bias, eps: float, out=None):
    """(y, mean, rstd) of `launches` on validated tensors: y is `out` or a fresh tensor like x; mean and rstd [rows]."""
    import torch

    index = current_index(x.device)
    y = torch.empty_like(x) if out is None else out
    mean = torch.empty(launches.rows, device=x.device, dtype=torch.float32)
    rstd = torch.empty(launches.rows, device=x.device, dtype=torch.float32)
    scratch = scratch_for(launches, x.device)
    b = bound(launches, index)
    with device_scope(index):
        b((x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(), mean.data_ptr(), rstd.data_ptr(),
           _ptr(scratch)), np.float32(eps), stream(index))
    return y, mean, rstd


def run(launches_for, x, weight, bias, eps: float, out=None, return_stats: bool = False):
    """A path's public function: validate the input as torch's vectorized path would take it
    (labkit.ops.eligibility.check, ValueError naming the condition before any launch), describe its launches
    with `launches_for(rows, n, device)` (the path's, which raises its own ValueError), execute. y, or
    (y, mean, rstd)."""
    from labkit.core.device import device_info
    from labkit.ops import eligibility

    layout = eligibility.check(x, weight, bias, eps, out=out)
    p = launches_for(layout.rows, layout.n, device_info(current_index(x.device)))
    y, mean, rstd = execute(p, x, weight, bias, eps, out)
    return (y, mean, rstd) if return_stats else y

