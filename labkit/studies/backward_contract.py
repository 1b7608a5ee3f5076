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

The bfloat16/float16 instances (docs/decisions.md#low_precision_reading): `low_precision_checks` runs `checks` on
their full instruction streams, then follows each input to the 2-byte element it widens and each stored half to the
rounding that made it (labkit.sass.halves); labkit.studies.low_precision_sass writes those records.
"""
from __future__ import annotations

import re
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labkit.core.compile import REPO_ROOT
from labkit.sass import halves, tools
from labkit.sass.parser import predicate_operand_branch

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
    operands: tuple = ()  # the instruction's operands as written (labkit.sass.halves reads them)
    parts: tuple = ()  # per source: which register of its writer's destination it reads (0, or k of a wide write)
    old: tuple = ()  # a predicated write: per destination register, the (value, part) it held before (the other side)

    def is_(self, opcode: str) -> bool:
        return self.opcode == opcode


def _operand(text: str) -> tuple[str, bool]:
    """(register or immediate, negated) of an operand, without its half selector: `-R4.H1_H1` -> ("R4", True) (which
    half an instruction reads is labkit.sass.halves' to say, from the operand's text)."""
    reg, _, neg = halves.operand(text)
    return reg.strip("|"), neg


def dataflow(ops: list[str], addrs: list[int] | None = None) -> list[Op]:
    """The recorded instructions of one function (address order) with each source resolved to the instruction
    whose value it reads: the last one before it, in address order, that wrote the register. Exact within straight-
    line code; every claim below follows values within one float4 or row, or from before its loop.

    With the instructions' addresses (`addrs`: a full stream, as the 2-byte records keep it), branches are followed
    where labkit.sass.symbolic.Evaluator follows them: code right after an unconditional jump or exit is reached only
    by the forward branches to it, conditional or unconditional (an if arm's `BRA` over the else arm and an EXIT),
    so it starts from the registers as they were at those branches, a register they disagree on being a `Phi` of
    their values (torch's GammaBeta kernels store their sums in a block after the reduction's EXIT, reached from
    before it; sm_80/86 leave a loop by a predicated CALL.REL.NOINC, a branch too). At a branch taken under P, a
    write made under P (and P not redefined since) is the value: the branch is taken where P held; an unconditional
    one narrows nothing."""
    written: dict[str, object] = {}
    part: dict[str, int] = {}  # register -> which register of its writer's destination it is
    at_branch: dict[int, list[tuple[dict, dict]]] = {}  # target address -> (written, part) at each branch to it
    pred_written: dict[str, int] = {}  # predicate -> the last instruction that wrote it
    unconditional = False
    out = []
    for i, text in enumerate(ops):
        pred, body = (text[1:].split(" ", 1) if text.startswith("@") else (None, text))
        opcode, _, rest = body.partition(" ")
        operands = [o.strip() for o in rest.split(",")] if rest else []
        if addrs is not None:
            if unconditional and addrs[i] in at_branch:
                written, part = _join(addrs[i], at_branch[addrs[i]])
            base = opcode.split(".")[0]
            conditional = (base == "BRA" and ((pred not in (None, "PT")) or ".DIV" in opcode
                                              or predicate_operand_branch(opcode, operands))) or (
                opcode == "CALL.REL.NOINC" and pred not in (None, "PT"))
            jump = base == "BRA" and not conditional
            target = re.search(r"0x([0-9a-f]+)$", operands[-1]) if (conditional or jump) and operands else None
            # a backward jump (a loop's) targets code already read: its state joins nothing later in address order
            if target and (conditional or int(target.group(1), 16) > addrs[i]):
                taken = dict(written)
                for reg, v in written.items():
                    w = int(v[4:]) if isinstance(v, str) and v.startswith("sel:") else None
                    if (conditional and w is not None and pred and out[w].pred == pred
                            and pred_written.get(pred.lstrip("!"), -1) < w):
                        taken[reg] = w
                at_branch.setdefault(int(target.group(1), 16), []).append((taken, dict(part)))
            unconditional = jump or (base in ("EXIT", "RET") and pred in (None, "PT"))
            for o in operands[:2]:
                if re.fullmatch(r"!?P[0-6]", o):
                    pred_written[o.lstrip("!")] = i
        pos = 1 if opcode.startswith("SHFL") else 0  # SHFL writes a predicate, then the register
        dst = operands[pos] if len(operands) > pos and _REG.match(operands[pos]) else None
        read = list(operands[pos + 1:] if dst else operands)
        if opcode.startswith(("STG", "ST.", "STS")) and read and _REG.match(_operand(read[-1])[0]):
            # a store reads every register of its width (STG.E.64 desc[..], R14 stores R14 and R15): the 2-byte
            # checks follow each stored half to the rounding that made it
            reg = _operand(read[-1])[0]
            file = reg.rstrip("0123456789")
            read += [f"{file}{int(reg[len(file):]) + k}" for k in range(1, _width(opcode))]
        srcs, neg, parts = [], [], []
        for o in read:
            reg, n = _operand(o)
            srcs.append(written.get(reg, f"in:{reg}") if _REG.match(reg) else f"imm:{reg}")
            neg.append(n)
            parts.append(part.get(reg, 0))
        old = ()
        if dst and pred:
            file = dst.rstrip("0123456789")
            old = tuple((written.get(f"{file}{r}", f"in:{file}{r}"), part.get(f"{file}{r}", 0))
                        for r in range(int(dst[len(file):]), int(dst[len(file):]) + _width(opcode)))
        out.append(Op(i, text, opcode, pred, dst, tuple(srcs), tuple(neg), tuple(operands), tuple(parts), old))
        if dst:
            file = dst.rstrip("0123456789")  # "R" or "UR"
            first = int(dst[len(file):])
            for r in range(first, first + _width(opcode)):  # later registers of a wide write: no value of ours
                written[f"{file}{r}"] = f"sel:{i}" if pred else (i if r == first else f"part:{i}")
                part[f"{file}{r}"] = r - first
    return out


@dataclass(frozen=True)
class Phi:
    """A register's value where code is reached by several branches that disagree on it: each (value, part)."""
    at: int
    alternatives: tuple


def _join(addr: int, states: list[tuple[dict, dict]]) -> tuple[dict, dict]:
    """The registers at `addr`, reached by the branches whose (written, part) are `states`."""
    written, part = {}, {}
    for reg in set().union(*(w for w, _ in states)):
        vals = tuple(dict.fromkeys((w.get(reg, f"in:{reg}"), p.get(reg, 0)) for w, p in states))
        if len(vals) == 1:
            written[reg], part[reg] = vals[0]
        else:
            written[reg], part[reg] = Phi(addr, vals), 0
    return written, part


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
    return isinstance(value, str) and value.startswith(("in:", "part:"))


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


@dataclass(frozen=True)
class _PushLinks:
    """The dX loop's first float4 as `_push_links` finds it: the stats_x1 links (FADD), the stats_x2 links (FFMA),
    and the predicates that recognise their terms (gp = round(dy * gamma), product = round(gp * round(x - mean)))."""
    s1: list
    s2: list
    gp: object
    product: object


def _push_links(flow: list[Op], body: int) -> _PushLinks:
    ops = flow[:body]

    def gp(v) -> bool:  # round(dy * gamma): an FMUL of two loaded values
        op = _def(flow, v, "FMUL")
        return op is not None and not any(op.neg) and all(_input(flow, s) for s in op.srcs)

    def product(v) -> bool:  # round(gp * round(x - mean))
        op = _def(flow, v, "FMUL")
        return op is not None and not any(op.neg) and len(op.srcs) == 2 and any(
            gp(a) and _difference(flow, b) is not None for a, b in (op.srcs, op.srcs[::-1]))

    return _PushLinks([op for op in ops if _fadd_link(op, gp)],
                      [op for op in ops if op.is_("FFMA") and _ffma_split(op, product)], gp, product)


def _push_checks(flow: list[Op], body: int) -> list[dict]:
    """The dX loop's first float4 (`flow[:body]`): stats_x1 = round(stats_x1 + gp), stats_x2 = fma(rstd, round(gp *
    round(x - mean)), stats_x2), gp = round(dy * gamma) shared by both, and no other FFMA."""
    ops = flow[:body]
    links = _push_links(flow, body)
    s1, s2, gp, product = links.s1, links.s2, links.gp, links.product
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
    flow = dataflow(ops)
    dg, db, dys, dg_ok, db_ok = _gamma_beta_links(flow, ops)
    return {"claim": f"{pretty}: dg = fma(rstd, dy*(x-mean), dg); db = db + dy", "holds": dg_ok and db_ok,
            "evidence": [op.text for op in dg[:1] + db[:1]]}


def _gamma_beta_links(flow: list[Op], ops: list[str]) -> tuple[list, list, list, bool, bool]:
    """(dg links, db links, the dy each dg product multiplies, dg's chain holds, db's chain holds)."""
    end = next((i for i, o in enumerate(ops) if o.startswith("SHFL.BFLY")), len(ops))
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
    return dg, db, dys, dg_ok, db_ok


def checks(record: dict) -> list[dict]:
    """Each contract claim re-derived from the committed instructions by dataflow (`dataflow`: each source resolved
    to the instruction that wrote it), free of register names: {"claim", "holds", "evidence"}."""
    fns = record["functions"]
    dx_name = _dx_name(fns)
    dx = fns[dx_name]["fp_ops"]
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
    out += [_gamma_beta_check(pretty, fns[pretty]["fp_ops"]) for pretty in fns if pretty != dx_name]
    return out


def _dx_name(functions: dict) -> str:
    """The dX kernel among a record's functions (the float32 one, or a 2-byte one: labkit.sass.summary.retype);
    the others are GammaBeta kernels."""
    return next(k for k in functions if k.startswith("layer_norm_grad_input_kernel_vectorized<"))


# --- 2-byte elements: T = bfloat16 / float16 (docs/decisions.md#low_precision_reading) ---------------------------
#
# torch's T kernels are the float32 templates with T loads widened to float and results rounded to T: `checks` holds
# on their full instruction streams as it does on float32's (the widenings are inputs to it, like loads), and
# `low_precision_checks` follows each input back to the 2-byte element it widens and each stored half back to the
# rounding that made it, with labkit.sass.halves' rules (the same ones labkit.sass.low_precision's forward claims
# use on the symbolic evaluation).

# The partial-sums GammaBeta kernel (M > 64K and N / 32 < SMs / 2): torch writes its partials into buffers of
# dgamma's dtype, so for T each partial is rounded to T before the .sum(0) (docs/decisions.md#low_precision_reading).
# The float32 records do not cover it; the T records do.
PARTIAL_FUNCTIONS = {
    "GammaBetaBackwardCUDAKernelTemplate<float, float, 32, 1, 32, true, true, false>":
        "GammaBetaBackwardCUDAKernelTemplateIffLj32ELj1ELj32ELb1ELb1ELb0E",
}


def low_precision_functions(dtype: str) -> dict[str, str]:
    """{pretty: mangled fragment} of the backward kernels the T records cover: TORCH_FUNCTIONS' and the partial
    GammaBeta kernel, for `dtype`."""
    from labkit.sass.summary import retype

    return retype({**TORCH_FUNCTIONS, **PARTIAL_FUNCTIONS}, dtype)


def _writes_predicate(op: Op, pred: str) -> bool:
    """Whether `op` (re)defines predicate `pred` (P0 of "!P0"): a compare, a carry-out, R2P (labkit.sass.symbolic
    reads predicate destinations the same way: among the first two operands)."""
    name = pred.lstrip("!")
    return any(o.lstrip("!") in (name, "PR") for o in op.operands[:2])


def _halves(flow: list[Op], value, part: int = 0, depth: int = 0, under: tuple | None = None,
            side: str | None = None) -> tuple:
    """(low, high) 16-bit halves of a value, each ("T", load, element) for an element of a 2-byte load (LDG.E.64's
    register `part` holds elements 2 part and 2 part + 1; LDG.E.U16's low half element 0, its high half zero),
    ("rnd", instruction, source value, dtype, rounding) for a float rounded to T, halves.ZERO, or None: followed
    through the instructions that only move halves (halves.route). `under` = (predicate, index) of the reader at the
    top (a predicated store): a value written under that same predicate, not redefined before the reader, is the
    predicated write's (the path where the store happens is the path where the write did). `side` ("new"/"old")
    reads every other predicated write as written or as not written (its register's value before); a 32-bit constant
    (an immediate, HFMA2 d, -RZ, RZ, hi, lo) has halves ("const", bits)."""
    if isinstance(value, Phi):  # halves every branch agrees on
        alts = {_halves(flow, v, p, depth + 1, under, side) for v, p in value.alternatives}
        return alts.pop() if len(alts) == 1 else (None, None)
    if isinstance(value, str):
        if value in ("imm:RZ", "imm:URZ"):
            return halves.ZERO, halves.ZERO
        if re.fullmatch(r"imm:0x[0-9a-f]{1,8}", value):
            bits = int(value[4:], 16)
            return ("const", bits & 0xFFFF), ("const", bits >> 16)
        if value.startswith("sel:") and under is not None:
            i = int(value[4:])
            if flow[i].pred == under[0] and not any(_writes_predicate(op, under[0]) for op in flow[i + 1:under[1]]):
                value = str(i)
        if value.startswith("sel:") and side == "old" and depth < 16:
            v, p = flow[int(value[4:])].old[part]
            return _halves(flow, v, p, depth + 1, under, side)
        if value.startswith("sel:") and side == "new":
            value = value[4:]
        if value.startswith("part:"):
            value = int(value[5:])
        elif value.isdigit():
            value = int(value)
        else:
            return None, None
    op = flow[value]
    ops = list(op.operands)
    pair = (ops[3:5] if op.opcode.split(".")[0] == "HFMA2" and ops[1:3] == ["-RZ", "RZ"] and len(ops) == 5 else
            ops[2:4] if op.opcode == "HADD2" and ops[1] in ("-RZ", "-RZ.H0_H0") and len(ops) == 4 else None)
    if pair is not None:
        try:  # -0 * 0 + (hi, lo) or -0 + (hi, lo): the pair of float16 constants itself (how torch's code makes T's 1.0)
            hi, lo = (int(struct.unpack("<H", struct.pack("<e", float(x)))[0]) for x in pair)
        except ValueError:
            return None, None
        return ("const", lo), ("const", hi)
    n = halves.load_halves(op.opcode)
    if n == 1:
        return ("T", value, 0), halves.ZERO
    if n in (4, 8):  # LDG.E.64 / .128: two elements per register
        return ("T", value, 2 * part), ("T", value, 2 * part + 1)
    if (nw := halves.narrow(op.opcode, ops)) is not None:
        return tuple(halves.ZERO if k is None else ("rnd", value, op.srcs[k - 1], nw.dtype, nw.rounding)
                     for k in (nw.low, nw.high))
    rt = halves.route(op.opcode, ops)
    if rt is None or depth > 16:
        return None, None
    out = []
    for h in rt:
        h = halves.resolve(h, ops)
        out.append(h if h == halves.ZERO else _halves(flow, op.srcs[h.operand - 1], op.parts[h.operand - 1],
                                                       depth + 1, under, side)[h.half])
    return tuple(out)


def _widened(flow: list[Op], value, side: str | None = None, of=("T",)) -> dict | None:
    """{"dtype", "load", "element", "form"} of a float value that is a 2-byte element widened exactly (labkit.sass.
    halves: float16 by HADD2.F32 -RZ, h or F2F.F32.F16; bfloat16 by its bits in the high half over a zero low half),
    or None. `side`: as `_halves`'; `of`: the kinds of half accepted ("const" too: a constant's bits, "element" its
    bits)."""
    if not isinstance(value, int):
        return None
    op = flow[value]
    w = halves.widen(op.opcode, list(op.operands))
    if w is not None:
        el, dtype = _halves(flow, op.srcs[w.operand - 1], op.parts[w.operand - 1], side=side)[w.half], w.dtype
    else:
        lo, el = _halves(flow, value, side=side)
        dtype = "bfloat16" if lo == halves.ZERO else None
    if dtype is None or not (isinstance(el, tuple) and el[0] in of):
        return None
    form = re.sub(r"\bU?R\d+", "R", f"{op.opcode} {', '.join(op.operands[1:])}")
    if el[0] == "const":
        return {"dtype": dtype, "load": None, "element": el[1], "form": form}
    return {"dtype": dtype, "load": el[1], "element": el[2], "form": form}


def _stored(flow: list[Op]) -> list[tuple[Op, list]]:
    """Each global store of T with the halves it writes, in element order: every 16- and 64-bit store (STG.E.U16,
    STG.E.64), and a 32- or 128-bit one where any half it writes is T data (an element of a 2-byte load or a
    rounding), so that `_rounded_once` holds a T value stored at another width to its rule too instead of skipping
    it. A 32-bit load's word is no known T (these kernels load float mean and rstd so): a word copied from one to a
    store is not seen."""
    out = []
    for op in flow:
        n = halves.store_halves(op.opcode) if op.opcode.startswith("STG") else None
        if n is None:
            continue
        regs = list(zip(op.srcs, op.parts))[-max(1, n // 2):]
        under = (op.pred, op.index) if op.pred else None
        hs = [h for v, part in regs for h in _halves(flow, v, part, under=under)][:n]
        if n in (1, 4) or any(isinstance(h, tuple) and h[0] in ("T", "rnd") for h in hs):
            out.append((op, hs))
    return out


def _rounded_once(flow: list[Op], dtype: str) -> tuple[bool, dict]:
    """Every stored T half is a rounding to `dtype`, to nearest, of a float an FADD/FMUL/FFMA made (not of a value
    already T); (holds, evidence)."""
    stores = _stored(flow)
    halves_ = [h for _, hs in stores for h in hs]

    def float_made(v, pred) -> bool:
        """A float that FADD/FMUL/FFMA made, or the zero a sum of no terms is (a move of RZ): on every branch to a
        join, and for a predicated write, where the rounding runs under that same predicate."""
        if isinstance(v, Phi):
            return all(float_made(a, pred) for a, _ in v.alternatives)
        if isinstance(v, str) and v.startswith("sel:") and flow[int(v[4:])].pred == pred:
            v = int(v[4:])
        if not isinstance(v, int):
            return False
        op = flow[v]
        zero = op.opcode in ("MOV", "IMAD.MOV.U32", "CS2R") and all(
            o in ("RZ", "SRZ") for o in op.operands[1:])
        return op.opcode.split(".")[0] in ("FADD", "FMUL", "FFMA") or zero

    ok = bool(halves_) and all(
        isinstance(h, tuple) and h[0] == "rnd" and h[3] == dtype and h[4] == "rn" and float_made(h[2], flow[h[1]].pred)
        for h in halves_)
    packs = sorted({flow[h[1]].opcode for h in halves_ if isinstance(h, tuple) and h[0] == "rnd"})
    return ok, {"stores": sorted({op.opcode for op, _ in stores}), "stored_halves": len(halves_), "packs": packs}


def _x_of(flow: list[Op], value):
    """x of round(x - mean): the unnegated source of the difference FADD."""
    diff = _difference(flow, value)
    return diff.srcs[diff.neg.index(False)] if diff is not None else None


ONE = {"bfloat16": 0x3F80, "float16": 0x3C00}  # T's 1.0


def _gamma(flow: list[Op], value, dtype: str) -> bool:
    """gamma in fH * gamma is a `dtype` element widened exactly: loaded, or selected by predicate over T's 1.0 (torch
    reads gamma where it is not null and 1 where it is, the contract's load_order; sm_100/120 load it under @P and
    keep 1.0 in the register otherwise): each side of the selects, the element where written, 1.0 where not."""
    w = _widened(flow, value, of=("T", "const"))
    if w is not None:  # an element, or 1.0 itself (sm_90's loop for a null gamma multiplies fH by T's 1.0)
        return w["dtype"] == dtype and (w["load"] is not None or w["element"] == ONE[dtype])
    new, old = _widened(flow, value, side="new"), _widened(flow, value, side="old", of=("const",))
    return bool(new and old and new["dtype"] == old["dtype"] == dtype and old["element"] == ONE[dtype])


def _dx_low_precision(flow: list[Op], ops: list[str], dtype: str) -> list[dict]:
    links = _push_links(flow, len(_first_vector(_first_loop(ops))))
    rows = []  # per element k of the first float4: (dy, gamma) of gp, and x
    for k, (a, b) in enumerate(zip(links.s1, links.s2)):
        gp = flow[_fadd_link(a, links.gp)[1]]
        prod = flow[_ffma_split(b, links.product)[1]]
        x = next((_x_of(flow, v) for v in prod.srcs if _difference(flow, v)), None)
        rows.append([_widened(flow, v) for v in gp.srcs] + [_widened(flow, x)])
    loads = [tuple(r[j]["load"] for r in rows) if all(r[j] for r in rows) else None for j in range(3)]
    stats_ok = (len(rows) == 4 and all(w and w["dtype"] == dtype for r in rows for w in r)
                and all(ld is not None and len(set(ld)) == 1 for ld in loads)
                and len({ld[0] for ld in loads}) == 3  # dy, gamma and x: three loads
                and all([r[j]["element"] for r in rows] == [0, 1, 2, 3] for j in range(3))
                and all(halves.load_halves(flow[ld[0]].opcode) == 4 for ld in loads))

    tail = next((i for i, o in enumerate(ops) if o.startswith("MUFU.RCP")), len(ops))
    rcp = _reciprocal(flow, tail)
    _, chains = _output_chains(flow, tail, rcp[-1].index if rcp else None)
    inputs_ok, x_element = bool(chains), {}
    for f, _sub, mul in chains:
        t = _def(flow, f.srcs[2], "FMUL")
        inner = t and next((_def(flow, v, "FMUL") for v in t.srcs if _def(flow, v, "FMUL")), None)
        x = inner and next((_x_of(flow, v) for v in inner.srcs if _difference(flow, v)), None)
        dy_g = [_widened(flow, v) for v in f.srcs[:2]]
        g = next((_def(flow, v, "FMUL") for v in f.srcs[:2] if _def(flow, v, "FMUL")), None)
        wx = _widened(flow, x)
        # dy is widened, and where g is round(fH * gamma), exactly one of its sources is gamma widened (fH is the
        # other); a g that is no FMUL is fH itself, the path without gamma, with nothing to widen. Counting only
        # the widened sources that exist would pass a gamma that is no element at all.
        gamma_ok = g is None or sum(1 for v in g.srcs if _gamma(flow, v, dtype)) == 1
        ok = (sum(1 for w in dy_g if w and w["dtype"] == dtype) == 1 and wx is not None and wx["dtype"] == dtype
              and gamma_ok)
        inputs_ok = inputs_ok and ok
        if wx:
            x_element[mul.index] = (wx["load"], wx["element"])
    once, ev = _rounded_once(flow, dtype)
    # the vector stores: element k the dX of x's element k, all from one x load; every dX of a chain stored
    vec, in_place, stored_dx = [], True, set()
    for op, hs in _stored(flow):
        srcs = [h[2] if isinstance(h, tuple) and h[0] == "rnd" else None for h in hs]
        stored_dx.update(s for s in srcs if s is not None)
        if len(hs) == 4:
            vec.append(op.opcode)
            els = [x_element.get(s) for s in srcs]
            if None in els or [e[1] for e in els] != [0, 1, 2, 3] or len({e[0] for e in els}) != 1:
                in_place = False
    every = bool(chains) and all(mul.index in stored_dx for _, _, mul in chains)
    forms = sorted({w["form"] for r in rows for w in r if w})
    return [
        {"claim": f"dX stats: the first vector's dy, gamma and x are {dtype} elements widened exactly, element k "
                  "of three 8-byte loads (LDG.E.64) in link k",
         "holds": stats_ok, "evidence": {"forms": forms, "loads": sorted({flow[ld[0]].opcode for ld in loads if ld})}},
        {"claim": f"dX output: in every dx chain, dy, gamma (in fH * gamma) and x (in x - mean) are {dtype} "
                  "elements widened exactly",
         "holds": inputs_ok, "evidence": {"chains": len(chains)}},
        {"claim": f"dX is rounded to {dtype} once, to nearest even, at its store: every stored half is a rounding "
                  "of a float result, and every dx chain's result is stored so",
         "holds": once and every, "evidence": ev},
        {"claim": "dX's vector stores are 8 bytes (STG.E.64), element k the dx of x's element k",
         "holds": bool(vec) and in_place and all(halves.store_halves(o) == 4 for o in vec),
         "evidence": {"vector_stores": vec}},
    ]


def _gamma_beta_low_precision(pretty: str, flow: list[Op], ops: list[str], dtype: str) -> list[dict]:
    dg, db, dys, dg_ok, db_ok = _gamma_beta_links(flow, ops)

    def product(v) -> bool:
        op = _def(flow, v, "FMUL")
        return op is not None and not any(op.neg) and any(_difference(flow, s) for s in op.srcs)

    inputs = []
    for op in dg if dg_ok else []:
        mul = flow[_ffma_split(op, product)[1]]
        inputs += [_widened(flow, v) if not _difference(flow, v) else _widened(flow, _x_of(flow, v))
                   for v in mul.srcs]
    inputs += [_widened(flow, _fadd_link(op, lambda v: v in dys)[1]) for op in db if db_ok]
    once, ev = _rounded_once(flow, dtype)
    return [
        {"claim": f"{pretty}: dy and x of every dg / db link are {dtype} elements widened exactly",
         # dg's links found (dg_ok), else the claim would rest on db's dy alone
         "holds": dg_ok and bool(inputs) and all(w and w["dtype"] == dtype for w in inputs),
         "evidence": sorted({w["form"] for w in inputs if w})},
        {"claim": f"{pretty}: dg and db are summed in float and rounded to {dtype} once, to nearest even, at their "
                  "stores",
         "holds": dg_ok and db_ok and once, "evidence": ev},
    ]


def low_precision_checks(functions: dict[str, list[str]], dtype: str) -> list[dict]:
    """The contract's claims for T = `dtype` on the backward kernels' full instruction streams ({pretty: [lines of
    labkit.sass.parser.compact, address order]}): `checks` (the float32 contract: the same arithmetic on the widened
    values), then where each input comes from and how each result is stored."""
    streams = {k: _split_addresses(v) for k, v in functions.items()}
    out = checks({"functions": {k: {"fp_ops": texts} for k, (_, texts) in streams.items()}})
    dx_name = _dx_name(functions)
    addrs, texts = streams[dx_name]
    out += _dx_low_precision(dataflow(texts, addrs), texts, dtype)
    for pretty, (addrs, texts) in streams.items():
        if pretty != dx_name:
            out += _gamma_beta_low_precision(pretty, dataflow(texts, addrs), texts, dtype)
    return out


def _split_addresses(lines: list[str]) -> tuple[list[int], list[str]]:
    """labkit.sass.parser.compact's lines -> (addresses, the instructions' text)."""
    pairs = [line.split(" ", 1) for line in lines]
    return [int(a, 16) for a, _ in pairs], [t for _, t in pairs]


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
    tools.add_wheel_arguments(ap, "; the forward's `python -m labkit.sass` may share it")
    ap.add_argument("--arch", action="append", required=True, help="device arch (sm_XY); repeat for several")
    ap.add_argument("--out-dir", default=None, help="folder to write into (default data/sass/backward)")
    args = ap.parse_args(argv)
    workdir = tools.scratch_dir(args.workdir)
    for arch in args.arch:
        rec, torch_version = record_for_device(Path(args.wheel), workdir, arch)
        out = record_path(arch, torch_version, Path(args.out_dir) if args.out_dir else RECORD.parent)
        atomic_write_json(out, rec)
        failed = [c["claim"] for c in checks(rec) if not c["holds"]]
        print(f"wrote {out} ({rec['cubin']}): " + ("every claim holds" if not failed else f"FAILED: {failed}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
