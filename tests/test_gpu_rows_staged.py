"""rows_staged (kernels/rows_staged.cu): bit identity with torch.native_layer_norm (output, mean, rstd as int32
views) at the corners of its schedule, repeated calls (its groups hand slots and statistics to each other: a
release ordered wrongly shows as a wrong row now and then, data/dev/rows_staged/race.log), CUDA graph replay and
concurrent streams. GPU only."""
import pytest

from labkit import inputs
from labkit.ops.reference import native_layer_norm
from labkit.studies.reliability import compare_bits

pytestmark = [pytest.mark.gpu, pytest.mark.sm90]  # bulk copies


def _bits(t):
    import torch

    return t.reshape(-1).view(torch.int32)


def _differing(got, ref) -> list[str]:
    """Which of output, mean and rstd differ from torch's as int32 views (or in shape)."""
    return [name for name, same in compare_bits(got, ref).items() if not same]


def _run(rows, n, eps=1e-5, kind="normal_plus_1000", seed=7):
    from labkit.ops.rows_staged import rows_staged_layer_norm

    x = inputs.make_input(kind, (rows, n), seed=seed, device="cuda")
    w, b = inputs.make_affine("random_normal", (n,), seed=seed, device="cuda")
    got = rows_staged_layer_norm(x, w, b, eps, return_stats=True)
    ref = native_layer_norm(x, w, b, eps)
    return _differing(got, ref)


def _slots(n):
    from labkit.core.device import device_info
    from labkit.ops import rows_staged

    return rows_staged.slots_for(n, device_info(0))


CASES = [
    (1, 4),               # one vector: 127 empty chains, one partial chunk
    (3, 516),             # a chain one vector longer than the others
    (7, 4096),            # one full chunk, fewer rows than blocks
    (500, 4100),          # a partial second chunk; blocks take 3 or 4 rows (the statistics hand-off)
    (1000, 4100),         # blocks take 7 or 8 rows: the ring (15 chunks a block, 14 slots) and the statistics ring wrap
    (1000, 1024),         # partial chunks, many rows a block
    (263, 16388),         # 5 chunks, the last of one vector
    (40, 65536),          # 16 chunks: longer than the ring, early chunks re-read from memory
    (300, 65536 + 1024),  # 17 chunks, the last a quarter full; blocks take 2 or 3 rows, each longer than the ring
    (2, 1 << 18),         # the longest row it takes: 64 chunks through the ring
    (300, 49152),         # 12 chunks: exactly the ring's kept chunks (slots - 1 on the H200), no early chunk
    (300, 53248),         # 13 chunks: one early chunk
    (1, 131076),          # a partial last chunk after early ones
]


@pytest.mark.parametrize("rows,n", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("eps", [1e-5, 0.0, 0.1])
def test_bit_identical(rows, n, eps):
    assert _run(rows, n, eps) == []


@pytest.mark.parametrize("kind", ["uniform", "normal", "constant_1e4"])
def test_value_classes(kind):
    assert _run(300, 16384, kind=kind) == []


def test_non_finite_rows():
    from labkit.ops.rows_staged import rows_staged_layer_norm

    x = inputs.make_input("normal", (300, 16384), seed=13, device="cuda")
    x[::7, 5] = float("inf")
    x[3::11, 17] = float("nan")
    w, b = inputs.make_affine("random_normal", (16384,), seed=13, device="cuda")
    got = rows_staged_layer_norm(x, w, b, 1e-5, return_stats=True)
    assert _differing(got, native_layer_norm(x, w, b, 1e-5)) == []


def test_rows_longer_than_the_ring_are_reached():
    """A guard on CASES, not on the kernel: on this GPU's ring the (40, 65536) and (2, 2**18) cases have more
    chunks than the ring keeps (one slot always goes to the next row) and (300, 49152) exactly as many."""
    from labkit.ops import rows_staged

    assert 65536 // 4 // rows_staged.CHUNK_VECTORS > _slots(65536) - 1
    assert 16384 // 4 // rows_staged.CHUNK_VECTORS <= _slots(16384) - 1
    assert 49152 // 4 // rows_staged.CHUNK_VECTORS == _slots(49152) - 1


@pytest.mark.parametrize("slots", [2, 3, 5])
@pytest.mark.parametrize("rows,n", [(400, 4100), (300, 16384), (200, 65536)])
def test_small_rings(rows, n, slots):
    """The rings a GPU with less shared memory gets (sm_120: 5 or 6 slots; the least the kernel takes: 2), forced
    on this one: every chunk then goes through few slots, the longer rows mostly as early chunks."""
    import dataclasses

    from labkit.core.device import device_info
    from labkit.ops import plans, rows_staged

    p = rows_staged.plan(rows, n, device_info(0))
    p = dataclasses.replace(p, slots=slots, kernel=dataclasses.replace(p.kernel,
                                                                        shared_mem=rows_staged.smem_bytes(n, slots)))
    x = inputs.make_input("normal_plus_1000", (rows, n), seed=14, device="cuda")
    w, b = inputs.make_affine("random_normal", (n,), seed=14, device="cuda")
    for _ in range(3):
        got = plans.execute(p, x, w, b, 1e-5)
        assert _differing(got, native_layer_norm(x, w, b, 1e-5)) == []


def test_out_and_an_offset_view():
    import torch

    from labkit.ops.rows_staged import rows_staged_layer_norm

    big = inputs.make_input("normal", (301, 16384), seed=15, device="cuda")
    x = big[1:]  # storage offset 64 KiB: still 16-byte aligned
    w, b = inputs.make_affine("random_normal", (16384,), seed=15, device="cuda")
    out = torch.empty_like(x)
    y = rows_staged_layer_norm(x, w, b, 1e-5, out=out)
    assert y.data_ptr() == out.data_ptr()
    assert torch.equal(_bits(out), _bits(native_layer_norm(x, w, b, 1e-5)[0]))

def test_repeated_calls_stay_identical():
    """Many calls at shapes where the groups overlap most (rows fitting the ring several times over, rows
    longer than it): every call compared, not one."""
    import torch

    from labkit.ops.rows_staged import rows_staged_layer_norm

    for rows, n, calls in ((2048, 16384, 25), (1024, 65536, 25), (16384, 4096, 100), (1000, 4100, 100)):
        x = inputs.make_input("normal", (rows, n), seed=11, device="cuda")
        w, b = inputs.make_affine("random_normal", (n,), seed=11, device="cuda")
        ref = [_bits(t) for t in native_layer_norm(x, w, b, 1e-5)]
        bad = 0
        for _ in range(calls):
            got = rows_staged_layer_norm(x, w, b, 1e-5, return_stats=True)
            bad += sum(not torch.equal(r, _bits(g)) for r, g in zip(ref, got))
        assert bad == 0, (rows, n, bad)


def test_graph_replay_and_streams():
    import torch

    from labkit.ops.rows_staged import rows_staged_layer_norm

    x = inputs.make_input("normal", (600, 32768), seed=12, device="cuda")
    w, b = inputs.make_affine("random_normal", (32768,), seed=12, device="cuda")
    ref = [_bits(t) for t in native_layer_norm(x, w, b, 1e-5)]
    static = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        rows_staged_layer_norm(static, w, b)  # loads and plans outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y, mean, rstd = rows_staged_layer_norm(static, w, b, return_stats=True)
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
            outs.append(rows_staged_layer_norm(x + i, w, b))
    torch.cuda.synchronize()
    assert all(torch.equal(_bits(o), _bits(native_layer_norm(x + i, w, b, 1e-5)[0])) for i, o in enumerate(outs))


def test_refusals_name_the_condition():
    import torch

    from labkit.ops.rows_staged import rows_staged_layer_norm

    n = (1 << 18) + 4
    x = torch.randn(2, n, device="cuda")
    with pytest.raises(ValueError, match="N <= 262144"):
        rows_staged_layer_norm(x, torch.ones(n, device="cuda"), torch.zeros(n, device="cuda"))
