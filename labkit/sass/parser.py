"""SASS text (cuobjdump -sass or nvdisasm) -> instructions: `parse_sass` gives {function: [Instr]} in address
order; `fp_op_sequence` / `opcode_histogram` keep the floating-point instructions and shuffles."""
from __future__ import annotations

import re
from dataclasses import dataclass


FP_OPCODES = ("FADD", "FMUL", "FFMA", "MUFU", "FSETP", "FCHK", "FSEL", "FMNMX", "I2FP", "SHFL")


@dataclass
class Instr:
    addr: int
    pred: str | None  # "P0", "!P0" or None
    opcode: str  # with modifiers, e.g. "FFMA", "MUFU.RCP", "LDG.E.128.CONSTANT"
    operands: list[str]
    text: str

    @property
    def base(self) -> str:
        return self.opcode.split(".")[0]


_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def _split_operands(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def parse_sass(text: str) -> dict[str, list[Instr]]:
    """cuobjdump -sass (or nvdisasm) text -> {function: [Instr]} in address order."""
    funcs: dict[str, list[Instr]] = {}
    current = None
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line) or re.match(r"\s*\.text\.(\S+):", line)
        if m:
            current = funcs.setdefault(m.group(1), [])
            continue
        m = _LINE.search(line)
        if not m or current is None:
            continue
        body = m.group(2).strip()
        pred = None
        if body.startswith("@"):
            pred, body = body[1:].split(None, 1)
        parts = body.split(None, 1)
        opcode = parts[0]
        operands = _split_operands(parts[1]) if len(parts) > 1 else []
        current.append(Instr(int(m.group(1), 16), pred, opcode, operands, body))
    return funcs


def fp_op_sequence(instrs: list[Instr], start: int | None = None, end: int | None = None,
                   operands: bool = False) -> list[str]:
    """The floating-point instructions (FADD, FMUL, FFMA, MUFU.*, FSETP, FCHK, I2FP) and shuffles of a function,
    in address order, optionally within [start, end). Opcodes only by default (what a committed summary keeps);
    with `operands`, the full instruction without register-reuse flags."""
    out = []
    for ins in instrs:
        if (start is not None and ins.addr < start) or (end is not None and ins.addr >= end):
            continue
        if ins.base in FP_OPCODES:
            pred = f"@{ins.pred} " if ins.pred else ""
            if operands:
                out.append(f"{pred}{ins.opcode} {', '.join(o.replace('.reuse', '') for o in ins.operands)}".strip())
            else:
                out.append(f"{pred}{ins.opcode}")
    return out


def opcode_histogram(instrs: list[Instr]) -> dict[str, int]:
    hist: dict[str, int] = {}
    for ins in instrs:
        if ins.base in FP_OPCODES:
            hist[ins.opcode] = hist.get(ins.opcode, 0) + 1
    return dict(sorted(hist.items()))


def subroutine_start(instrs: list[Instr]) -> int | None:
    """Address of the first called subroutine (the division/reciprocal slow paths, laid out after the kernel body),
    or None. Only CALL targets past the body's last EXIT count: sm_80/86 code also uses a predicated
    `@P0 CALL.REL.NOINC` to leave a loop, a jump to a target inside the body, not a call."""
    exits = [i.addr for i in instrs if i.base == "EXIT"]
    targets = [t for t in (branch_target(i) for i in instrs if i.base == "CALL") if t is not None]
    body_end = max(exits) if exits else -1
    return min((t for t in targets if t > body_end), default=None)


def branch_target(ins: Instr) -> int | None:
    for o in reversed(ins.operands):
        m = re.search(r"0x([0-9a-f]+)$", o.split()[-1]) if o else None
        if m:
            return int(m.group(1), 16)
    m = re.search(r"0x([0-9a-f]+)\s*$", ins.text)
    return int(m.group(1), 16) if m else None


def predicate_operand_branch(opcode: str, operands) -> bool:
    """A branch whose predicate is its first operand (a uniform branch, `BRA.U !UP0, 0x2f0`): conditional, though
    the instruction carries no @P."""
    return opcode.split(".")[0] == "BRA" and len(operands) > 1 and re.fullmatch(r"!?U?P[0-6]", operands[0]) is not None


def compact(instrs: list[Instr]) -> list[str]:
    """A function's instructions as committable lines, `<hex address> [@pred ]<opcode> <operands>` without the
    register-reuse flags and encodings: what `parse_compact` reads back into the same Instr list (the symbolic
    evaluation and the dataflow checks need every instruction, its predicate and branch targets, not only the
    floating-point ones)."""
    out = []
    for ins in instrs:
        pred = f"@{ins.pred} " if ins.pred else ""
        ops = ", ".join(o.replace(".reuse", "") for o in ins.operands)
        out.append(f"{ins.addr:04x} {pred}{ins.opcode} {ops}".rstrip())
    return out


def parse_compact(lines: list[str]) -> list[Instr]:
    """`compact`'s lines -> Instr list (the text without the address, as `parse_sass` keeps it)."""
    out = []
    for line in lines:
        addr, body = line.split(" ", 1)
        pred = None
        if body.startswith("@"):
            pred, body = body[1:].split(None, 1)
        parts = body.split(None, 1)
        out.append(Instr(int(addr, 16), pred, parts[0], _split_operands(parts[1]) if len(parts) > 1 else [], body))
    return out
