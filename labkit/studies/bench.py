"""Timing protocols and their statistics.

Protocol A (the post's, the default): each method captured once in a CUDA graph and timed by replaying it;
8 warmups per method; 35 rounds, each visiting every method once in a seeded random order; one CUDA-event pair
around 5 back-to-back replays, with a synchronize before the pair. Every per-round sample is kept.
Protocol B (KernelBench's): eager calls, one event pair per call, the L2 flushed before each trial.

Ratios against the baseline are paired: computed within each round, then summarized, never from the medians
of separate samples.
"""
from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from labkit.records.text import PROTOCOL_NAMES  # noqa: F401 (the names beside the definitions)


@dataclass(frozen=True)
class Protocol:
    name: str = "A-graph-replay"
    graph: bool = True          # capture each method in a CUDA graph, time replays
    warmups: int = 8            # calls per method before capture/timing
    rounds: int = 35
    repeats: int = 5            # calls (replays) inside one event pair; the sample is their mean
    order_seed: int = 913       # seeds the per-round method order
    flush_l2_bytes: int = 0     # > 0: zero a buffer this large before each event pair (protocol B)

    def __post_init__(self):
        for name in ("warmups", "rounds", "repeats"):
            if getattr(self, name) < (0 if name == "warmups" else 1):
                raise ValueError(f"Protocol.{name} must be >= {0 if name == 'warmups' else 1}, "
                                 f"got {getattr(self, name)}")
        if self.flush_l2_bytes < 0:
            raise ValueError(f"Protocol.flush_l2_bytes must be >= 0, got {self.flush_l2_bytes}")


PROTOCOL_A = Protocol()
PROTOCOL_B = Protocol(name="B-kernelbench-eager", graph=False, warmups=3, rounds=100, repeats=1,
                      flush_l2_bytes=256 << 20)

# Each protocol's definition, said once (the front page's glossary), under its one name (PROTOCOL_NAMES, kept in
# labkit.records.text so that the records' own notes use it too).
PROTOCOL_DEFINITIONS = {
    "A": "the call captured in a CUDA graph, replayed between CUDA events, methods in randomized order (the post's "
         "protocol): the GPU's time, no host cost",
    "B": "CUDA events around each ordinary Python call, the L2 flushed before it (KernelBench's way): what an "
         "eager loop pays, host time included",
}


@dataclass
class TimingRecord:
    protocol: dict
    baseline: str | None
    order: list[list[str]]                         # per round, the visiting order
    samples_ms: dict[str, list[float]]             # per method, one sample per round, in round order
    stats: dict[str, dict] = field(default_factory=dict)
    ratio_vs_baseline: dict[str, dict] = field(default_factory=dict)  # baseline_ms / method_ms, paired per round

    def to_json(self) -> dict:
        return asdict(self)


def us(ms: float | None) -> float | None:
    """A median in milliseconds as microseconds, for a table's "us" column (None stays None: not timed)."""
    return None if ms is None else 1e3 * ms


def summarize(samples) -> dict:
    """median, quartiles (linear interpolation), min, max and count of a list of milliseconds."""
    a = np.asarray(samples, dtype=np.float64)
    if a.size == 0:
        raise ValueError("summarize needs at least one sample")
    q25, med, q75 = np.percentile(a, [25, 50, 75])
    return {"median_ms": float(med), "q25_ms": float(q25), "q75_ms": float(q75),
            "min_ms": float(a.min()), "max_ms": float(a.max()), "n": int(a.size)}


def paired_ratios(samples_ms: dict[str, list[float]], baseline: str) -> dict[str, dict]:
    """Per-round baseline/method ratios (speedup > 1 means faster than the baseline), summarized."""
    if baseline not in samples_ms:
        raise ValueError(f"baseline {baseline!r} was not timed; timed: {sorted(samples_ms)}")
    base = np.asarray(samples_ms[baseline])
    out = {}
    for name, s in samples_ms.items():
        r = base / np.asarray(s)
        q25, med, q75 = np.percentile(r, [25, 50, 75])
        out[name] = {"median": float(med), "q25": float(q25), "q75": float(q75), "per_round": r.tolist()}
    return out


class CudaEventTimer:
    """Milliseconds of `fn` called `repeats` times between two CUDA events, after a device synchronize."""

    def __init__(self, flush_l2_bytes: int = 0):
        import torch

        self._torch = torch
        self._flush = torch.empty(flush_l2_bytes, dtype=torch.uint8, device="cuda") if flush_l2_bytes else None

    def __call__(self, fn: Callable[[], object], repeats: int) -> float:
        torch = self._torch
        if self._flush is not None:
            self._flush.zero_()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / repeats


class HostTimer:
    """Wall-clock timer for CPU callables; exercises the protocol's mechanics where there is no GPU."""

    def __call__(self, fn: Callable[[], object], repeats: int) -> float:
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - t0) * 1e3 / repeats


def graphed(fn: Callable[[], object]) -> tuple[Callable[[], object], object]:
    """Capture one call of `fn` on a side stream; return the replay and what keeps the graph's memory alive."""
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    graph.replay()
    torch.cuda.synchronize()
    return graph.replay, (graph, out)


def time_methods(methods: dict[str, Callable[[], object]], protocol: Protocol = PROTOCOL_A,
                 baseline: str | None = None, timer=None) -> TimingRecord:
    """Time every method under `protocol`; a method that raises is reported by the caller, not here."""
    if not methods:
        raise ValueError("time_methods needs at least one method")
    if baseline is not None and baseline not in methods:
        raise ValueError(f"baseline {baseline!r} is not among the methods {sorted(methods)}")
    timer = timer or CudaEventTimer(protocol.flush_l2_bytes)
    prepared, keep = {}, []
    for name, fn in methods.items():
        for _ in range(protocol.warmups):
            fn()
        if protocol.graph:
            replay, alive = graphed(fn)
            prepared[name] = replay
            keep.append(alive)
        else:
            prepared[name] = fn
    rng = random.Random(protocol.order_seed)
    samples = {name: [] for name in prepared}
    order = []
    for _ in range(protocol.rounds):
        names = list(prepared)
        rng.shuffle(names)
        order.append(names)
        for name in names:
            samples[name].append(timer(prepared[name], protocol.repeats))
    record = TimingRecord(asdict(protocol), baseline, order, samples)
    record.stats = {name: summarize(s) for name, s in samples.items()}
    if baseline is not None:
        record.ratio_vs_baseline = paired_ratios(samples, baseline)
    del keep
    return record
