"""Chain-parallel reference order: bit identity with torch.native_layer_norm (output, mean, rstd as int32 views)
for every schedule and blocking, including ragged chains and many row counts. GPU only."""
import pytest

from bits import assert_bits_equal

from labkit.studies import identity

from labkit import inputs, tasks
from labkit.ops.chain import ChainSettings, chain_layer_norm
from labkit.ops.reference import native_layer_norm

pytestmark = pytest.mark.gpu  # tma, w1 and w4 need sm_90 (tests/conftest.py skips them below); the ring runs below

SHAPES = [
    (16, 64, 256, 256),  # L1/40: tma blocking, equal chains
    (8, 32, 128, 256),
    (3, 64, 17, 19),     # N = 20672: N/4 = 5168 is not a multiple of 128, chains of unequal length
    (5, 516),            # 129 vectors: one chain of each row is one step longer
    (7, 4),              # a single vector per row: 127 empty chains per row
    (1, 1 << 24),        # torch's vectorized-path limit
    (33, 2052),          # odd row count, ragged
    (200, 4096),         # many rows: the rows_fused schedule under "auto" (a block per row)
    (4096, 1024),              # rows_fused, a block per row: 2 vectors per torch thread
    (300, 2048),               # rows_fused, a block per row: 4 vectors per torch thread
    (1000, 256),               # rows_fused, a warp per row: half of torch's threads have no vector
    # tma blocking (N % 512 == 0; default ring: 6 stages of 64 steps, reads 8 steps ahead): a partial last stage,
    # fewer steps than the read-ahead, and ring wrap-around
    (2, 512),                    # one step per chain
    (3, 512 * 17),               # a single partial stage
    (2, 512 * (64 * 6 * 2 + 3)),  # the ring wraps twice, then a partial stage of 3 steps (< read-ahead)
    (3, 512 * 64 * 7),           # the ring wraps, no partial stage
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("schedule,blocking", [("auto", "auto"), ("chain", "w4"), ("chain", "w1"),
                                               ("rows_fused", "auto")])  # auto: tma on sm_90, the ring below
def test_bit_identical(shape, schedule, blocking):
    x = inputs.make_input("normal_plus_1000", shape, seed=3, device="cuda")
    w, b = inputs.make_affine("random_normal", shape[1:], seed=3, device="cuda")
    rec = identity.compare_to_native(
        lambda x, w, b, e: chain_layer_norm(x, w, b, e, return_stats=True, settings=ChainSettings(schedule, blocking)),
        x, w, b, 1e-5)
    assert rec["identical"], {k: rec[k]["bit_equal_fraction"] for k in ("output", "mean", "rstd")}


def test_tma_blocking_refuses_ragged_rows():
    x = inputs.make_input("uniform", tasks.UNEVEN_SHAPE, seed=0, device="cuda")
    w, b = inputs.make_affine("default", tasks.UNEVEN_SHAPE[1:], seed=0, device="cuda")
    with pytest.raises(ValueError, match="N % 512"):
        chain_layer_norm(x, w, b, settings=ChainSettings("chain", "tma"))


def test_graph_replay_after_mutation_identical():
    import torch

    shape = tasks.L1_40
    x = inputs.make_input("uniform", shape, seed=4, device="cuda")
    w, b = inputs.make_affine("random_normal", shape[1:], seed=4, device="cuda")
    for _ in range(3):
        chain_layer_norm(x, w, b, 1e-5)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        got = chain_layer_norm(x, w, b, 1e-5, return_stats=True)
    x.mul_(0.8)
    w.mul_(0.9)
    b.add_(0.01)
    for _ in range(2):  # twice: the per-row counters must be back at zero after each replay
        g.replay()
        torch.cuda.synchronize()
        ref = native_layer_norm(x, w, b, 1e-5)
        for name, r, q in zip(("output", "mean", "rstd"), ref, got):
            assert_bits_equal(q, r, what=f"{name} after graph replay", path="chain")


@pytest.mark.parametrize("config", [(16, 24, 2), (32, 12, 4), (8, 48, 8), (32, 2, 8), (64, 4, 8)],
                         ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("shape", [tasks.L1_40, (3, 512 * 17), (2, 512 * (32 * 12 + 3)), (5, 512 * 3)],
                         ids=lambda s: "x".join(map(str, s)))
def test_ring_shapes_bit_identical(config, shape):
    """Other ring shapes of chain_stats_tma.cu keep the bits: the ring only schedules loads. Its tma entry point on
    sm_90, its cp.async ring below (a partial last stage is zero-filled there, as TMA fills it)."""
    from labkit.core.device import device_info
    from labkit.ops import chain
    from labkit.ops.launches import execute

    x = inputs.make_input("normal_plus_1000", shape, seed=5, device="cuda")
    w, b = inputs.make_affine("random_normal", shape[1:], seed=5, device="cuda")
    device = device_info(x.device.index)
    blocking = "tma" if device.tensor_maps else "ring"
    if chain.TmaConfig(*config).smem_bytes > device.smem_optin_bytes - chain.STATIC_SMEM:
        pytest.skip(f"the {config} ring does not fit this GPU's {device.smem_optin_bytes} bytes per block")

    def run(x, w, b, eps):
        rows, n = x.numel() // w.numel(), w.numel()
        p = chain.launches(rows, n, device, chain.ChainSettings("chain", blocking, chain.TmaConfig(*config)))
        assert p.blocking == blocking
        return execute(p, x, w, b, eps)

    rec = identity.compare_to_native(run, x, w, b, 1e-5)
    assert rec["identical"], {k: rec[k]["bit_equal_fraction"] for k in ("output", "mean", "rstd")}


def _streams_case(blocking):
    import torch

    shape = (4, 64 * 64 * 64) if blocking == "auto" else (4, 64 * 17 * 19)  # tma and ring need N % 512 == 0
    xs = [inputs.make_input("normal_plus_1000", shape, seed=s, device="cuda") for s in (0, 1)]
    w, b = inputs.make_affine("random_normal", shape[1:], seed=0, device="cuda")
    refs = [native_layer_norm(x, w, b, 1e-5) for x in xs]
    torch.cuda.synchronize()
    return xs, w, b, refs


@pytest.mark.parametrize("blocking", ["auto", "w4"])  # auto: tma on sm_90, the ring below
def test_overlapping_calls_on_two_streams_keep_the_bits(blocking):
    """Each call takes its scratch (per-row counters, warp states) from torch's allocator on its own stream: calls
    running at the same time on two streams must not see each other's counters."""
    import torch

    xs, w, b, refs = _streams_case(blocking)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    settings = ChainSettings("chain", blocking)
    outs = [[], []]
    for _ in range(25):  # interleaved launches keep both streams busy at once
        for k, s in enumerate(streams):
            with torch.cuda.stream(s):
                outs[k].append(chain_layer_norm(xs[k], w, b, 1e-5, return_stats=True, settings=settings))
    torch.cuda.synchronize()
    for k in (0, 1):
        for i, got in enumerate(outs[k]):
            for name, r, q in zip(("output", "mean", "rstd"), refs[k], got):
                assert_bits_equal(q, r, what=f"{name}, stream {k} call {i}", path=f"chain {blocking}")


def test_calls_from_two_host_threads_keep_the_bits():
    import threading

    import torch

    xs, w, b, refs = _streams_case("auto")
    failures = []

    def worker(k):
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            outs = [chain_layer_norm(xs[k], w, b, 1e-5, return_stats=True) for _ in range(25)]
        stream.synchronize()
        for i, got in enumerate(outs):
            for name, r, q in zip(("output", "mean", "rstd"), refs[k], got):
                try:
                    assert_bits_equal(q, r, what=f"{name}, thread {k} call {i}", path="chain")
                except AssertionError as exc:
                    failures.append(str(exc))

    threads = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_inputs_that_require_grad_are_refused_not_silently_detached():
    import torch

    x = inputs.make_input("uniform", (2, 512), seed=0, device="cuda").requires_grad_()
    w, b = inputs.make_affine("random_normal", (512,), seed=0, device="cuda")
    with pytest.raises(ValueError, match="require grad"):
        chain_layer_norm(x, w, b)
    with torch.no_grad():
        assert chain_layer_norm(x, w, b).grad_fn is None  # no gradient asked for: served


def test_refusal_table_on_the_gpu():
    """Every refused case raises a ValueError naming its condition from every public function, before launch."""
    from labkit.lab.refusals import refusal_rows

    rows = refusal_rows("cuda")
    assert {r["function"] for r in rows} >= {"reference_order_layer_norm", "chain_layer_norm", "split_stats_layer_norm"}
    bad = [r for r in rows if not r["names_condition"]]
    assert not bad, bad



def _rows_fused_cases():
    """Every rows_fused entry point, warp per row and block per row, including those function_for picks for no row
    length today (each through rows_fused.entry_launches): the longest row it holds and a ragged one (some of torch's
    threads without a vector), at row counts that leave a warp-per-row block partly empty; for the largest block
    entry point rows longer than its registers."""
    from labkit.ops import rows_fused
    from labkit.ops.rows_fused import rows_counted, rows_counted_block

    cases = []
    for layout, ks in (("warp", rows_fused.WARP_VECTORS), ("reg", rows_fused.VECTORS)):
        for k in ks:
            full = 4 * rows_fused.THREADS * k
            cases += [(f"rows_fused_{layout}{k}", rows, n) for rows, n in ((1, full), (5, full - 4 * 37), (130, full))]
    big = f"rows_fused_reg{rows_fused.VECTORS[-1]}"
    # the counted form (labkit.ops.rows_fused.rows_counted) takes every row of the warp layout: threads with two vectors, one,
    # or none (where the count pass's quotient is 0), and row counts that leave its last block partly empty
    counted = [(rows_counted.FUNCTION, rows, n) for rows, n in
               ((1, 1024), (5, 1024 - 4 * 37), (130, 1024), (7, 768), (9, 200), (6, 40), (3, 4), (4097, 1000))]
    # the counted block form (labkit.ops.rows_fused.rows_counted_block): the same rows, one block each: whole warps with no vector
    # at N <= 384, and a tree quotient 0 (warps 1 and 3 both empty) at N <= 128
    counted += [(rows_counted_block.FUNCTION, rows, n) for rows, n in
                ((1, 1024), (5, 1024 - 4 * 37), (130, 1024), (7, 768), (9, 200), (6, 40), (3, 4), (4097, 1000),
                 (8192, 1024))]
    return cases + counted + [(big, 3, 4 * rows_fused.THREADS * rows_fused.VECTORS[-1] + 20), (big, 2, 1 << 18),
                              ("rows_fused_warp1", 9, 4), ("rows_fused_warp1", 6, 40)]


@pytest.mark.parametrize("case", _rows_fused_cases(), ids=lambda c: f"{c[0]}-{c[1]}x{c[2]}")
@pytest.mark.parametrize("eps", [1e-5, 0.0, 0.1])
def test_every_rows_fused_entry_point_bit_identical(case, eps):
    from labkit.ops import launches, rows_fused

    function, rows, n = case
    p = rows_fused.entry_launches(rows, n, function)
    x = inputs.make_input("normal_plus_1000", (rows, n), seed=5, device="cuda")
    w, b = inputs.make_affine("random_normal", (n,), seed=5, device="cuda")
    got = launches.execute(p, x, w, b, eps)
    ref = native_layer_norm(x, w, b, eps)
    for name, r, g in zip(("output", "mean", "rstd"), ref, got):
        assert_bits_equal(g, r.reshape(g.shape), what=f"{name}, eps {eps}, {rows}x{n}", path=function)


# (shape, floats of each row in a carry part): an exact eighth, and one rounded down to whole 256-thread blocks
# (18944 / 4 / 8 = 592 columns: 2 blocks, 512 columns, 2048 floats)
CARRY_SHAPES = [((16, 64, 256, 256), 64 * 256 * 256 // 8), ((3, 512 * 64 * 7), 512 * 64 * 7 // 8), ((3, 18944), 2048)]


@pytest.mark.parametrize("shape,part", CARRY_SHAPES, ids=[f"{s[0]}x{s[-1]}" for s, _ in CARRY_SHAPES])
def test_notebook_07s_carry_pair_writes_the_parts_it_names(shape, part):
    """parallel_stats.carry_methods: the output kernel over the rows' last or first part of columns through offset
    pointers, after the statistics or alone; each writes exactly its part of y, and that part equals torch's bits."""
    import torch

    from labkit.core.device import device_info
    from labkit.ops import chain
    from labkit.lab.stages import stats_only
    from labkit.studies import parallel_stats as ps

    x = inputs.make_input("normal_plus_1000", shape, seed=4, device="cuda")
    w, b = inputs.make_affine("random_normal", shape[1:], seed=4, device="cuda")
    rows, n = x.numel() // w.numel(), w.numel()
    p = chain.launches(rows, n, device_info(0), ChainSettings("chain"))
    mean, rstd = torch.empty(rows, device="cuda"), torch.empty(rows, device="cuda")
    ref = native_layer_norm(x, w, b, 1e-5)[0].reshape(rows, n)
    stats_only(p, x, mean, rstd, 1e-5)  # the parts alone read these
    for name, cols in ((ps.CARRY_LAST, slice(n - part, n)), (ps.CARRY_FIRST, slice(0, part)),
                       (ps.PART_LAST, slice(n - part, n)), (ps.PART_FIRST, slice(0, part))):
        y = torch.full_like(x, float("nan"))
        ps.carry_methods(p, lambda: stats_only(p, x, mean, rstd, 1e-5), x, mean, rstd, w, b, y)[name]()
        y = y.reshape(rows, n)
        assert_bits_equal(y[:, cols], ref[:, cols], what=f"y's written part, {name}", path="chain")
        assert int(torch.isnan(y).sum()) == rows * (n - part), name  # nothing written outside the part
