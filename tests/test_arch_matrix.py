"""Every kernel against every NVIDIA arch from sm_80 (issue 25, checked here without those GPUs): NVRTC compiles
each kernel a path offers there, and each of the launches the paths describe there fits that arch's limits — registers
per thread (255), registers per block (the 64K-register file), and static plus dynamic shared memory per block
(the arch's opt-in maximum, from the CUDA programming guide's table). Below sm_90 chain_stats and rows_staged (bulk
copies, mbarrier transaction counts) and rows_cluster (clusters) do not compile: the test names that set exactly, so a
kernel that stops compiling anywhere else, or starts compiling there, shows. The tensor-map kernels, chain_stats_tma
and the backward's chain sums, compile everywhere (a cp.async ring below sm_90)."""
import pytest

from labkit.core import compile as kc
from labkit.core.device import ARCH_SMEM_OPTIN, Device
from labkit.core.program import Launch
from labkit.ops import backward, paths
from labkit.sass.elf import resource_usage

# opt-in shared memory per block (labkit.core.device.ARCH_SMEM_OPTIN, the programming guide's table); SM counts
# only shape the launches' grids
ARCHES = {a: ARCH_SMEM_OPTIN[a] for a in (80, 86, 89, 90, 100, 120)}
SM90_ONLY = {"chain_stats", "rows_staged", "rows_cluster"}
SHAPES = ((16, 1 << 22), (1, 1 << 24), (3, 1000), (4096, 768), (8192, 4096), (100000, 256), (64, 65536))
REGISTER_FILE = 65536


def _device(arch: int) -> Device:
    return Device(f"sm_{arch}", arch, 100, ARCHES[arch], 65535)


@pytest.fixture(scope="module")
def compiled():
    """{(arch, kernel): cubin or None where NVRTC refuses it}."""
    out = {}
    for arch in ARCHES:
        for k in kc.available_kernels():
            try:
                out[arch, k] = kc.compile_kernel(k, f"sm_{arch}").cubin
            except RuntimeError:
                out[arch, k] = None
    return out


@pytest.mark.parametrize("arch", sorted(ARCHES))
@pytest.mark.slow
def test_exactly_the_sm90_kernels_fail_below_sm90(compiled, arch):
    failing = {k for (a, k), cubin in compiled.items() if a == arch and cubin is None}
    assert failing == (SM90_ONLY if arch < 90 else set())
    offered = set(paths.candidate_kernels(arch)) | set(backward.KERNELS)
    assert not offered & failing, "a path offers a kernel that does not compile for its arch"


def _launches(arch: int):
    dev = _device(arch)
    for rows, n in SHAPES:
        for p in list(paths.candidates(rows, n, dev).values()) + list(backward.candidates(rows, n, dev).values()):
            try:
                prog = p.program(0)
            except Exception:  # the chain's w4 blocking reads the device's reciprocal table: the grid is enough
                prog = None
            kernels = [s.kernel for s in prog.steps if isinstance(s, Launch)] if prog else \
                [k for k in (getattr(p, "stats", None), getattr(p, "output", None), getattr(p, "sums", None),
                             getattr(p, "columns", None), getattr(p, "kernel", None)) if k is not None]
            yield (rows, n, p.path), kernels


@pytest.mark.parametrize("arch", sorted(ARCHES))
@pytest.mark.slow
def test_every_planned_launch_fits_the_arch(compiled, arch):
    usage = {}
    for (a, k), cubin in compiled.items():
        if a == arch and cubin is not None:
            usage.update({(k, u.function): u for u in resource_usage(cubin)})
    checked = 0
    for where, kernels in _launches(arch):
        for k in kernels:
            u = next(v for (kernel, fn), v in usage.items() if kernel == k.kernel and fn == k.function)
            threads = 1
            for d in k.block:
                threads *= d
            assert u.registers <= 255, (arch, where, k.function, u.registers)
            assert u.registers * threads <= REGISTER_FILE, (arch, where, k.function, u.registers, threads)
            assert (u.shared_bytes or 0) + k.shared_mem <= ARCHES[arch], (arch, where, k.function)
            checked += 1
    assert checked > 0


def test_which_paths_each_arch_gets_is_decided_by_its_limits():
    """The chain path's tma ring needs more than 99 KiB of shared memory per block, its cp.async ring below sm_90
    fits in less: so it is planned everywhere but sm_120 (99 KiB, tensor maps), where rows_fused and
    reference_order still are."""
    got = {arch: set(paths.candidates(16, 1 << 22, _device(arch))) for arch in ARCHES}
    assert all(got[a] == {"chain", "rows_fused", "reference_order"} for a in (80, 86, 89, 90, 100))
    assert got[120] == {"rows_fused", "reference_order"}
    # rows_staged (bulk copies, N <= 2**18): from sm_90 on, its ring as deep as each arch's shared memory allows
    long_rows = {arch: set(paths.candidates(1024, 1 << 16, _device(arch))) for arch in ARCHES}
    assert all(("rows_staged" in long_rows[a]) == (a >= 90) for a in ARCHES)
    slots = {a: paths.launches("rows_staged", 1024, 1 << 16, _device(a)).slots for a in (90, 100, 120)}
    assert slots[90] == slots[100] == 13 and slots[120] == 5
    # rows_cluster (clusters, N up to 2 (slots - 1) chunks): from sm_90 on; sm_120's 99 KiB hold half a row of 2**16
    # floats (8 chunks) in no ring, half of 2**15 (4 chunks) in its 5 slots
    assert all(("rows_cluster" in long_rows[a]) == (a in (90, 100)) for a in ARCHES)
    assert "rows_cluster" in paths.candidates(1024, 1 << 15, _device(120))
