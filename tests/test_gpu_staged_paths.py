"""The paths that stage rows in shared memory, rows_staged (kernels/rows_staged.cu, one CTA a row) and rows_cluster
(kernels/rows_cluster.cu, a row across a cluster of two CTAs): bit identity with torch.native_layer_norm (output,
mean and rstd as int32 views) at the corners of each schedule, value classes and non-finite rows, forced small rings,
out= and offset views, repeated calls, CUDA graph replay and concurrent streams, and refusals.

Repeated calls matter here: the warp groups (and, in a cluster, the CTAs) hand slots, states and statistics to each
other through mbarriers, and a hand-off ordered wrongly shows as a wrong row now and then
(docs/decisions.md#rows_staged, #rows_cluster). GPU only."""
from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass

import pytest

from bits import assert_bits_equal
from labkit import inputs
from labkit.ops.reference import native_layer_norm

pytestmark = [pytest.mark.gpu, pytest.mark.sm90]  # bulk copies; thread block clusters


@dataclass(frozen=True)
class Staged:
    path: str
    cases: tuple            # (rows, n) at the corners of the schedule, each with why in CASES_WHY
    wide: int               # N of the value-class, non-finite, offset and graph tests
    small_rings: tuple      # (rows, n, slots) forced on this GPU
    repeated: tuple         # (rows, n, calls)
    too_long: int           # the shortest N the path refuses, and what its error says
    too_long_says: str

    @property
    def module(self):
        return importlib.import_module(f"labkit.ops.{self.path}")

    def layer_norm(self, *args, **kwargs):
        return getattr(self.module, f"{self.path}_layer_norm")(*args, **kwargs)


CASES_WHY = {
    # rows_staged: one CTA a row, a ring of 16-KiB chunks (14 slots on the H200), rows longer than it re-read early
    # chunks from memory
    ("rows_staged", 1, 4): "one vector: 127 empty chains, one partial chunk",
    ("rows_staged", 3, 516): "a chain one vector longer than the others",
    ("rows_staged", 7, 4096): "one full chunk, fewer rows than blocks",
    ("rows_staged", 500, 4100): "a partial second chunk; blocks take 3 or 4 rows (the statistics hand-off)",
    ("rows_staged", 1000, 4100): "blocks take 7 or 8 rows: the ring and the statistics ring wrap",
    ("rows_staged", 1000, 1024): "partial chunks, many rows a block",
    ("rows_staged", 263, 16388): "5 chunks, the last of one vector",
    ("rows_staged", 40, 65536): "16 chunks: longer than the ring, early chunks re-read from memory",
    ("rows_staged", 300, 65536 + 1024): "17 chunks, the last a quarter full; each row longer than the ring",
    ("rows_staged", 2, 1 << 18): "the longest row it takes: 64 chunks through the ring",
    ("rows_staged", 300, 49152): "12 chunks: exactly the ring's kept chunks (slots - 1 on the H200)",
    ("rows_staged", 300, 53248): "13 chunks: one early chunk",
    ("rows_staged", 1, 131076): "a partial last chunk after early ones",
    # rows_cluster: CTA i holds chunks [i h, (i + 1) h) of the row and relays the chains' states to CTA i + 1
    ("rows_cluster", 1, 4): "one vector: one partial chunk, the second CTA relays and finishes only",
    ("rows_cluster", 3, 516): "a chain one vector longer than the others, second CTA empty",
    ("rows_cluster", 7, 8192): "one full chunk each",
    ("rows_cluster", 500, 8196): "2 + 1 chunks, the last of one vector; the statistics ring wraps",
    ("rows_cluster", 1000, 1028): "second CTA empty, 15 or 16 rows a cluster",
    ("rows_cluster", 263, 16388): "3 + 2 chunks, the last of one vector",
    ("rows_cluster", 1000, 32768): "4 + 4 chunks: the ring (13 slots) wraps from row to row",
    ("rows_cluster", 40, 65536): "8 + 8 chunks, fewer rows than clusters",
    ("rows_cluster", 2, 57344): "7 + 7 chunks, two clusters",
    ("rows_cluster", 300, 98304): "12 + 12 chunks: half a row fills the ring but one slot (the most on the H200)",
    ("rows_cluster", 130, 98300): "12 + 12 chunks, the last partial",
    ("rows_cluster", 3, 8232): "2 + 1 chunks, the second CTA's of 10 vectors: 118 chains release the relay "
                               "without pushing (the release fixed at 19f0ec4)",
}

PATHS = (
    Staged("rows_staged", tuple((r, n) for (p, r, n) in CASES_WHY if p == "rows_staged"), 16384,
           small_rings=tuple((r, n, k) for r, n in ((400, 4100), (300, 16384), (200, 65536)) for k in (2, 3, 5)),
           repeated=((2048, 16384, 25), (1024, 65536, 25), (16384, 4096, 100), (1000, 4100, 100)),
           too_long=(1 << 18) + 4, too_long_says="N <= 262144"),
    Staged("rows_cluster", tuple((r, n) for (p, r, n) in CASES_WHY if p == "rows_cluster"), 65536,
           small_rings=((400, 8196, 3), (300, 16384, 3), (200, 32768, 5), (200, 65536, 9)),
           repeated=((2048, 16384, 25), (1024, 65536, 25), (512, 98304, 10), (16384, 4096, 50)),
           too_long=98304 + 4, too_long_says="half a row"),
)
BY_NAME = {s.path: s for s in PATHS}


def _assert_identical(got, ref, what: str, path: str) -> None:
    """Output, mean and rstd each torch's: one dtype, one shape, the same bits (tests/bits.py)."""
    __tracebackhide__ = True
    for name, g, r in zip(("output", "mean", "rstd"), got, ref):
        assert_bits_equal(g, r, what=f"{name}, {what}", path=path)


def _run(spec: Staged, rows, n, eps=1e-5, kind="normal_plus_1000", seed=7):
    x = inputs.make_input(kind, (rows, n), seed=seed, device="cuda")
    w, b = inputs.make_affine("random_normal", (n,), seed=seed, device="cuda")
    _assert_identical(spec.layer_norm(x, w, b, eps, return_stats=True), native_layer_norm(x, w, b, eps),
                      what=f"{rows}x{n}, eps {eps}, {kind}", path=spec.path)


def _params(field):
    return [pytest.param(s, *v, id=f"{s.path}-{v}") for s in PATHS for v in getattr(s, field)]


@pytest.mark.parametrize("spec,rows,n", _params("cases"))
@pytest.mark.parametrize("eps", [1e-5, 0.0, 0.1])
def test_bit_identical(spec, rows, n, eps):
    _run(spec, rows, n, eps)


@pytest.mark.parametrize("spec", PATHS, ids=lambda s: s.path)
@pytest.mark.parametrize("kind", ["uniform", "normal", "constant_1e4"])
def test_value_classes(spec, kind):
    _run(spec, 300, spec.wide, kind=kind)


@pytest.mark.parametrize("spec", PATHS, ids=lambda s: s.path)
def test_non_finite_rows(spec):
    n = spec.wide
    x = inputs.make_input("normal", (300, n), seed=13, device="cuda")
    x[::7, 5] = float("inf")
    x[3::11, 17] = float("nan")  # in the row's first chunk
    x[4::13, n - 17] = float("nan")  # in its last (rows_cluster: the second CTA's half)
    w, b = inputs.make_affine("random_normal", (n,), seed=13, device="cuda")
    got = spec.layer_norm(x, w, b, 1e-5, return_stats=True)
    _assert_identical(got, native_layer_norm(x, w, b, 1e-5), what=f"non-finite rows, 300x{n}", path=spec.path)


def test_rows_staged_cases_reach_past_the_ring():
    """A guard on rows_staged's cases, not on the kernel: on this GPU's ring (40, 65536) and (2, 2**18) have more
    chunks than the ring keeps (one slot always goes to the next row) and (300, 49152) exactly as many."""
    from labkit.core.device import device_info
    from labkit.ops import rows_staged

    def slots(n):
        return rows_staged.slots_for(n, device_info(0))

    assert 65536 // 4 // rows_staged.CHUNK_VECTORS > slots(65536) - 1
    assert 16384 // 4 // rows_staged.CHUNK_VECTORS <= slots(16384) - 1
    assert 49152 // 4 // rows_staged.CHUNK_VECTORS == slots(49152) - 1


def test_rows_cluster_small_rings_are_the_least():
    """A guard on rows_cluster's forced rings: each is the least its half row takes (its chunks and one more)."""
    from labkit.ops import rows_cluster

    assert all(rows_cluster.own_chunks(n) == slots - 1 for _, n, slots in BY_NAME["rows_cluster"].small_rings)


@pytest.mark.parametrize("spec,rows,n,slots", _params("small_rings"))
def test_small_rings(spec, rows, n, slots):
    """Rings a GPU with less shared memory gets (sm_120's 99 KiB: 5 or 6 slots), forced on this one: every chunk
    goes through few slots (rows_staged: longer rows mostly as early chunks)."""
    from labkit.core.device import device_info
    from labkit.ops import launches

    p = spec.module.launches(rows, n, device_info(0))
    p = dataclasses.replace(p, slots=slots, kernel=dataclasses.replace(p.kernel,
                                                                        shared_mem=spec.module.smem_bytes(n, slots)))
    x = inputs.make_input("normal_plus_1000", (rows, n), seed=14, device="cuda")
    w, b = inputs.make_affine("random_normal", (n,), seed=14, device="cuda")
    for _ in range(3):
        _assert_identical(launches.execute(p, x, w, b, 1e-5), native_layer_norm(x, w, b, 1e-5),
                          what=f"{rows}x{n}, {slots} slots", path=spec.path)


@pytest.mark.parametrize("spec", PATHS, ids=lambda s: s.path)
def test_out_and_an_offset_view(spec):
    import torch

    n = spec.wide
    big = inputs.make_input("normal", (301, n), seed=15, device="cuda")
    x = big[1:]  # storage offset of one row: still 16-byte aligned
    w, b = inputs.make_affine("random_normal", (n,), seed=15, device="cuda")
    out = torch.empty_like(x)
    y = spec.layer_norm(x, w, b, 1e-5, out=out)
    assert y.data_ptr() == out.data_ptr()
    assert_bits_equal(out, native_layer_norm(x, w, b, 1e-5)[0], what="out= of an offset view", path=spec.path)


@pytest.mark.parametrize("spec,rows,n,calls", _params("repeated"))
def test_repeated_calls_stay_identical(spec, rows, n, calls):
    """Many calls where the hand-offs overlap most (rows fitting the ring several times over, rows longer than
    it): every call compared, not one."""
    x = inputs.make_input("normal", (rows, n), seed=11, device="cuda")
    w, b = inputs.make_affine("random_normal", (n,), seed=11, device="cuda")
    ref = native_layer_norm(x, w, b, 1e-5)
    for i in range(calls):
        got = spec.layer_norm(x, w, b, 1e-5, return_stats=True)
        _assert_identical(got, ref, what=f"{rows}x{n}, call {i + 1} of {calls}", path=spec.path)


@pytest.mark.parametrize("spec", PATHS, ids=lambda s: s.path)
def test_graph_replay_and_streams(spec):
    import torch

    n = spec.wide
    x = inputs.make_input("normal", (600, n), seed=12, device="cuda")
    w, b = inputs.make_affine("random_normal", (n,), seed=12, device="cuda")
    ref = native_layer_norm(x, w, b, 1e-5)
    static = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        spec.layer_norm(static, w, b)  # loads and plans outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y, mean, rstd = spec.layer_norm(static, w, b, return_stats=True)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    _assert_identical((y, mean, rstd), ref, what="graph replay", path=spec.path)
    static.copy_(x * 2)
    g.replay()
    torch.cuda.synchronize()
    assert_bits_equal(y, native_layer_norm(x * 2, w, b, 1e-5)[0], what="graph replay after a new input", path=spec.path)
    streams = [torch.cuda.Stream() for _ in range(4)]
    outs = []
    for i, st in enumerate(streams):
        st.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(st):
            outs.append(spec.layer_norm(x + i, w, b))
    torch.cuda.synchronize()
    for i, o in enumerate(outs):
        assert_bits_equal(o, native_layer_norm(x + i, w, b, 1e-5)[0], what=f"output on stream {i}", path=spec.path)


@pytest.mark.parametrize("spec", PATHS, ids=lambda s: s.path)
def test_refusals_name_the_condition(spec):
    import torch

    n = spec.too_long
    x = torch.randn(2, n, device="cuda")
    with pytest.raises(ValueError, match=spec.too_long_says):
        spec.layer_norm(x, torch.ones(n, device="cuda"), torch.zeros(n, device="cuda"))
