"""FMA-contraction patterns of torch's vectorized LayerNorm (Welford push, cuWelfordCombine merge, finish,
affine output), matched on the symbolic evaluation of a function: `contract_report`."""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

from labkit.sass.parser import Instr, opcode_histogram, subroutine_start
from labkit.sass.symbolic import LEAVES, RECEIVED, Evaluator, Node, const, is_const, render

# The patterns of contract_report that a comparison puts side by side (summary.compare, summary.verdict).
CONTRACT_KEYS = ("push_mean", "push_m2", "merge", "merge_m2", "division", "rsqrt", "output")


def _as_rsqrt(n: Node) -> tuple[Node, Node] | None:
    """rsqrtf as compiled: MUFU.RSQ with the denormal pre-scale (x * 2^24) and post-scale (* 2^12), both under
    one predicate. Returns (argument, node) when `n` is the (selected) result."""
    if n.op == "sel":
        new, old = n.args
        if new.op == "mul" and old.op == "rsq~" and old in new.args and any(is_const(a, 4096.0) for a in new.args):
            inner = old.args[0]
            if inner.op == "sel" and inner.args[0].op == "mul" and inner.args[1] in inner.args[0].args:
                return inner.args[1], n
            return inner, n
    if n.op == "rsq~":
        return n.args[0], n
    return None


def _received(n: Node) -> bool:
    return n.op in RECEIVED


def _base(n: Node) -> Node:
    """A predicated load (`@P0 LDG`) evaluates to sel(load, old): for matching, it is the load (and a predicated
    conversion of a loaded element, the converted element)."""
    while n.op == "sel" and (n.args[0].op in LEAVES or n.args[0].op == "cvt"):
        n = n.args[0]
    return n


def converted_element(n: Node) -> Node | None:
    """The load whose 2-byte element `n` widens exactly (cvt of a half of a load: labkit.sass.halves), or None."""
    n = _base(n)
    if n.op == "cvt" and n.args[0].op == "half" and n.args[0].args[0].op == "ld":
        return n.args[0].args[0]
    return None


def _loaded(n: Node) -> bool:
    """A value read from memory as the kernel's element type: a float load, or a bfloat16/float16 element widened
    to float exactly (the same value: what makes the float32 patterns the T kernels' patterns too)."""
    return _base(n).op == "ld" or converted_element(n) is not None


def _is_neg_of(nm: Node, m: Node) -> bool:
    if nm.op == "neg" and nm.args[0] is m:
        return True
    return nm.op == "const" and m.op == "const" and nm.args[0] == -m.args[0]  # x - 0 with a known 0 mean


def _recip_kind(y: Node) -> str | None:
    if y.op == "rcp" and y.args[0].op == "add" and any(is_const(a, 1.0) for a in y.args[0].args):
        return "rcp(count + 1)"
    if is_const(y):
        for k in range(2, 64):
            if struct.unpack("<f", struct.pack("<f", 1.0 / k))[0] == y.args[0]:
                return f"1/{k} folded to a constant"
    return None


def _push_mean(f: Node) -> dict | None:
    """new_mean = fma(delta, r, mean), delta = x - mean, r = 1/(count+1) (IEEE) or its folded constant."""
    if f.op != "fma":
        return None
    mean = f.args[2]
    for d, y in (f.args[:2], f.args[1::-1]):
        if d.op != "add":
            continue
        for x, nm in (d.args, d.args[::-1]):
            if _loaded(x) and _is_neg_of(nm, mean):
                kind = _recip_kind(y)
                if kind:
                    return {"delta": d, "x": x, "mean": mean, "recip": kind, "node": f}
    return None


def _push_first_folded(f: Node) -> dict | None:
    """The first push of a chain whose state is known to be zero: fma(x - 0, 1/1, 0) folds to 0 + x."""
    plus_zero = [a for a in f.args if is_const(a, 0.0) and math.copysign(1.0, a.args[0]) > 0]
    if f.op == "add" and plus_zero:  # 0 + x; x - 0 is the delta of a push (a -0 constant), not this
        x = f.args[1] if f.args[0] is plus_zero[0] else f.args[0]
        if _loaded(x):
            return {"delta": x, "x": x, "mean": const(0.0), "recip": "1/1 folded (0 + x)", "node": f}
    return None


def _push_m2(g: Node, pushes: list[dict]) -> dict | None:
    """m2' = fma(delta, x - new_mean, m2) for a recognised push (same delta and new_mean nodes)."""
    if g.op != "fma":
        return None
    for p in pushes:
        for d, t in (g.args[:2], g.args[1::-1]):
            if d is p["delta"] and t.op == "add":
                for x, nm in (t.args, t.args[::-1]):
                    if x is p["x"] and nm.op == "neg" and nm.args[0] is p["node"]:
                        return p
    return None


def _merge(f: Node) -> dict | None:
    """cuWelfordCombine(own, received): mean = nA*A.mean + nB*B.mean with A = received, B = own,
    nA = A.count*coef, nB = B.count*coef, coef = 1/(A.count + B.count). Reports which product the FFMA fuses.
    A merge whose coef was made by a count pass ahead of it (kernels/rows_fused.cu's counted entry point: the same
    counts added and divided, but from their own shuffles, so other nodes than the products' counts) is matched as
    "given": coef is still one reciprocal of a sum with a received term, shared by both products."""
    if f.op != "fma" or f.args[2].op != "mul":
        return None

    def side(prod, given):  # a product n*m with n = count * coef, coef = rcp(cA + cB): (n, m, count, coef)
        for n, m in (prod, prod[::-1]):
            if n.op != "mul":
                continue
            for c, coef in (n.args, n.args[::-1]):
                if coef.op != "rcp" or coef.args[0].op != "add":
                    continue
                if any(c is a for a in coef.args[0].args) or (given and any(_received(a) for a in coef.args[0].args)):
                    return n, m, c, coef
        return None

    for given in (False, True):
        fused, rounded = side(f.args[:2], given), side(f.args[2].args, given)
        if fused is not None and rounded is not None and fused[3] is rounded[3]:
            break
    else:
        return None
    (n_f, m_f, c_f, coef), (n_r, m_r, c_r, _) = fused, rounded
    if not given and {id(c_f), id(c_r)} != {id(a) for a in coef.args[0].args}:
        return None
    if _received(m_f) and _received(c_f) and not _received(m_r):
        which, own, recv = "first_product", (m_r, c_r, n_r), (m_f, c_f, n_f)
    elif _received(m_r) and _received(c_r) and not _received(m_f):
        which, own, recv = "second_product", (m_f, c_f, n_f), (m_r, c_r, n_r)
    else:
        return None
    via = recv[0].op + (", quotient given" if given else "")
    return {"contraction": which, "own_mean": own[0], "recv_mean": recv[0], "recv_count": recv[1],
            "n_own": own[2], "received_via": via}


def _merge_m2(g: Node, merges: list[dict]) -> dict | None:
    """sigma2 = fma(nB, round(round(delta*delta) * A.count), A.sigma2 + B.sigma2), delta = B.mean - A.mean."""
    if g.op != "fma" or g.args[2].op != "add":
        return None
    for mg in merges:
        for nb, rest in (g.args[:2], g.args[1::-1]):
            if nb is not mg["n_own"] or rest.op != "mul" or not any(a is mg["recv_count"] for a in rest.args):
                continue
            dd = rest.args[1] if rest.args[0] is mg["recv_count"] else rest.args[0]
            if dd.op != "mul" or dd.args[0] is not dd.args[1] or dd.args[0].op != "add":
                continue
            for own, neg in (dd.args[0].args, dd.args[0].args[::-1]):
                if own is mg["own_mean"] and neg.op == "neg" and neg.args[0] is mg["recv_mean"]:
                    return mg
    return None


def _centered(t: Node) -> dict | None:
    """t = rstd * (x - mean) with x loaded."""
    if t.op != "mul":
        return None
    for rs, d in (t.args, t.args[::-1]):
        if d.op == "add":
            for x, nm in (d.args, d.args[::-1]):
                if _loaded(x) and nm.op == "neg":
                    return {"rstd": rs, "mean": nm.args[0], "x": x}
    return None


def _output(f: Node) -> tuple[str, dict] | None:
    """The affine output y = fma(gamma, round(rstd * round(x - mean)), beta) (gamma, beta, x loaded), or the
    beta-only variant y = fma(rstd, round(x - mean), beta) that torch uses when gamma is absent."""
    if f.op == "add":  # round(rstd * (x - mean)) + beta, not fused
        for t, b in (f.args, f.args[::-1]):
            if _loaded(b) and _centered(t) is not None and not _loaded(_centered(t)["rstd"]):
                return "beta_only_unfused", _centered(t)
        return None
    if f.op != "fma" or not _loaded(f.args[2]):
        return None
    for g, t in (f.args[:2], f.args[1::-1]):
        c = _centered(t)
        if _loaded(g) and c is not None:
            return "affine", {**c, "gamma": g, "beta": f.args[2]}
    for rs, d in (f.args[:2], f.args[1::-1]):
        if d.op == "add" and any(_loaded(x) for x in d.args) and any(a.op == "neg" for a in d.args) \
                and not _loaded(rs):
            return "beta_only", {"rstd": rs}
    return None


def _rstd_source(n: Node) -> str:
    if _as_rsqrt(n) is not None:
        return "rsqrtf of the statistics (MUFU.RSQ with denormal scaling)"
    return {"ld": "loaded from memory", "lds": "read from shared memory", "in": "live on entry"}.get(n.op, n.op)


@dataclass
class Match:
    """contract_report's matching, kept for the claims that follow matched values further (labkit.sass.
    low_precision: where each push's x and each output's operands come from, and what is stored)."""
    report: dict
    evaluator: Evaluator
    pushes: list = field(default_factory=list)  # (instruction, push) in address order: push as _push_mean's
    outputs: list = field(default_factory=list)  # (instruction, node, kind, operands) of every matched output


def contract_report(instrs: list[Instr], max_listed: int = 12, dtype: str | None = None) -> dict:
    """Match a function's floating-point instructions against torch's vectorized LayerNorm arithmetic (`match`'s
    report).

    Returns counts and one example per pattern: Welford pushes (`new_mean = fma(delta, r, mean)`,
    `m2 = fma(delta, x - new_mean, m2)`), merges (cuWelfordCombine with its argument order, and which product of
    the mean update the FFMA fuses), the finish (IEEE division m2/N, rsqrtf(var + eps)) and the output
    (`fma(gamma, rstd*(x - mean), beta)`). FFMAs inside the IEEE reciprocal/division idioms and in called
    slow-path subroutines are counted apart; every other FFMA that no pattern explains is listed. `dtype`: the T of a
    bfloat16/float16 kernel (its loaded words hold 2-byte elements: symbolic.Evaluator), None for float32.
    """
    return match(instrs, max_listed, dtype).report


def match(instrs: list[Instr], max_listed: int = 12, dtype: str | None = None) -> Match:
    """contract_report with the matched pushes and outputs (`Match`)."""
    ev = Evaluator(dtype)
    for ins in instrs:
        ev.step(ins)
    sub_start = subroutine_start(instrs)
    nodes = [(ins, node.args[0] if node.op == "sel" else node) for ins, node in ev.fp_nodes]
    report = {"push_mean": {}, "push_m2": 0, "merge": {}, "merge_m2": 0, "output": {}, "division": 0,
              "rsqrt": 0, "idiom_ffma": 0, "subroutine_ffma": 0, "examples": {}, "unexplained_ffma": [],
              "unexplained_count": 0}
    explained: set[int] = set()

    def example(key, ins, node):
        report["examples"].setdefault(key, {"sass": ins.text, "expr": render(node, 3)})
        explained.add(ins.addr)

    pushes, merges = [], []
    found = Match(report, ev)
    for ins, node in nodes:  # pass 1: the roots (new mean of a push, new mean of a merge)
        p = _push_mean(node) or (_push_first_folded(node) if ins.base == "FADD" else None)
        if p is not None:
            pushes.append(p)
            found.pushes.append((ins, p))
            report["push_mean"][p["recip"]] = report["push_mean"].get(p["recip"], 0) + 1
            example("push_mean" if p["recip"] == "rcp(count + 1)" else "push_mean_folded", ins, node)
            continue
        mg = _merge(node)
        if mg is not None:
            merges.append(mg)
            key = f"{mg['contraction']} (received via {mg['received_via']})"
            report["merge"][key] = report["merge"].get(key, 0) + 1
            example("merge_mean", ins, node)
    for ins, node in nodes:  # pass 2: what depends on them, and the rest
        if ins.addr in explained:
            continue
        if (p := _push_m2(node, pushes)) is not None:
            report["push_m2"] += 1
            example("push_m2" if p["recip"] == "rcp(count + 1)" else "push_m2_folded", ins, node)
        elif _merge_m2(node, merges) is not None:
            report["merge_m2"] += 1
            example("merge_m2", ins, node)
        elif ins.base in ("FFMA", "FADD") and (out := _output(node)) is not None:
            kind, info = out
            found.outputs.append((ins, node, kind, info))
            report["output"][kind] = report["output"].get(kind, 0) + 1
            report.setdefault("output_rstd", _rstd_source(info["rstd"]))
            example(f"output_{kind}", ins, node)
        elif node.op == "div":
            report["division"] += 1
            example("division", ins, node)
        elif ins.base == "FFMA":
            if sub_start is not None and ins.addr >= sub_start:
                report["subroutine_ffma"] += 1
            elif ins.addr in ev.idiom_addrs or node.op == "rcp":
                report["idiom_ffma"] += 1
            else:
                report["unexplained_count"] += 1
                if len(report["unexplained_ffma"]) < max_listed:
                    report["unexplained_ffma"].append({"sass": ins.text, "expr": render(node, 3)})
    for ins, node in ev.fp_nodes:
        if ins.opcode == "MUFU.RSQ" and (sub_start is None or ins.addr < sub_start):
            report["rsqrt"] += 1
            arg = node.args[0] if node.op == "rsq~" else node
            while arg.op == "sel":
                arg = arg.args[1]
            report["examples"].setdefault("rsqrt", {"sass": ins.text, "expr": f"rsqrt({render(arg, 3)})"})
    report["fp_opcodes"] = opcode_histogram(instrs)
    return found
