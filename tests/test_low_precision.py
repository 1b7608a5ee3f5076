"""bfloat16/float16 inputs on the CPU (issue 54, item 2, forward): the kernel builds of kernels/dtype.cuh compile for
every arch from sm_80, the launches pick them by dtype, the one eligibility predicate takes those dtypes only for the
functions that launch them, and the CPU emulation of torch's kernel for them (labkit.exact.low_precision) is the
float32 emulator between exact conversions. Whether the builds give torch's bits is tests/test_gpu_low_precision.py's
question (GPU only)."""
import numpy as np
import pytest
import torch

from labkit.core import compile as kc
from labkit.core.device import ARCH_SMEM_OPTIN, Device
from labkit.exact import emulator
from labkit.exact import low_precision as lp
from labkit.ops import chain, dtypes, eligibility, rows_fused
from labkit.sass.elf import resource_usage

ARCHES = (80, 86, 89, 90, 100, 120)
LOW = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def _device(arch: int = 90) -> Device:
    return Device(f"sm_{arch}", arch, 132, ARCH_SMEM_OPTIN[arch], 65535)


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


# --- the kernel builds -------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("kernel", dtypes.KERNELS)
def test_low_precision_builds_compile_with_the_default_entry_points_and_registers(kernel, arch, cache_dir):
    """Each 2-byte build has the default build's entry points (their launch bounds are the source's, so the
    compiler holds their registers to them), and spills no more than the default build does (local memory where the
    default has none would be a regression of the conversions). rows_fused's 2-byte builds hold the row's vectors as
    loaded (8 bytes, two registers, converted at each use: exactly) where the float32 build holds four floats, so its
    entry points that keep eight vectors or more a thread take fewer registers (more blocks on an SM)."""
    default = {u.function: u for u in resource_usage(kc.compile_kernel(kernel, f"sm_{arch}").cubin)}
    for dtype in dtypes.LOW_PRECISION:
        built = {u.function: u for u in resource_usage(kc.compile_kernel(kernel, f"sm_{arch}",
                                                                         dtypes.options(dtype)).cubin)}
        assert set(built) == set(default), (dtype, arch)
        for f, u in built.items():
            assert (u.local_bytes or 0) <= (default[f].local_bytes or 0), (dtype, arch, f, u.local_bytes)
            # grad_chain_sums' stack frames move either way between builds (the float32 build's own are 0-8 bytes
            # by entry point and arch: sm_80 ring_split2 8, sm_90 split4 8, sm_120 all 8), with 56-96 registers:
            # its 2-byte builds may take up to 24 bytes (fp16 ring_split4 below sm_90), no more
            slack = 24 if kernel == "grad_chain_sums" else 0
            assert (u.stack_bytes or 0) <= (default[f].stack_bytes or 0) + slack, (dtype, arch, f, u.stack_bytes)
        if kernel == "rows_fused":  # the entry points keeping 8 vectors or more (reg4 dropped too where measured)
            for f in ("rows_fused_reg8", "rows_fused_reg16", "rows_fused_reg32", "rows_fused_warp2"):
                assert built[f].registers < default[f].registers, (dtype, arch, f, built[f].registers)


@pytest.mark.slow
def test_low_precision_builds_refuse_the_epilogue(cache_dir):
    """The epilogue reads and writes float: a 2-byte build with it is a compile error, not a kernel mixing types."""
    with pytest.raises(RuntimeError, match="no bfloat16/float16 build"):
        kc.compile_kernel("rows_fused", "sm_90", dtypes.options("bfloat16") + ("-DEPILOGUE",))


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", dtypes.LOW_PRECISION)
def test_low_precision_machine_code_moves_8_byte_vectors_and_rounds_to_nearest(dtype, arch, cache_dir):
    """In the SASS of the 2-byte builds: x, gamma and beta travel as 8-byte vectors (no 16-byte global access is
    left: the float4 ones were the float32 build's), the chain's cp.async ring copies 8 bytes (LDGSTS.E.64), and y is
    converted by F2FP packs with the default rounding, to nearest even (no .RZ/.RM/.RP); float16 loads convert with
    HADD2.F32, and the chain's consumer reads its lane's 8 bytes of a step from shared memory (LDS.64)."""
    import re

    from labkit.sass import tools

    if tools.find_tool("cuobjdump") is None and tools.find_tool("nvdisasm") is None:
        pytest.skip("no cuobjdump or nvdisasm here")
    for kernel in dtypes.KERNELS:
        sass = tools.disassemble(kc.compile_kernel(kernel, arch, dtypes.options(dtype)).cubin)
        ops = re.findall(r"\b((?:LDG|STG|LDGSTS|LDS|F2FP|F2F|HADD2)\.[A-Z0-9_.]*)", sass)
        if dtype == "float16":
            assert "HADD2.F32" in ops, (kernel, arch)
        # grad_columns also stores float4 values for grad_columns_fold (the tree's float partial sums, not T)
        wide = r"LDG\.E\.128" if kernel == "grad_columns" else r"(LDG|STG)\.E\.128"
        assert not [o for o in ops if re.match(wide, o)], (kernel, arch)
        assert not [o for o in ops if o.startswith("F2F") and re.search(r"\.(RZ|RM|RP)\b", o)], (kernel, arch)
        if kernel == "grad_row_sums":  # the row sums read T and write float sums only
            assert any(o.startswith("LDG.E.64") for o in ops), (kernel, arch)
        elif kernel not in ("chain_stats_tma", "grad_chain_sums"):  # the chains' sums write no T
            assert any(o.startswith("LDG.E.64") for o in ops) and any(o.startswith("STG.E.64") for o in ops)
            assert any(o.startswith("F2FP") and "PACK_AB" in o for o in ops), (kernel, arch, set(ops))
        else:
            assert "LDS.64" in ops, (kernel, arch)
        if kernel in ("chain_stats_tma", "grad_chain_sums") and arch == "sm_80":
            assert any(o.startswith("LDGSTS.E.64") for o in ops) and not any(o.startswith("LDGSTS.E.128")
                                                                            for o in ops)


def test_dtype_options():
    assert dtypes.options("float32") == ()  # the default build: its cubins are the committed runs' own
    assert dtypes.options("bfloat16") == ("-DLN_BF16",) and dtypes.options("float16") == ("-DLN_FP16",)
    assert dtypes.itemsize("bfloat16") == 2 and dtypes.itemsize("float32") == 4
    with pytest.raises(ValueError, match="dtype must be one of .* got 'float64'"):
        dtypes.options("float64")


# --- the launches ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rows,n", [(1, 4), (4096, 768), (3, 1000), (64, 16384), (2, 1 << 20)])
@pytest.mark.parametrize("dtype", dtypes.LOW_PRECISION)
def test_rows_fused_launches_differ_by_the_dtype_option_alone(rows, n, dtype):
    base = rows_fused.launches(rows, n, _device())
    low = rows_fused.launches(rows, n, _device(), dtype)
    assert low.kernel.options == dtypes.options(dtype)
    assert low.kernel.function == base.kernel.function and low.kernel.grid == base.kernel.grid
    assert low.kernel.block == base.kernel.block and low.scratch == base.scratch
    assert rows_fused.launches(rows, n, _device(), "float32") == base  # float32 is the default, one key


@pytest.mark.parametrize("path", [rows_fused.rows_counted, rows_fused.rows_counted_block])
def test_counted_entry_points_take_the_dtype(path):
    assert path.launches(8192, 1024, _device(), "float16").kernel.options == ("-DLN_FP16",)
    with pytest.raises(ValueError, match=f"at most {path.MAX_N} float16 elements .* got N={path.MAX_N + 4}"):
        path.launches(8, path.MAX_N + 4, _device(), "float16")


@pytest.mark.parametrize("dtype", dtypes.LOW_PRECISION)
def test_chain_launches_for_2_byte_types(dtype):
    """The tma blocking's map has 2-byte elements and half the byte strides, its ring half the bytes a stage; the
    ring likewise; grids, blocks and scratch are float32's; w1/w4 have no 2-byte build."""
    n = 1 << 22
    base, low = chain.launches(16, n, _device()), chain.launches(16, n, _device(), dtype=dtype)
    assert low.stats.options == low.output.options == dtypes.options(dtype)
    assert (low.stats.grid, low.stats.block, low.output.grid, low.scratch) == \
        (base.stats.grid, base.stats.block, base.output.grid, base.scratch)
    assert base.tensor_map == chain.TensorMapGeometry((128, 4, n // 512, 16), (512, 2048, 4 * n), (128, 1, 64, 1))
    assert low.tensor_map == chain.TensorMapGeometry((128, 4, n // 512, 16), (256, 1024, 2 * n), (128, 1, 64, 1), 2)
    assert low.stats.shared_mem == chain.TmaConfig().stages * 64 * (256 + 16)
    ring = chain.launches(16, n, _device(80), dtype=dtype)
    assert ring.blocking == "ring" and ring.stats.options[-1:] == dtypes.options(dtype)
    assert ring.stats.shared_mem == chain.ring_config(_device(80)).smem_bytes_of(2)
    assert chain.launches(16, n, _device()).output == chain.output_kernel(n)
    with pytest.raises(ValueError, match=f"the w4 blocking .* reads float32 only, got dtype {dtype}"):
        chain.launches(16, 512 * 33 + 4, _device(), dtype=dtype)
    with pytest.raises(ValueError, match="dtype must be one of"):
        chain.launches(16, n, _device(), dtype="int8")


@pytest.mark.parametrize("rows,n", [(4096, 768), (8192, 4096), (70000, 256), (1000, 4096), (5, 516)])
@pytest.mark.parametrize("schedule", ["rows", "split"])
@pytest.mark.parametrize("dtype", dtypes.LOW_PRECISION)
def test_backward_launches_for_2_byte_types(rows, n, schedule, dtype):
    """The rows and split schedules on T: the float32 launches with the dtype option on every kernel, grad_columns.cu's
    own layout where float32 would take the tiled pass (built for float32 only), and one more argument to the column
    pass (narrow_out: 1 where it writes the result or torch's partials in T, 0 where grad_columns_fold rounds)."""
    from labkit.core.program import I32, Launch
    from labkit.ops import backward

    base = backward.launches(rows, n, _device(), schedule)
    low = backward.launches(rows, n, _device(), schedule, dtype=dtype)
    assert low.dtype == dtype and base.dtype == "float32" and low.align == 8 and base.align == 16
    assert low.sums.options == dtypes.options(dtype) and low.sums.function == base.sums.function
    assert low.columns.options == dtypes.options(dtype) and low.columns.kernel == "grad_columns"
    if base.columns.kernel == "grad_columns":
        assert low.columns.function == base.columns.function and low.columns.grid == base.columns.grid
    if low.fold is not None:
        assert low.fold.options == dtypes.options(dtype)
    launches = [s for s in low.program(0).steps if isinstance(s, Launch)]
    columns = next(s for s in launches if s.kernel.function.startswith("grad_columns_") and s.kernel.function !=
                   "grad_columns_fold")
    assert columns.args[-1] == I32(0 if low.fold is not None else 1)
    float_columns = next(s for s in base.program(0).steps if isinstance(s, Launch) and s.kernel == base.columns)
    assert len(columns.args) == len(float_columns.args) + (base.columns.kernel == "grad_columns")
    assert backward.launches(rows, n, _device(), schedule, dtype="float32") == base  # the default, one key


@pytest.mark.parametrize("arch", [80, 86, 90])
@pytest.mark.parametrize("dtype", dtypes.LOW_PRECISION)
def test_backward_chain_launches_for_2_byte_types(dtype, arch):
    """The chain schedule on T: the float32 entry point and grid with the dtype option (and the ring's depth below
    sm_90), half the ring's bytes, tensor maps of 2-byte elements with halved byte strides on sm_90 (x, dy and gamma
    then 16-byte aligned, 8 below, where the ring copies 8 bytes a lane); "auto" keeps float32's schedule; the tiled
    column pass refuses T by name."""
    from labkit.ops import backward

    dev = _device(arch)
    base = backward.launches(16, 1 << 22, dev, "chain")
    low = backward.launches(16, 1 << 22, dev, "chain", dtype=dtype)
    assert low.schedule == "chain" and low.dtype == dtype
    assert low.sums.function == base.sums.function and low.sums.grid == base.sums.grid
    assert low.sums.options == backward.chain_options(dev) + dtypes.options(dtype)  # the forward chain's order
    assert low.sums.shared_mem * 2 == base.sums.shared_mem
    if arch >= 90:
        g, f = low.tensor_map, base.tensor_map
        assert g.element_bytes == 2 and g.dims == f.dims and g.box == f.box
        assert tuple(2 * b for b in g.strides_bytes) == f.strides_bytes
        assert low.align == 16
        from labkit.core.program import Launch, Map
        sums = next(st for st in low.program(0).steps if isinstance(st, Launch) and st.kernel == low.sums)
        maps = [a for a in sums.args if isinstance(a, Map)]
        assert [m.slot for m in maps] == ["x", "dy", "weight"]  # gamma's map too: 2-byte elements, its strides
        assert all(m.geometry.element_bytes == 2 and m.geometry.box == g.box for m in maps)
        assert all(m.geometry.strides_bytes == g.strides_bytes for m in maps)
    else:
        assert low.tensor_map is None and low.align == 8
    assert base.align == 16
    assert backward.launches(16, 1 << 22, dev, dtype=dtype).schedule == backward.launches(16, 1 << 22, dev).schedule
    assert set(backward.candidates(16, 1 << 22, dev, dtype)) == set(backward.candidates(16, 1 << 22, dev))
    with pytest.raises(ValueError, match=f"tiled column pass is built for float32 only, got {dtype}"):
        backward.launches(4096, 1536, dev, "split", "tiled", dtype=dtype)


# --- the predicate -----------------------------------------------------------------------------------------------

def _t(dtype, shape=(2, 8, 4)):
    x = torch.rand(shape).to(dtype)
    return x, torch.ones(shape[1:], dtype=dtype), torch.zeros(shape[1:], dtype=dtype)


def _check(x, w, b, policy=eligibility.LOW_PRECISION_FUNCTIONS, **kw):
    return eligibility.check(x, w, b, 1e-5, require_cuda=False, policy=policy, **kw)


@pytest.mark.parametrize("dtype", list(LOW))
def test_low_precision_functions_take_2_byte_inputs(dtype):
    assert _check(*_t(LOW[dtype])) == eligibility.RowLayout(2, 32, dtype)
    assert _check(*_t(torch.float32)) == eligibility.RowLayout(2, 32)


def test_the_float32_kernel_functions_refuse_2_byte_inputs():
    """The float32 kernel functions (chain_layer_norm and the paths' own functions) name the dtype they take."""
    with pytest.raises(ValueError, match=r"^x must be float32 \(got torch.bfloat16\)"):
        _check(*_t(torch.bfloat16), policy=eligibility.KERNEL_FUNCTIONS)


@pytest.mark.parametrize("dtype", list(LOW))
def test_the_drop_in_takes_2_byte_inputs(dtype):
    assert _check(*_t(LOW[dtype]), policy=eligibility.DROP_IN) == eligibility.RowLayout(2, 32, dtype)


@pytest.mark.parametrize("x_dtype,w_dtype,condition", [
    (torch.bfloat16, torch.float32, "weight must be bfloat16, as x is: torch's kernel for x's dtype reads its "
                                    "parameters as that dtype"),  # autocast's mixed case: torch refuses it too
    (torch.float16, torch.bfloat16, "weight must be float16, as x is"),
    (torch.float32, torch.float16, "weight must be float32, as x is"),
])
def test_parameters_must_have_xs_dtype(x_dtype, w_dtype, condition):
    x, w, b = _t(x_dtype)
    with pytest.raises(ValueError) as exc:
        _check(x, w.to(w_dtype), b)
    assert str(exc.value).startswith(condition) and str(w_dtype) in str(exc.value)
    with pytest.raises(ValueError, match="bias must be"):
        _check(x, w, b.to(w_dtype))


def test_x_of_another_dtype_names_the_dtypes_taken():
    with pytest.raises(ValueError, match=r"^x must be float32 or bfloat16 or float16 \(got torch.float64\)"):
        _check(*_t(torch.float64))


def test_2_byte_inputs_need_8_byte_alignment_only():
    """torch's can_vectorize asks vec_size * sizeof(T): 8 bytes for T of 2 bytes, so a view 8 bytes in keeps its
    vectorized path (and ours) where a float32 view 8 bytes in does not."""
    w, b = torch.ones(8, 4, dtype=torch.bfloat16), torch.zeros(8, 4, dtype=torch.bfloat16)
    flat = torch.rand(64 + 8).to(torch.bfloat16)
    assert _check(flat[4:68].view(2, 8, 4), w, b) == eligibility.RowLayout(2, 32, "bfloat16")  # 8 bytes in
    why = eligibility.refusal(flat[2:66].view(2, 8, 4), w, b, 1e-5, policy=eligibility.LOW_PRECISION_FUNCTIONS,
                              require_cuda=False)  # 4 bytes in
    assert why.torch_path and str(why).startswith("x must be 8-byte aligned") and "(got 4 bytes past" in str(why)
    flat32 = torch.rand(64 + 2)
    why32 = eligibility.refusal(flat32[2:66].view(2, 8, 4), torch.ones(8, 4), torch.zeros(8, 4), 1e-5,
                                policy=eligibility.LOW_PRECISION_FUNCTIONS, require_cuda=False)  # 8 bytes in
    assert str(why32).startswith("x must be 16-byte aligned")


def test_out_must_have_xs_dtype_and_8_byte_alignment():
    x, w, b = _t(torch.float16)
    with pytest.raises(ValueError, match="out must be float16, as x is"):
        _check(x, w, b, out=torch.empty(x.shape))
    flat = torch.empty(64 + 2, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"out must be 8-byte aligned for 4-element vector stores \(got address % 8"):
        _check(x, w, b, out=flat[2:66].view(2, 8, 4))
    assert _check(x, w, b, out=torch.empty(64 + 4, dtype=torch.float16)[4:68].view(2, 8, 4)).dtype == "float16"


@pytest.mark.parametrize("x_dtype,out_dtype", [(torch.float32, torch.float64), (torch.float16, torch.float32)])
def test_out_of_another_dtype_is_named_before_its_alignment(x_dtype, out_dtype):
    """out's alignment is 4 elements of x's dtype: an out of a wider dtype, aligned for x's vectors but not for its
    own, is refused for its dtype (not for an alignment of its own element size)."""
    x, w, b = _t(x_dtype)
    width = torch.empty(0, dtype=out_dtype).element_size()
    align = 4 * x.element_size()
    flat = torch.empty(64 + 4 * width, dtype=out_dtype)
    off = next(k for k in range(1, 4 * width) if (flat.data_ptr() + k * width) % (4 * width) == align % (4 * width))
    out = flat[off:off + 64].view(2, 8, 4)
    assert out.data_ptr() % align == 0 and out.data_ptr() % (4 * width)
    with pytest.raises(ValueError, match=f"^out must be {str(x_dtype)[6:]}, as x is"):
        _check(x, w, b, out=out)


# --- the emulation -----------------------------------------------------------------------------------------------

def _wide_floats(count: int, seed: int = 0) -> torch.Tensor:
    """float32 values over every binade, both signs, with the ties and edges rounding treats specially."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(count, generator=g) * torch.exp2(torch.randint(-150, 129, (count,), generator=g).float())
    r = torch.rand(count, generator=g)
    ties = (torch.randint(0, 1 << 15, (count,), generator=g, dtype=torch.int32) << 16) | 0x8000  # bf16 ties
    edges = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 3.3895314e38, 3.4e38, 65504.0, 65519.996,
                          65520.0, 6.0e-8, 2.9e-8, 1.0e-45, -1.0e-45, 1.1754942e-38])
    return torch.cat([v, r, ties.view(torch.float32), edges]).float()


@pytest.mark.parametrize("dtype", list(LOW))
def test_round_to_is_torchs_round_to_nearest_even(dtype):
    values = _wide_floats(1 << 18)
    values = values[~torch.isnan(values)]
    assert np.array_equal(lp.round_to(values.numpy(), dtype), _bits(values.to(LOW[dtype])))


@pytest.mark.parametrize("dtype", list(LOW))
def test_nan_rounds_to_the_canonical_nan(dtype):
    got = lp.round_to(np.array([np.nan, -np.nan], dtype=np.float32), dtype)
    assert (got == lp.CANONICAL_NAN).all()


@pytest.mark.parametrize("dtype", list(LOW))
def test_to_float32_is_exact_for_every_bit_pattern(dtype):
    every = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(LOW[dtype])
    want = every.float()
    got = lp.to_float32(_bits(every), dtype)
    finite = ~torch.isnan(want)
    assert np.array_equal(got[finite.numpy()].view(np.uint32), want[finite].numpy().view(np.uint32))
    assert np.isnan(got[~finite.numpy()]).all()
    assert np.array_equal(lp.round_to(got, dtype)[finite.numpy()], _bits(every)[finite.numpy()])  # round trip


@pytest.mark.parametrize("dtype", list(LOW))
@pytest.mark.parametrize("rows,n", [(3, 1000), (1, 4), (5, 516), (2, 4096)])
def test_low_precision_emulation_is_the_float32_emulator_on_the_converted_values(dtype, rows, n):
    """Statistics and the unrounded output are the float32 emulator's on T-representable float32 inputs, bit for
    bit; the output is then one rounding of those floats."""
    g = torch.Generator().manual_seed(rows * n)
    x = (torch.randn(rows, n, generator=g) * 3 + 100).to(LOW[dtype])
    gamma = torch.randn(n, generator=g).to(LOW[dtype])
    beta = torch.randn(n, generator=g).to(LOW[dtype])
    xf, gf, bf = (t.float().numpy() for t in (x, gamma, beta))
    stats = lp.reference_stats(_bits(x), dtype, 1e-5)
    want = emulator.reference_stats(xf, 1e-5)
    for key in ("mean", "m2", "var", "rstd_cr"):
        assert np.array_equal(stats[key].view(np.uint32), want[key].view(np.uint32)), key
    mean, rstd = stats["mean"], stats["rstd_cr"]
    y32 = lp.reference_output(_bits(x), mean, rstd, _bits(gamma), _bits(beta), dtype, rounded=False)
    assert np.array_equal(y32.view(np.uint32), emulator.reference_output(xf, mean, rstd, gf, bf).view(np.uint32))
    y = lp.reference_output(_bits(x), mean, rstd, _bits(gamma), _bits(beta), dtype)
    assert y.dtype == np.uint16 and np.array_equal(y, _bits(torch.from_numpy(y32).to(LOW[dtype])))


def test_emulation_refuses_what_is_not_bits():
    with pytest.raises(ValueError, match="bits must be a uint16 numpy array of bfloat16 bits, got float32"):
        lp.to_float32(np.zeros(4, np.float32), "bfloat16")
    with pytest.raises(ValueError, match="dtype must be one of"):
        lp.round_to(np.zeros(4, np.float32), "float32")
    with pytest.raises(ValueError, match="values must be float32"):
        lp.round_to(np.zeros(4), "float16")


@pytest.mark.parametrize("dtype", dtypes.LOW_PRECISION)
def test_the_tma_maps_address_is_refused_before_anything_runs(monkeypatch, dtype):
    """A 2-byte x 8 bytes off a 16-byte boundary is torch's (and the eligibility's) but not a tensor map's: the bound
    program's encode raises ValueError before its memset or any launch is issued, and an aligned x runs all three."""
    from labkit.core import launch, program

    issued = []

    class Function:
        ptr = 0x1234

        def __call__(self, *a, **k):
            issued.append("launch")

    def encoder(geometry):
        assert geometry.element_bytes == 2

        def encode(address):
            if address % 16:
                raise ValueError(f"tensor maps need a 16-byte aligned address, got {address:#x}")
            return np.zeros(16, np.uint64)
        return encode

    monkeypatch.setattr(launch, "function", lambda *a, **k: Function())
    monkeypatch.setattr(program, "memset_async", lambda *a: issued.append("memset"))
    monkeypatch.setattr(program, "TensorMapEncoder", encoder)
    p = chain.launches(3, 512 * 17, _device(), dtype=dtype)
    assert p.blocking == "tma"
    bp = program.BoundProgram(p.program(0), 0)
    ptrs = [0x100000 * (i + 1) for i in range(len(bp.program.slots))]
    ptrs[bp.program.slots.index("x")] += 8
    with pytest.raises(ValueError, match="tensor maps need a 16-byte aligned address"):
        bp(ptrs, np.float32(1e-5), (None, 0))
    assert issued == []
    ptrs[bp.program.slots.index("x")] -= 8
    bp(ptrs, np.float32(1e-5), (None, 0))
    assert issued == ["memset", "launch", "launch"]


@pytest.mark.parametrize("arch", sorted(ARCH_SMEM_OPTIN))
def test_warmup_options_and_the_kernel_functions_stay_float32(arch):
    """`labkit warmup`'s default options are the float32 launches' (the 2-byte builds only with `dtypes=`:
    tests/test_warmup.py), the drop-in's policy takes the 2-byte dtypes, and the float32 kernel functions take
    float32 only."""
    from labkit.ops import warmup

    low = {o for d in dtypes.LOW_PRECISION for o in dtypes.options(d)}
    for target in (f"sm_{arch}", f"compute_{arch}"):
        passed = {o for opts in warmup._options(None, target).values() for o in opts}
        assert not low & passed, (target, passed)
    assert not low & set(warmup._options(_device(arch), f"sm_{arch}")["chain_stats_tma"])  # on a GPU of that arch
    assert eligibility.KERNEL_FUNCTIONS.dtypes == (dtypes.FLOAT32,)
    assert eligibility.DROP_IN.dtypes == (dtypes.FLOAT32,) + dtypes.LOW_PRECISION


@pytest.mark.parametrize("dtype", list(LOW))
def test_the_drop_in_serves_2_byte_forwards_and_backwards(dtype):
    """The drop-in's forward and backward plans take bfloat16/float16, and so does labkit.ops.backward.backward; the
    fused consumer refuses them by their dtype, first (torch serves those), whatever the device: the GPU tests check
    the same through real plans."""
    from labkit.ops import backward
    from labkit.ops.dropin import fused, plan
    from labkit.ops.epilogue import Epilogue

    x, w, b = _t(LOW[dtype])
    cpu = "x must be a CUDA tensor (got cpu)"  # past the dtype: the one condition left on this machine
    assert plan.refusal(x, (8, 4), w, b, 1e-5) == cpu
    assert plan.refusal(x, (8, 4), None, None, 1e-5) == cpu
    assert backward.input_refusal(x, (8, 4), w, b) == cpu
    assert dtype in backward.DROP_IN_DTYPES
    assert backward.input_refusal(x, (8, 4), w, b, addresses=False) == cpu
    fp, _ = fused.make_plan(x, (8, 4), w, b, 1e-5, Epilogue("gelu", 2.0, True), torch.zeros_like(x))
    assert type(fp) is fused.FusedPlan and fp.reason == f"the fused epilogues are built for float32 x, got {LOW[dtype]}"


@pytest.mark.parametrize("dtype", list(LOW))
def test_paths_offer_2_byte_dtypes_where_built(dtype):
    """paths.candidates for a 2-byte dtype: rows_fused's entry points and the chain (N % 512 == 0: its tma blocking on
    sm_90, the ring below), never the float32-only paths; a path not built for it says so."""
    from labkit.ops import paths

    for arch in (80, 90):
        dev = _device(arch)
        got = set(paths.candidates(4, 1 << 16, dev, dtype))
        assert got <= {p for p, ts in paths.DTYPES.items() if dtype in ts} and "chain" in got, (arch, got)
        assert "chain" not in paths.candidates(4, (1 << 16) + 4, dev, dtype)  # ragged: w1/w4 are float32's
        assert "rows_fused" in paths.candidates(4096, 768, dev, dtype)
    with pytest.raises(ValueError, match=f"path rows_staged is built for float32, got dtype {dtype}"):
        paths.launches("rows_staged", 4096, 768, _device(90), dtype)


@pytest.mark.parametrize("dtype", dtypes.LOW_PRECISION)
def test_2_byte_chain_shared_memory_counts_the_static_barriers(dtype):
    """A 2-byte ring (half float32's bytes a stage) is checked against the opt-in limit with the kernel's static
    shared memory beside it, as float32's: a device one byte short of ring + STATIC_SMEM refuses it, naming both."""
    config = chain.TmaConfig(64, 12, 8)  # 12 stages: float32's would not fit 227 KiB, a 2-byte type's do
    need = config.smem_bytes_of(2)
    assert config.smem_bytes > ARCH_SMEM_OPTIN[90] and need + chain.STATIC_SMEM <= ARCH_SMEM_OPTIN[90]
    settings = chain.ChainSettings(schedule="chain", blocking="tma", tma=config)
    fits = Device("sm_90", 90, 132, need + chain.STATIC_SMEM, 65535)
    assert chain.launches(4, 1 << 20, fits, settings, dtype=dtype).stats.shared_mem == need
    short = Device("sm_90", 90, 132, need + chain.STATIC_SMEM - 1, 65535)
    with pytest.raises(ValueError, match=f"needs {need} bytes of shared memory per block beside its static barriers, "
                                         f"the device allows {need + chain.STATIC_SMEM - 1}"):
        chain.launches(4, 1 << 20, short, settings, dtype=dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", dtypes.LOW_PRECISION)
def test_2_byte_ring_static_shared_memory_fits_the_headroom(dtype, cache_dir):
    """Below sm_90 (where cuobjdump does not add the 1 KiB sm_90 reserves) the 2-byte ring's static shared memory,
    its barriers at the deepest ring, is within chain.STATIC_SMEM."""
    options = chain.TmaConfig(chain.RING_STEPS, chain.RING_MAX_STAGES, 8).options + dtypes.options(dtype)
    for u in resource_usage(kc.compile_kernel("chain_stats_tma", "sm_80", options).cubin):
        assert u.shared_bytes is not None and 0 < u.shared_bytes <= chain.STATIC_SMEM, (u.function, u.shared_bytes)


def test_tensor_map_geometry_of_2_byte_elements():
    """The driver's box conditions, for 2-byte elements too: the innermost box spans a multiple of 16 bytes (8
    elements of 2 bytes, 4 of 4), every extent 1 to 256; the element size is 4 or 2."""
    from labkit.core.tensormap import TensorMapGeometry

    assert TensorMapGeometry((128, 4), (256,), (8, 1), 2).element_bytes == 2
    with pytest.raises(ValueError, match="spans? a multiple of 16 bytes, got 4 elements of 2 bytes"):
        TensorMapGeometry((128, 4), (256,), (4, 1), 2)
    with pytest.raises(ValueError, match=r"box extents must be 1 to 256, got \(128, 1, 257, 1\)"):
        TensorMapGeometry((128, 4, 1024, 2), (256, 1024, 1 << 20), (128, 1, 257, 1), 2)
    with pytest.raises(ValueError, match="element_bytes must be one of"):
        TensorMapGeometry((128, 4), (256,), (8, 1), 8)
