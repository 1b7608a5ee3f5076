"""Symbolic evaluation of straight-line SASS: every floating-point result becomes a Node expression over
loads, shuffles, shared-memory reads, kernel arguments and constants, with the compiler's IEEE reciprocal and
division idioms recognised as rcp / div nodes, so that arithmetic can be matched without register names."""
from __future__ import annotations

import re
import struct

from labkit.sass import halves
from labkit.sass.parser import Instr, branch_target, predicate_operand_branch


class Node:
    """A value in the symbolic evaluation of straight-line SASS. Leaves: in (a register live on entry), ld
    (global load), shfl (warp shuffle), lds (shared-memory load), param (kernel argument), const, int (anything
    computed by non-floating-point instructions).

    2-byte elements (bfloat16/float16, labkit.sass.halves): half (16-bit half k of a 32-bit value), pack16 (a
    32-bit value made of two halves, e.g. a loaded word shifted by 16), cvt (an element widened to float exactly:
    cvt(half, dtype)) and rnd (a float rounded to T: rnd(value, dtype, rounding)). Float32 code makes none of them:
    an integer instruction that moves halves yields a pack16 only where one of its halves is a rounded one, or a
    loaded one in a kernel the caller names 2-byte (`Evaluator(dtype=...)`), else the int leaf it always was."""

    __slots__ = ("op", "args", "addr")

    def __init__(self, op: str, args: tuple = (), addr: int | None = None):
        self.op, self.args, self.addr = op, args, addr

    def __repr__(self) -> str:
        return render(self, 3)


LEAVES = ("in", "ld", "shfl", "lds", "param", "const", "int")
RECEIVED = ("shfl", "lds")  # a value that came from another thread


def render(n: Node, depth: int = 4) -> str:
    """Readable form, cut at `depth` (deeper subtrees print as `…`)."""
    if n.op == "const":
        v = n.args[0]
        return repr(int(v)) if float(v).is_integer() and abs(v) < 2 ** 24 else f"{v:.9g}"
    if n.op in ("in", "int"):
        return f"{n.op}:{n.args[0]}" if n.args else n.op
    if n.op == "param":
        return f"param[{n.args[0]}]"
    if n.op == "ld":
        return f"ld{n.args[0]}"
    if n.op in ("shfl", "lds") and depth <= 0:
        return n.op
    if depth <= 0:
        return "…"
    inner = ", ".join(render(a, depth - 1) if isinstance(a, Node) else str(a) for a in n.args)
    return f"{n.op}({inner})"


def const(v: float) -> Node:
    return Node("const", (float(v),))


def is_const(n: Node, v: float | None = None) -> bool:
    return n.op == "const" and (v is None or n.args[0] == v)


def _strip_neg(n: Node) -> tuple[Node, bool]:
    if n.op == "neg":
        return n.args[0], True
    if n.op == "const" and n.args[0] < 0:
        return const(-n.args[0]), True
    return n, False


def _hex_float(text: str) -> float:
    return struct.unpack("<f", struct.pack("<I", int(text, 16) & 0xFFFFFFFF))[0]


_PRED_DEST = re.compile(r"!?U?P[0-6]|PR")  # a predicate among an instruction's first operands: written there


class Evaluator:
    """Linear symbolic execution of one function: each register holds the Node of its latest definition in
    address order. Branches are not followed, with two corrections that keep the fast paths right: a block
    that starts right after an unconditional jump or exit (the end of an if/else arm, e.g. a division's slow path
    that calls a subroutine) restarts from the state at the forward branches that target it, conditional or not
    (a register they disagree on: a `join` node of their values, the first branch's first); and writes made
    under predicate P are undone when the code falls through `@P BRA` (P was false there). Predicated writes
    otherwise become sel(new, old), except to an instruction under the same predicate P (P not redefined since),
    which sees the new value: it runs only where P held, so where the write happened (sm_100/120 compute a whole
    peeled float4 under one @P0).

    `dtype` ("bfloat16"/"float16") says the function is a 2-byte kernel, whose loaded words hold T elements; None
    (float32 code) keeps a shift or permute of a loaded word the int leaf it is, never a widened element."""

    def __init__(self, dtype: str | None = None):
        self.dtype = dtype
        self.env: dict[str, Node] = {}
        self.stores: list[tuple[Instr, list[Node]]] = []
        self.fp_nodes: list[tuple[Instr, Node]] = []
        self.pending: dict[str, list[tuple[str, Node]]] = {}
        self.guarded: dict[str, tuple[str, Node, Node]] = {}  # reg -> (predicate, its sel node, the new value)
        self.snapshots: dict[int, list[dict[str, Node]]] = {}  # target -> the state at each forward branch to it
        self.prev_unconditional = False
        self.subroutines: set[int] = set()
        self.idiom_addrs: set[int] = set()
        self.loads = 0
        self.load_ops: dict[str, Instr] = {}  # load group -> its instruction (its width: how many T it holds)
        self.memo: dict[tuple, tuple] = {}  # interned half / cvt / float views, with the nodes they key on

    # --- 2-byte elements (labkit.sass.halves) ----------------------------------------------------------------------

    def _interned(self, key: tuple, make, *keep) -> Node:
        """One node per key (built by `make`), so that two reads of one element are the same node, as two reads of
        one float register are: the patterns match by identity (the push's x - mean and x - new_mean)."""
        if key not in self.memo:
            self.memo[key] = (make(), keep)
        return self.memo[key][0]

    def half(self, n: Node, k: int) -> Node:
        return self._interned(("half", id(n), k), lambda: Node("half", (n, k)), n)

    def halves_of(self, n: Node) -> tuple[Node, Node]:
        """(low, high) 16-bit halves of a register's value: a pack16's own; a 2-byte load's element and zero (the
        load zero-extends); zero for zero; else the two halves of the value."""
        if n.op == "pack16":
            return n.args
        if is_const(n, 0.0):
            return const(0.0), const(0.0)
        if n.op == "ld" and n.args[0] in self.load_ops and halves.load_halves(self.load_ops[n.args[0]].opcode) == 1:
            return self.half(n, 0), const(0.0)
        return self.half(n, 0), self.half(n, 1)

    def t_half(self, h: Node) -> bool:
        """A half that holds T data: a rounding to T, or an element of a load where the kernel is a 2-byte one (in
        float32 code a loaded word's half is part of a float or an index: `SHF.L 16` of it is no bfloat16 cvt)."""
        return h.op == "rnd" or (self.dtype is not None and h.op == "half" and h.args[0].op == "ld")

    def moved(self, ins: Instr, rt: tuple) -> Node | None:
        """The pack16 an instruction that only moves halves makes (halves.route), or None where neither half is
        T data (then it stays an int leaf, as in float32 code)."""
        out = []
        for h in rt:
            h = halves.resolve(h, ins.operands)
            if h == halves.ZERO:
                out.append(const(0.0))
            else:
                src = self.read_register(ins.operands[h.operand], ins)
                out.append(self.halves_of(src)[h.half])
        return Node("pack16", tuple(out), ins.addr) if any(self.t_half(h) for h in out) else None

    def cvt(self, h: Node, dtype: str, addr: int | None) -> Node:
        """The element `h` widened to float; its addr is the first instruction that widened (or placed) it."""
        return self._interned(("cvt", id(h), dtype), lambda: Node("cvt", (h, dtype), addr), h)

    def float_view(self, n: Node, depth: int = 0) -> Node:
        """The float an FP instruction reads from a register: a pack16 whose low half is zero and whose high half is
        an element is that bfloat16 element widened (exact); a predicated write of one, the select of the views
        (each select viewed once: float32 code reads long chains of them, and gets them back unchanged)."""
        if n.op == "pack16" and is_const(n.args[0], 0.0) and n.args[1].op == "half":
            return self.cvt(n.args[1], "bfloat16", n.addr)
        if n.op != "sel" or depth > 64:
            return n

        def view() -> Node:
            new, old = self.float_view(n.args[0], depth + 1), self.float_view(n.args[1], depth + 1)
            return n if (new is n.args[0] and old is n.args[1]) else Node("sel", (new, old), n.addr)

        return self._interned(("view", id(n)), view, n)

    def read_register(self, operand: str, ins: Instr) -> Node:
        """A source's value without its half selector or sign (halves.operand): what a half-moving instruction
        reads."""
        reg, _, _ = halves.operand(operand)
        return self.read(reg, ins)

    def read(self, operand: str, ins: Instr, as_float: bool = False) -> Node:
        o = operand.replace(".reuse", "").strip()
        neg = o.startswith("-")
        o = o.lstrip("-")
        absval = o.startswith("|") and o.endswith("|")
        o = o.strip("|")
        if o in ("RZ", "URZ", "SRZ"):
            n = const(0.0)
        elif re.fullmatch(r"U?R\d+", o):
            if o not in self.env:
                self.env[o] = Node("in", (o,))
            n = self.env[o]
            g = self.guarded.get(o)
            if g is not None and ins.pred == g[0] and n is g[1]:
                n = g[2]  # written under this instruction's own predicate: on its path, the write happened
        elif m := re.fullmatch(r"c\[0x0\]\[(0x[0-9a-f]+)\]", o):
            n = Node("param", (m.group(1),))
        elif re.fullmatch(r"0x[0-9a-f]+", o):
            n = const(_hex_float(o))
        elif re.fullmatch(r"[-+]?(\d+(\.\d*)?(e[-+]?\d+)?|\+?INF|QNAN)", o, re.I):
            n = const(float(o.replace("+INF", "inf")) if "NAN" not in o.upper() else float("nan"))
        else:
            n = Node("int", (o,))
        if as_float:
            n = self.float_view(n)
        if absval:
            n = Node("abs", (n,))
        if neg:
            n = const(-n.args[0]) if n.op == "const" else Node("neg", (n,))
        return n

    @staticmethod
    def _regs(dst: str, count: int) -> list[str]:
        m = re.fullmatch(r"(U?R)(\d+)", dst.replace(".reuse", ""))
        if not m:
            return []
        return [f"{m.group(1)}{int(m.group(2)) + k}" for k in range(count)]

    def write(self, ins: Instr, dst: str, node: Node, count: int = 1, nodes: list[Node] | None = None) -> None:
        for k, reg in enumerate(self._regs(dst, count)):
            value = nodes[k] if nodes else node
            if ins.pred is not None:
                old = self.env.get(reg) or Node("in", (reg,))
                self.pending.setdefault(ins.pred, []).append((reg, old))
                new, value = value, Node("sel", (value, old), ins.addr)  # predicated: the new value or the old one
                self.guarded[reg] = (ins.pred, value, new)
            self.env[reg] = value

    def step(self, ins: Instr) -> None:
        op, base, ops = ins.opcode, ins.base, ins.operands
        if ins.addr in self.snapshots and self.prev_unconditional:
            # The code just above ended in an unconditional jump or exit (an if/else arm such as a division's slow
            # path): this block is reached only from the branches that target it, with their states.
            states = self.snapshots[ins.addr]
            # float32 code keeps the first branch's state alone, as before the joins (see the jumps below)
            self.env = _join(ins.addr, states) if self.dtype is not None else dict(states[0])
            self.pending = {}
        if any(_PRED_DEST.fullmatch(o) for o in ops[:2]):
            self.guarded.clear()  # a predicate may be redefined (compares, carries, R2P): forget what it guarded
        self.prev_unconditional = (base in ("BRA", "EXIT", "RET") and ins.pred is None) or (
            base == "BRA" and ins.pred == "PT")
        if base == "BRA" and (ins.pred is None or ins.pred == "PT") and ".DIV" not in op and not \
                predicate_operand_branch(op, ops):
            # an unconditional forward jump reaches its target with this state (the end of an if arm that skips
            # the else arm, or a jump over an EXIT to the stores); nothing is undone: no predicate was false. The
            # jumps and the joins of several branches are 2-byte kernels' only for now: in torch's sm_80/86 float32
            # forward they turn the merges' rendered examples from 0 into join(0, …) (the counts are unchanged), and
            # the committed float32 records keep the old text.
            target = branch_target(ins)
            if target is not None and target > ins.addr and self.dtype is not None:
                self.snapshots.setdefault(target, []).append(dict(self.env))
            return
        if base == "BRA" and ins.pred is not None:
            target = branch_target(ins)
            if target is not None and target > ins.addr:
                self.snapshots.setdefault(target, []).append(dict(self.env))
            # Falling through a branch taken under `pred` means `pred` was false: writes made under the same
            # predicate just before (e.g. the zero result of an empty merge) did not happen on this path.
            for reg, old in reversed(self.pending.pop(ins.pred, [])):
                self.env[reg] = old
            return
        if base == "CALL":
            target = branch_target(ins)
            if target is not None:
                self.subroutines.add(target)
            return
        if any(re.fullmatch(r"U?P\d", o) for o in ops[:2]) and base in ("FSETP", "ISETP", "PLOP3", "LOP3", "DSETP"):
            self.pending.clear()  # predicates redefined
        width = 4 if ".128" in op else 2 if ".64" in op else 1
        r = lambda k: self.read(ops[k], ins, as_float=True)  # noqa: E731
        if base == "FADD":
            node = _make(("add.ftz" if ".FTZ" in op else "add"), (r(1), r(2)), ins.addr, self.idiom_addrs)
        elif base == "FMUL":
            node = _make("mul", (r(1), r(2)), ins.addr, self.idiom_addrs)
        elif base == "FFMA":
            mod = "".join(f".{m.lower()}" for m in op.split(".")[1:] if m in ("RM", "RP", "RZ"))
            node = _make("fma" + mod, (r(1), r(2), r(3)), ins.addr, self.idiom_addrs)
        elif op == "MUFU.RCP":
            node = Node("rcp~", (r(1),), ins.addr)
        elif op == "MUFU.RSQ":
            node = Node("rsq~", (r(1),), ins.addr)
        elif base == "MUFU":
            node = Node(op.lower(), (r(1),), ins.addr)
        elif base == "I2FP" or base == "I2F":
            node = Node("i2f", (self.read(ops[1], ins),), ins.addr)
        elif base == "SHFL":
            node = Node("shfl", (self.read(ops[2], ins), ops[3]), ins.addr)
            self.write(ins, ops[1], node)
            return
        elif base in ("LDG", "LD", "LDC") and ops and ops[0].startswith("R") and "[" in " ".join(ops[1:]):
            group = self.loads
            self.loads += 1
            for k in range(width):
                self.load_ops[f"{group}.{k}"] = ins
            nodes = [Node("ld", (f"{group}.{k}",), ins.addr) for k in range(width)]
            self.write(ins, ops[0], nodes[0], width, nodes)
            return
        elif base == "LDS":
            nodes = [Node("lds", (f"{ins.addr:x}.{k}",), ins.addr) for k in range(width)]
            self.write(ins, ops[0], nodes[0], width, nodes)
            return
        elif base in ("STG", "STS", "ST", "STL"):
            regs = self._regs(ops[1], width)
            self.stores.append((ins, [self.env.get(reg, Node("in", (reg,))) for reg in regs]))
            return
        elif base in ("MOV", "UMOV") and len(ops) == 2:
            node = self.read(ops[1], ins)  # a move copies bits: a packed pair of T stays one
        elif op == "IMAD.MOV.U32" and len(ops) == 4 and ops[1] == "RZ" and ops[2] == "RZ":
            node = self.read(ops[3], ins)
        elif op == "CS2R" and ops[1] == "SRZ":
            self.write(ins, ops[0], const(0.0), 2)
            return
        elif op == "HFMA2.MMA" and ops[1:] == ["-RZ", "RZ", "0", "0"]:
            node = const(0.0)
        elif base == "ULDC":
            nodes = [Node("param", (f"{ops[1]}+{4 * k}",), ins.addr) for k in range(width)]
            self.write(ins, ops[0], nodes[0], width, nodes)
            return
        elif (rt := halves.route(op, ops)) is not None and (moved := self.moved(ins, rt)) is not None:
            node = moved
        elif (w := halves.widen(op, ops)) is not None:
            node = self.cvt(self.halves_of(self.read_register(ops[w.operand], ins))[w.half], w.dtype, ins.addr)
        elif (nw := halves.narrow(op, ops)) is not None:
            def rounded(k):
                return const(0.0) if k is None else Node(
                    "rnd", (self.read(ops[k], ins, as_float=True), nw.dtype, nw.rounding), ins.addr)
            node = Node("pack16", (rounded(nw.low), rounded(nw.high)), ins.addr)
        else:
            if ops and re.fullmatch(r"U?R\d+", ops[0].replace(".reuse", "")):
                wide = 2 if (".WIDE" in op or ".64" in op) else 1
                self.write(ins, ops[0], Node("int", (base,), ins.addr), wide)
            return
        self.write(ins, ops[0], node)
        if base in ("FADD", "FMUL", "FFMA", "MUFU"):
            self.fp_nodes.append((ins, self.env.get(self._regs(ops[0], 1)[0], node) if ins.pred else node))


def _join(addr: int, states: list[dict[str, Node]]) -> dict[str, Node]:
    """The registers at `addr`, reached by branches with `states`: a register they all agree on keeps its node, one
    they disagree on is join(first branch's, next branch's, ...) (a register a branch never wrote reads as live on
    entry there)."""
    env = {}
    for reg in dict.fromkeys(r for st in states for r in st):
        vals = list({id(v): v for v in (st.get(reg) or Node("in", (reg,)) for st in states)}.values())
        env[reg] = vals[0] if len(vals) == 1 else Node("join", tuple(vals), addr)
    return env


def _make(op: str, args: tuple, addr: int, idioms: set[int] | None = None) -> Node:
    """Build an arithmetic node, recognising the compiler's idioms for IEEE reciprocal and division (the
    addresses of their intermediate instructions go to `idioms`)."""
    node = Node(op, args, addr)
    found = _as_rcp(node) or _as_div(node)
    if found is None:
        return node
    if idioms is not None:
        stack = [node]
        while stack:
            n = stack.pop()
            if n.addr is not None and n.op in ("fma", "add.ftz", "rcp~", "neg"):
                idioms.add(n.addr)
            if n.op in ("fma", "add.ftz", "neg") and n.addr is not None or n.op == "neg":
                stack.extend(a for a in n.args if isinstance(a, Node) and a.op in ("fma", "add.ftz", "neg"))
    return found


def _match_prod(pair: tuple[Node, Node], a, b) -> tuple | None:
    """Try both orders of a commutative product: a(x) and b(y) are predicates returning a binding or None."""
    for x, y in (pair, pair[::-1]):
        ba = a(x)
        if ba is not None:
            bb = b(y, ba)
            if bb is not None:
                return ba, bb
    return None


def _as_rcp(n: Node) -> Node | None:
    # r = MUFU.RCP(a); e = fma(a, r, -1); e2 = -e - 0 (FTZ); result = fma(r, e2, r)  -> IEEE 1/a (fast path)
    if n.op != "fma" or n.args[2].op != "rcp~":
        return None
    r = n.args[2]
    hit = _match_prod(n.args[:2], lambda x: x if x is r else None,
                      lambda y, _: y if (y.op == "add.ftz" and _neg_of_rcp_error(y, r)) else None)
    return Node("rcp", (r.args[0],), n.addr) if hit else None


def _neg_of_rcp_error(y: Node, r: Node) -> bool:
    a, b = y.args
    for e, z in ((a, b), (b, a)):
        if e.op == "neg" and is_const(_strip_neg(z)[0], 0.0):
            inner = e.args[0]
            if inner.op == "fma" and is_const(inner.args[2], -1.0) and r in inner.args[:2] \
                    and r.args[0] in inner.args[:2]:
                return True
    return False


def _as_div(n: Node) -> Node | None:
    # IEEE a/b fast path: r=rcp~(b); t=fma(-b,r,1); r2=fma(r,t,r); q=fma(a,r2,0); e=fma(-b,q,a); fma(r2,e,q)
    if n.op != "fma":
        return None
    q = n.args[2]
    if q.op != "fma" or not is_const(q.args[2], 0.0):
        return None
    for r2, e in (n.args[:2], n.args[1::-1]):
        if r2 not in q.args[:2] or e.op != "fma":
            continue
        a = q.args[1] if q.args[0] is r2 else q.args[0]
        if e.args[2] is not a or q not in e.args[:2]:
            continue
        nb = e.args[1] if e.args[0] is q else e.args[0]
        b, negated = _strip_neg(nb)
        if not negated or r2.op != "fma" or r2.args[2].op != "rcp~" or r2.args[2].args[0] is not b:
            continue
        return Node("div", (a, b), n.addr)
    return None
