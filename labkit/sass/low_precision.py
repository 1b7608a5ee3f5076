"""torch's bfloat16/float16 vectorized LayerNorm forward (`vectorized_layer_norm_kernel<T, float, false>`) against
the contract read from its source (docs/decisions.md#low_precision_reading), claim by claim, on the symbolic
evaluation of its SASS: each claim follows values (labkit.sass.symbolic's nodes, with 2-byte elements as
labkit.sass.halves reads them), none counts opcodes.

`forward_claims(instrs, dtype, float32_contract)` -> [{"claim", "holds", "evidence"}]; `float32_contract` is the
contract report (labkit.sass.patterns.contract_report) of torch's float32 kernel from the same cubin, which the
Welford claims compare with. labkit.studies.low_precision_sass writes the records (data/sass/low_precision/) and
tests/test_sass_low_precision.py replays these claims from the instructions the records keep.
"""
from __future__ import annotations

import re

from labkit.sass import halves
from labkit.sass.parser import Instr
from labkit.sass.patterns import Match, converted_element, match
from labkit.sass.symbolic import Node, render

RCP = "rcp(count + 1)"
# The patterns' counts that the finish and the merges must share with the float32 kernel, kind for kind.
SHARED_WITH_FLOAT32 = ("merge", "merge_m2", "division", "rsqrt")


def _unsel(n: Node) -> Node:
    """The value a predicated write writes (sel(new, old) -> new, through nested selects): the widening or rounding
    itself."""
    while n.op == "sel":
        n = n.args[0]
    return n


def _element(n: Node, ev) -> tuple[str, int, str] | None:
    """(load group, element index in the load, opcode of the load) of a converted element: element 2j + k of a load
    is half k of its register j (element 0 in the low half, as the GPU is little-endian)."""
    ld = converted_element(n)
    if ld is None:
        return None
    group, j = ld.args[0].rsplit(".", 1)
    return group, 2 * int(j) + _unsel(n).args[0].args[1], ev.load_ops[ld.args[0]].opcode


def _form(n: Node, by_addr: dict[int, Instr]) -> str:
    """The instruction that widened (or placed) an element, registers written R: the conversion's form."""
    ins = by_addr.get(_unsel(n).addr)
    return re.sub(r"\bU?R\d+", "R", f"{ins.opcode} {', '.join(ins.operands)}") if ins else "?"


def _is_dtype(n: Node, dtype: str) -> bool:
    return converted_element(n) is not None and _unsel(n).args[1] == dtype


def forward_claims(instrs: list[Instr], dtype: str, float32_contract: dict) -> list[dict]:
    """The claims of the contract for T = `dtype` ("bfloat16"/"float16") on one vectorized forward kernel."""
    m = match(instrs, dtype=dtype)
    by_addr = {i.addr: i for i in instrs}
    return (_load_claims(m, dtype, by_addr) + _welford_claims(m, float32_contract)
            + _output_claims(m, dtype, by_addr))


def _load_claims(m: Match, dtype: str, by_addr: dict) -> list[dict]:
    ev, pushes = m.evaluator, m.pushes
    xs = [p["x"] for _, p in pushes]
    converted = [x for x in xs if _is_dtype(x, dtype)]
    forms = sorted({_form(x, by_addr) for x in converted})
    # each element of each x load reaches exactly one push: a lost or doubled element is a push the matcher no
    # longer sees (the pushes that remain would all read widened elements)
    pushed: dict[str, list[int]] = {}
    for x in converted:
        group, k, opcode = _element(x, ev)
        pushed.setdefault(group, []).append(k)
    whole = all(sorted(ks) == list(range(halves.load_halves(ev.load_ops[f"{g}.0"].opcode) or 0))
                for g, ks in pushed.items())
    widths = sorted({_element(x, ev)[2] for x in converted})
    # the pushes in chains: a chain starts at a push whose mean no push made, and goes on through the push whose
    # mean is its new mean
    made = {id(p["node"]) for _, p in pushes}
    chains = []
    for _, p in pushes:
        if id(p["mean"]) in made:
            continue
        chain, cur = [p], p
        while (nxt := next((q for _, q in pushes if q["mean"] is cur["node"]), None)) is not None:
            chain.append(nxt)
            cur = nxt
        chains.append(chain)
    in_order = bool(chains) and sum(map(len, chains)) == len(pushes)
    orders = []
    for chain in chains:
        els = [_element(p["x"], ev) for p in chain]
        orders.append([e[1] if e else None for e in els])
        if any(e is None for e in els) or len(els) % 4:
            in_order = False
            continue
        for k in range(0, len(els), 4):
            block = els[k:k + 4]
            if [e[1] for e in block] != [0, 1, 2, 3] or len({e[0] for e in block}) != 1:
                in_order = False
    return [
        {"claim": f"every Welford push reads a {dtype} element widened to float exactly, with nothing in between "
                  "(the push's x - mean and x - new_mean read the widened element itself), and every element of "
                  "x's loads is pushed once",
         "holds": bool(xs) and len(converted) == len(xs) and whole,
         "evidence": {"pushes": len(xs), "widened": len(converted), "every_element_pushed_once": whole,
                      "forms": forms,
                      "example": render(_unsel(converted[0]), 3) if converted else None}},
        {"claim": "x is read as 8-byte vectors of four elements (LDG.E.64), and each thread pushes a vector's "
                  "elements in order 0, 1, 2, 3",
         "holds": in_order and bool(widths) and all(halves.load_halves(w) == 4 for w in widths),
         "evidence": {"x_loads": widths, "push_chains": orders}},
    ]


def _welford_claims(m: Match, f32: dict) -> list[dict]:
    t = m.report
    kinds = set(t["push_mean"])
    f32_kinds = set(f32["push_mean"])
    # a reciprocal the compiler folded where the count is known is the correctly rounded value of the run-time
    # division (summary.verdict's note): a kind either kernel has only folded is the same arithmetic
    same_push = RCP in kinds and RCP in f32_kinds and all(k == RCP or "folded" in k for k in kinds)
    shared = {k: (t[k], f32[k]) for k in SHARED_WITH_FLOAT32}
    return [
        {"claim": "push: new_mean = fma(x - mean, 1/(count + 1), mean) and m2 = fma(x - mean, x - new_mean, m2), "
                  "one m2 per push: the float32 kernel's contractions",
         "holds": same_push and t["push_m2"] == sum(t["push_mean"].values()) > 0,
         "evidence": {"push_mean": t["push_mean"], "push_m2": t["push_m2"], "float32_push_mean": f32["push_mean"]}},
        {"claim": "merges and finish as the float32 kernel's: the same cuWelfordCombine contractions (received "
                  "product fused) and counts, m2/N by IEEE division, rsqrtf",
         "holds": all(a == b for a, b in shared.values()) and bool(t["merge"]) and t["division"] > 0
         and t["rsqrt"] > 0,
         "evidence": {k: {"T": a, "float32": b} for k, (a, b) in shared.items()}},
        {"claim": "every FFMA accounted for (Welford, output, IEEE reciprocal/division idioms)",
         "holds": t["unexplained_count"] == 0, "evidence": t["unexplained_ffma"][:3]},
    ]


def _stores(m: Match) -> list[tuple[Instr, list[Node]]]:
    """The global stores of T: (instruction, the 16-bit halves it writes, in element order). A 16- or 64-bit store
    is one of T; a 32- or 128-bit one is where any half it writes is T data (a loaded element or a rounding), so that
    a T value stored by a store of another width is held to the rounding claim too, not skipped (mean and rstd, the
    32-bit float stores, hold none)."""
    out = []
    ev = m.evaluator
    for ins, regs in ev.stores:
        n = halves.store_halves(ins.opcode) if ins.base == "STG" else None
        if n is None:
            continue
        hs = [h for r in regs for h in ev.halves_of(r)][:n]
        if n in (1, 4) or any(ev.t_half(h) for h in hs):
            out.append((ins, hs))
    return out


def _output_claims(m: Match, dtype: str, by_addr: dict) -> list[dict]:
    ev = m.evaluator
    affine = [(ins, node, info) for ins, node, kind, info in m.outputs if kind == "affine"]
    operands_ok = bool(affine) and all(_is_dtype(info[k], dtype) for _, _, info in affine
                                       for k in ("gamma", "beta", "x"))
    gb_loads = {}
    for _, _, info in affine:
        for k in ("gamma", "beta"):
            e = _element(info[k], ev)
            if e:
                gb_loads[e[2]] = gb_loads.get(e[2], 0) + 1
    outputs = {id(node): info for _, node, info in affine}
    stores = _stores(m)
    rounded = [h for _, hs in stores for h in hs]
    # one rounding: every T half stored is rnd(v), to nearest and to T, of a float computed by FP arithmetic (not of
    # a value already T: a widened element or another rounding)
    once = bool(rounded) and all(
        h.op == "rnd" and h.args[1] == dtype and h.args[2] == "rn" and _unsel(h.args[0]).op in ("fma", "mul", "add")
        for h in rounded)
    bad = [render(h, 2) for h in rounded if not (h.op == "rnd" and h.args[1] == dtype and h.args[2] == "rn")][:3]
    vec_stores, in_place = [], True
    for ins, hs in stores:
        if not all(h.op == "rnd" and id(_unsel(h.args[0])) in outputs for h in hs):
            continue
        vec_stores.append(ins.opcode)
        els = [_element(outputs[id(_unsel(h.args[0]))]["x"], ev) for h in hs]
        if any(e is None for e in els) or [e[1] for e in els] != list(range(len(hs))) or len({e[0] for e in els}) != 1:
            in_place = False
    packs = sorted({by_addr[h.addr].opcode for h in rounded if h.op == "rnd" and h.addr in by_addr})
    float_stores = [(ins, regs) for ins, regs in ev.stores
                    if ins.base == "STG" and halves.store_halves(ins.opcode) == 2]
    stats_float = bool(float_stores) and all(r.op not in ("pack16", "half", "rnd") for _, regs in float_stores
                                             for r in regs)
    return [
        {"claim": "output: y = fma(gamma, rstd * (x - mean), beta) in float, gamma, x and beta each a "
                  f"{dtype} element widened exactly",
         "holds": operands_ok,
         "evidence": {"affine_outputs": len(affine), "gamma_beta_loads": gb_loads,
                      "example": render(affine[0][1], 3) if affine else None}},
        {"claim": f"each stored element is rounded to {dtype} once, to nearest even (no .RZ/.RM/.RP), from the "
                  "float the arithmetic made",
         "holds": once, "evidence": {"rounded_halves": len(rounded), "packs": packs, "not_rn_or_not_T": bad}},
        {"claim": "y is written as 8-byte vectors (STG.E.64), element k the output of x's element k",
         "holds": bool(vec_stores) and in_place and all(halves.store_halves(o) == 4 for o in vec_stores),
         "evidence": {"affine_stores": vec_stores}},
        {"claim": "mean and rstd are stored as 32-bit floats (nothing rounded to T)",
         "holds": stats_float, "evidence": [ins.opcode for ins, _ in float_stores]},
    ]
