"""labkit.sass on CPU: resource usage, ptxas report, SASS parsing and the contract matcher.

Disassembly needs cuobjdump or nvdisasm (pip: nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm); those tests skip
without them. The symbolic matcher is also tested on hand-written SASS, which needs no tool."""
import json

import pytest

from labkit.core.compile import compile_kernel
from labkit.sass import elf, parser, patterns, ptxas, summary, tools

HAS_DISASM = tools.find_tool("cuobjdump") is not None or tools.find_tool("nvdisasm") is not None
needs_disasm = pytest.mark.skipif(not HAS_DISASM, reason="no cuobjdump/nvdisasm (pip install nvidia-cuda-cuobjdump)")


def test_resource_usage_from_the_elf_matches_ptxas(monkeypatch):
    monkeypatch.setenv("LABKIT_SASS_TOOLS", "off")
    usage = {u.function: u for u in elf.resource_usage(compile_kernel("reference_stats", "sm_90").cubin)}
    info = ptxas.ptxas_info("reference_stats", "sm_90")
    assert info["code_identical"]
    fn = info["functions"][0]
    assert fn["function"] == "reference_order_stats" and fn["spill_store_bytes"] == 0
    assert usage["reference_order_stats"].registers == fn["registers"] > 0
    assert usage["reference_order_stats"].shared_bytes >= fn["static_smem_bytes"] == 48  # 12 floats
    assert usage["reference_order_stats"].source.startswith("ELF")


def test_parse_ptxas_log():
    log = ("ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
           "ptxas info    : Function properties for k\n"
           "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 48 bytes smem\n")
    assert ptxas.parse_ptxas_log(log) == [{"function": "k", "stack_bytes": 8, "spill_store_bytes": 4,
                                          "spill_load_bytes": 4, "registers": 40, "barriers": 1,
                                          "static_smem_bytes": 48}]


# Hand-written sm_90-style SASS: one float4 of the affine output, and one Welford push with the IEEE reciprocal
# idiom (fast path after the slow-path call, as nvcc lays it out).
OUTPUT_SASS = """
        Function : toy_output
        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0010*/                   LDG.E R3, desc[UR4][R18.64] ;
        /*0020*/                   LDG.E R16, desc[UR4][R16.64] ;
        /*0030*/                   LDG.E.128 R8, desc[UR4][R20.64] ;
        /*0040*/                   LDG.E.128 R12, desc[UR4][R12.64] ;
        /*0050*/                   FADD R23, R4, -R3.reuse ;
        /*0060*/                   FMUL R23, R23, R16 ;
        /*0070*/                   FFMA R8, R8, R23, R12 ;
        /*0080*/                   STG.E.128 desc[UR4][R4.64], R8 ;
        /*0090*/                   EXIT ;
"""
PUSH_SASS = """
        Function : toy_push
        /*0000*/                   LDG.E.128 R8, desc[UR8][R34.64] ;
        /*0010*/                   FADD R0, R30, 1 ;
        /*0020*/                   FADD R14, R8, -R31 ;
        /*0030*/                   ISETP.GT.U32.AND P0, PT, R2, 0x1ffffff, PT ;
        /*0040*/               @P0 BRA 0x80 ;
        /*0050*/                   MOV R2, 0x70 ;
        /*0060*/                   CALL.REL.NOINC 0x200 ;
        /*0070*/                   BRA 0xc0 ;
        /*0080*/                   MUFU.RCP R21, R0 ;
        /*0090*/                   FFMA R2, R0, R21, -1 ;
        /*00a0*/                   FADD.FTZ R2, -R2, -RZ ;
        /*00b0*/                   FFMA R21, R21, R2, R21 ;
        /*00c0*/                   FFMA R31, R14, R21, R31 ;
        /*00d0*/                   FADD R15, R8, -R31 ;
        /*00e0*/                   FFMA R15, R14, R15, R32 ;
        /*00f0*/                   EXIT ;
        /*0200*/                   FFMA R21, R0, 1.84467440737095516160e+19, RZ ;
        /*0210*/                   RET.REL.NODEC R2 0x0 ;
"""


def test_parse_sass_and_fp_sequence_on_text():
    funcs = parser.parse_sass(OUTPUT_SASS + PUSH_SASS)
    assert set(funcs) == {"toy_output", "toy_push"}
    assert parser.fp_op_sequence(funcs["toy_output"]) == ["FADD", "FMUL", "FFMA"]
    assert parser.fp_op_sequence(funcs["toy_output"], operands=True)[0] == "FADD R23, R4, -R3"
    push = funcs["toy_push"]
    assert push[4].pred == "P0" and push[4].opcode == "BRA"


def test_contract_report_on_hand_written_sass():
    funcs = parser.parse_sass(OUTPUT_SASS + PUSH_SASS)
    out = patterns.contract_report(funcs["toy_output"])
    assert out["output"] == {"affine": 1} and out["unexplained_count"] == 0
    push = patterns.contract_report(funcs["toy_push"])
    assert push["push_mean"] == {"rcp(count + 1)": 1} and push["push_m2"] == 1
    assert push["idiom_ffma"] == 2 and push["subroutine_ffma"] == 1 and push["unexplained_count"] == 0


def test_contract_report_flags_a_different_contraction():
    # m2 computed as fma(x - new_mean, x - new_mean, m2) is not torch's push: it must not be explained.
    wrong = PUSH_SASS.replace("FFMA R15, R14, R15, R32", "FFMA R15, R15, R15, R32")
    rep = patterns.contract_report(parser.parse_sass(wrong)["toy_push"])
    assert rep["push_m2"] == 0 and rep["unexplained_count"] == 1


@needs_disasm
def test_disassembled_affine_rows_has_the_fused_output():
    text = tools.disassemble(compile_kernel("affine_rows", "sm_90").cubin)
    instrs = parser.parse_sass(text)["affine_rows_interleaved"]
    ops = parser.fp_op_sequence(instrs)
    assert ops.count("FFMA") == 4 and ops.count("FMUL") == 4 and ops.count("FADD") == 4
    rep = patterns.contract_report(instrs)
    assert rep["output"] == {"affine": 4} and rep["output_rstd"] == "loaded from memory"


@needs_disasm
def test_reference_stats_matches_torch_contract_in_committed_summary():
    committed = summary.committed_comparisons()
    if not committed:
        pytest.skip("no committed summary under data/sass/")
    rec = json.loads(committed[-1].read_text())
    vec = rec["torch"]["functions"]["vectorized_layer_norm_kernel<float, float, false>"]
    ours = summary.our_kernels_summary("sm_90")
    verdict = summary.verdict(vec, list(ours.values()))
    assert verdict["same_contractions"], verdict["checks"]


def test_committed_summary_is_small_and_says_same_contractions():
    committed = summary.committed_comparisons()
    if not committed:
        pytest.skip("no committed summary under data/sass/")
    for path in committed:
        assert path.stat().st_size < 200_000, f"{path} is not a small summary"
        rec = json.loads(path.read_text())
        assert rec["verdict"]["same_contractions"] is True
        assert rec["torch"]["wheel_sha256"] and rec["torch"]["commands"]
        vec = rec["torch"]["functions"]["vectorized_layer_norm_kernel<float, float, false>"]
        # the replay path: verdict recomputed from the committed parts alone
        assert summary.verdict(vec, list(rec["ours"].values()))["same_contractions"]


@needs_disasm
def test_rows_fused_merges_keep_torchs_contraction():
    """Every Welford merge of every rows_fused entry point, as NVRTC builds them, fuses the received product into the
    FFMA of the new mean, as torch's SASS does ("first_product"), and keeps torch's m2 update. The compiler chose
    the other product for the same source expression in a variant whose merge coefficient came from elsewhere
    (docs/decisions.md#rows_coef: bits lost where the products round); a toolchain that did so here fails this before
    any GPU run. The warp layout makes 11 merges per lane (welford_packed_rows4), the block layout torch's 5 shuffle
    merges per warp and its 4-warp tree's 2 (received through shared memory). The counted entry point (labkit.ops.
    rows_counted) takes each merge's quotient from its count pass: the matcher reports those as "quotient given". The
    counted block entry point (labkit.ops.rows_fused.rows_counted_block) makes torch's 5 shuffle merges with given quotients; its
    4-warp tree's three merges read both states from shared memory, which the matcher cannot tell own from received
    by, and are written in intrinsics (welford_merge_given: the contraction is the source's, not the compiler's); the
    GPU tests compare their bits."""
    funcs = parser.parse_sass(tools.disassemble(compile_kernel("rows_fused", "sm_90").cubin))
    warp = {"first_product (received via shfl)": 11}
    counted = {"first_product (received via shfl, quotient given)": 11}
    counted_block = {"first_product (received via shfl, quotient given)": 5}
    block = {"first_product (received via shfl)": 5, "first_product (received via lds)": 2}
    from labkit.ops import rows_fused
    from labkit.ops.rows_fused import rows_counted, rows_counted_block

    assert sorted(funcs) == sorted([f"rows_fused_reg{k}" for k in rows_fused.VECTORS]
                                   + [f"rows_fused_warp{k}" for k in rows_fused.WARP_VECTORS]
                                   + [rows_counted.FUNCTION, rows_counted_block.FUNCTION])  # every entry point
    for function, instrs in funcs.items():
        rep = patterns.contract_report(instrs)
        want = (counted if function == rows_counted.FUNCTION else
                counted_block if function == rows_counted_block.FUNCTION else
                warp if function.startswith("rows_fused_warp") else block)
        assert rep["merge"] == want and rep["merge_m2"] == sum(want.values()), (function, rep["merge"])


@needs_disasm
def test_the_counted_merge_written_as_torchs_source_is_caught():
    """The counterexample the matcher must reject: the counted entry point with welford_merge's source expression
    in place of the intrinsics (ROWS_FUSED_GIVEN_AS_SOURCE). With the quotient given, the compiler fuses the own
    product instead (docs/decisions.md#rows_coef: that build lost torch's bits at N = 200, 768 and 1000 on the H200)."""
    cubin = compile_kernel("rows_fused", "sm_90", ("-DROWS_FUSED_GIVEN_AS_SOURCE",)).cubin
    rep = patterns.contract_report(parser.parse_sass(tools.disassemble(cubin))["rows_fused_warp2_counted"])
    assert rep["merge"] == {"second_product (received via shfl, quotient given)": 11}, rep["merge"]


@needs_disasm
@pytest.mark.parametrize("kernel", ["rows_staged", "rows_cluster", "chain_stats_tma", "chain_stats", "reference_stats"])
@pytest.mark.slow
def test_the_other_forward_kernels_warp_merges_keep_torchs_contraction(kernel):
    """The same check on the other reference-order forward kernels: torch's five shuffle-down merges per warp, each
    with the received product fused, and no merge of another form. The chain kernels' and rows_staged's 4-warp
    trees load all four warps' states, their own included, from memory (global in welford_row_merge_across_blocks,
    shared in rows_staged), so the matcher cannot tell own from received there and leaves them out; only
    reference_stats' tree (own state in registers, the other through shared memory) is matched here."""
    funcs = parser.parse_sass(tools.disassemble(compile_kernel(kernel, "sm_90").cubin))
    merging = {f: patterns.contract_report(i) for f, i in funcs.items() if f != "reciprocal_table"}
    assert merging
    for function, rep in merging.items():
        assert rep["merge"].get("first_product (received via shfl)") == 5, (function, rep["merge"])
        if kernel == "reference_stats":  # its tree: the other warp's state through shared memory
            assert rep["merge"].get("first_product (received via lds)") == 2, (function, rep["merge"])
        assert all(k.startswith("first_product") for k in rep["merge"]), (function, rep["merge"])
        assert rep["merge_m2"] == sum(rep["merge"].values()), (function, rep["merge_m2"])
