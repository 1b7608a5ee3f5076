"""rows_cluster (kernels/rows_cluster.cu): bit identity with torch.native_layer_norm (output, mean, rstd as int32
views) at the corners of its schedule (a second CTA holding no chunk, halves of unequal length, partial chunks, half a
row filling the ring, fewer rows than clusters), repeated calls (the CTAs hand states and statistics to each other
through st.async and mbarrier transactions: a hand-off ordered wrongly shows as a wrong row now and then), forced
small rings, CUDA graph replay and concurrent streams. GPU only."""
import pytest

from labkit import inputs
from labkit.ops.reference import native_layer_norm
from labkit.studies.reliability import compare_bits

pytestmark = [pytest.mark.gpu, pytest.mark.sm90]  # thread block clusters


def _bits(t):
    import torch

    return t.reshape(-1).view(torch.int32)


def _differing(got, ref) -> list[str]:
    """Which of output, mean and rstd differ from torch's as int32 views (or in shape)."""
    return [name for name, same in compare_bits(got, ref).items() if not same]


def _run(rows, n, eps=1e-5, kind="normal_plus_1000", seed=7):
    from labkit.ops.rows_cluster import rows_cluster_layer_norm

    x = inputs.make_input(kind, (rows, n), seed=seed, device="cuda")
    w, b = inputs.make_affine("random_normal", (n,), seed=seed, device="cuda")
    got = rows_cluster_layer_norm(x, w, b, eps, return_stats=True)
    ref = native_layer_norm(x, w, b, eps)
    return _differing(got, ref)


CASES = [
    (1, 4),               # one vector: one partial chunk, the second CTA relays and finishes only
    (3, 516),             # a chain one vector longer than the others, second CTA empty
    (7, 8192),            # one full chunk each
    (500, 8196),          # 2 + 1 chunks, the last of one vector; clusters take 7 or 8 rows (statistics ring wraps)
    (1000, 1028),         # second CTA empty, 15 or 16 rows a cluster
    (263, 16388),         # 3 + 2 chunks, the last of one vector
    (1000, 32768),        # 4 + 4 chunks: the ring (13 slots) wraps from row to row
    (40, 65536),          # 8 + 8 chunks, fewer rows than clusters
    (2, 57344),           # 7 + 7 chunks, two clusters
    (300, 98304),         # 12 + 12 chunks: half a row fills the ring but one slot (the most it takes on the H200)
    (130, 98300),         # 12 + 12 chunks, the last partial
]


@pytest.mark.parametrize("rows,n", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("eps", [1e-5, 0.0, 0.1])
def test_bit_identical(rows, n, eps):
    assert _run(rows, n, eps) == []


@pytest.mark.parametrize("kind", ["uniform", "normal", "constant_1e4"])
def test_value_classes(kind):
    assert _run(300, 65536, kind=kind) == []


def test_non_finite_rows():
    from labkit.ops.rows_cluster import rows_cluster_layer_norm

    x = inputs.make_input("normal", (300, 65536), seed=13, device="cuda")
    x[::7, 5] = float("inf")
    x[3::11, 40000] = float("nan")  # in the second CTA's half
    w, b = inputs.make_affine("random_normal", (65536,), seed=13, device="cuda")
    got = rows_cluster_layer_norm(x, w, b, 1e-5, return_stats=True)
    assert _differing(got, native_layer_norm(x, w, b, 1e-5)) == []


@pytest.mark.parametrize("rows,n,slots", [(400, 8196, 3), (300, 16384, 3), (200, 32768, 5), (200, 65536, 9)])
def test_small_rings(rows, n, slots):
    """The least ring each half row takes (its chunks and one more), forced on this GPU: what a GPU with less shared
    memory per block gets (sm_120's 99 KiB: 5 slots)."""
    import dataclasses

    from labkit.core.device import device_info
    from labkit.ops import plans, rows_cluster

    p = rows_cluster.plan(rows, n, device_info(0))
    assert rows_cluster.own_chunks(n) == slots - 1
    p = dataclasses.replace(p, slots=slots, kernel=dataclasses.replace(p.kernel,
                                                                        shared_mem=rows_cluster.smem_bytes(n, slots)))
    x = inputs.make_input("normal_plus_1000", (rows, n), seed=14, device="cuda")
    w, b = inputs.make_affine("random_normal", (n,), seed=14, device="cuda")
    for _ in range(3):
        got = plans.execute(p, x, w, b, 1e-5)
        assert _differing(got, native_layer_norm(x, w, b, 1e-5)) == []


def test_out_and_an_offset_view():
    import torch

    from labkit.ops.rows_cluster import rows_cluster_layer_norm

    big = inputs.make_input("normal", (301, 65536), seed=15, device="cuda")
    x = big[1:]  # storage offset 256 KiB: still 16-byte aligned
    w, b = inputs.make_affine("random_normal", (65536,), seed=15, device="cuda")
    out = torch.empty_like(x)
    y = rows_cluster_layer_norm(x, w, b, 1e-5, out=out)
    assert y.data_ptr() == out.data_ptr()
    assert torch.equal(_bits(out), _bits(native_layer_norm(x, w, b, 1e-5)[0]))


def test_repeated_calls_stay_identical():
    """Many calls where the CTAs' hand-offs overlap most (many rows a cluster, halves of 1 to 12 chunks): every call
    compared, not one."""
    import torch

    from labkit.ops.rows_cluster import rows_cluster_layer_norm

    for rows, n, calls in ((2048, 16384, 25), (1024, 65536, 25), (512, 98304, 10), (16384, 4096, 50)):
        x = inputs.make_input("normal", (rows, n), seed=11, device="cuda")
        w, b = inputs.make_affine("random_normal", (n,), seed=11, device="cuda")
        ref = [_bits(t) for t in native_layer_norm(x, w, b, 1e-5)]
        bad = 0
        for _ in range(calls):
            got = rows_cluster_layer_norm(x, w, b, 1e-5, return_stats=True)
            bad += sum(not torch.equal(r, _bits(g)) for r, g in zip(ref, got))
        assert bad == 0, (rows, n, bad)


def test_graph_replay_and_streams():
    import torch

    from labkit.ops.rows_cluster import rows_cluster_layer_norm

    x = inputs.make_input("normal", (600, 65536), seed=12, device="cuda")
    w, b = inputs.make_affine("random_normal", (65536,), seed=12, device="cuda")
    ref = [_bits(t) for t in native_layer_norm(x, w, b, 1e-5)]
    static = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        rows_cluster_layer_norm(static, w, b)  # loads and plans outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y, mean, rstd = rows_cluster_layer_norm(static, w, b, return_stats=True)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(_bits(t), r) for t, r in zip((y, mean, rstd), ref))
    static.copy_(x * 2)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(_bits(y), _bits(native_layer_norm(x * 2, w, b, 1e-5)[0]))
    streams = [torch.cuda.Stream() for _ in range(4)]
    outs = []
    for i, st in enumerate(streams):
        st.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(st):
            outs.append(rows_cluster_layer_norm(x + i, w, b))
    torch.cuda.synchronize()
    assert all(torch.equal(_bits(o), _bits(native_layer_norm(x + i, w, b, 1e-5)[0])) for i, o in enumerate(outs))


def test_refusals_name_the_condition():
    import torch

    from labkit.ops.rows_cluster import rows_cluster_layer_norm

    n = 98304 + 4
    x = torch.randn(2, n, device="cuda")
    with pytest.raises(ValueError, match="half a row"):
        rows_cluster_layer_norm(x, torch.ones(n, device="cuda"), torch.zeros(n, device="cuda"))
