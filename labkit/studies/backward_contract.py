"""torch's CUDA LayerNorm backward (float32, vectorized dX path) as a contract: what kernels/grad_ln.cuh keeps, where
it was read, and the machine-code evidence for every rounding it claims.

Read from aten/src/ATen/native/cuda/layer_norm_kernel.cu at v2.11.0 (the same fork commit the forward's contract was
read at) and checked against torch 2.11.0+cu130's (and 2.14.1+cu130's) own SASS for every device arch it runs LayerNorm
on, extracted from the CUDA wheel on PyPI: one record per version and arch under data/sass/backward/ (sha256s inside;
`RECORD` is 2.11.0's sm_90), written
by `python -m labkit.studies.backward_contract --wheel ... --workdir ... --arch sm_XY` (`main`). `checks(record)`
re-derives each claim from the committed instructions by dataflow (`dataflow`: each source resolved to the
instruction that wrote it, so the claims do not depend on how the compiler allocates registers); the installed header
block_reduce.cuh (the CPU wheel ships it) is read for BlockReduceSum by `header_checks`.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labkit.core.compile import REPO_ROOT

SOURCE = {
    "file": "aten/src/ATen/native/cuda/layer_norm_kernel.cu",
    "tag_described": "v2.11.0",
    "read_at": "cyyever/pytorch@0660972b2e907c38dff07fb1dbbb4c3310791427 (fork of pytorch/pytorch)",
    "functions": ("layer_norm_grad_input_kernel_vectorized", "layer_norm_grad_input_kernel",
                  "blockReduceGammaBetaBackwardsHelper", "GammaBetaBackwardCUDAKernelTemplate",
                  "LaunchGammaBetaBackwardCUDAKernel", "LayerNormBackwardKernelImplInternal"),
}
RECORD = REPO_ROOT / "data" / "sass" / "backward" / "layernorm-backward-torch-2.11.0+cu130-sm_90.json"

# Mangled-name fragments of the float32 kernels in torch's sm_90 cubin.
TORCH_FUNCTIONS = {
    "layer_norm_grad_input_kernel_vectorized<float, float, false>": "layer_norm_grad_input_kernel_vectorizedIffLb0E",
    "GammaBetaBackwardCUDAKernelTemplate<float, float, 32, 1, 8, true, true, false>":
        "GammaBetaBackwardCUDAKernelTemplateIffLj32ELj1ELj8ELb1ELb1ELb0E",
    "GammaBetaBackwardCUDAKernelTemplate<float, float, 32, 32, 256, false, true, false>":
        "GammaBetaBackwardCUDAKernelTemplateIffLj32ELj32ELj256ELb0ELb1ELb0E",
}


@dataclass(frozen=True)
class BackwardContract:
    dx_kernel: str = "layer_norm_grad_input_kernel_vectorized<T, T_ACC, false>: grid M, block num_threads() = 128 (1-D)"
    dx_when: str = ("dY, X, gamma (null counts as aligned) and dX aligned to 4 * sizeof(T), T float/half/bfloat16, "
                    "N % 4 == 0; else layer_norm_grad_input_kernel (scalar loads)")
    load_order: str = "thread t reads float4 vectors t, t+128, ... of X, dY and gamma (gamma absent: 1.0)"
    push: str = ("gp = round(dy * gamma); stats_x1 = round(stats_x1 + gp) (FADD: the product is shared, not fused); "
                 "stats_x2 = fma(rstd, round(gp * round(x - mean)), stats_x2)")
    reduce: str = ("BlockReduceSum (block_reduce.cuh) on stats_x1, then stats_x2: WarpReduceSum (shuffle-down 16..1, "
                   "val += received) per warp; warp 0 reduces (w0, w1, w2, w3, 0, ..., 0) again")
    output: str = ("fH = float(N); term1 = rstd * round(1 / fH) (correctly rounded reciprocal); dx = round(term1 * "
                   "round(fma(dy, round(fH * gamma), -round(stats_x2 * round(rstd * round(x - mean)))) - stats_x1))")
    gamma_beta_push: str = "dg = fma(rstd, round(dy * round(x - mean)), dg); db = round(db + dy)"
    gamma_beta_templates: str = ("M > 64K and N/32 < SMs/2: block (32, 1), 32 rows per chunk, blocks.y = min(32768 / "
                                 "ceil(N/32), ceil(M/32)) partials, then .sum(0); else M < 64: (32, 1, 8); M < 128: "
                                 "(32, 8, 64); M < 256: (32, 16, 128); else (32, 32, 256); groups folded by "
                                 "WARP_SHFL_XOR butterfly")
    sources: dict = field(default_factory=lambda: SOURCE)

    def rows(self) -> list[dict]:
        return [{"aspect": k, "value": v} for k, v in asdict(self).items() if k != "sources"]


CONTRACT = BackwardContract()


def _functions(cubin: bytes) -> dict:
    """{pretty name: (mangled name, [Instr])} of each TORCH_FUNCTIONS kernel in a cubin."""
    from labkit.sass.parser import parse_sass
    from labkit.sass.tools import disassemble

    funcs = parse_sass(disassemble(cubin))
    out = {}
    for pretty, frag in TORCH_FUNCTIONS.items():
        names = [f for f in funcs if frag in f]
        if len(names) != 1:
            raise RuntimeError(f"expected one function matching {frag}, found {names}")
        out[pretty] = (names[0], funcs[names[0]])
    return out


def record_from_cubin(cubin: bytes, wheel: str, wheel_sha256: str) -> dict:
    """The committable record: each TORCH_FUNCTIONS kernel's floating-point instructions with operands, in address
    order (labkit.sass.parser.fp_op_sequence), from one of torch's cubins (`record_for_device` picks it)."""
    import hashlib

    from labkit.sass.parser import fp_op_sequence
    from labkit.sass.tools import tool_versions

    out = {pretty: {"mangled": name, "fp_ops": fp_op_sequence(instrs, operands=True)}
           for pretty, (name, instrs) in _functions(cubin).items()}
    return {"schema": 1, "wheel": wheel, "wheel_sha256": wheel_sha256,
            "cubin_sha256": hashlib.sha256(cubin).hexdigest(), "tools": tool_versions(), "functions": out}


def full_stream_checks(cubin: bytes) -> list[dict]:
    """`checks` on every instruction of the cubin's functions, not only the floating-point ones a record keeps.
    The record cannot show a register rewritten by a load or move between a write and a read; here those writes
    are in the stream, so a claim that holds on the record but not here rests on a value the record misattributes."""
    def text(ins) -> str:
        pred = f"@{ins.pred} " if ins.pred else ""
        return f"{pred}{ins.opcode} {', '.join(o.replace('.reuse', '') for o in ins.operands)}".strip()

    return checks({"functions": {pretty: {"fp_ops": [text(i) for i in instrs]}
                                 for pretty, (_, instrs) in _functions(cubin).items()}})


def _first_loop(ops: list[str]) -> list[str]:
    """The instructions before the first shuffle: the dX kernel's accumulation loops."""
    end = next((i for i, o in enumerate(ops) if o.startswith("SHFL")), len(ops))
    return ops[:end]


def _first_vector(loop: list[str]) -> list[str]:
    """The first float4's instructions: up to the loop's fourth FFMA (the vectorized loop with gamma comes first in
    the code, and each of its elements has exactly one FFMA if the contract holds)."""
    seen = 0
    for i, o in enumerate(loop):
        if o.startswith("FFMA "):
            seen += 1
            if seen == 4:
                return loop[:i + 1]
    return loop


# --- dataflow over the recorded instructions --------------------------------------------------------------------
#
# The claims follow values, not register names: the register allocator may pass one accumulator through two
# registers (torch's sm_86 and sm_120 dX loops do, at the ends of each float4's chain), which is the same arithmetic.

# A register that holds a value: a general register R<n> or a uniform one UR<n> (one value for the whole warp: what
# a kernel parameter or a per-row scalar is loaded into, ULDC/LDCU/UMOV/R2UR, and what FP instructions may read).
# RZ and URZ read zero: constants, like immediates.
_REG = re.compile(r"^U?R\d+$")


@dataclass(frozen=True)
class Op:
    """One recorded instruction, its sources resolved to the values they read. A value is the index (in the
    function's recorded list) of the instruction that wrote it; "in:R7" when no recorded instruction before it
    wrote R7 (loaded, moved or set by an instruction the record does not keep: an input of the list); "sel:<i>"
    after a predicated write at <i> (the new or the old value); "imm:<text>" for RZ, URZ, immediates and constants.
    Uniform registers (UR12) are values like general ones: "in:UR12" or the instruction that wrote them."""
    index: int
    text: str
    opcode: str
    pred: str | None
    dst: str | None
    srcs: tuple
    neg: tuple  # per source: read negated

    def is_(self, opcode: str) -> bool:
        return self.opcode == opcode


def _operand(text: str) -> tuple[str, bool]:
    neg = text.startswith("-")
    return text.lstrip("-").strip("|"), neg


def dataflow(ops: list[str]) -> list[Op]:
    """The recorded instructions of one function (address order) with each source resolved to the instruction
    whose value it reads: the last one before it, in address order, that wrote the register. Exact within straight-
    line code; every claim below follows values within one float4 or row, or from before its loop."""
    written: dict[str, object] = {}
    out = []
    for i, text in enumerate(ops):
        pred, body = (text[1:].split(" ", 1) if text.startswith("@") else (None, text))
        opcode, _, rest = body.partition(" ")
        operands = [o.strip() for o in rest.split(",")] if rest else []
        pos = 1 if opcode.startswith("SHFL") else 0  # SHFL writes a predicate, then the register
        dst = operands[pos] if len(operands) > pos and _REG.match(operands[pos]) else None
        srcs, neg = [], []
        for o in operands[pos + 1:] if dst else operands:
            reg, n = _operand(o)
            srcs.append(written.get(reg, f"in:{reg}") if _REG.match(reg) else f"imm:{reg}")
            neg.append(n)
        out.append(Op(i, text, opcode, pred, dst, tuple(srcs), tuple(neg)))
        if dst:
            file = dst.rstrip("0123456789")  # "R" or "UR"
            first = int(dst[len(file):])
            for r in range(first, first + _width(opcode)):  # later registers of a wide write: no value of ours
                written[f"{file}{r}"] = f"sel:{i}" if pred else (i if r == first else f"part:{i}")
    return out


def _width(opcode: str) -> int:
    """Registers an instruction writes from its destination on: 2, 4 or 8 for .64/.128/.256 (loads, moves),
    2 for (U)IMAD.WIDE and CS2R; 1 for every floating-point instruction a record keeps. Counting too many can only
    make a claim fail, never hold (what `full_stream_checks` relies on)."""
    bits = re.search(r"\.(64|128|256)(\.|$)", opcode)
    if bits:
        return int(bits.group(1)) // 32
    return 2 if opcode.startswith(("IMAD.WIDE", "UIMAD.WIDE", "CS2R")) else 1


def _input(flow: list[Op], value) -> bool:
    """A value no floating-point arithmetic made: an input of the list, a part of a wide load, or written by a load,
    move or shuffle (in a record of FP instructions only, those are inputs too). A predicated write is none."""
    if isinstance(value, int):
        return flow[value].opcode.split(".")[0] not in ("FADD", "FMUL", "FFMA")
    return value.startswith(("in:", "part:"))


def _def(flow: list[Op], value, opcode: str) -> Op | None:
    """The instruction that wrote `value`, if it is an `opcode`."""
    return flow[value] if isinstance(value, int) and flow[value].is_(opcode) else None


def _difference(flow: list[Op], value) -> Op | None:
    """round(a - b): an FADD of a value and a negated one (x - mean)."""
    op = _def(flow, value, "FADD")
    return op if op is not None and op.neg.count(True) == 1 else None


def _chain(links: list[Op], acc_of, window: list[Op]) -> bool:
    """Whether `links` (address order) are one accumulator chain: each link's accumulator source (`acc_of(op)`) is
    the previous link's value, and the first link's is carried in: no floating-point arithmetic of `window` made it
    (a move or load there may: the full stream's accumulators start as MOV Rn, RZ)."""
    if not links:
        return False
    first = acc_of(links[0])
    made_here = {op.index for op in window if op.opcode.split(".")[0] in ("FADD", "FMUL", "FFMA")}
    return first not in made_here and all(acc_of(b) == a.index for a, b in zip(links, links[1:]))


def _fadd_link(op: Op, term) -> tuple[object, object] | None:
    """(accumulator, term) of an unnegated FADD one of whose sources `term` accepts (FADD commutes: either side)."""
    if not op.is_("FADD") or any(op.neg) or len(op.srcs) != 2:
        return None
    a, b = op.srcs
    return (a, b) if term(b) and not term(a) else (b, a) if term(a) else None


def _ffma_split(op: Op, term) -> tuple[object, object] | None:
    """(multiplier, term) of an unnegated FFMA one of whose multiplicands `term` accepts (a*b == b*a exactly)."""
    if not op.is_("FFMA") or any(op.neg) or len(op.srcs) != 3:
        return None
    a, b, _ = op.srcs
    return (a, b) if term(b) and not term(a) else (b, a) if term(a) else None


def _push_checks(flow: list[Op], body: int) -> list[dict]:
    """The dX loop's first float4 (`flow[:body]`): stats_x1 = round(stats_x1 + gp), stats_x2 = fma(rstd, round(gp *
    round(x - mean)), stats_x2), gp = round(dy * gamma) shared by both, and no other FFMA."""
    ops = flow[:body]

    def gp(v) -> bool:  # round(dy * gamma): an FMUL of two loaded values
        op = _def(flow, v, "FMUL")
        return op is not None and not any(op.neg) and all(_input(flow, s) for s in op.srcs)

    def product(v) -> bool:  # round(gp * round(x - mean))
        op = _def(flow, v, "FMUL")
        return op is not None and not any(op.neg) and len(op.srcs) == 2 and any(
            gp(a) and _difference(flow, b) is not None for a, b in (op.srcs, op.srcs[::-1]))

    s1 = [op for op in ops if _fadd_link(op, gp)]
    s2 = [op for op in ops if op.is_("FFMA") and _ffma_split(op, product)]
    s2_ok = (len(s2) == 4 and _chain(s2, lambda op: op.srcs[2], ops)
             and len({_ffma_split(op, product)[0] for op in s2}) == 1  # one rstd
             and _input(flow, _ffma_split(s2[0], product)[0]))
    terms = [_ffma_split(op, product)[1] for op in s2]
    means = {_difference(flow, s).srcs[_difference(flow, s).neg.index(True)]
             for t in terms for s in flow[t].srcs if _difference(flow, s)}
    s2_ok = s2_ok and len(means) == 1  # every element's x - mean subtracts the same mean
    # the same rounded dy*gamma feeds stats_x1 and element k's product: shared, not recomputed or fused
    shared = [next(s for s in flow[t].srcs if gp(s)) for t in terms]
    s1_ok = (len(s1) == 4 and _chain(s1, lambda op: _fadd_link(op, gp)[0], ops)
             and [_fadd_link(op, gp)[1] for op in s1] == shared)
    others = [op.text for op in ops if op.is_("FFMA") and op not in s2]
    return [{"claim": "stats_x1 adds the rounded dy*gamma: four FADDs of FMUL results per float4",
             "holds": s1_ok, "evidence": [op.text for op in s1]},
            {"claim": "stats_x2 = fma(rstd, p, stats_x2): four FFMAs per float4, one multiplier, one accumulator",
             "holds": s2_ok, "evidence": [op.text for op in s2]},
            {"claim": "no other FFMA in the loop body (the product is not fused into stats_x1)",
             "holds": not others and bool(s2), "evidence": others}]


def _reciprocal(flow: list[Op], tail: int) -> list[Op]:
    """1/a correctly rounded, from the MUFU.RCP at `tail` (the first in the kernel; the slow path's come later):
    r = MUFU.RCP(a); e = fma(a, r, -1); r' = fma(r, -e, r), the Newton step (-e by FADD.FTZ(-e, -0)).
    [rcp, e, -e, r'] or []."""
    if tail >= len(flow) or not flow[tail].is_("MUFU.RCP") or flow[tail].pred:
        return []
    rcp = flow[tail]
    for e in flow[tail + 1:]:
        if not (e.is_("FFMA") and rcp.index in e.srcs[:2] and rcp.srcs[0] in e.srcs[:2]
                and e.srcs[2] == "imm:1" and e.neg[2]):
            continue
        n = next((op for op in flow[e.index + 1:] if op.is_("FADD.FTZ") and op.srcs[0] == e.index
                  and op.neg[0] and op.srcs[1] == "imm:RZ"), None)
        r = n and next((op for op in flow[n.index + 1:] if op.is_("FFMA") and not any(op.neg)
                        and sorted(map(str, op.srcs[:2])) == sorted(map(str, (rcp.index, n.index)))
                        and op.srcs[2] == rcp.index), None)
        if r:
            return [rcp, e, n, r]
    return []


def _output_chains(flow: list[Op], tail: int, refined: int | None) -> tuple[list[Op], list[list[Op]]]:
    """(each fma(dy, g, -t) from `tail` on, each dx = round(term1 * round(that - stats_x1)) made of one): by dataflow,
    with t = round(stats_x2 * round(rstd * round(x - mean))) and term1 = round(rstd * refined reciprocal); g is
    round(fH * gamma), or fH in the path without gamma. [FFMA, FADD, FMUL] per element."""
    def t_ok(v) -> bool:
        op = _def(flow, v, "FMUL")
        inner = op and next((_def(flow, s, "FMUL") for s in op.srcs if _def(flow, s, "FMUL")), None)
        return bool(inner) and any(_difference(flow, s) for s in inner.srcs)

    def term1(v) -> bool:
        op = _def(flow, v, "FMUL")
        return op is not None and refined is not None and refined in op.srcs

    fmas = [f for f in flow[tail:] if f.is_("FFMA") and f.neg == (False, False, True) and t_ok(f.srcs[2])]
    out = []
    for f in fmas:
        sub = next((op for op in flow[f.index + 1:] if op.is_("FADD") and f.index in op.srcs
                    and op.neg[op.srcs.index(f.index)] is False and op.neg.count(True) == 1), None)
        mul = sub and next((op for op in flow[sub.index + 1:] if op.is_("FMUL") and sub.index in op.srcs
                            and not any(op.neg) and any(term1(s) for s in op.srcs)), None)
        if mul:
            out.append([f, sub, mul])
    return fmas, out


def _gamma_beta_check(pretty: str, ops: list[str]) -> dict:
    """dg = fma(rstd, round(dy * round(x - mean)), dg) and db = round(db + dy) over each thread's rows (the
    instructions before the first butterfly): one chain each, every FFMA there a dg link, every unnegated FADD a db
    link, and db adding the very dy each dg product multiplies."""
    end = next((i for i, o in enumerate(ops) if o.startswith("SHFL.BFLY")), len(ops))
    flow = dataflow(ops)
    region = flow[:end]

    def product(v) -> bool:
        op = _def(flow, v, "FMUL")
        return op is not None and not any(op.neg) and any(_difference(flow, s) for s in op.srcs)

    dg = [op for op in region if op.is_("FFMA")]
    dg_ok = bool(dg) and all(_ffma_split(op, product) for op in dg) and _chain(dg, lambda op: op.srcs[2], region)
    dys = []
    for op in dg if dg_ok else []:
        mul = flow[_ffma_split(op, product)[1]]
        dys.append(next(s for s in mul.srcs if not _difference(flow, s)))
    db = [op for op in region if op.is_("FADD") and not any(op.neg)]
    links = [_fadd_link(op, lambda v: v in dys) for op in db]
    db_ok = (bool(db) and all(links) and _chain(db, lambda op: _fadd_link(op, lambda v: v in dys)[0], region)
             and [t for _, t in links] == dys)
    return {"claim": f"{pretty}: dg = fma(rstd, dy*(x-mean), dg); db = db + dy", "holds": dg_ok and db_ok,
            "evidence": [op.text for op in dg[:1] + db[:1]]}


def checks(record: dict) -> list[dict]:
    """Each contract claim re-derived from the committed instructions by dataflow (`dataflow`: each source resolved
    to the instruction that wrote it), free of register names: {"claim", "holds", "evidence"}."""
    fns = record["functions"]
    dx = fns["layer_norm_grad_input_kernel_vectorized<float, float, false>"]["fp_ops"]
    flow = dataflow(dx)
    out = _push_checks(flow, len(_first_vector(_first_loop(dx))))
    tail = next((i for i, o in enumerate(dx) if o.startswith("MUFU.RCP")), len(dx))
    rcp = _reciprocal(flow, tail)
    fmas, chains = _output_chains(flow, tail, rcp[-1].index if rcp else None)
    # every element's: at least one float4's, and no fma(dy, g, -t) whose result is used otherwise
    out.append({"claim": "dx = term1 * (fma(dy, fH*gamma, -t) - stats_x1): FFMA with a negated register addend, "
                         "FADD subtracting a register from its result, FMUL of that",
                "holds": len(chains) >= 4 and len(chains) == len(fmas),
                "evidence": [op.text for op in chains[0]] if chains else []})
    out.append({"claim": "1/fH by MUFU.RCP refined to the correctly rounded reciprocal (then FFMA steps)",
                "holds": bool(rcp), "evidence": [op.text for op in rcp[:1]]})
    out += [_gamma_beta_check(pretty, fns[pretty]["fp_ops"]) for pretty in list(fns)[1:]]
    return out


def header_checks(header_text: str) -> list[dict]:
    """BlockReduceSum as the contract says, read from the installed ATen/native/cuda/block_reduce.cuh."""
    warp = re.search(r"T WarpReduceSum\(T val\)\s*\{.*?for \(int offset = \(C10_WARP_SIZE >> 1\); offset > 0; "
                     r"offset >>= 1\)\s*\{\s*val \+= WARP_SHFL_DOWN\(val, offset\);", header_text, re.S)
    block = re.search(r"T BlockReduceSum\(T val, T\* shared\).*?val = WarpReduceSum\(val\);.*?shared\[wid\] = val;"
                      r".*?val = \(tid < B::Warps\(\)\) \? shared\[lid\] : T\(0\);.*?val = WarpReduceSum\(val\);",
                      header_text, re.S)
    return [{"claim": "WarpReduceSum: shuffle-down 16..1, val += received", "holds": bool(warp)},
            {"claim": "BlockReduceSum: per warp, then warp 0 over the warps' sums and zeros", "holds": bool(block)}]


def installed_header() -> str | None:
    """block_reduce.cuh of the installed torch (CPU and CUDA wheels ship it), or None."""
    from pathlib import Path

    import torch

    path = Path(torch.__file__).parent / "include" / "ATen" / "native" / "cuda" / "block_reduce.cuh"
    return path.read_text() if path.is_file() else None


# --- the command that writes the records -----------------------------------------------------------------------

def command(wheel: str, arch: str) -> str:
    """The command line that writes the backward record for a device of `arch` (its `produced_by`)."""
    return f"python -m labkit.studies.backward_contract --wheel {wheel} --workdir <tmp> --arch {arch}"


def record_for_device(wheel: Path, workdir: Path, arch: str) -> tuple[dict, str]:
    """(record, the wheel's torch version): the committable backward record for a device of `arch`, from the cubin
    torch runs there, found and extracted under `workdir` by labkit.sass.summary.torch_device_summary (the
    forward's record reads the same cubin: one translation unit), summarised by `record_from_cubin`, with `arch`
    (the cubin's), `device_arch` and `cubin`. Raises RuntimeError when a claim's verdict on the record differs from
    the one on the full instruction stream (`full_stream_checks`)."""
    from labkit.sass import summary

    wheel, workdir = Path(wheel), Path(workdir)
    part = summary.torch_device_summary(wheel, workdir, arch)
    cubin = (workdir / part["arch"] / part["cubin"]).read_bytes()
    rec = record_from_cubin(cubin, wheel.name, part["wheel_sha256"])
    if rec["cubin_sha256"] != part["cubin_sha256"]:
        raise RuntimeError(f"{part['cubin']} changed under {workdir} while it was read")
    recorded = {c["claim"]: c["holds"] for c in checks(rec)}
    full = {c["claim"]: c["holds"] for c in full_stream_checks(cubin)}
    if recorded != full:
        raise RuntimeError(f"{arch}: the record's verdicts {recorded} differ from the full stream's {full}")
    return ({**rec, "arch": part["arch"], "device_arch": arch, "cubin": part["cubin"],
             "produced_by": command(wheel.name, arch)}, part["torch_version"])


def record_path(arch: str, torch_version: str, folder: Path = RECORD.parent) -> Path:
    return Path(folder) / f"layernorm-backward-torch-{torch_version}-{arch}.json"


def main(argv: list[str] | None = None) -> int:
    """`python -m labkit.studies.backward_contract --wheel ... --workdir ... --arch sm_86 [--arch ...]`: write
    data/sass/backward/layernorm-backward-torch-<version>-<arch>.json per arch and print its claims."""
    import argparse

    from labkit.core.atomic import atomic_write_json

    ap = argparse.ArgumentParser(description="Record torch's LayerNorm backward SASS (from a CUDA wheel) per arch")
    ap.add_argument("--wheel", required=True, help="torch CUDA wheel, e.g. torch-2.11.0-cp312-...whl")
    ap.add_argument("--workdir", required=True, help="scratch folder outside the repository (GBs); the forward's "
                    "`python -m labkit.sass` may share it")
    ap.add_argument("--arch", action="append", required=True, help="device arch (sm_XY); repeat for several")
    ap.add_argument("--out-dir", default=None, help="folder to write into (default data/sass/backward)")
    args = ap.parse_args(argv)
    if Path(args.workdir).resolve().is_relative_to(REPO_ROOT):
        raise SystemExit("--workdir must be outside the repository: torch's binaries are never committed")
    for arch in args.arch:
        rec, torch_version = record_for_device(Path(args.wheel), Path(args.workdir), arch)
        out = record_path(arch, torch_version, Path(args.out_dir) if args.out_dir else RECORD.parent)
        atomic_write_json(out, rec)
        failed = [c["claim"] for c in checks(rec) if not c["holds"]]
        print(f"wrote {out} ({rec['cubin']}): " + ("every claim holds" if not failed else f"FAILED: {failed}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
