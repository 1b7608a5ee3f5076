"""The 16-bit halves of 32-bit registers, as torch's bfloat16/float16 kernels move them: which integer instructions
only move halves (and where each half of the result comes from), which instructions widen a half to float exactly,
and which narrow floats to halves (with their rounding).

A 2-byte element has no float instruction of its own on these GPUs: the compiler loads T into the halves of a
register (LDG.E.64: four elements in two registers, element 0 in the low half; LDG.E.U16: one, zero-extended),
widens it to float, computes in float and packs the results back. The widening is exact only in the forms below, so
they are the whole list, and an instruction not on it is no widening (the callers then see a value that is not a
converted element and their claim fails, which is the point):
- bfloat16: a float whose high half holds the element and whose low half is zero (the element's bits shifted into
  place: `SHF.L.U32 d, a, 0x10, RZ`, `IMAD.U32 d, a, 0x10000, RZ`, `LOP3.LUT d, a, 0xffff0000, RZ, 0xc0`, `PRMT`
  with a zero half). The callers decide this from `route`'s halves, since no instruction names the conversion.
- float16: `HADD2.F32 d, -RZ, a.H0_H0` (or `.H1_H1`), i.e. -0 + h in float, which is h for every h, -0 and NaN
  included (with +0 instead, -0 would become +0), and `F2F.F32.F16`.
The narrowing: `F2FP.<T>...PACK_AB d, a, b` rounds a into the high half and b into the low half (PTX's cvt.*x2.f32);
`F2F.<T>.F32 d, a` rounds a into the low half. Rounding is to nearest even unless the opcode names .RZ, .RM or .RP.

Only names and positions here (this module reads no instructions' values): labkit.sass.symbolic builds expression
nodes from it and labkit.studies.backward_contract follows register dataflow with it, so both read the 2-byte kernels
with one set of rules.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

ZERO = "zero"  # a half known to be zero


@dataclass(frozen=True)
class Half:
    """Half `half` (0 low, 1 high) of the value operand `operand` (1 = the first source) holds."""
    operand: int
    half: int


def operand(text: str) -> tuple[str, str | None, bool]:
    """(register or immediate, half selector H0_H0/H1_H1 or None, negated) of an operand's text: `-R4.reuse.H1_H1`
    -> ("R4", "H1_H1", True)."""
    text = text.replace(".reuse", "").strip()
    neg = text.startswith("-")
    text = text.lstrip("-")
    m = re.fullmatch(r"(.+?)\.(H0_H0|H1_H1)", text)
    return (m.group(1), m.group(2), neg) if m else (text, None, neg)


def _is_zero(text: str) -> bool:
    return text in ("RZ", "URZ", "0x0", "0")


def _imm(text: str) -> int | None:
    return int(text, 16) if re.fullmatch(r"0x[0-9a-f]+", text) else None


def route(opcode: str, operands: list[str]) -> tuple[Half | str, Half | str] | None:
    """(low, high) of the result of an instruction that only moves 16-bit halves, each a `Half` of a source operand
    or ZERO; None for any other instruction (or form). A source that is RZ reads as two zero halves: the callers
    resolve a `Half` of RZ to ZERO themselves (`resolve`)."""
    ops = [o.replace(".reuse", "").strip() for o in operands]
    if len(ops) < 2 or any(o.startswith("-") or "|" in o for o in ops[1:]):
        return None
    if opcode in ("MOV", "IMAD.MOV.U32", "UMOV"):
        src = 1 if len(ops) == 2 else 3 if len(ops) == 4 and _is_zero(ops[1]) and _is_zero(ops[2]) else None
        return (Half(src, 0), Half(src, 1)) if src else None
    if opcode == "SHF.L.U32" and len(ops) == 4 and _imm(ops[2]) == 16 and _is_zero(ops[3]):
        return ZERO, Half(1, 0)
    if opcode == "SHF.R.U32.HI" and len(ops) == 4 and _is_zero(ops[1]) and _imm(ops[2]) == 16:
        return Half(3, 1), ZERO
    if opcode in ("IMAD.U32", "IMAD.SHL.U32") and len(ops) == 4 and _imm(ops[2]) == 0x10000 and _is_zero(ops[3]):
        return ZERO, Half(1, 0)
    if opcode == "LOP3.LUT" and len(ops) == 6 and ops[4] == "0xc0" and _is_zero(ops[3]) and ops[0][0] != "P":
        mask = _imm(ops[2])  # 0xc0 is a & b: the register masked by the immediate
        if mask == 0xFFFF0000:
            return ZERO, Half(1, 1)
        if mask == 0x0000FFFF:
            return Half(1, 0), ZERO
        return None
    if opcode == "PRMT" and len(ops) == 4 and (sel := _imm(ops[2])) is not None and sel <= 0xFFFF:
        # default mode: each result byte takes the source byte its selector nibble's bits 0-2 name (0-3 a's bytes,
        # 4-7 b's); bit 3 set (nibbles 8-F) replicates that byte's sign bit over the result byte instead, which is no
        # moved byte. A half moves whole when its two nibbles name an aligned pair of bytes in order, neither
        # sign-replicating (0xba10 would otherwise pass as b's high half).
        out = []
        for j in (0, 1):
            lo_n, hi_n = (sel >> (8 * j)) & 0xF, (sel >> (8 * j + 4)) & 0xF
            if lo_n > 7 or lo_n % 2 or hi_n != lo_n + 1:
                return None
            which = lo_n // 2  # 0 a.lo, 1 a.hi, 2 b.lo, 3 b.hi
            out.append(Half(1 if which < 2 else 3, which % 2))
        return out[0], out[1]
    return None


def resolve(h: Half | str, operands: list[str]) -> Half | str:
    """A route's half with an RZ source read as ZERO."""
    if isinstance(h, Half) and _is_zero(operand(operands[h.operand])[0]):
        return ZERO
    return h


@dataclass(frozen=True)
class Widen:
    """An exact T -> float conversion: the half `half` of source operand `operand`, as `dtype`."""
    operand: int
    half: int
    dtype: str
    form: str


def widen(opcode: str, operands: list[str]) -> Widen | None:
    """The conversion an instruction makes of one 2-byte element to float, if it is an exact one (module docstring);
    a bfloat16 element widened by a shift is the callers' to see in `route`'s halves."""
    if opcode == "HADD2.F32" and len(operands) == 3:
        zero, sel_zero, neg = operand(operands[1])
        reg, sel, _ = operand(operands[2])
        if zero == "RZ" and neg and sel_zero is None and sel in ("H0_H0", "H1_H1") and not operands[2].startswith("-"):
            return Widen(2, int(sel[1]), "float16", "HADD2.F32 -RZ, h")
        return None
    if opcode in ("F2F.F32.F16", "F2F.F32.BF16") and len(operands) == 2:
        _, sel, neg = operand(operands[1])
        if not neg:
            return Widen(1, 1 if sel == "H1_H1" else 0, "float16" if opcode.endswith("F16") else "bfloat16", opcode)
    return None


@dataclass(frozen=True)
class Narrow:
    """A float -> T rounding: `low` and `high` are the source operands rounded into each half (None: that half is
    not written by a rounding), `rounding` rn, rz, rm or rp."""
    dtype: str
    rounding: str
    low: int | None
    high: int | None


def narrow(opcode: str, operands: list[str]) -> Narrow | None:
    parts = opcode.split(".")
    if parts[0] == "F2FP" and "PACK_AB" in parts and len(operands) == 3:
        # sm_80/86 print the float16 pack as plain F2FP.PACK_AB, sm_90 on as F2FP.F16.F32.PACK_AB; any other type
        # token (FP8 packs, .RELU, .SATFINITE) is no plain rounding to T
        types = [p for p in parts[1:] if p not in ("F32", "PACK_AB", "RN", "RZ", "RM", "RP")]
        dtype = {("BF16",): "bfloat16", ("F16",): "float16", (): "float16"}.get(tuple(types))
        return Narrow(dtype, _rounding(parts), low=2, high=1) if dtype else None
    if opcode.startswith(("F2F.BF16.F32", "F2F.F16.F32")) and len(operands) == 2:
        return Narrow("bfloat16" if parts[1] == "BF16" else "float16", _rounding(parts), low=1, high=None)
    return None


def _rounding(parts: list[str]) -> str:
    found = [p.lower() for p in parts if p in ("RN", "RZ", "RM", "RP")]
    return found[0] if found else "rn"


def store_halves(opcode: str) -> int | None:
    """How many 16-bit halves a global store writes from its registers: 4 for STG.E.64, 2 for STG.E (32 bits), 1 for
    STG.E.U16 / .16 (and .S16: a 16-bit store writes the register's low half whatever the sign mode says); None for
    a store of another width."""
    if not opcode.startswith(("STG", "ST.")):
        return None
    if ".128" in opcode:
        return 8
    if ".64" in opcode:
        return 4
    if ".U16" in opcode or ".S16" in opcode or re.search(r"\.16(\.|$)", opcode):
        return 1
    if ".U8" in opcode or ".S8" in opcode:
        return None
    return 2


def load_halves(opcode: str) -> int | None:
    """How many 16-bit halves a global load reads: 4 for LDG.E.64, 8 for .128, 1 for .U16 (the callers take its high
    half as zero), 2 for 32 bits; None for another width, and for .S16: it sign-extends, so its high half is copies
    of the element's sign bit, not zero, and no caller's rule reads that (unknown, like an 8-bit load)."""
    if not opcode.startswith(("LDG", "LD.")):
        return None
    if ".128" in opcode:
        return 8
    if ".64" in opcode:
        return 4
    if ".U16" in opcode:
        return 1
    if ".S16" in opcode or ".U8" in opcode or ".S8" in opcode:
        return None
    return 2
