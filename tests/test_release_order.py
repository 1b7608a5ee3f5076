"""kernels/rows_staged.cu releases a ring slot (or a statistics entry) only after the values its shared-memory reads
returned have been used, checked in its SASS. Why in SASS: an mbarrier arrive does not wait for the thread's
outstanding shared-memory loads, and the compiler may issue it before their first use. A build that arrived right
after issuing its reads (STAGED_EARLY_RELEASE=1) gave wrong rows on the H200 (docs/decisions.md#rows_staged).

The property checked is exact for this kernel: in program order, no LDS result may still be unread when a
SYNCS.ARRIVE issues, since no group here reads ahead past a release. The chain kernels do read the next slot ahead
by design, so the property does not apply to them; their ring protocol has its own sanitizer evidence
(kernels/sanitize/tma_ring.cu). CPU only: NVRTC and cuobjdump or nvdisasm."""
import re

import pytest

from labkit.core.compile import compile_kernel
from labkit.sass import tools
from labkit.sass.parser import parse_sass

pytestmark = pytest.mark.skipif(tools.find_tool("cuobjdump") is None and tools.find_tool("nvdisasm") is None,
                                reason="no cuobjdump/nvdisasm (pip install nvidia-cuda-cuobjdump)")

_REGISTER = re.compile(r"\bR(\d+)\b")


def arrives_with_loads_pending(sass: str) -> list[tuple[str, list[str]]]:
    """(arrive address, addresses of the LDS whose results are still unread there), in program order, over every
    function of `sass` (labkit.sass.parser.parse_sass). A load's result is used once any later instruction reads one
    of its registers, and dead once one is overwritten."""
    found = []
    for instrs in parse_sass(sass).values():
        pending: dict[int, str] = {}  # register -> address of the LDS that writes it
        for ins in instrs:
            address, ops = f"{ins.addr:04x}", ins.operands
            dest = int(ops[0][1:]) if ops and re.fullmatch(r"R\d+", ops[0]) else None
            reads = {int(r) for o in (ops[1:] if dest is not None else ops) for r in _REGISTER.findall(o)}
            for load in {pending[r] for r in reads if r in pending}:
                for r in [r for r, a in pending.items() if a == load]:
                    del pending[r]
            if ins.opcode.startswith("SYNCS.ARRIVE") and pending:
                found.append((address, sorted(set(pending.values()))))
            if dest is not None:
                if ins.base == "LDS":
                    width = 4 if ".128" in ins.opcode else 2 if ".64" in ins.opcode else 1
                    pending.update({r: address for r in range(dest, dest + width)})
                else:
                    pending.pop(dest, None)
    return found


def _sass(options=()):
    return tools.disassemble(compile_kernel("rows_staged", "sm_90", tuple(options)).cubin, "rows_staged")


def test_every_release_comes_after_its_values_are_used():
    sass = _sass()
    assert sass.count("SYNCS.ARRIVE") >= 4  # the chain group's, the output group's, statistics, the producer's
    assert arrives_with_loads_pending(sass) == []


def test_the_check_catches_the_early_release_build():
    """The build the race probe measured wrong: the output group's slot reads and its statistics read pending."""
    found = arrives_with_loads_pending(_sass(("-DSTAGED_EARLY_RELEASE=1",)))
    assert len(found) >= 2


def test_the_check_on_hand_written_sass():
    head = "Function : k\n"
    used = head + ("/*0010*/ LDS.128 R4, [R2] ;\n/*0020*/ FADD R9, R4, R1 ;\n"
                   "/*0030*/ SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R8+URZ], RZ ;")
    unused = head + "/*0010*/ LDS.64 R4, [R2] ;\n/*0020*/ SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R8+URZ], RZ ;\n/*0030*/ FADD R9, R5, R1 ;"
    overwritten = head + "/*0010*/ @!P0 LDS R4, [R2] ;\n/*0020*/ MOV R4, R1 ;\n/*0030*/ SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R8+URZ], RZ ;"
    assert arrives_with_loads_pending(used) == []
    assert arrives_with_loads_pending(unused) == [("0020", ["0010"])]
    assert arrives_with_loads_pending(overwritten) == []


def _cluster_sass():
    return tools.disassemble(compile_kernel("rows_cluster", "sm_90").cubin, "rows_cluster2")


def test_rows_cluster_releases_after_use_or_with_release_semantics():
    """kernels/rows_cluster.cu: an arrive issued while a shared-memory read is still unread is either a local
    arrive.expect_tx (it arms the barrier's next phase, which cannot complete before this thread's own later
    release) or an arrive with release semantics (a memory barrier right before it), which orders the read. The
    relaxed releases (.RED without a barrier before them) must all come after their values are used. A program-order
    scan, so a release behind a branch that skips every use is beyond it: the kernel arms those with release
    semantics by construction (pushes_first)."""
    sass = _cluster_sass()
    lines = [ln for ln in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", ln)]
    at = {re.search(r"/\*([0-9a-f]{4})\*/", ln).group(1): i for i, ln in enumerate(lines)}
    found = arrives_with_loads_pending(sass)
    assert sass.count("SYNCS.ARRIVE") >= 6
    for address, _ in found:
        i = at[address]
        arrive = lines[i]
        before = " ".join(lines[max(0, i - 3):i])
        expect_tx = ".A1T0" not in arrive and not re.search(r",\s*RZ\s*;", arrive)
        release = re.search(r"\b(MEMBAR|ERRBAR|CGAERRBAR)\b", before) is not None
        assert expect_tx or release, (address, arrive.strip())
