"""Measuring tools several studies share: the device-copy ceiling, the dependent-push floor, and the graph-capture
preflight that keeps out of protocol A what a CUDA graph cannot replay. Each returns a JSON-able record."""
from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import replace

import numpy as np

from labkit.core.environ import scoped_environ
from labkit.studies import bench
from labkit.tasks import L1_40

COPY_CEILING_BYTES = 1 << 30  # the copied buffer: 1 GiB read + 1 GiB written per call
ELEMENT_BYTES = 4
FLOOR_PUSHES = math.prod(L1_40[1:]) // 128  # pushes per chain at L1/40: 4,194,304 elements over 128 chains


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def default_timer(protocol):
    return bench.CudaEventTimer(protocol.flush_l2_bytes)


def timeable(fns: dict, protocol, rows: dict, key: str, warmups: int) -> list[str]:
    """The names in `fns` that `protocol` can time: all of them, or under graph replay those whose capture preflight
    passes; each other one gets rows[name]["excluded"][key] = why."""
    names = list(fns)
    if protocol.graph:
        for name in list(names):
            err = graph_preflight(fns[name], warmups)
            if err is not None:
                rows[name]["excluded"][key] = f"CUDA graph capture failed: {err}"
                names.remove(name)
    return names


def graph_preflight(fn, warmups: int) -> str | None:
    """Warm `fn` up, capture it once in a CUDA graph and replay it; the error text if that fails, else None."""
    import torch

    try:
        for _ in range(warmups):
            fn()
        torch.cuda.synchronize()
        replay, alive = bench.graphed(fn)
        replay()
        torch.cuda.synchronize()
        del replay, alive
        return None
    except Exception as exc:
        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        return f"{type(exc).__name__}: {str(exc).strip()[:400]}"


def copy_ceiling(protocols: dict, nbytes: int = COPY_CEILING_BYTES, device="cuda", timer_factory=None) -> dict:
    """The best of two device copies of an `nbytes` float32 buffer under each protocol, read + write counted:
    `dst.copy_(src)`, and an elementwise kernel (`torch.mul(src, 1, out=dst)`). Both are kept because under graph
    replay torch's copy_ becomes a memcpy node that can run on a copy engine, measured on the H200 at 2,760 GB/s
    against 4,200 GB/s eager (run 20261129T151853Z): an SM kernel is the ceiling that LayerNorm kernels compete with."""
    import torch

    timer_factory = timer_factory or default_timer
    src = torch.ones(nbytes // ELEMENT_BYTES, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    moved = 2 * src.numel() * ELEMENT_BYTES
    out = {}
    for key, protocol in protocols.items():
        rec = bench.time_methods({"device_copy": lambda: dst.copy_(src),
                                  "elementwise_copy": lambda: torch.mul(src, 1.0, out=dst)}, protocol, baseline=None,
                                 timer=timer_factory(protocol))
        best = min(rec.stats, key=lambda k: rec.stats[k]["median_ms"])
        med = rec.stats[best]["median_ms"]
        out[key] = {"buffer_bytes": src.numel() * ELEMENT_BYTES, "bytes_moved": moved, "median_ms": med,
                    "median_gbps": gbps(moved, med), "ceiling_method": best,
                    "by_method_median_ms": {k: v["median_ms"] for k, v in rec.stats.items()}, "timing": rec.to_json()}
    src = dst = None  # the buffers freed before the caller measures anything else
    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()
    return out


def copy_ceiling_a(nbytes: int = COPY_CEILING_BYTES, rounds: int = 15, device="cuda", timer_factory=None) -> dict:
    """`copy_ceiling` under protocol A alone with `rounds` samples, in the floors' units (notebooks 07 and 08)."""
    c = copy_ceiling({"A": replace(bench.PROTOCOL_A, rounds=rounds)}, nbytes, device, timer_factory)["A"]
    return {"bytes": c["buffer_bytes"], "median_ms": c["median_ms"], "method": c["ceiling_method"],
            "read_plus_write_gbps": c["median_gbps"],
            "by_method_median_ms": c["by_method_median_ms"]}


def chain_floor(pushes: int = FLOOR_PUSHES, blocks: int = 64, rounds: int = 35, device="cuda") -> dict:
    """The dependent-push latency floor: kernels/chain_floor.cu on `blocks` one-warp blocks (as many chains as
    L1/40 has), timed under protocol A like every other stage (a single launch would catch the clocks still
    ramping), plus the SMs' own cycle counts per push, which do not depend on the clock."""
    import torch

    from labkit.core.launch import launch

    dev = torch.device(device)
    out = torch.empty(blocks * 32, device=dev)
    cycles = torch.zeros(blocks, device=dev, dtype=torch.int64)
    args = (out, cycles, np.int32(pushes), np.float32(1.0))
    rec = bench.time_methods({"floor": lambda: launch("chain_floor", "chain_floor", (blocks,), (32,), args, dev)},
                       replace(bench.PROTOCOL_A, rounds=rounds))
    ms = rec.stats["floor"]["median_ms"]
    cyc = float(cycles.double().mean().item())
    return {"pushes": pushes, "chains": blocks * 32, "ms": ms, "q25_ms": rec.stats["floor"]["q25_ms"],
            "q75_ms": rec.stats["floor"]["q75_ms"], "cycles_per_push": cyc / pushes,
            "sm_clock_ghz_implied": cyc / ms / 1e6}


def compile_static(*fns, **options):
    """torch.compile of each of `fns` with shapes held static (dynamic=False), dynamo's caches reset first: a
    function whose code object an earlier shape compiled would otherwise be recompiled with dynamic shapes
    (automatic dynamic), a generic kernel no user with one shape gets; and no recompile limit is reached in a
    sweep. `options` go to torch.compile (fullgraph, mode)."""
    import torch
    import torch._dynamo

    torch._dynamo.reset()
    return tuple(torch.compile(f, dynamic=False, **options) for f in fns)


def host_us_per_call(fn, calls: int, sync, warmups: int = 100) -> float:
    """Host microseconds per call over `calls` back-to-back calls after `warmups` (at a tiny shape the GPU keeps up,
    so the loop's wall time is the host's); `sync` waits for the device before and after the timed loop."""
    for _ in range(warmups):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    sync()
    return (t1 - t0) / calls * 1e6


@contextlib.contextmanager
def deterministic_algorithms():
    """torch.use_deterministic_algorithms(True) for a comparison of two models' bits (attention's and some matmul
    and embedding backwards reduce in a nondeterministic order otherwise, and a model would differ from itself),
    with cuBLAS's deterministic workspace; the previous setting, warn_only and the environment restored after."""
    import torch

    was = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    with scoped_environ(CUBLAS_WORKSPACE_CONFIG=os.environ.get("CUBLAS_WORKSPACE_CONFIG") or ":4096:8"):
        torch.use_deterministic_algorithms(True)
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(was[0], warn_only=was[1])
