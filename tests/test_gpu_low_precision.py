"""The bfloat16/float16 builds (kernels/dtype.cuh) against torch's own kernel for those dtypes on the GPU: y as int16
views, mean and rstd as int32 views, at ragged N, one row, many rows, N = 2**20, views 8 bytes off a 16-byte boundary
and absent affine; every rows_fused entry point; the chain schedule (tma on sm_90, the cp.async ring below) and its
output pass alone on torch's own statistics (first passed at 342bed4 on an H100, plain and as compute_80); and the
drop-in serving T: our forward and backward where the rule picks them, eager, compiled, captured, on a side stream,
through labkit.enable(); the backward for T (the 2-byte builds of every schedule) against torch's
native_layer_norm_backward."""
import numpy as np
import pytest

from bits import assert_bits_equal

pytestmark = pytest.mark.gpu

DTYPES = ("bfloat16", "float16")
SHAPES = [
    (1, 4),          # a single vector: 127 of torch's threads without one
    (1, 768),        # one row
    (5, 516),        # ragged N: N/4 = 129, one thread of each row pushes one vector more
    (3, 1000),       # ragged, a warp per row
    (64, 1024),      # many rows, two vectors a torch thread (the warp layout's largest)
    (4096, 768),
    (16384, 256),    # many short rows: half of torch's threads have no vector
    (1000, 4096),    # a block per row
    (300, 2048),
    (3, 16384 + 516),  # longer than rows_fused_reg32's registers: the rest re-read, ragged
    (2, 1 << 20),    # few long rows
]


def _torch_dtype(dtype: str):
    import torch

    return getattr(torch, dtype)


def _inputs(shape, dtype: str, seed: int = 0, offset: float = 1000.0):
    """x = randn * 3 + offset (torch's Welford sees the offset), gamma, beta ~ randn: drawn in float32 on the CPU, then
    rounded to `dtype` (so both kernels read the same T values)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    t = _torch_dtype(dtype)
    x = (torch.randn(shape, generator=g) * 3 + offset).to(t).cuda()
    return x, torch.randn(shape[1:], generator=g).to(t).cuda(), torch.randn(shape[1:], generator=g).to(t).cuda()


def _assert_native_bits(got, x, w, b, eps, what, ns=None, path=None):
    import torch

    y, mean, rstd = torch.native_layer_norm(x, ns or tuple(w.shape), w, b, eps)
    assert_bits_equal(got[0], y, what=f"y {what}", path=path)
    assert_bits_equal(got[1], mean.reshape(got[1].shape), what=f"mean {what}", path=path)
    assert_bits_equal(got[2], rstd.reshape(got[2].shape), what=f"rstd {what}", path=path)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_rows_fused_keeps_torchs_bits(shape, dtype):
    from labkit.ops.rows_fused import low_precision_layer_norm

    x, w, b = _inputs(shape, dtype, seed=sum(shape))
    got = low_precision_layer_norm(x, w, b, 1e-5, return_stats=True)
    assert got[0].dtype == x.dtype and got[1].dtype == got[2].dtype == _torch_dtype("float32")
    _assert_native_bits(got, x, w, b, 1e-5, f"{dtype} {shape}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", [0.0, 1000.0, -3.0e4])  # centred, offset, and large values (fp16 tops at 65504)
@pytest.mark.parametrize("eps", [1e-5, 0.0, 0.1])
def test_rows_fused_across_values_and_eps(dtype, offset, eps):
    from labkit.ops.rows_fused import low_precision_layer_norm

    x, w, b = _inputs((257, 1536), dtype, seed=7, offset=offset)
    got = low_precision_layer_norm(x, w, b, eps, return_stats=True)
    _assert_native_bits(got, x, w, b, eps, f"{dtype} offset {offset} eps {eps}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_views_8_bytes_off_16_keep_the_vectorized_path_and_the_bits(dtype):
    """torch asks 8-byte alignment of 2-byte types: x, gamma and beta 8 bytes past a 16-byte boundary stay on its
    vectorized kernel, and ours take them (a float32 view there would go to torch's other path)."""
    import torch

    from labkit.ops import eligibility
    from labkit.ops.rows_fused import low_precision_layer_norm

    rows, n = 33, 768
    x0, w0, b0 = _inputs((1, rows * n + 4), dtype, seed=3)  # fresh allocations: 256-byte aligned
    x, w, b = x0[0, 4:].view(rows, n), w0[4:4 + n], b0[4:4 + n]  # each 4 elements (8 bytes) in
    assert x.data_ptr() % 16 == 8 and w.data_ptr() % 16 == 8
    assert eligibility.torch_path(x, w, b)[0] == eligibility.VECTORIZED
    _assert_native_bits(low_precision_layer_norm(x, w, b, 1e-5, return_stats=True), x, w, b, 1e-5, f"{dtype} view")
    with pytest.raises(ValueError, match="x must be 8-byte aligned"):
        low_precision_layer_norm(x0[0, 2:2 + rows * n].view(rows, n), w, b)  # 4 bytes off: torch's other path
    out = torch.empty(rows * n + 4, dtype=x.dtype, device="cuda")[4:].view(rows, n)
    assert_bits_equal(low_precision_layer_norm(x, w, b, out=out), torch.native_layer_norm(x, (n,), w, b, 1e-5)[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 516), (4096, 768), (2, 1 << 20)], ids=lambda s: "x".join(map(str, s)))
def test_absent_affine_as_the_drop_in_passes_it(shape, dtype):
    """torch without gamma and beta computes rstd * (x - mean); the drop-in gives our kernels gamma 1 and beta -0.0
    (fma(1, t, -0.0) is t, signed zeros included): the same in T, both exactly representable."""
    import torch

    from labkit.ops.rows_fused import low_precision_layer_norm

    x, _, _ = _inputs(shape, dtype, seed=11)
    n = shape[1]
    ones = torch.ones(n, dtype=x.dtype, device="cuda")
    neg_zeros = torch.full((n,), -0.0, dtype=x.dtype, device="cuda")
    got = low_precision_layer_norm(x, ones, neg_zeros, 1e-5, return_stats=True)
    _assert_native_bits(got, x, None, None, 1e-5, f"{dtype} no affine", ns=(n,))


def _entry_cases():
    from labkit.ops import rows_fused

    cases = [(f"rows_fused_{layout}{k}", rows, 4 * rows_fused.THREADS * k - sub)
             for layout, ks in (("warp", rows_fused.WARP_VECTORS), ("reg", rows_fused.VECTORS))
             for k in ks for rows, sub in ((1, 0), (5, 4 * 37), (130, 0))]
    cases += [(f.FUNCTION, rows, n) for f in (rows_fused.rows_counted, rows_fused.rows_counted_block)
              for rows, n in ((1, 1024), (5, 1024 - 4 * 37), (7, 768), (6, 40), (3, 4), (4097, 1000))]
    return cases + [(f"rows_fused_reg{rows_fused.VECTORS[-1]}", 2, 1 << 18)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", _entry_cases(), ids=lambda c: f"{c[0]}-{c[1]}x{c[2]}")
def test_every_rows_fused_entry_point(case, dtype):
    from labkit.ops import launches, rows_fused

    function, rows, n = case
    x, w, b = _inputs((rows, n), dtype, seed=rows + n)
    got = launches.execute(rows_fused.entry_launches(rows, n, function, dtype), x, w, b, 1e-5)
    _assert_native_bits(got, x, w, b, 1e-5, f"{dtype} {rows}x{n}", path=function)


# the chain's tma blocking (its sm_90 tensor maps; the cp.async ring below sm_90), N % 512 == 0 (default ring: 6
# stages of 64 steps, read 8 steps ahead): one step per chain, a single partial stage, the ring wrapping twice then
# a partial stage of 3 steps (< read-ahead), the wide rows of L1/40's length
CHAIN_SHAPES = [(2, 512), (3, 512 * 17), (2, 512 * (64 * 6 * 2 + 3)), (3, 512 * 64 * 7), (16, 1 << 20), (1, 1 << 22)]


def _chain_launches(rows: int, n: int, device, dtype: str):
    """The chain's launches for a 2-byte x: tma on sm_90 and later, the cp.async ring below (LABKIT_ARCH=compute_80
    on an H100 runs it). Skipped only below sm_80: a ValueError elsewhere is a failure, not a skip."""
    from labkit.ops import chain

    if device.arch < chain.MIN_ARCH:
        pytest.skip(f"the chain needs sm_{chain.MIN_ARCH}, device is {device.arch_name}")
    p = chain.launches(rows, n, device, dtype=dtype)
    assert p.blocking == ("tma" if device.tensor_maps else "ring") and p.stats.options[-1:] == (
        ("-DLN_BF16",) if dtype == "bfloat16" else ("-DLN_FP16",))
    return p


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", CHAIN_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_chain_keeps_torchs_bits(shape, dtype):
    """The chain schedule's 2-byte build, statistics (a segment of 128 elements, 256 bytes, per warp and step) and
    output pass, through its launches (chain_layer_norm takes float32 only)."""
    import torch

    from labkit.core.device import device_info
    from labkit.ops import launches

    device = device_info(torch.cuda.current_device())
    p = _chain_launches(shape[0], shape[1], device, dtype)
    x, w, b = _inputs(shape, dtype, seed=19)
    _assert_native_bits(launches.execute(p, x, w, b, 1e-5), x, w, b, 1e-5, f"{dtype} {shape}", path=p.blocking)


@pytest.mark.parametrize("dtype", DTYPES)
def test_chain_on_a_view_8_bytes_off(dtype):
    """Below sm_90 the ring copies 8 bytes a lane and keeps the bits on a view 8 bytes off a 16-byte boundary, which
    torch's vectorized kernel takes for 2-byte types; sm_90's tensor maps need 16 bytes: the encode says so."""
    import torch

    from labkit.core.device import device_info
    from labkit.ops import launches

    rows, n = 3, 512 * 17
    device = device_info(torch.cuda.current_device())
    p = _chain_launches(rows, n, device, dtype)
    x0, w, b = _inputs((1, rows * n + 4), dtype, seed=23)
    x = x0[0, 4:].view(rows, n)
    w, b = w[:n], b[:n]
    if p.blocking == "tma":
        with pytest.raises(ValueError, match="tensor maps need a 16-byte aligned address"):
            launches.execute(p, x, w, b, 1e-5)
        return
    _assert_native_bits(launches.execute(p, x, w, b, 1e-5), x, w, b, 1e-5, f"{dtype} view", path=p.blocking)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 4), (5, 516), (3, 1000), (16, 1 << 16), (2, 1 << 20), (7, 512 * 33)],
                         ids=lambda s: "x".join(map(str, s)))
def test_chain_output_pass_on_torchs_statistics(shape, dtype):
    """kernels/affine_columns.cu's 2-byte build alone, given torch's own mean and rstd, writes torch's y: at ragged N
    too, which the chain's statistics do not take."""
    import torch

    from labkit.core.launch import launch
    from labkit.ops import chain

    x, w, b = _inputs(shape, dtype, seed=13)
    rows, n = shape
    y_ref, mean, rstd = torch.native_layer_norm(x, (n,), w, b, 1e-5)
    y = torch.empty_like(x)
    k = chain.output_kernel(n, dtype)
    launch(k.kernel, k.function, k.grid, k.block, (x, mean.reshape(-1), rstd.reshape(-1), w, b, y, np.int32(rows),
                                                   np.int32(n // 4)), x.device, options=k.options)
    assert_bits_equal(y, y_ref, what=f"chain output {dtype} {shape}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_torchs_output_is_the_emulated_rounding(dtype):
    """The reading this contract rests on (docs/decisions.md#low_precision_reading), checked on torch itself: its y
    is the float32 output expression (one fused multiply-add) on the converted values, rounded to nearest even once."""
    import torch

    from labkit.exact import low_precision as lp

    x, w, b = _inputs((64, 1000), dtype, seed=17)
    y, mean, rstd = torch.native_layer_norm(x, (1000,), w, b, 1e-5)

    def bits(t):
        return t.cpu().contiguous().view(torch.int16).numpy().view(np.uint16)

    def tensor(bits_):  # emulated bits as a tensor of x's dtype, for assert_bits_equal (it views floats only)
        return torch.from_numpy(bits_.view(np.int16)).view(x.dtype)

    want = lp.reference_output(bits(x), mean.reshape(-1).cpu().numpy(), rstd.reshape(-1).cpu().numpy(), bits(w),
                               bits(b), dtype)
    assert_bits_equal(y.cpu(), tensor(want), what=f"torch's {dtype} y against the emulation")
    special = torch.tensor([float("nan"), float("inf"), 3.4e38, 65520.0, 1e-45], device="cuda")
    assert_bits_equal(special.to(x.dtype).cpu(), tensor(lp.round_to(special.cpu().numpy(), dtype)),
                      what="the GPU's cvt.rn (NaN: lp.CANONICAL_NAN)")


# --- the drop-in: our forward and backward for T ------------------------------------------------------------------

DROP_IN_SHAPES = [(1, 4), (5, 516), (4096, 768), (8192, 4096), (3, 512 * 33 + 4), (4, 1 << 22), (16, 64, 256, 256)]
AFFINES = ("both", "weight", "none")


def _drop_in_inputs(shape, dtype, affine, seed, grad):
    x, w, b = _inputs(shape, dtype, seed=seed)
    ns = tuple(shape[1:])  # (16, 64, 256, 256): KernelBench L1/40's normalized (64, 256, 256)
    w = w if affine != "none" else None
    b = b if affine == "both" else None
    for t in (x, w, b):
        if t is not None:
            t.requires_grad_(grad)
    return x, ns, w, b


def _step(fn, x, ns, w, b, dy):
    """y and every gradient torch's autograd gives for one call of fn (F.layer_norm's signature)."""
    import torch

    leaves = [t for t in (x, w, b) if t is not None]
    y = fn(x, ns, w, b)
    grads = torch.autograd.grad(y, leaves, dy)
    return (y.detach(), *grads)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", AFFINES)
@pytest.mark.parametrize("shape", DROP_IN_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_drop_in_keeps_torchs_bits_forward_and_backward(shape, affine, dtype):
    """labkit.layer_norm on T: y (int16 views) and the gradients from our kernels where the forward's and the
    backward's plans serve (backward.DROP_IN_DTYPES), torch's elsewhere: every output equals F.layer_norm's."""
    import torch

    import labkit

    x, ns, w, b = _drop_in_inputs(shape, dtype, affine, seed=sum(shape), grad=True)
    dy = torch.randn_like(x)
    want = _step(torch.nn.functional.layer_norm, x, ns, w, b, dy)
    got = _step(labkit.layer_norm, x, ns, w, b, dy)
    what = f"{dtype} {shape} affine {affine}"
    for i, (a, e) in enumerate(zip(got, want)):
        assert_bits_equal(a, e, what=f"{what} output {i}")
    with torch.no_grad():
        assert_bits_equal(labkit.layer_norm(x, ns, w, b), want[0], what=f"{what} no grad")


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_drop_in_serves_t_with_our_kernels_where_the_rule_picks_them(dtype):
    """At a few wide rows (the chain's domain on every table) our kernels serve T, and explain says which path and
    that the float32 scores decided; a view 8 bytes off 16 there is torch's to serve (the tensor map needs 16) and
    keeps the bits; at 4096 x 768 an 8-bytes-off view stays ours where rows_fused serves."""
    import torch

    import labkit
    from labkit.ops import paths

    x, ns, w, b = _drop_in_inputs((16, 1 << 18), dtype, "both", seed=5, grad=False)
    e = labkit.explain(x, ns, w, b)
    assert e["path"] != paths.NATIVE and f"[{dtype}: the float32 scores" in e["reason"], e
    storage = torch.empty(x.numel() + 4, dtype=x.dtype, device=x.device)
    off = storage[4:].view(x.shape)
    off.copy_(x)
    e_off = labkit.explain(off, ns, w, b)
    if e["path"] == "chain" and torch.cuda.get_device_capability()[0] >= 9:
        assert e_off["path"] == paths.NATIVE and "x 16 bytes" in e_off["reason"], e_off
    with torch.no_grad():
        assert_bits_equal(labkit.layer_norm(off, ns, w, b), torch.layer_norm(off, ns, w, b, 1e-5),
                          what=f"{dtype} 8 bytes off")
    x, ns, w, b = _drop_in_inputs((4096, 768), dtype, "both", seed=6, grad=False)
    storage = torch.empty(x.numel() + 4, dtype=x.dtype, device=x.device)
    off = storage[4:].view(x.shape)
    off.copy_(x)
    e = labkit.explain(off, ns, w, b)
    if e["path"] != paths.NATIVE:
        assert "rows" in e["path"], e
    with torch.no_grad():
        assert_bits_equal(labkit.layer_norm(off, ns, w, b), torch.layer_norm(off, ns, w, b, 1e-5),
                          what=f"{dtype} rows 8 bytes off")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compiled_t_keeps_eagers_bits(dtype, mode):
    """torch.compile(fullgraph) of the drop-in on T: the registered ops (C++) serve, forward and gradients equal
    F.layer_norm's in eager."""
    import torch

    import labkit

    x, ns, w, b = _drop_in_inputs((4, 1 << 20), dtype, "both", seed=12, grad=True)
    dy = torch.randn_like(x)
    want = _step(torch.nn.functional.layer_norm, x, ns, w, b, dy)
    torch._dynamo.reset()  # each case compiles labkit.layer_norm afresh: no recompile limit across cases
    compiled = torch.compile(labkit.layer_norm, fullgraph=True, mode=mode)
    for _ in range(3):  # reduce-overhead records its graph after warm-up calls
        got = _step(compiled, x, ns, w, b, dy)
    for i, (a, e) in enumerate(zip(got, want)):
        assert_bits_equal(a, e, what=f"compiled {mode} {dtype} output {i}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_t_under_graph_capture_and_on_a_side_stream(dtype):
    import torch

    import labkit

    x, ns, w, b = _drop_in_inputs((8, 1 << 18), dtype, "both", seed=13, grad=False)
    want = torch.layer_norm(x, ns, w, b, 1e-5)
    with torch.no_grad():
        labkit.layer_norm(x, ns, w, b)  # planned outside capture
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y_side = labkit.layer_norm(x, ns, w, b)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y_graph = labkit.layer_norm(x, ns, w, b)
        g.replay()
    torch.cuda.synchronize()
    assert_bits_equal(y_side, want, what=f"{dtype} side stream")
    assert_bits_equal(y_graph, want, what=f"{dtype} graph replay")


@pytest.mark.parametrize("dtype", DTYPES)
def test_mixed_parameters_follow_torch(dtype):
    """T x with float32 parameters: torch's CUDA kernel refuses them; the drop-in hands the call to torch, which
    raises its own error (nothing of ours runs)."""
    import torch

    import labkit

    x, ns, w, b = _drop_in_inputs((64, 1024), dtype, "both", seed=14, grad=False)
    with pytest.raises(RuntimeError) as torchs:
        torch.layer_norm(x, ns, w.float(), b.float(), 1e-5)
    with pytest.raises(RuntimeError) as ours:
        labkit.layer_norm(x, ns, w.float(), b.float())
    assert type(ours.value) is type(torchs.value)


@pytest.mark.parametrize("dtype", DTYPES)
def test_enable_serves_t_through_f_layer_norm(dtype):
    import torch

    import labkit

    x, ns, w, b = _drop_in_inputs((16, 1 << 18), dtype, "both", seed=15, grad=True)
    dy = torch.randn_like(x)
    want = _step(torch.nn.functional.layer_norm, x, ns, w, b, dy)
    with labkit.enabled():
        got = _step(torch.nn.functional.layer_norm, x, ns, w, b, dy)
    for i, (a, e) in enumerate(zip(got, want)):
        assert_bits_equal(a, e, what=f"enable() {dtype} output {i}")

# --- the backward for T: our kernels against torch.ops.aten.native_layer_norm_backward --------------------------------

GRAD_SHAPES = [
    (1, 4),             # one vector
    (5, 516),           # ragged N/4
    (64, 1024),
    (4096, 768),
    (300, 2048),
    (1000, 4096),
    (8192, 4096),       # the rows schedule's domain (N / 32 column blocks fill the GPU)
    (3, 16384 + 516),   # longer than grad_rows_fused_reg16's registers: the rest re-read
    (70000, 256),       # M > 64K, N / 32 < SMs / 2: torch's partials, rounded to T, then its .sum(0)
    (2, 1 << 20),       # the chain's domain
    (3, 512 * 17),      # the chain with a partial last stage
    (1, 1 << 24),       # N = 2^24
]


def _grad_inputs(shape, dtype, seed):
    import torch

    x, w, b = _inputs(shape, dtype, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    dy = torch.randn(shape, generator=g).to(x.dtype).cuda()
    _, mean, rstd = torch.native_layer_norm(x, shape[1:], w, b, 1e-5)
    return dy, x, w, b, mean, rstd


def _assert_backward_bits(got, dy, x, w, b, mean, rstd, mask, what):
    import torch

    # the mask torch's autograd node passes: no dgamma/dbeta for an absent weight/bias (torch's kernel for T cannot
    # make one: "tensor does not have a device")
    mask = (mask[0], mask[1] and w is not None, mask[2] and b is not None)
    want = torch.ops.aten.native_layer_norm_backward(dy, x, list(x.shape[1:]), mean, rstd, w, b, list(mask))
    for name, a, e in zip(("dx", "dgamma", "dbeta"), got, want):
        if e is None:
            assert a is None, (what, name)
        else:
            assert_bits_equal(a, e, what=f"{name} {what}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("schedule", ["auto", "rows", "split", "chain"])
@pytest.mark.parametrize("shape", GRAD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_backward_keeps_torchs_bits_for_t(shape, schedule, dtype):
    """Every schedule on T (the 2-byte builds): dX, dgamma and dbeta as int16 views of torch's, with every mask,
    with and without affine."""
    from labkit.core.device import device_info
    from labkit.ops import backward

    dy, x, w, b, mean, rstd = _grad_inputs(shape, dtype, seed=sum(shape) + len(schedule))
    ns = tuple(shape[1:])
    if schedule == "chain" and shape[1] % 512:
        with pytest.raises(ValueError, match="N % 512"):
            backward.backward(dy, x, ns, mean, rstd, w, b, schedule=schedule)
        return
    p = backward.launches(shape[0], shape[1], device_info(0), schedule, dtype=dtype)
    assert p.dtype == dtype and (schedule == "auto" or p.schedule == schedule)
    for mask in [(True, True, True), (True, False, False), (False, True, True)]:
        got = backward.backward(dy, x, ns, mean, rstd, w, b, mask, schedule=schedule)
        _assert_backward_bits(got, dy, x, w, b, mean, rstd, mask, f"{dtype} {shape} {p.schedule} mask {mask}")
    got = backward.backward(dy, x, ns, mean, rstd, None, None, schedule=schedule)
    _assert_backward_bits(got, dy, x, None, None, mean, rstd, (True, True, True), f"{dtype} {shape} no affine")


@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_on_views_8_bytes_off_and_refusals(dtype):
    """x and dy 8 bytes off a 16-byte boundary: torch's vectorized backward for T takes them (8-byte vectors), and so
    do our rows and split schedules; the chain takes them where its ring reads them (below sm_90) and refuses them by
    name where tensor maps do; 2 bytes off is a refusal naming the alignment."""
    import torch

    from labkit.ops import backward

    shape = (512, 1024)
    dy, x, w, b, mean, rstd = _grad_inputs(shape, dtype, seed=11)

    def off(t, k):
        s = torch.empty(t.numel() + k, dtype=t.dtype, device=t.device)
        v = s[k:].view(t.shape)
        v.copy_(t)
        return v
    xo, dyo = off(x, 4), off(dy, 4)
    for schedule in ("rows", "split"):
        got = backward.backward(dyo, xo, shape[1:], mean, rstd, w, b, schedule=schedule)
        _assert_backward_bits(got, dyo, xo, w, b, mean, rstd, (True, True, True), f"{dtype} 8 bytes off {schedule}")
    with pytest.raises(ValueError, match="8-byte aligned"):
        backward.backward(off(dy, 2), x, shape[1:], mean, rstd, w, b)
    shape = (2, 1 << 16)
    dy, x, w, b, mean, rstd = _grad_inputs(shape, dtype, seed=12)
    xo, dyo = off(x, 4), off(dy, 4)
    if torch.cuda.get_device_capability()[0] >= 9:
        with pytest.raises(ValueError, match="16-byte aligned where the chain schedule's tensor maps read them"):
            backward.backward(dyo, xo, shape[1:], mean, rstd, w, b, schedule="chain")
    else:
        got = backward.backward(dyo, xo, shape[1:], mean, rstd, w, b, schedule="chain")
        _assert_backward_bits(got, dyo, xo, w, b, mean, rstd, (True, True, True), f"{dtype} 8 bytes off chain")
    with pytest.raises(ValueError, match=f"grad_y must be a {dtype} tensor"):
        backward.backward(dy.float(), x, shape[1:], mean, rstd, w, b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4096, 768), (8192, 4096), (16, 1 << 18), (16, 64, 256, 256)],
                         ids=lambda s: "x".join(map(str, s)))
def test_the_drop_in_runs_our_backward_for_t(shape, dtype):
    """The drop-in serves T's backward (backward.DROP_IN_DTYPES): explain names one of our schedules for it where the
    float32 scores pick ours, and says those scores decided, and a training step through labkit.layer_norm gives
    F.layer_norm's gradients either way; x 8 bytes off 16 there keeps them (torch's backward where tensor maps would
    read it)."""
    import torch

    import labkit
    from labkit.ops import paths

    x, ns, w, b = _drop_in_inputs(shape, dtype, "both", seed=7, grad=True)
    e = labkit.explain(x, ns, w, b)
    dy = torch.randn_like(x)
    want = _step(torch.nn.functional.layer_norm, x, ns, w, b, dy)
    got = _step(labkit.layer_norm, x, ns, w, b, dy)
    for i, (a, ex) in enumerate(zip(got, want)):
        assert_bits_equal(a, ex, what=f"{dtype} {shape} output {i} (backward {e['backward']})")
    from labkit.ops import backward

    assert dtype in backward.DROP_IN_DTYPES
    assert f"[{dtype}: the float32 scores of the schedules" in e["backward_reason"], e
    if x.shape[0] <= 16:  # few wide rows: every table's backward is ours there
        assert e["backward"] != paths.NATIVE, e
    storage = torch.empty(x.numel() + 4, dtype=x.dtype, device=x.device)
    xo = storage[4:].view(x.shape).copy_(x.detach()).requires_grad_()
    want = _step(torch.nn.functional.layer_norm, xo, ns, w, b, dy)
    got = _step(labkit.layer_norm, xo, ns, w, b, dy)
    for i, (a, ex) in enumerate(zip(got, want)):
        assert_bits_equal(a, ex, what=f"{dtype} {shape} 8 bytes off output {i}")
