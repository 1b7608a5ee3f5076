"""The one kernel path on the CPU: what bound launches hand each launch (argument order and types, the device made
current, the per-row counters zeroed first), and that many shapes neither reload functions nor grow the caches
without bound. The launches themselves are recorded, not run (there is no GPU here)."""
import numpy as np
import pytest
import torch

from labkit.core import launch, program
from labkit.core.device import Device
from labkit.ops import chain, launches, reference_order, rows_cluster, rows_fused, rows_staged

H200 = Device("NVIDIA H200", 90, 132, 232448, 65535)


@pytest.fixture
def recorded(monkeypatch):
    """Every function handle asked for, every launch and memset, and the device current at each."""
    log = {"functions": [], "calls": [], "memsets": [], "device": [0]}

    class FakeFunction:
        def __init__(self, key):
            self.key, self.ptr = key, 0

        def __call__(self, grid, block, args, shared_mem=0, stream=None):
            log["calls"].append((self.key[2], grid, block, args, shared_mem, log["device"][0]))

    def fake_function(kernel, name, index, options=(), shared_mem=0):
        log["functions"].append((index, kernel, name, options))
        return FakeFunction((index, kernel, name))

    class Scope:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            self.saved, log["device"][0] = log["device"][0], self.index

        def __exit__(self, *exc):
            log["device"][0] = self.saved

    monkeypatch.setattr(launch, "function", fake_function)
    monkeypatch.setattr(launches, "device_scope", Scope)
    monkeypatch.setattr(program, "memset_async", lambda ptr, n, s: log["memsets"].append((ptr, n, log["device"][0])))
    monkeypatch.setattr(program, "TensorMapEncoder", lambda geometry: (lambda address: ("map", geometry, address)))
    monkeypatch.setattr(launches, "stream", lambda index: (f"stream{index}", 1000 + index))
    launches._bound.clear()
    yield log
    launches._bound.clear()


def test_chain_launches_hand_the_kernels_their_arguments_in_order(recorded):
    p = chain.launches(16, 1 << 22, H200)
    b = launches.bound(p, 1)
    with launches.device_scope(1):
        b((0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000, 0x7000), np.float32(1e-5), ("s", 1001))
    (ptr, nbytes, dev), = recorded["memsets"]
    assert (ptr, nbytes, dev) == (0x7000 + 48 * 16, 4 * 16, 1)  # the row counters, zeroed on x's device first
    (s_fn, s_grid, s_block, s_args, s_smem, s_dev), (o_fn, o_grid, _, o_args, _, o_dev) = recorded["calls"]
    assert (s_fn, s_grid, s_block, s_smem, s_dev) == ("chain_stats_tma", (4, 16), (64,), p.stats.shared_mem, 1)
    assert s_args[0] == ("map", p.tensor_map, 0x1000)
    assert [int(a) for a in s_args[1:5]] == [0x7000, 0x7000 + 48 * 16, 0x5000, 0x6000]
    assert s_args[5] == np.int32(1 << 22) and s_args[6] == np.float32(1e-5)
    assert o_fn == "affine_columns" and o_dev == 1 and o_grid == p.output.grid
    assert [int(a) for a in o_args[:6]] == [0x1000, 0x5000, 0x6000, 0x2000, 0x3000, 0x4000]
    assert (o_args[6], o_args[7]) == (np.int32(16), np.int32((1 << 22) // 4))
    assert all(isinstance(a, (np.uint64, np.int32, np.float32, tuple)) for a in s_args + o_args)


def test_reference_order_and_rows_fused_argument_order(recorded):
    for p in (reference_order.launches(8, 1024, H200), rows_fused.launches(8, 2048, H200),
              rows_fused.launches(9, 1024, H200)):
        recorded["calls"].clear()
        with launches.device_scope(0):
            launches.bound(p, 0)((1, 2, 3, 4, 5, 6, 0), np.float32(0.5), ("s", 1000))
        names = [c[0] for c in recorded["calls"]]
        args = [[int(a) if isinstance(a, np.uint64) else a for a in c[3]] for c in recorded["calls"]]
        if p.path == "reference_order":
            assert names == ["reference_order_stats", "affine_rows_interleaved"]
            assert args[0][:3] == [1, 5, 6] and args[1][:6] == [1, 5, 6, 2, 3, 4]
        elif p.n == 2048:  # a block per row: n and eps after the slots
            assert names == ["rows_fused_reg4"] and args[0][:6] == [1, 2, 3, 4, 5, 6]
            assert args[0][6] == np.int32(2048) and args[0][7] == np.float32(0.5)
            assert p.kernel.grid == (8,)
        else:  # a warp per row: the row count first (a block holds four rows, the last one partly)
            assert names == ["rows_fused_warp2"] and args[0][:6] == [1, 2, 3, 4, 5, 6]
            assert args[0][6:] == [np.int32(9), np.int32(1024), np.float32(0.5)]
            assert p.kernel.grid == (3,)


def test_rows_staged_launch(recorded):
    """One launch: the forward slots, then rows, N, eps and the ring's depth; a persistent grid of at most one block
    per SM; its dynamic shared memory the ring, the reciprocals and the barriers, within the device's opt-in."""
    for rows, n in ((8, 16384), (5000, 65536), (3, 4), (1, 1 << 18)):
        p = rows_staged.launches(rows, n, H200)
        recorded["calls"].clear()
        with launches.device_scope(0):
            launches.bound(p, 0)((1, 2, 3, 4, 5, 6, 0), np.float32(0.5), ("s", 1000))
        (fn, grid, block, args, smem, _), = recorded["calls"]
        assert fn == "rows_staged" and grid == (min(rows, H200.sm_count),) and block == (rows_staged.BLOCK,)
        assert [int(a) for a in args[:6]] == [1, 2, 3, 4, 5, 6]
        assert list(args[6:]) == [np.int32(rows), np.int32(n), np.float32(0.5), np.int32(p.slots)]
        assert smem == rows_staged.smem_bytes(n, p.slots) <= H200.smem_optin_bytes - rows_staged.RESERVED_BYTES
        assert rows_staged.MIN_SLOTS <= p.slots <= rows_staged.MAX_SLOTS
        # one more slot would not fit: the ring is as deep as the shared memory allows
        assert rows_staged.smem_bytes(n, p.slots + 1) > H200.smem_optin_bytes - rows_staged.RESERVED_BYTES


def test_rows_staged_constants_match_the_kernel():
    """The launches size the block and the shared memory from constants the kernel defines: they must agree."""
    import re

    from labkit.core.compile import kernel_sources

    text, headers = kernel_sources("rows_staged")  # with staged_chain.cuh, where the chain group's constants live
    src = text + "".join(headers.values())

    def const(name):
        return int(re.search(rf"(?:constexpr int {name} =|#define {name}) (\d+)", src).group(1))

    assert const("kThreads") == rows_staged.THREADS
    assert const("kThreads") * const("kPerThread") == rows_staged.CHUNK_VECTORS
    assert 32 * const("STAGED_OUT_WARPS") == rows_staged.OUT_THREADS
    assert const("kStatsRing") == rows_staged.STATS_RING


@pytest.mark.parametrize("device,n,match", [
    (Device("A100", 80, 108, 167936, 65535), 16384, "sm_90 and later"),
    (H200, (1 << 18) + 4, "N <= 262144; got N=262148"),
    (Device("small", 90, 10, 30 * 1024, 65535), 16384, "needs 2 ring slots"),
])
def test_rows_staged_refuses_what_it_cannot_take(device, n, match):
    with pytest.raises(ValueError, match=match):
        rows_staged.launches(4, n, device)


def test_rows_cluster_launch(recorded):
    """One launch: the forward slots, then rows, N, eps and the ring's depth; clusters of 2 CTAs, at most one per
    SM, one per row at most; half a row and one more chunk in each CTA's ring, the ring as deep as the shared memory
    allows."""
    for rows, n in ((8, 16384), (5000, 65536), (3, 4), (1, 98304), (1000, 1028)):
        p = rows_cluster.launches(rows, n, H200)
        recorded["calls"].clear()
        with launches.device_scope(0):
            launches.bound(p, 0)((1, 2, 3, 4, 5, 6, 0), np.float32(0.5), ("s", 1000))
        (fn, grid, block, args, smem, _), = recorded["calls"]
        assert fn == "rows_cluster2" and grid == (2 * min(rows, H200.sm_count // 2),)
        assert block == (rows_cluster.BLOCK,)
        assert [int(a) for a in args[:6]] == [1, 2, 3, 4, 5, 6]
        assert list(args[6:]) == [np.int32(rows), np.int32(n), np.float32(0.5), np.int32(p.slots)]
        assert smem == rows_cluster.smem_bytes(n, p.slots) <= H200.smem_optin_bytes - rows_cluster.RESERVED_BYTES
        assert rows_cluster.smem_bytes(n, p.slots + 1) > H200.smem_optin_bytes - rows_cluster.RESERVED_BYTES
        assert rows_cluster.own_chunks(n) <= p.slots - 1


def test_rows_cluster_constants_match_the_kernel():
    """The launches size the block, the cluster and the shared memory from constants the kernel defines."""
    import re

    from labkit.core.compile import kernel_sources

    text, headers = kernel_sources("rows_cluster")  # with staged_chain.cuh, where the chain group's constants live
    src = text + "".join(headers.values())

    def const(name):
        return int(re.search(rf"constexpr int {name} = (\d+)", src).group(1))

    assert const("kThreads") == rows_cluster.THREADS
    assert const("kThreads") * const("kPerThread") == rows_cluster.CHUNK_VECTORS
    assert 32 * const("kOutWarps") == rows_cluster.OUT_THREADS
    assert (const("kStatsRing"), const("kRelayRing")) == (rows_cluster.STATS_RING, rows_cluster.RELAY_RING)
    dims = re.findall(r"__cluster_dims__\((\d+), 1, 1\) __launch_bounds__\(kBlock, 1\)\s+(\w+)\(", src)
    assert dims == [(str(rows_cluster.CLUSTER), rows_cluster.FUNCTION)]


@pytest.mark.parametrize("device,n,match", [
    (Device("A100", 80, 108, 167936, 65535), 16384, "sm_90 and later"),
    (H200, 98304 + 4, "half a row .* ring of 13 .*: N <= 98304, got N=98308 \\(13 chunks a CTA\\)"),
    (H200, 1 << 24, "at least 2 chunks .* hold 0 at N=16777216"),
    (Device("small", 90, 10, 30 * 1024, 65535), 16384, "at least 2 chunks .* hold 1 at N=16384"),
    (Device("one SM", 90, 1, 232448, 65535), 16384, "clusters of 2 CTAs"),
])
def test_rows_cluster_refuses_what_it_cannot_take(device, n, match):
    with pytest.raises(ValueError, match=match):
        rows_cluster.launches(4, n, device)


def test_execute_makes_x_device_current_around_every_launch(recorded, monkeypatch):
    """x on cuda:1 while cuda:0 is current: the memset and both launches run with cuda:1 current."""
    x = torch.empty(4, 1 << 20, device="meta")
    monkeypatch.setattr(launches, "current_index", lambda device: 1)
    monkeypatch.setattr(launches, "scratch_for", lambda launches, device: None)
    fake = type("T", (), {"data_ptr": lambda self: 0x10})()
    monkeypatch.setattr(torch, "empty_like", lambda t: fake)
    monkeypatch.setattr(torch, "empty", lambda *a, **k: fake)
    launches.execute(chain.launches(4, 1 << 20, H200), x, fake, fake, 1e-5)
    assert [c[-1] for c in recorded["calls"]] == [1, 1] and [m[-1] for m in recorded["memsets"]] == [1]



def test_a_stage_alone_launches_only_that_stage(recorded, monkeypatch):
    """labkit.lab.stages (the stage breakdown, the sanitizer step): the statistics stage with its memset, or the
    output launch, from the same bound launches the public functions run."""
    from labkit.lab import stages

    monkeypatch.setattr(stages, "device_scope", launches.device_scope)
    monkeypatch.setattr(stages, "stream", launches.stream)
    monkeypatch.setattr(stages, "current_index", lambda device: 0)
    monkeypatch.setattr(stages, "scratch_for", lambda l, device: None)
    t = type("T", (), {"data_ptr": lambda self: 0x10, "device": "meta"})()
    p = chain.launches(16, 1 << 22, H200)
    stages.stats_only(p, t, t, t, 1e-5)
    assert [c[0] for c in recorded["calls"]] == ["chain_stats_tma"] and len(recorded["memsets"]) == 1
    recorded["calls"].clear()
    stages.output_only(p, t, t, t, t, t, t)
    assert [c[0] for c in recorded["calls"]] == ["affine_columns"] and len(recorded["memsets"]) == 1

def test_many_row_counts_load_each_function_once_and_bound_launches_stay_bounded(recorded):
    for rows in range(1, 3 * launches.MAX_BOUND):
        launches.bound(rows_fused.launches(rows, 4096, H200), 0)
    assert len(set(recorded["functions"])) == 1  # one handle for every row count
    assert launches.bound_launches() <= launches.MAX_BOUND


def test_rows_counted_block_launch_and_refusal(recorded):
    """torch's block per row (grid rows, block (32, 4)), the counted entry point, no rows argument; rows longer than
    two float4s a thread are refused, naming the bound."""
    from labkit.ops.rows_fused import rows_counted_block

    p = rows_counted_block.launches(9, 1024, H200)
    recorded["calls"].clear()
    with launches.device_scope(0):
        launches.bound(p, 0)((1, 2, 3, 4, 5, 6, 0), np.float32(0.5), ("s", 1000))
    (fn, grid, block, args, smem, _), = recorded["calls"]
    assert (fn, grid, block) == ("rows_fused_reg2_counted", (9,), (32, 4)) and p.path == "rows_counted_block"
    assert [int(a) for a in args[:6]] == [1, 2, 3, 4, 5, 6] and list(args[6:]) == [np.int32(1024), np.float32(0.5)]
    with pytest.raises(ValueError, match="at most 1024 floats .* got N=1028"):
        rows_counted_block.launches(9, 1028, H200)
