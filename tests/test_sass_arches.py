"""The FMA-contraction comparison on every arch torch ships LayerNorm SASS for, per recorded torch version (2.11.0+cu130
and 2.14.1+cu130: data/sass/*-sm_*.json, data/sass/backward/*-sm_*.json), and the SASS-reading fixes those archs needed.

The records' `same_contractions` verdicts are checked for every committed file by
tests/test_sass.py::test_committed_summary_is_small_and_says_same_contractions; here: each record is the arch its
name says, ours recompiled now for that arch still match torch's committed functions, the backward records' claims
(checked by dataflow, so a register allocation that passes an accumulator through two registers is the same chain)
with a planted contraction failing them on every arch, and the parser fixes on hand-written SASS."""
import json
import re
from pathlib import Path

import pytest

from labkit.sass import parser, patterns, summary, tools

HAS_DISASM = tools.find_tool("cuobjdump") is not None or tools.find_tool("nvdisasm") is not None
needs_disasm = pytest.mark.skipif(not HAS_DISASM, reason="no cuobjdump/nvdisasm (pip install nvidia-cuda-cuobjdump)")

VEC = "vectorized_layer_norm_kernel<float, float, false>"
FORWARD = sorted(summary.SASS_DIR.glob("layernorm-torch-*-sm_*.json"))
BACKWARD = sorted((summary.SASS_DIR / "backward").glob("layernorm-backward-torch-*-sm_*.json"))


def _arch_of(path: Path) -> str:
    return re.search(r"-(sm_\d+)\.json$", path.name).group(1)


def _device_arch(torch_part: dict) -> str:
    return torch_part.get("device_arch", torch_part["arch"])  # records before device_arch: the cubin's own arch


def test_there_is_a_forward_record_per_arch_torch_ships():
    # torch 2.11.0+cu130 ships LayerNorm SASS for sm_75/80/86/90/100/120 (sm_89's one cubin is FP8 GEMMs only);
    # ours target sm_80 and up, and an sm_89 device runs torch's sm_86 code.
    if not FORWARD:
        pytest.skip("no committed summary under data/sass/")
    assert {_arch_of(p) for p in FORWARD} >= {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"}


@pytest.mark.parametrize("path", FORWARD, ids=[p.stem for p in FORWARD])
def test_forward_record_is_the_arch_its_name_says(path):
    rec = json.loads(path.read_text())
    arch, torch_part = _arch_of(path), rec["torch"]
    assert _device_arch(torch_part) == arch
    assert torch_part["cubin"].endswith(f".{torch_part['arch']}.cubin")
    # torch's code is the cubin a device of `arch` loads: its own, else a lower minor of its major (sm_89 -> sm_86)
    assert torch_part["arch"] in summary.loadable_archs(arch, [torch_part["arch"], arch])
    assert {f["compile_record"]["arch"] for f in rec["ours"].values()} == {arch}
    assert rec["produced_by"].endswith(f"--arch {arch}")
    assert summary.committed_comparison(arch).name.endswith(f"-{arch}.json")  # what a consumer for `arch` reads


@needs_disasm
@pytest.mark.parametrize("path", FORWARD, ids=[p.stem for p in FORWARD])
@pytest.mark.slow
def test_ours_recompiled_for_the_arch_still_contract_as_torch(path):
    rec = json.loads(path.read_text())
    ours = summary.our_kernels_summary(_arch_of(path))
    committed = {fn: f["compile_record"]["cubin_sha256"] for fn, f in rec["ours"].items()}
    now = {fn: f["compile_record"]["cubin_sha256"] for fn, f in ours.items()}
    assert set(now) == set(committed)
    if now == committed:
        return
    # the kernels changed since the record (e.g. sm_90's, made before later source edits): the contractions must not
    v = summary.verdict(rec["torch"]["functions"][VEC], list(ours.values()))
    assert v["same_contractions"], v["checks"]


def _version_of(path: Path) -> str:
    return re.search(r"layernorm-(?:backward-)?torch-(.+)-sm_\d+\.json$", path.name).group(1)


def test_every_recorded_torch_version_covers_every_arch_forward_and_backward():
    """Several torch versions' records side by side: each version has the forward and backward record of every arch,
    and a consumer for an arch reads the newest version's (2.14.1 after 2.11.0: by number, not by name)."""
    if not FORWARD:
        pytest.skip("no committed summary under data/sass/")
    versions = {_version_of(p) for p in FORWARD}
    for v in versions:
        archs = {_arch_of(p) for p in FORWARD if _version_of(p) == v}
        assert archs >= {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"}, v
        assert {_arch_of(p) for p in BACKWARD if _version_of(p) == v} == archs, v
    newest = max(versions, key=lambda v: tuple(int(x) for x in re.match(r"[\d.]+", v).group(0).split(".")))
    for arch in ("sm_80", "sm_90", "sm_120"):
        assert summary.committed_comparison(arch).name == f"layernorm-torch-{newest}-{arch}.json"


def test_committed_comparison_orders_versions_by_number(tmp_path):
    for v in ("2.9.0+cu128", "2.11.0+cu130", "2.14.1+cu130"):
        (tmp_path / f"layernorm-torch-{v}-sm_90.json").write_text("{}")
    assert summary.committed_comparison("sm_90", tmp_path).name == "layernorm-torch-2.14.1+cu130-sm_90.json"
    (tmp_path / "layernorm-torch-2.14.1+cu130-sm_90.json").unlink()
    assert summary.committed_comparison("sm_90", tmp_path).name == "layernorm-torch-2.11.0+cu130-sm_90.json"


def test_loadable_archs_follow_cudas_binary_compatibility():
    shipped = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_103a", "sm_120",
               "sm_120a", "sm_121a"]  # torch 2.11.0+cu130's libtorch_cuda.so (cuobjdump -lelf)
    assert summary.loadable_archs("sm_89", shipped) == ["sm_89", "sm_86", "sm_80"]
    assert summary.loadable_archs("sm_90", shipped) == ["sm_90"]  # not sm_86: another major
    assert summary.loadable_archs("sm_103", shipped) == ["sm_100"]  # sm_103a runs only on sm_103a code paths
    assert summary.loadable_archs("sm_121", shipped) == ["sm_120"]
    assert summary.loadable_archs("sm_110", shipped) == []  # no PTX in the wheel: nothing to JIT
    listing = "ELF file    1: libtorch_cuda.1.sm_90.cubin\nELF file    2: libtorch_cuda.2.sm_100a.cubin\n"
    assert summary.shipped_sass_archs(listing) == ["sm_90", "sm_100a"]


# --- the backward: torch's own dX and GammaBeta SASS per arch --------------------------------------------------------

DX = "layer_norm_grad_input_kernel_vectorized<float, float, false>"
STATS_X1 = "stats_x1 adds the rounded dy*gamma: four FADDs of FMUL results per float4"
NOT_FUSED = "no other FFMA in the loop body (the product is not fused into stats_x1)"


@pytest.mark.parametrize("path", BACKWARD, ids=[p.stem for p in BACKWARD])
def test_backward_record_claims_per_arch(path):
    from labkit.studies import backward_contract as bc

    rec = json.loads(path.read_text())
    arch = _arch_of(path)
    assert rec["device_arch"] == arch and set(rec["functions"]) == set(bc.TORCH_FUNCTIONS)
    assert rec["cubin"].endswith(f".{rec['arch']}.cubin")
    assert rec["produced_by"] == bc.command(rec["wheel"], arch)  # the command that rewrites this file
    forward = summary.SASS_DIR / path.name.replace("layernorm-backward-", "layernorm-")
    if forward.is_file():  # the same cubin as the forward's record for that arch (one translation unit)
        torch_part = json.loads(forward.read_text())["torch"]
        assert (rec["cubin_sha256"], rec["cubin"]) == (torch_part["cubin_sha256"], torch_part["cubin"])
    failed = [c["claim"] for c in bc.checks(rec) if not c["holds"]]
    assert not failed, failed


@pytest.mark.parametrize("path", BACKWARD, ids=[p.stem for p in BACKWARD])
def test_a_fused_stats_x1_fails_on_every_arch(path):
    """Planted: the first float4's first stats_x1 link fused, fma(dy, gamma, stats_x1) instead of FADD-ing the
    rounded product, with that arch's own registers."""
    from labkit.studies import backward_contract as bc

    rec = json.loads(path.read_text())
    ops = rec["functions"][DX]["fp_ops"]
    first = next(c for c in bc.checks(rec) if c["claim"] == STATS_X1)["evidence"][0]
    flow = bc.dataflow(ops)
    link = flow[ops.index(first)]
    mul = next(flow[v] for v in link.srcs if isinstance(v, int) and flow[v].opcode == "FMUL")
    acc = next(r.strip() for r in first.split(" ", 1)[1].split(",")[1:] if r.strip() != mul.dst)
    factors = [r.strip() for r in mul.text.split(" ", 1)[1].split(",")[1:]]
    ops[ops.index(first)] = f"FFMA {link.dst}, {factors[0]}, {factors[1]}, {acc}"
    holds = {c["claim"]: c["holds"] for c in bc.checks(rec)}
    assert not holds[STATS_X1] and not holds[NOT_FUSED]


# --- the SASS-reading fixes the other archs needed (hand-written SASS, no tool) ---------------------------------------

# sm_80/86: a predicated CALL.REL.NOINC leaves the stats loop (a jump inside the body, not a call); only the slow
# path past the last EXIT is a subroutine. Before the fix the finish's MUFU.RSQ was counted as subroutine code.
LOOP_EXIT_SASS = """
        Function : toy_loop_exit
        /*0000*/                   ISETP.GE.AND P0, PT, R23, UR4, PT ;
        /*0010*/                   CALL.REL.NOINC 0x60 ;
        /*0020*/               @P0 CALL.REL.NOINC 0x40 ;
        /*0030*/                   BRA 0x0 ;
        /*0040*/                   MUFU.RSQ R3, R6 ;
        /*0050*/                   EXIT ;
        /*0060*/                   FFMA R21, R0, 1.84467440737095516160e+19, RZ ;
        /*0070*/                   RET.REL.NODEC R2 0x0 ;
"""

# sm_100/120: torch's (and on sm_90 ours') first float4 peeled under one predicate, its reciprocals folded
# (0 + x, then 1/2): each instruction reads values written under its own predicate.
PEELED_SASS = """
        Function : toy_peeled
        /*0000*/                   ISETP.NE.U32.AND P0, PT, R4, 0x1, PT ;
        /*0010*/               @P0 LDG.E.128.CONSTANT R4, desc[UR8][R4.64] ;
        /*0020*/               @P0 FADD R14, RZ, R4 ;
        /*0030*/               @P0 FADD R17, R5, -R14 ;
        /*0040*/               @P0 FADD R15, R4, -R14 ;
        /*0050*/               @P0 FFMA R16, R17, 0.5, R14 ;
        /*0060*/               @P0 FFMA R15, R4, R15, RZ ;
        /*0070*/               @P0 FADD R14, R5, -R16 ;
        /*0080*/               @P0 FFMA R14, R17, R14, R15 ;
        /*0090*/                   EXIT ;
"""


def test_a_call_inside_the_body_is_not_a_subroutine():
    instrs = parser.parse_sass(LOOP_EXIT_SASS)["toy_loop_exit"]
    assert parser.subroutine_start(instrs) == 0x60
    rep = patterns.contract_report(instrs)
    assert rep["rsqrt"] == 1 and rep["subroutine_ffma"] == 1
    assert summary.regions(instrs)["subroutines"] == ["FFMA"]


def test_predicated_block_reads_its_own_writes():
    rep = patterns.contract_report(parser.parse_sass(PEELED_SASS)["toy_peeled"])
    assert rep["push_mean"] == {"1/1 folded (0 + x)": 1, "1/2 folded to a constant": 1}
    assert rep["push_m2"] == 2 and rep["unexplained_count"] == 0


def test_predicated_reads_under_another_predicate_stay_selects():
    # @P1 does not imply @P0: the second push reads sel(new, old) and must not be explained.
    text = PEELED_SASS.replace("@P0 FFMA R16, R17, 0.5, R14", "@P1 FFMA R16, R17, 0.5, R14")
    rep = patterns.contract_report(parser.parse_sass(text)["toy_peeled"])
    assert "1/2 folded to a constant" not in rep["push_mean"] and rep["unexplained_count"] > 0


def test_a_redefined_predicate_forgets_what_it_guarded():
    redefine = "        /*004f*/                   ISETP.NE.AND P0, PT, R9, RZ, PT ;\n"  # between 0x40 and 0x50
    text = PEELED_SASS.replace("        /*0050*/", redefine + "        /*0050*/")
    rep = patterns.contract_report(parser.parse_sass(text)["toy_peeled"])
    assert "1/2 folded to a constant" not in rep["push_mean"]
