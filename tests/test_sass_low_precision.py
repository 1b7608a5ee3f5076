"""torch's bfloat16/float16 LayerNorm SASS on the CPU: every claim of the committed records
(data/sass/low_precision/, written by `python -m labkit.studies.low_precision_sass`) recomputed from the instructions
they keep, planted changes failing the claim they break on every arch, and the rules the claims rest on
(labkit.sass.halves, the 2-byte nodes of the symbolic evaluation, the branch joins of the backward's dataflow) on
hand-written SASS. Needs neither the wheel nor a CUDA tool."""
import copy
import json
import re
from pathlib import Path

import pytest

from labkit.sass import halves, parser, patterns, summary
from labkit.sass.low_precision import forward_claims
from labkit.studies import backward_contract as bc
from labkit.studies import low_precision_sass as lps

RECORDS = sorted(lps.OUT_DIR.glob("layernorm-t-torch-*-sm_*.json"))
ARCHS = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"}
IDS = [p.stem.removeprefix("layernorm-t-torch-") for p in RECORDS]


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _arch(path: Path) -> str:
    return re.search(r"-(sm_\d+)\.json$", path.name).group(1)


def _version(path: Path) -> str:
    return re.search(r"layernorm-t-torch-(.+)-sm_\d+\.json$", path.name).group(1)


def test_there_is_a_record_per_arch_for_each_version():
    assert RECORDS, "no committed record under data/sass/low_precision/"
    for v in {_version(p) for p in RECORDS}:
        assert {_arch(p) for p in RECORDS if _version(p) == v} == ARCHS, v


@pytest.mark.parametrize("path", RECORDS, ids=IDS)
def test_the_record_reads_the_float32_records_cubin(path):
    """The same wheel and cubin as the float32 forward record of that version and arch (one translation unit: the
    cubin a device of the arch loads, by labkit.sass.summary.loadable_archs), the command that rewrites the file,
    and the float32 contract the forward claims compared with, equal to the float32 record's."""
    rec, arch = _load(path), _arch(path)
    torch_part = rec["torch"]
    assert torch_part["device_arch"] == arch and rec["produced_by"] == lps.command(torch_part["wheel"], arch)
    assert torch_part["arch"] in summary.loadable_archs(arch, [torch_part["arch"], arch])
    f32 = json.loads((lps.OUT_DIR.parent / f"layernorm-torch-{_version(path)}-{arch}.json").read_text())
    assert rec["float32"]["record"].endswith(f"layernorm-torch-{_version(path)}-{arch}.json")
    for key in ("wheel", "wheel_sha256", "library_sha256", "cubin", "cubin_sha256", "arch", "torch_version"):
        assert torch_part[key] == f32["torch"][key], key
    contract = f32["torch"]["functions"][lps.VEC]["contract"]
    assert rec["float32"]["contract"] == {k: contract[k] for k in lps.FLOAT32_KEYS}
    assert set(rec["dtypes"]) == set(lps.DTYPES)
    for dtype, part in rec["dtypes"].items():
        t_name = summary.TYPE_NAMES[dtype][0]
        assert part["forward"]["function"] == f"vectorized_layer_norm_kernel<{t_name}, float, false>"
        assert set(part["backward"]["functions"]) == set(bc.low_precision_functions(dtype))
        for fn in [part["forward"], *part["backward"]["functions"].values()]:
            assert fn["sass"] and summary.TYPE_NAMES[dtype][1] in fn["mangled"]


@pytest.mark.parametrize("path", RECORDS, ids=IDS)
def test_every_claim_replays_from_the_kept_instructions_and_holds(path):
    rec = _load(path)
    replayed = lps.replay(rec)
    for dtype, part in rec["dtypes"].items():
        assert replayed[dtype]["forward"] == part["forward"]["claims"], dtype
        assert replayed[dtype]["backward"] == part["backward"]["claims"], dtype
    assert rec["verdicts"] == lps.verdicts(rec)
    failed = {(dt, d): v["failed"] for dt, dirs in rec["verdicts"].items() for d, v in dirs.items() if v["failed"]}
    assert not failed, failed


@pytest.mark.parametrize("path", RECORDS, ids=IDS)
def test_the_forward_contract_is_its_streams(path):
    rec = _load(path)
    for dtype, part in rec["dtypes"].items():
        report = patterns.contract_report(parser.parse_compact(part["forward"]["sass"]), dtype=dtype)
        assert {k: report[k] for k in part["forward"]["contract"]} == part["forward"]["contract"]


# --- planted changes: each breaks one fact a claim states; the rest of the record is torch's own ---------------------

FWD_LOADS = "every Welford push reads a"
FWD_PUSH = "push: new_mean = fma"
FWD_ROUND = "each stored element is rounded to"
FWD_PLACE = "y is written as 8-byte vectors"
DX_STATS = "dX stats:"
DX_ROUND = "dX is rounded to"
DX_VECTOR = "dX's vector stores are 8 bytes"
GB_ROUND = "dg and db are summed in float and rounded to"


DX_OUTPUT = "dX output:"


def _gamma_widenings(dx: list[str]) -> list[int]:
    """Indices of the instructions that widen gamma in fH * gamma, in every dx output chain of a dX stream."""
    addrs, texts = bc._split_addresses(dx)
    flow = bc.dataflow(texts, addrs)
    tail = next(i for i, o in enumerate(texts) if o.startswith("MUFU.RCP"))
    rcp = bc._reciprocal(flow, tail)
    _, chains = bc._output_chains(flow, tail, rcp[-1].index if rcp else None)
    out = set()
    for f, _, _ in chains:
        g = next((bc._def(flow, v, "FMUL") for v in f.srcs[:2] if bc._def(flow, v, "FMUL")), None)
        out.update(v for v in (g.srcs if g else ())
                   if isinstance(v, int) and any(bc._gamma(flow, v, t) for t in lps.DTYPES))
    return sorted(out)


def _holds(claims: list[dict], prefix: str) -> list[bool]:
    found = [c["holds"] for c in claims if c["claim"].startswith(prefix) or f": {prefix}" in c["claim"]]
    assert found, prefix
    return found


def _replace(lines: list[str], index: int, new_body: str) -> None:
    lines[index] = lines[index].split(" ", 1)[0] + " " + new_body


def _first_widening(lines: list[str], dtype: str) -> int:
    """Index of the instruction that widened the first push's x (its cvt node's address)."""
    m = patterns.match(parser.parse_compact(lines), dtype=dtype)
    x = m.pushes[0][1]["x"]
    while x.op == "sel":
        x = x.args[0]
    return next(i for i, line in enumerate(lines) if int(line.split(" ", 1)[0], 16) == x.addr)


def _not_exact(body: str) -> str:
    """A widening's text made inexact: float16's -0 + h as +0 + h (turns -0 into +0); bfloat16's element shifted by
    8, not 16, or PRMT'd with an element, not zero, in the low half."""
    if body.startswith("HADD2.F32"):
        return body.replace("-RZ", "RZ", 1)
    if body.startswith("SHF.L.U32"):
        return body.replace("0x10", "0x8")
    if body.startswith(("IMAD.U32", "IMAD.SHL.U32")):
        return body.replace("0x10000", "0x100")
    if body.startswith("PRMT"):
        ops = body.split(" ", 1)[1].split(", ")
        return f"PRMT {ops[0]}, {ops[3]}, {ops[2]}, {ops[3]}"
    raise AssertionError(f"no planted change for {body}")


def _forward(rec: dict, dtype: str, lines: list[str]) -> list[dict]:
    return forward_claims(parser.parse_compact(lines), dtype, rec["float32"]["contract"])


@pytest.mark.parametrize("dtype", lps.DTYPES)
@pytest.mark.parametrize("path", RECORDS, ids=IDS)
def test_an_inexact_widening_fails_the_load_claim(path, dtype):
    rec = _load(path)
    lines = list(rec["dtypes"][dtype]["forward"]["sass"])
    i = _first_widening(lines, dtype)
    _replace(lines, i, _not_exact(lines[i].split(" ", 1)[1]))
    assert not all(_holds(_forward(rec, dtype, lines), FWD_LOADS))


@pytest.mark.parametrize("dtype", lps.DTYPES)
@pytest.mark.parametrize("path", RECORDS, ids=IDS)
def test_a_rounding_toward_zero_fails_the_store_claims(path, dtype):
    """The output's first pack rounding toward zero (F2FP...PACK_AB.RZ), forward and dX."""
    rec = _load(path)
    lines = list(rec["dtypes"][dtype]["forward"]["sass"])
    i = next(k for k, line in enumerate(lines) if " F2FP." in line)
    lines[i] = lines[i].replace("PACK_AB", "PACK_AB.RZ", 1)
    assert not all(_holds(_forward(rec, dtype, lines), FWD_ROUND))
    functions = {k: list(v["sass"]) for k, v in rec["dtypes"][dtype]["backward"]["functions"].items()}
    dx = functions[bc._dx_name(functions)]
    i = next(k for k, line in enumerate(dx) if " F2FP." in line)
    dx[i] = dx[i].replace("PACK_AB", "PACK_AB.RZ", 1)
    assert not all(_holds(bc.low_precision_checks(functions, dtype), DX_ROUND))


@pytest.mark.parametrize("path", RECORDS, ids=IDS)
def test_a_different_push_contraction_fails_the_push_claim(path):
    """m2 = fma(delta, delta, m2) in place of fma(delta, x - new_mean, m2) in the first push."""
    rec = _load(path)
    lines = list(rec["dtypes"]["bfloat16"]["forward"]["sass"])
    m = patterns.match(parser.parse_compact(lines), dtype="bfloat16")
    example = m.report["examples"].get("push_m2") or m.report["examples"]["push_m2_folded"]
    i = next(k for k, line in enumerate(lines) if line.split(" ", 1)[1] == example["sass"])
    dst, a, _, c = lines[i].split(" ", 2)[2].split(", ")
    _replace(lines, i, f"FFMA {dst}, {a}, {a}, {c}")
    assert not all(_holds(_forward(rec, "bfloat16", lines), FWD_PUSH))


@pytest.mark.parametrize("path", RECORDS, ids=IDS)
def test_swapped_elements_fail_the_placement_claim(path):
    """The first affine pack's two floats swapped (F2FP d, b, a): y's elements 0 and 1 trade places."""
    rec = _load(path)
    lines = list(rec["dtypes"]["float16"]["forward"]["sass"])
    holds = _holds(_forward(rec, "float16", lines), FWD_PLACE)
    assert all(holds)
    for i, line in enumerate(lines):
        if " F2FP." in line:
            op, rest = line.split(" ", 2)[1:]
            d, a, b = rest.split(", ")
            if a != "RZ":
                _replace(lines, i, f"{op} {d}, {b}, {a}")
    assert not all(_holds(_forward(rec, "float16", lines), FWD_PLACE))


@pytest.mark.parametrize("dtype", lps.DTYPES)
@pytest.mark.parametrize("path", RECORDS, ids=IDS)
def test_planted_backward_changes_fail_their_claims(path, dtype):
    rec = _load(path)
    base = {k: list(v["sass"]) for k, v in rec["dtypes"][dtype]["backward"]["functions"].items()}
    dx_name = bc._dx_name(base)

    # dX's first widening made inexact: the stats claim (first vector) no longer sees three widened loads
    functions = copy.deepcopy(base)
    dx = functions[dx_name]
    i = next(k for k, line in enumerate(dx) if re.search(r" (HADD2\.F32|SHF\.L\.U32 R\d+, R\d+, 0x10, RZ|"
                                                         r"IMAD\.U32 R\d+, R\d+, 0x10000, RZ|PRMT R\d+, RZ, )", line))
    _replace(dx, i, _not_exact(dx[i].split(" ", 1)[1]))
    holds = bc.low_precision_checks(functions, dtype)
    assert not all(_holds(holds, DX_STATS) + _holds(holds, "dX output:"))

    # dX's vector store narrowed to 32 bits: two of its elements are no longer stored
    functions = copy.deepcopy(base)
    dx = functions[dx_name]
    i = next(k for k, line in enumerate(dx) if " STG.E.64 " in line)
    dx[i] = dx[i].replace("STG.E.64", "STG.E", 1)
    assert not all(_holds(bc.low_precision_checks(functions, dtype), DX_ROUND))

    # every gamma widening in the dx chains replaced by a copy of another register (MOV R, R0): gamma is then no
    # element, and the output claim must say so (it held vacuously before: a source that was no widening was dropped)
    functions = copy.deepcopy(base)
    dx = functions[dx_name]
    for i in _gamma_widenings(dx):
        _replace(dx, i, f"MOV {dx[i].split(' ', 2)[2].split(',')[0]}, R0")
    assert _gamma_widenings(base[dx_name]), "no gamma widening found"
    assert not all(_holds(bc.low_precision_checks(functions, dtype), DX_OUTPUT))

    # a loaded T element stored raw by a 32-bit store (STG.E of the x load's register): unrounded T at a width the
    # rounding claim skipped before
    functions = copy.deepcopy(base)
    dx = functions[dx_name]
    i = next(k for k, line in enumerate(dx) if " LDG.E.64" in line)
    ld = dx[i].split(" ", 2)[2].split(",")[0]
    dx.insert(i + 1, f"{int(dx[i].split(' ', 1)[0], 16) + 1:04x} STG.E desc[UR4][R2.64], {ld}")
    assert not all(_holds(bc.low_precision_checks(functions, dtype), DX_ROUND))

    # each GammaBeta kernel's first rounding made toward minus infinity
    for name in base:
        if name == dx_name:
            continue
        functions = copy.deepcopy(base)
        lines = functions[name]
        i = next(k for k, line in enumerate(lines) if " F2FP." in line)
        lines[i] = lines[i].replace("PACK_AB", "PACK_AB.RM", 1)
        claims = [c for c in bc.low_precision_checks(functions, dtype) if c["claim"].startswith(name)]
        assert not all(_holds(claims, GB_ROUND)), name


# --- the rules, on hand-written SASS ----------------------------------------------------------------------------------

@pytest.mark.parametrize("opcode, operands, want", [
    ("SHF.L.U32", ["R1", "R2", "0x10", "RZ"], (halves.ZERO, halves.Half(1, 0))),
    ("IMAD.U32", ["R1", "R2.reuse", "0x10000", "RZ"], (halves.ZERO, halves.Half(1, 0))),
    ("LOP3.LUT", ["R1", "R2", "0xffff0000", "RZ", "0xc0", "!PT"], (halves.ZERO, halves.Half(1, 1))),
    ("PRMT", ["R1", "R2", "0x7632", "R3"], (halves.Half(1, 1), halves.Half(3, 1))),
    ("PRMT", ["R1", "RZ", "0x5410", "R3"], (halves.Half(1, 0), halves.Half(3, 0))),
    ("SHF.L.U32", ["R1", "R2", "0xf", "RZ"], None),  # not a whole half
    ("LOP3.LUT", ["R1", "R2", "0xffff0000", "RZ", "0xfc", "!PT"], None),  # an OR, not the mask
    ("PRMT", ["R1", "R2", "0x8832", "R3"], None),  # sign-replicate bytes
    ("PRMT", ["R1", "R2", "0xba10", "R3"], None),  # sign-replicate nibbles in order: b's high half's signs, no move
    ("PRMT", ["R1", "R2", "0x7623", "R3"], None),  # bytes out of order
])
def test_route_moves_whole_halves_only(opcode, operands, want):
    assert halves.route(opcode, operands) == want


def test_widen_and_narrow_forms():
    assert halves.widen("HADD2.F32", ["R5", "-RZ", "R4.reuse.H1_H1"]) == halves.Widen(2, 1, "float16",
                                                                                      "HADD2.F32 -RZ, h")
    assert halves.widen("HADD2.F32", ["R5", "RZ", "R4.H0_H0"]) is None  # +0 + -0 is +0: not exact
    assert halves.widen("HADD2.F32", ["R5", "-RZ", "R4"]) is None
    assert halves.narrow("F2FP.BF16.F32.PACK_AB", ["R1", "R2", "R3"]) == halves.Narrow("bfloat16", "rn", 2, 1)
    assert halves.narrow("F2FP.BF16.PACK_AB", ["R1", "RZ", "R3"]).dtype == "bfloat16"  # sm_80's spelling
    assert halves.narrow("F2FP.PACK_AB", ["R1", "R2", "R3"]).dtype == "float16"  # sm_80's float16 pack
    assert halves.narrow("F2FP.F16.F32.PACK_AB.RZ", ["R1", "R2", "R3"]).rounding == "rz"
    assert halves.narrow("F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C", ["R1", "R2", "R3"]) is None
    assert [halves.store_halves(o) for o in ("STG.E.64", "STG.E.U16", "STG.E", "STG.E.128")] == [4, 1, 2, 8]
    # a zero-extending 16-bit load has a zero high half; a sign-extending one has copies of the sign bit: unknown
    assert (halves.load_halves("LDG.E.U16.CONSTANT"), halves.load_halves("LDG.E.S16")) == (1, None)


BF16_PUSH = """
        Function : toy_bf16
        /*0000*/                   LDG.E.64 R10, desc[UR8][R14.64] ;
        /*0010*/                   SHF.L.U32 R22, R10, 0x10, RZ ;
        /*0020*/                   PRMT R25, R10, 0x7632, R25 ;
        /*0030*/                   IMAD.U32 R26, R25, 0x10000, RZ ;
        /*0040*/                   SHF.L.U32 R27, R7, 0x10, RZ ;
        /*0050*/                   FADD R1, R22, -R31 ;
        /*0060*/                   FADD R2, R26, -R31 ;
        /*0070*/                   FADD R3, R27, -R31 ;
        /*0080*/                   F2FP.BF16.F32.PACK_AB R4, R2, R1 ;
        /*0090*/                   STG.E desc[UR8][R8.64], R4 ;
        /*00a0*/                   EXIT ;
"""


def test_the_evaluator_widens_bfloat16_elements_and_leaves_other_shifts_alone():
    from labkit.sass.symbolic import Evaluator

    ev = Evaluator("bfloat16")
    for ins in parser.parse_sass(BF16_PUSH)["toy_bf16"]:
        ev.step(ins)
    x0, x1, other = (node.args[0] for _, node in ev.fp_nodes)
    assert patterns.converted_element(x0) is not None and x0.args[0].args[1] == 0  # element 0: the low half
    assert patterns.converted_element(x1) is x0.args[0].args[0] and x1.args[0].args[1] == 1  # same load, element 1
    assert other.op == "int"  # a shift of a register no load wrote: the int leaf float32 code always had
    (_, (packed,)), = ev.stores
    low, high = ev.halves_of(packed)
    assert (low.op, low.args[1:], high.args[0].args[0]) == ("rnd", ("bfloat16", "rn"), x1)  # B low, A high


def test_the_backward_dataflow_joins_the_branches_to_a_block_after_an_exit():
    """torch's GammaBeta kernels reach their store block from a branch before the reduction's EXIT (and sm_80's
    loops leave by a predicated CALL.REL.NOINC): the block's registers are those at the branches, a Phi where they
    disagree; a write under the branch's own predicate is the value on the branch."""
    lines = ["0000 @P2 IMAD.MOV.U32 R46, RZ, RZ, RZ", "0010 @P2 BRA 0x60", "0020 FFMA R46, R1, R2, R46",
             "0030 @P3 CALL.REL.NOINC 0x60", "0040 BRA 0x20", "0050 EXIT", "0060 F2FP.BF16.F32.PACK_AB R5, RZ, R46",
             "0070 STG.E.U16 desc[UR4][R8.64], R5", "0080 EXIT"]
    addrs, texts = bc._split_addresses(lines)
    flow = bc.dataflow(texts, addrs)
    joined = flow[6].srcs[1]
    assert isinstance(joined, bc.Phi) and {v for v, _ in joined.alternatives} == {0, 2}
    assert bc._rounded_once(flow, "bfloat16")[0]  # both ways a float: the empty sum's zero, or the FFMA chain
    linear = bc.dataflow(texts)  # without addresses: the last writer in address order, as for the float32 records
    assert linear[6].srcs[1] == 2


def test_float32_code_never_widens_a_loaded_word():
    """The same shifts in a function the caller does not name 2-byte (float32 code): a loaded word's halves are no
    elements, so nothing becomes a bfloat16 cvt."""
    from labkit.sass.symbolic import Evaluator

    ev = Evaluator()
    for ins in parser.parse_sass(BF16_PUSH)["toy_bf16"]:
        ev.step(ins)
    assert all(patterns.converted_element(node.args[0]) is None for _, node in ev.fp_nodes)


def test_the_backward_dataflow_follows_unconditional_forward_jumps():
    """An if arm that ends in `BRA` over an EXIT to the join: the join's register is a Phi of both arms (not the
    zero of the branch that skipped the arm alone), and a lone `BRA` before an EXIT reaches its target with its
    state, not with the dead code's after it."""
    lines = ["0000 @P2 MOV R46, RZ", "0010 @P2 BRA 0x50", "0020 FMUL R46, R1, R2", "0030 BRA 0x50", "0040 EXIT",
             "0050 F2FP.BF16.F32.PACK_AB R5, RZ, R46", "0060 STG.E.U16 desc[UR4][R8.64], R5", "0070 EXIT"]
    addrs, texts = bc._split_addresses(lines)
    flow = bc.dataflow(texts, addrs)
    joined = flow[5].srcs[1]
    assert isinstance(joined, bc.Phi) and {v for v, _ in joined.alternatives} == {0, 2}
    lone = ["0000 FMUL R46, R1, R2", "0010 BRA 0x40", "0020 FADD R46, R3, R4", "0030 EXIT",
            "0040 F2FP.BF16.F32.PACK_AB R5, RZ, R46", "0050 STG.E.U16 desc[UR4][R8.64], R5", "0060 EXIT"]
    addrs, texts = bc._split_addresses(lone)
    assert bc.dataflow(texts, addrs)[4].srcs[1] == 0  # the FMUL before the jump, not the dead FADD after it
    # a uniform branch names its predicate as an operand (torch's sm_120 GammaBeta loop): conditional, so the code
    # after the loop is reached by falling out of it, with the loop's sum, not the jump's empty sum alone
    loop = ["0000 MOV R25, RZ", "0010 BRA.U UP0, 0x40", "0020 FADD R25, R25, R3", "0030 BRA.U !UP0, 0x20",
            "0040 F2FP.BF16.F32.PACK_AB R5, RZ, R25", "0050 EXIT"]
    addrs, texts = bc._split_addresses(loop)
    assert bc.dataflow(texts, addrs)[4].srcs[1] == 2


def test_the_evaluator_follows_unconditional_forward_jumps():
    from labkit.sass.symbolic import Evaluator

    text = """
        Function : toy_join
        /*0000*/                   FMUL R46, R1, R2 ;
        /*0010*/                   BRA 0x40 ;
        /*0020*/                   FADD R46, R3, R4 ;
        /*0030*/                   EXIT ;
        /*0040*/                   FADD R7, R46, R5 ;
        /*0050*/                   EXIT ;
"""
    ev = Evaluator("bfloat16")
    for ins in parser.parse_sass(text)["toy_join"]:
        ev.step(ins)
    assert ev.fp_nodes[-1][1].args[0] is ev.fp_nodes[0][1]  # R46 is the FMUL's, not the dead FADD's


def test_retype_names_the_2_byte_instances():
    got = summary.retype({lps.VEC: summary.TORCH_FUNCTIONS[lps.VEC]}, "bfloat16")
    assert got == {"vectorized_layer_norm_kernel<c10::BFloat16, float, false>":
                   "vectorized_layer_norm_kernelIN3c108BFloat16EfLb0EE"}
    assert bc.low_precision_functions("float16")[
        "GammaBetaBackwardCUDAKernelTemplate<c10::Half, float, 32, 1, 32, true, true, false>"] == \
        "GammaBetaBackwardCUDAKernelTemplateIN3c104HalfEfLj32ELj1ELj32ELb1ELb1ELb0E"
    with pytest.raises(ValueError, match="not a float32 instance"):
        summary.retype({"k<double, double>": "kIddE"}, "float16")


def test_the_recorder_refuses_a_workdir_in_the_repository():
    with pytest.raises(SystemExit, match="outside the repository"):
        lps.main(["--wheel", "w.whl", "--workdir", str(lps.OUT_DIR), "--arch", "sm_90"])


def test_notebook_06_recomputes_every_claim_per_arch_and_dtype():
    """Notebook 06's 2-byte rows: one per committed arch and dtype, counts recomputed from the kept instructions."""
    from labkit.studies import kernel_definitions as kd
    from labkit.studies import low_precision_sass as lps

    rows = kd.low_precision_rows()
    archs = sorted(p.stem.rsplit("-", 1)[1] for p in lps.OUT_DIR.glob("layernorm-t-torch-*.json"))
    assert sorted({r["device"] for r in rows}) == archs and len(rows) == 2 * len(archs)
    for r in rows:
        for direction in ("forward", "backward"):
            held, total = map(int, r[f"{direction}: claims holding"].split("/"))
            assert total > 0 and (held == total) == (r[f"{direction}: not holding"] == "—")
    claims = kd.low_precision_claim_rows("sm_89", "float16")
    assert claims and {c["device"] for c in claims} == {"sm_89"} and {c["dtype"] for c in claims} == {"float16"}
