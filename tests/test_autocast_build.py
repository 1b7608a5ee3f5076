"""The autocast builds on the CPU (issue 54, item 1: x of T, gamma, beta, y, dy, dgamma, dbeta float32;
kernels/dtype.cuh -DLN_X_BF16 / -DLN_X_FP16): they compile for every arch from sm_80 with the default build's entry
points, move x and dX as 8-byte vectors and the float arrays as 16-byte ones, and the launches give the chain's
statistics pass T's build, its output pass and backward the autocast build, with a 2-byte tensor map for x beside
4-byte ones for dy and gamma and stages of x's half-size array plus two float ones. Whether they give autocast's bits
is tests/test_gpu_autocast.py's question (GPU only)."""
import pytest
import torch

from labkit.core import compile as kc
from labkit.core.device import ARCH_SMEM_OPTIN, Device
from labkit.core.program import Launch, Map
from labkit.ops import backward, chain, dtypes
from labkit.ops.dropin import autocast
from labkit.sass.elf import resource_usage

ARCHES = (80, 86, 89, 90, 100, 120)


def _device(arch: int = 90) -> Device:
    return Device(f"sm_{arch}", arch, 132, ARCH_SMEM_OPTIN[arch], 65535)


def _options(kernel: str, arch: int, build: str) -> tuple[str, ...]:
    extra = backward.chain_options(_device(arch)) if kernel == "grad_chain_sums" else ()
    return extra + dtypes.options(build)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("kernel", dtypes.AUTOCAST_KERNELS)
def test_autocast_builds_compile_with_the_default_entry_points(kernel, arch, cache_dir):
    """Each autocast build has the default build's entry points and no local memory beyond the default's (the
    chain's sums allowed the 2-byte builds' 24 bytes of stack more)."""
    default = {u.function: u for u in resource_usage(kc.compile_kernel(kernel, f"sm_{arch}",
                                                                       _options(kernel, arch, "float32")).cubin)}
    for build in dtypes.AUTOCAST:
        built = {u.function: u for u in resource_usage(kc.compile_kernel(kernel, f"sm_{arch}",
                                                                         _options(kernel, arch, build)).cubin)}
        assert set(built) == set(default), (build, arch)
        for f, u in built.items():
            assert (u.local_bytes or 0) <= (default[f].local_bytes or 0), (build, arch, f)
            slack = 24 if kernel == "grad_chain_sums" else 0
            assert (u.stack_bytes or 0) <= (default[f].stack_bytes or 0) + slack, (build, arch, f, u.stack_bytes)


@pytest.mark.slow
@pytest.mark.parametrize("arch", [80, 90])
def test_autocast_machine_code_reads_x_as_t_and_the_rest_as_float(arch, cache_dir):
    """SASS: the output pass reads x in 8-byte vectors and writes y in 16-byte ones; the column pass reads x in
    8 bytes, dy in 16, and stores dX in 8 after an F2FP pack (rounding to nearest: no .RZ/.RM/.RP); below sm_90 the
    chain's ring copies x 8 bytes a piece (cp.async.ca) and dy and gamma 16 (.cg: LDGSTS.E.BYPASS.128)."""
    import re

    from labkit.sass import tools

    if tools.find_tool("cuobjdump") is None and tools.find_tool("nvdisasm") is None:
        pytest.skip("no cuobjdump or nvdisasm here")
    for build in dtypes.AUTOCAST:
        ops = {}
        for kernel in dtypes.AUTOCAST_KERNELS:
            sass = tools.disassemble(kc.compile_kernel(kernel, f"sm_{arch}", _options(kernel, arch, build)).cubin)
            ops[kernel] = re.findall(r"\b((?:LDG|STG|LDGSTS|F2FP)\.[A-Z0-9_.]*)", sass)
        a, c, s = ops["affine_columns"], ops["grad_columns"], ops["grad_chain_sums"]
        assert any(o.startswith("LDG.E.64") for o in a) and any(o.startswith("STG.E.128") for o in a), build
        assert not any(o.startswith("STG.E.64") for o in a), build
        assert any(o.startswith("LDG.E.64") for o in c) and any(o.startswith("LDG.E.128") for o in c), build
        assert any(o.startswith("STG.E.64") for o in c) and any(o.startswith("F2FP") for o in c), build
        assert not [o for o in c if o.startswith("F2F") and re.search(r"\.(RZ|RM|RP)\b", o)], build
        if arch == 80:
            assert "LDGSTS.E.64" in s and "LDGSTS.E.BYPASS.128" in s, build  # .cg: the 16-byte copies bypass L1


@pytest.mark.slow
def test_autocast_builds_refuse_the_epilogue(cache_dir):
    with pytest.raises(RuntimeError, match="no bfloat16/float16 build"):
        kc.compile_kernel("affine_columns", "sm_90", dtypes.options("autocast_bfloat16") + ("-DEPILOGUE",))


def test_autocast_dtype_names():
    assert dtypes.options("autocast_bfloat16") == ("-DLN_X_BF16",)
    assert dtypes.options("autocast_float16") == ("-DLN_X_FP16",)
    assert [dtypes.x_dtype(b) for b in dtypes.AUTOCAST] == ["bfloat16", "float16"]
    assert [dtypes.param_dtype(b) for b in dtypes.AUTOCAST] == ["float32", "float32"]
    assert dtypes.param_dtype("bfloat16") == "bfloat16" and dtypes.itemsize("autocast_float16") == 2
    assert dtypes.x_dtype("autocast_float16") == "float16" and dtypes.x_dtype("float32") == "float32"
    with pytest.raises(ValueError, match="dtype must be one of .* got 'autocast_float32'"):
        dtypes.x_dtype("autocast_float32")


@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("build", dtypes.AUTOCAST)
def test_autocast_chain_launches(build, arch):
    """Forward: T's statistics pass (its map or ring in 2-byte elements), the autocast output pass. Backward: the
    chain's sums with x's map in 2-byte elements and dy's and gamma's in 4-byte ones, a stage of 40 KiB (x's 8, dy's
    and gamma's 16 each: 5/6 of float32's 48), no narrow_out (dgamma and dbeta are float32)."""
    dev, n = _device(arch), 1 << 22
    low = dtypes.x_dtype(build)
    f, t = chain.launches(16, n, dev, dtype=build), chain.launches(16, n, dev, dtype=low)
    assert f.stats == t.stats and f.tensor_map == t.tensor_map
    assert f.output == chain.output_kernel(n, build) and f.output.options == dtypes.options(build)
    g = backward.launches(16, n, dev, "chain", dtype=build)
    base = backward.launches(16, n, dev, "chain")
    assert g.sums.function == base.sums.function and g.sums.grid == base.sums.grid
    assert g.sums.shared_mem * 6 == base.sums.shared_mem * 5
    assert g.columns.options == dtypes.options(build) and g.align == 16
    prog = g.program(0)
    sums = next(s for s in prog.steps if isinstance(s, Launch) and s.kernel.kernel == "grad_chain_sums")
    columns = next(s for s in prog.steps if isinstance(s, Launch) and s.kernel.kernel == "grad_columns")
    assert len(columns.args) == len(next(s for s in base.program(0).steps if isinstance(s, Launch)
                                         and s.kernel.kernel == "grad_columns").args)  # no narrow_out
    if arch >= 90:
        x_map, dy_map, g_map = sums.args[:3]
        assert isinstance(x_map, Map) and x_map.geometry.element_bytes == 2
        assert dy_map.geometry == base.tensor_map and g_map.geometry.element_bytes == 4
        assert x_map.geometry.strides_bytes == tuple(s // 2 for s in base.tensor_map.strides_bytes)
    else:
        assert g.tensor_map is None and g.x_map is None


@pytest.mark.parametrize("schedule", ["rows", "split"])
def test_autocast_builds_serve_the_chain_schedule_only(schedule):
    """grad_row_sums.cu and grad_rows_fused.cu have no autocast build: their launches refuse it by name."""
    with pytest.raises(ValueError, match=f"autocast_bfloat16 build serves the chain schedule only, got '{schedule}'"):
        backward.launches(4096, 768, _device(), schedule, dtype="autocast_bfloat16")


def test_autocast_refusals_name_the_condition():
    """Each condition by name and value (shapes on the meta device: no memory for N = 2**25). Beyond N = 2**24
    torch's float32 kernel takes its other path, so autocast's cast serves there; a GPU test checks those bits."""
    def meta(*shape):
        return torch.empty(shape, dtype=torch.bfloat16, device="meta")

    f32 = torch.zeros(2, 1024)
    assert "autocast's cast of a torch.float32 x" in autocast.refusal(f32, (1024,), None, None)
    assert "N must be <= 2**24" in autocast.refusal(meta(1, 1 << 25), (1 << 25,), None, None)
    assert "N % 512 == 0, got N=1000" in autocast.refusal(meta(2, 1000), (1000,), None, None)
    assert "eps must be a finite float >= 0, got nan" in autocast.refusal(meta(2, 1024), (1024,), None, None,
                                                                          float("nan"))
    assert "trailing dimensions" in autocast.refusal(meta(2, 1024), (512,), None, None)
    assert "bias without weight" in autocast.refusal(meta(2, 1024), (1024,), None, torch.zeros(1024, device="meta"))
    assert "weight must be a contiguous float32" in autocast.refusal(
        meta(2, 1024), (1024,), torch.zeros(1024, dtype=torch.float16, device="meta"), None)
    assert "contiguous CUDA tensor" in autocast.refusal(meta(2, 1024), (1024,), None, None)


def test_autocast_under_cpu_autocast_is_torchs():
    """CPU autocast (and any device but CUDA) keeps torch's own call: labkit.layer_norm gives F.layer_norm's
    tensors."""
    import labkit

    x = torch.randn(4, 1024).to(torch.bfloat16)
    w, b = torch.randn(1024), torch.randn(1024)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = labkit.layer_norm(x, (1024,), w, b)
        want = torch.nn.functional.layer_norm(x, (1024,), w, b)
    assert got.dtype == want.dtype and torch.equal(got.view(torch.int32), want.view(torch.int32))
