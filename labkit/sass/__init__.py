"""What the compiler made of our kernels, and of torch's: resource usage, SASS, and the FMA contractions.

Path: a cubin (ours from labkit.compile, or one extracted from torch's libtorch_cuda.so) -> `resource_usage` /
`ptxas_info` (registers, shared memory, spills) -> `disassemble` (cuobjdump -sass, or nvdisasm) -> `parse_sass`
-> `contract_report`, which evaluates the instructions symbolically and matches them against the arithmetic of
torch's vectorized LayerNorm (push, merge, finish, output), so two binaries can be compared op for op without
comparing register names or instruction schedules.

Tools: cuobjdump and nvdisasm are looked up on PATH, in $CUDA_HOME/bin, /usr/local/cuda/bin, and in the
`nvidia/cu13/bin` folder of the pip wheels `nvidia-cuda-cuobjdump` / `nvidia-cuda-nvdisasm`. Without them,
`resource_usage` falls back to reading the cubin's ELF section headers and the disassembly-based functions raise
ToolMissing, so callers (notebooks, tests) can replay committed summaries instead.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from labkit.core.compile import BASE_OPTIONS, REPO_ROOT
from labkit.core.cubin import complete_cubin

SASS_DIR = REPO_ROOT / "data" / "sass"
FP_OPCODES = ("FADD", "FMUL", "FFMA", "MUFU", "FSETP", "FCHK", "FSEL", "FMNMX", "I2FP", "SHFL")


class ToolMissing(RuntimeError):
    """cuobjdump / nvdisasm not found: disassembly is not possible on this machine."""


# ------------------------------------------------------------------------------------------------- tools ---

def find_tool(name: str) -> str | None:
    """Path of a CUDA binary tool (cuobjdump, nvdisasm), or None. LABKIT_SASS_TOOLS=off hides them (to exercise
    the replay paths on a machine that has them)."""
    if os.environ.get("LABKIT_SASS_TOOLS", "").lower() in ("off", "0", "no"):
        return None
    found = shutil.which(name)
    if found:
        return found
    candidates = []
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            candidates.append(Path(os.environ[env]) / "bin" / name)
    candidates.append(Path("/usr/local/cuda/bin") / name)
    for entry in sys.path:
        candidates.append(Path(entry) / "nvidia" / "cu13" / "bin" / name)
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


def tool_versions() -> dict:
    out = {}
    for name in ("cuobjdump", "nvdisasm"):
        path = find_tool(name)
        if path is None:
            out[name] = None
            continue
        text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
        release = re.search(r"release ([\d.]+), (V[\d.]+)", text)
        out[name] = {"path": path, "version": release.group(2) if release else text.strip().splitlines()[-1]}
    return out


def _run(tool: str, *args: str, timeout: int = 600) -> str:
    path = find_tool(tool)
    if path is None:
        raise ToolMissing(f"{tool} not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, pip nvidia-cuda-{tool})")
    proc = subprocess.run([path, *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(args)} failed: {proc.stderr.strip()[:2000]}")
    return proc.stdout


# ----------------------------------------------------------------------------------------------- cubins ---

def _sections(cubin: bytes) -> list[tuple[str, int, int, int, int, int]]:
    """(name, type, flags, info, offset, size) of every ELF section."""
    e_shoff, = struct.unpack_from("<Q", cubin, 0x28)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = []
    for i in range(e_shnum):
        at = e_shoff + i * e_shentsize
        name, sh_type, flags = struct.unpack_from("<IIQ", cubin, at)
        offset, size = struct.unpack_from("<QQ", cubin, at + 0x18)
        _link, info = struct.unpack_from("<II", cubin, at + 0x28)
        heads.append((name, sh_type, flags, info, offset, size))
    str_off, str_size = heads[e_shstrndx][4], heads[e_shstrndx][5]
    strtab = cubin[str_off:str_off + str_size]
    out = []
    for name, sh_type, flags, info, offset, size in heads:
        end = strtab.find(b"\0", name)
        out.append((strtab[name:end].decode(), sh_type, flags, info, offset, size))
    return out


def text_sections(cubin: bytes) -> dict[str, bytes]:
    """Machine code of each function: the `.text.<name>` sections."""
    cubin, _ = complete_cubin(cubin)
    return {name[len(".text."):]: cubin[off:off + size]
            for name, _t, _f, _i, off, size in _sections(cubin) if name.startswith(".text.")}


@dataclass(frozen=True)
class ResourceUsage:
    function: str
    registers: int
    shared_bytes: int | None  # static shared memory (cuobjdump counts the 1 KiB that sm_90 reserves per block)
    stack_bytes: int | None
    local_bytes: int | None
    constant0_bytes: int | None
    source: str  # "cuobjdump --dump-resource-usage" or "ELF section headers"

    def to_json(self) -> dict:
        return asdict(self)


def resource_usage(cubin: bytes) -> list[ResourceUsage]:
    """Per-function registers / shared / stack / local memory of a cubin.

    With cuobjdump: its --dump-resource-usage. Without: registers and stack frame from the EIATTR_REGCOUNT and
    EIATTR_FRAME_SIZE records of the `.nv.info` section (keyed by the function's symbol, which is the sh_info of
    its `.text.<fn>` section), shared and constant memory from the sizes of `.nv.shared.<fn>` and
    `.nv.constant0.<fn>`; local memory is then unknown (None).
    """
    cubin, _ = complete_cubin(cubin)
    if find_tool("cuobjdump"):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "k.cubin"
            path.write_bytes(cubin)
            text = _run("cuobjdump", "--dump-resource-usage", str(path))
        out = []
        for fn, body in re.findall(r"Function (\S+):\s*\n\s*(REG:.*)", text):
            kv = dict(re.findall(r"(\w+(?:\[\d+\])?):(\d+)", body))
            out.append(ResourceUsage(fn, int(kv["REG"]), int(kv.get("SHARED", 0)), int(kv.get("STACK", 0)),
                                     int(kv.get("LOCAL", 0)), int(kv.get("CONSTANT[0]", 0)),
                                     "cuobjdump --dump-resource-usage"))
        return out
    secs = _sections(cubin)
    shared = {n[len(".nv.shared."):]: size for n, _t, _f, _i, _o, size in secs if n.startswith(".nv.shared.")}
    const0 = {n[len(".nv.constant0."):]: size for n, _t, _f, _i, _o, size in secs
              if n.startswith(".nv.constant0.")}
    by_symbol = {info: n[len(".text."):] for n, _t, _f, info, _o, _s in secs if n.startswith(".text.")}
    regs, frame = {}, {}
    for n, _t, _f, _i, off, size in secs:
        if n != ".nv.info":
            continue
        # EIATTR records: format byte, attribute byte, 16-bit size/value, payload (format 4 = sized payload).
        at = off
        while at + 4 <= off + size:
            fmt, attr, length = cubin[at], cubin[at + 1], struct.unpack_from("<H", cubin, at + 2)[0]
            if fmt == 4:
                if attr in (0x2F, 0x11) and length == 8:  # EIATTR_REGCOUNT, EIATTR_FRAME_SIZE: (symbol, value)
                    sym, value = struct.unpack_from("<II", cubin, at + 4)
                    (regs if attr == 0x2F else frame)[sym] = value
                at += 4 + length
            else:
                at += 4
    return [ResourceUsage(fn, regs.get(sym, 0), shared.get(fn, 0), frame.get(sym), None, const0.get(fn),
                          "ELF .nv.info (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and section sizes")
            for sym, fn in by_symbol.items()]


_PTXAS_FN = re.compile(r"Compiling entry function '([^']+)'")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")


def parse_ptxas_log(log: str) -> list[dict]:
    """ptxas -v lines -> one record per entry function (registers, barriers, smem, stack, spills)."""
    records, current = [], None
    for line in log.splitlines():
        m = _PTXAS_FN.search(line)
        if m:
            current = {"function": m.group(1)}
            records.append(current)
            continue
        if current is None:
            continue
        m = _PTXAS_FRAME.search(line)
        if m:
            current.update(stack_bytes=int(m.group(1)), spill_store_bytes=int(m.group(2)),
                           spill_load_bytes=int(m.group(3)))
        m = _PTXAS_USED.search(line)
        if m:
            current.update(registers=int(m.group(1)), barriers=int(m.group(2) or 0),
                           static_smem_bytes=int(m.group(3) or 0))
    return records


def ptxas_info(kernel: str, arch: str = "sm_90") -> dict:
    """Recompile `kernels/<kernel>.cu` with the book's options plus `--ptxas-options=-v` and return ptxas's
    per-function report (registers, barriers, shared memory, stack frame, spill stores/loads).

    `-v` only adds a report: `code_identical` says whether every function's machine code equals the cached cubin's
    (the ELF differs only in the embedded option string).
    """
    from cupy_backends.cuda.libs import nvrtc

    from labkit.core.compile import _sources, compile_kernel

    source, headers = _sources(kernel)
    options = BASE_OPTIONS + (f"--gpu-architecture={arch}", "--ptxas-options=-v")
    names = tuple(headers)
    prog = nvrtc.createProgram(source, f"{kernel}.cu", tuple(headers[n].encode() for n in names),
                               tuple(n.encode() for n in names))
    try:
        nvrtc.compileProgram(prog, options)
        log = nvrtc.getProgramLog(prog)
        verbose_cubin = nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    cached = compile_kernel(kernel, arch)
    return {"kernel": kernel, "arch": arch, "options": list(options),
            "functions": parse_ptxas_log(log.rstrip("\0")),
            "code_identical": text_sections(verbose_cubin) == text_sections(cached.cubin)}


# ------------------------------------------------------------------------------------------------- SASS ---

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


def disassemble(cubin: bytes, function: str | None = None) -> str:
    """SASS text of a cubin (optionally one function), by cuobjdump -sass, else nvdisasm."""
    cubin, _ = complete_cubin(cubin)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "k.cubin"
        path.write_bytes(cubin)
        if find_tool("cuobjdump"):
            args = ["-sass"] + (["-fun", function] if function else []) + [str(path)]
            return _run("cuobjdump", *args)
        args = ["-c"] + (["-fun", function] if function else []) + [str(path)]
        return _run("nvdisasm", *args)


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


# ---------------------------------------------------------------------------------- symbolic evaluation ---

class Node:
    """A value in the symbolic evaluation of straight-line SASS. Leaves: in (a register live on entry), ld
    (global load), shfl (warp shuffle), lds (shared-memory load), param (kernel argument), const, int (anything
    computed by non-floating-point instructions)."""

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


def _const(v: float) -> Node:
    return Node("const", (float(v),))


def _is_const(n: Node, v: float | None = None) -> bool:
    return n.op == "const" and (v is None or n.args[0] == v)


def _strip_neg(n: Node) -> tuple[Node, bool]:
    if n.op == "neg":
        return n.args[0], True
    if n.op == "const" and n.args[0] < 0:
        return _const(-n.args[0]), True
    return n, False


def _hex_float(text: str) -> float:
    return struct.unpack("<f", struct.pack("<I", int(text, 16) & 0xFFFFFFFF))[0]


class _Evaluator:
    """Linear symbolic execution of one function: each register holds the Node of its latest definition in
    address order. Branches are not followed, with two corrections that keep the fast paths right: a block
    that starts right after an unconditional jump (the end of an if/else arm, e.g. a division's slow path that
    calls a subroutine) restarts from the state at the conditional branch that targets it; and writes made
    under predicate P are undone when the code falls through `@P BRA` (P was false there). Predicated writes
    otherwise become sel(new, old)."""

    def __init__(self):
        self.env: dict[str, Node] = {}
        self.stores: list[tuple[Instr, list[Node]]] = []
        self.fp_nodes: list[tuple[Instr, Node]] = []
        self.pending: dict[str, list[tuple[str, Node]]] = {}
        self.snapshots: dict[int, dict[str, Node]] = {}
        self.prev_unconditional = False
        self.subroutines: set[int] = set()
        self.idiom_addrs: set[int] = set()
        self.loads = 0

    def read(self, operand: str, ins: Instr) -> Node:
        o = operand.replace(".reuse", "").strip()
        neg = o.startswith("-")
        o = o.lstrip("-")
        absval = o.startswith("|") and o.endswith("|")
        o = o.strip("|")
        if o in ("RZ", "URZ", "SRZ"):
            n = _const(0.0)
        elif re.fullmatch(r"U?R\d+", o):
            if o not in self.env:
                self.env[o] = Node("in", (o,))
            n = self.env[o]
        elif m := re.fullmatch(r"c\[0x0\]\[(0x[0-9a-f]+)\]", o):
            n = Node("param", (m.group(1),))
        elif re.fullmatch(r"0x[0-9a-f]+", o):
            n = _const(_hex_float(o))
        elif re.fullmatch(r"[-+]?(\d+(\.\d*)?(e[-+]?\d+)?|\+?INF|QNAN)", o, re.I):
            n = _const(float(o.replace("+INF", "inf")) if "NAN" not in o.upper() else float("nan"))
        else:
            n = Node("int", (o,))
        if absval:
            n = Node("abs", (n,))
        if neg:
            n = _const(-n.args[0]) if n.op == "const" else Node("neg", (n,))
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
                value = Node("sel", (value, old), ins.addr)  # predicated: the new value or the old one
            self.env[reg] = value

    def step(self, ins: Instr) -> None:
        op, base, ops = ins.opcode, ins.base, ins.operands
        if ins.addr in self.snapshots and self.prev_unconditional:
            # The code just above ended in an unconditional jump (an if/else arm such as a division's slow path):
            # this block is reached from the conditional branch that skipped that arm, with its state.
            self.env = dict(self.snapshots[ins.addr])
            self.pending = {}
        self.prev_unconditional = (base in ("BRA", "EXIT", "RET") and ins.pred is None) or (
            base == "BRA" and ins.pred == "PT")
        if base == "BRA" and ins.pred is not None:
            target = _branch_target(ins)
            if target is not None and target > ins.addr:
                self.snapshots.setdefault(target, dict(self.env))
            # Falling through a branch taken under `pred` means `pred` was false: writes made under the same
            # predicate just before (e.g. the zero result of an empty merge) did not happen on this path.
            for reg, old in reversed(self.pending.pop(ins.pred, [])):
                self.env[reg] = old
            return
        if base == "CALL":
            target = _branch_target(ins)
            if target is not None:
                self.subroutines.add(target)
            return
        if any(re.fullmatch(r"U?P\d", o) for o in ops[:2]) and base in ("FSETP", "ISETP", "PLOP3", "LOP3", "DSETP"):
            self.pending.clear()  # predicates redefined
        width = 4 if ".128" in op else 2 if ".64" in op else 1
        r = lambda k: self.read(ops[k], ins)  # noqa: E731
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
            node = Node("i2f", (r(1),), ins.addr)
        elif base == "SHFL":
            node = Node("shfl", (r(2), ops[3]), ins.addr)
            self.write(ins, ops[1], node)
            return
        elif base in ("LDG", "LD", "LDC") and ops and ops[0].startswith("R") and "[" in " ".join(ops[1:]):
            group = self.loads
            self.loads += 1
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
            node = r(1)
        elif op == "IMAD.MOV.U32" and len(ops) == 4 and ops[1] == "RZ" and ops[2] == "RZ":
            node = r(3)
        elif op == "CS2R" and ops[1] == "SRZ":
            self.write(ins, ops[0], _const(0.0), 2)
            return
        elif op == "HFMA2.MMA" and ops[1:] == ["-RZ", "RZ", "0", "0"]:
            node = _const(0.0)
        elif base == "ULDC":
            nodes = [Node("param", (f"{ops[1]}+{4 * k}",), ins.addr) for k in range(width)]
            self.write(ins, ops[0], nodes[0], width, nodes)
            return
        else:
            if ops and re.fullmatch(r"U?R\d+", ops[0].replace(".reuse", "")):
                wide = 2 if (".WIDE" in op or ".64" in op) else 1
                self.write(ins, ops[0], Node("int", (base,), ins.addr), wide)
            return
        self.write(ins, ops[0], node)
        if base in ("FADD", "FMUL", "FFMA", "MUFU"):
            self.fp_nodes.append((ins, self.env.get(self._regs(ops[0], 1)[0], node) if ins.pred else node))


def _branch_target(ins: Instr) -> int | None:
    for o in reversed(ins.operands):
        m = re.search(r"0x([0-9a-f]+)$", o.split()[-1]) if o else None
        if m:
            return int(m.group(1), 16)
    m = re.search(r"0x([0-9a-f]+)\s*$", ins.text)
    return int(m.group(1), 16) if m else None


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
        if e.op == "neg" and _is_const(_strip_neg(z)[0], 0.0):
            inner = e.args[0]
            if inner.op == "fma" and _is_const(inner.args[2], -1.0) and r in inner.args[:2] \
                    and r.args[0] in inner.args[:2]:
                return True
    return False


def _as_div(n: Node) -> Node | None:
    # IEEE a/b fast path: r=rcp~(b); t=fma(-b,r,1); r2=fma(r,t,r); q=fma(a,r2,0); e=fma(-b,q,a); fma(r2,e,q)
    if n.op != "fma":
        return None
    q = n.args[2]
    if q.op != "fma" or not _is_const(q.args[2], 0.0):
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


def _as_rsqrt(n: Node) -> tuple[Node, Node] | None:
    """rsqrtf as compiled: MUFU.RSQ with the denormal pre-scale (x * 2^24) and post-scale (* 2^12), both under
    one predicate. Returns (argument, node) when `n` is the (selected) result."""
    if n.op == "sel":
        new, old = n.args
        if new.op == "mul" and old.op == "rsq~" and old in new.args and any(_is_const(a, 4096.0) for a in new.args):
            inner = old.args[0]
            if inner.op == "sel" and inner.args[0].op == "mul" and inner.args[1] in inner.args[0].args:
                return inner.args[1], n
            return inner, n
    if n.op == "rsq~":
        return n.args[0], n
    return None


# ------------------------------------------------------------------------------------------- templates ---

def _received(n: Node) -> bool:
    return n.op in RECEIVED


def _base(n: Node) -> Node:
    """A predicated load (`@P0 LDG`) evaluates to sel(load, old): for matching, it is the load."""
    while n.op == "sel" and n.args[0].op in LEAVES:
        n = n.args[0]
    return n


def _is_neg_of(nm: Node, m: Node) -> bool:
    if nm.op == "neg" and nm.args[0] is m:
        return True
    return nm.op == "const" and m.op == "const" and nm.args[0] == -m.args[0]  # x - 0 with a known 0 mean


def _recip_kind(y: Node) -> str | None:
    if y.op == "rcp" and y.args[0].op == "add" and any(_is_const(a, 1.0) for a in y.args[0].args):
        return "rcp(count + 1)"
    if _is_const(y):
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
            if _base(x).op == "ld" and _is_neg_of(nm, mean):
                kind = _recip_kind(y)
                if kind:
                    return {"delta": d, "x": x, "mean": mean, "recip": kind, "node": f}
    return None


def _push_first_folded(f: Node) -> dict | None:
    """The first push of a chain whose state is known to be zero: fma(x - 0, 1/1, 0) folds to 0 + x."""
    plus_zero = [a for a in f.args if _is_const(a, 0.0) and math.copysign(1.0, a.args[0]) > 0]
    if f.op == "add" and plus_zero:  # 0 + x; x - 0 is the delta of a push (a -0 constant), not this
        x = f.args[1] if f.args[0] is plus_zero[0] else f.args[0]
        if _base(x).op == "ld":
            return {"delta": x, "x": x, "mean": _const(0.0), "recip": "1/1 folded (0 + x)", "node": f}
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
    nA = A.count*coef, nB = B.count*coef, coef = 1/(A.count + B.count). Reports which product the FFMA fuses."""
    if f.op != "fma" or f.args[2].op != "mul":
        return None

    def side(prod):  # a product n*m with n = count * coef, coef = rcp(cA + cB): (n, m, count, coef)
        for n, m in (prod, prod[::-1]):
            if n.op != "mul":
                continue
            for c, coef in (n.args, n.args[::-1]):
                if coef.op == "rcp" and coef.args[0].op == "add" and any(c is a for a in coef.args[0].args):
                    return n, m, c, coef
        return None

    fused, rounded = side(f.args[:2]), side(f.args[2].args)
    if fused is None or rounded is None or fused[3] is not rounded[3]:
        return None
    (n_f, m_f, c_f, coef), (n_r, m_r, c_r, _) = fused, rounded
    if {id(c_f), id(c_r)} != {id(a) for a in coef.args[0].args}:
        return None
    if _received(m_f) and _received(c_f) and not _received(m_r):
        which, own, recv = "first_product", (m_r, c_r, n_r), (m_f, c_f, n_f)
    elif _received(m_r) and _received(c_r) and not _received(m_f):
        which, own, recv = "second_product", (m_f, c_f, n_f), (m_r, c_r, n_r)
    else:
        return None
    return {"contraction": which, "own_mean": own[0], "recv_mean": recv[0], "recv_count": recv[1],
            "n_own": own[2], "received_via": recv[0].op}


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
                if _base(x).op == "ld" and nm.op == "neg":
                    return {"rstd": rs, "mean": nm.args[0]}
    return None


def _output(f: Node) -> tuple[str, dict] | None:
    """The affine output y = fma(gamma, round(rstd * round(x - mean)), beta) (gamma, beta, x loaded), or the
    beta-only variant y = fma(rstd, round(x - mean), beta) that torch uses when gamma is absent."""
    if f.op == "add":  # round(rstd * (x - mean)) + beta, not fused
        for t, b in (f.args, f.args[::-1]):
            if _base(b).op == "ld" and _centered(t) is not None and _base(_centered(t)["rstd"]).op != "ld":
                return "beta_only_unfused", _centered(t)
        return None
    if f.op != "fma" or _base(f.args[2]).op != "ld":
        return None
    for g, t in (f.args[:2], f.args[1::-1]):
        c = _centered(t)
        if _base(g).op == "ld" and c is not None:
            return "affine", c
    for rs, d in (f.args[:2], f.args[1::-1]):
        if d.op == "add" and any(_base(x).op == "ld" for x in d.args) and any(a.op == "neg" for a in d.args) \
                and _base(rs).op not in ("ld",):
            return "beta_only", {"rstd": rs}
    return None


def _rstd_source(n: Node) -> str:
    if _as_rsqrt(n) is not None:
        return "rsqrtf of the statistics (MUFU.RSQ with denormal scaling)"
    return {"ld": "loaded from memory", "lds": "read from shared memory", "in": "live on entry"}.get(n.op, n.op)


def contract_report(instrs: list[Instr], max_listed: int = 12) -> dict:
    """Match a function's floating-point instructions against torch's vectorized LayerNorm arithmetic.

    Returns counts and one example per pattern: Welford pushes (`new_mean = fma(delta, r, mean)`,
    `m2 = fma(delta, x - new_mean, m2)`), merges (cuWelfordCombine with its argument order, and which product of
    the mean update the FFMA fuses), the finish (IEEE division m2/N, rsqrtf(var + eps)) and the output
    (`fma(gamma, rstd*(x - mean), beta)`). FFMAs inside the IEEE reciprocal/division idioms and in called
    slow-path subroutines are counted apart; every other FFMA that no pattern explains is listed.
    """
    ev = _Evaluator()
    for ins in instrs:
        ev.step(ins)
    sub_start = min(ev.subroutines) if ev.subroutines else None
    nodes = [(ins, node.args[0] if node.op == "sel" else node) for ins, node in ev.fp_nodes]
    report = {"push_mean": {}, "push_m2": 0, "merge": {}, "merge_m2": 0, "output": {}, "division": 0,
              "rsqrt": 0, "idiom_ffma": 0, "subroutine_ffma": 0, "examples": {}, "unexplained_ffma": [],
              "unexplained_count": 0}
    explained: set[int] = set()

    def example(key, ins, node):
        report["examples"].setdefault(key, {"sass": ins.text, "expr": render(node, 3)})
        explained.add(ins.addr)

    pushes, merges = [], []
    for ins, node in nodes:  # pass 1: the roots (new mean of a push, new mean of a merge)
        p = _push_mean(node) or (_push_first_folded(node) if ins.base == "FADD" else None)
        if p is not None:
            pushes.append(p)
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
    return report


# --------------------------------------------------------------------------------- summaries to commit ---

def _clean(obj):
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items() if not isinstance(v, Node)}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def function_summary(sass_text: str, function: str, label: str) -> dict:
    """Small, committable summary of one function's SASS: FP opcode histogram, the ordered FP op sequence of the
    stats loop / merges / finish / output regions, and the contract report."""
    funcs = parse_sass(sass_text)
    if function not in funcs:
        raise ValueError(f"{function!r} not in the disassembly; have {sorted(funcs)[:5]}…")
    instrs = funcs[function]
    return {"label": label, "function": function, "instructions": len(instrs),
            "regions": regions(instrs), "contract": _clean(contract_report(instrs))}


def regions(instrs: list[Instr]) -> dict[str, list[str]]:
    """FP opcode sequences of a LayerNorm kernel's regions, split at anchors: `loop` (up to the first
    SHFL.DOWN), `warp_merge` (up to the first barrier or SHFL.IDX after the last SHFL.DOWN),
    `block_tree_and_finish` (up to just past the first MUFU.RSQ), `output` (the rest of the kernel body) and
    `subroutines` (the division/reciprocal slow paths reached by CALL, after the body). A kernel without
    shuffles (output only) has `output` and `subroutines`."""
    calls = [_branch_target(i) for i in instrs if i.base == "CALL"]
    sub = min((c for c in calls if c is not None), default=None)
    end = sub if sub is not None else instrs[-1].addr + 0x10
    out: dict[str, list[str]] = {}
    shfl = [i.addr for i in instrs if i.opcode.startswith("SHFL.DOWN") and i.addr < end]
    if shfl:
        after = [i.addr for i in instrs if shfl[-1] < i.addr < end
                 and (i.opcode.startswith("BAR") or i.opcode.startswith("SHFL.IDX"))]
        tree = after[0] if after else shfl[-1] + 0x10
        rsq = [i.addr for i in instrs if i.opcode == "MUFU.RSQ" and i.addr < end]
        finish = rsq[0] + 0x30 if rsq else end
        out["loop"] = fp_op_sequence(instrs, None, shfl[0])
        out["warp_merge"] = fp_op_sequence(instrs, shfl[0], tree)
        out["block_tree_and_finish"] = fp_op_sequence(instrs, tree, finish)
        out["output"] = fp_op_sequence(instrs, finish, end)
    else:
        out["output"] = fp_op_sequence(instrs, None, end)
    out["subroutines"] = fp_op_sequence(instrs, end, None) if sub is not None else []
    return out


def our_kernels_summary(arch: str = "sm_90", kernels: tuple[str, ...] = ("reference_stats", "affine_rows")) -> dict:
    """Compile our reference-order kernels (through labkit.compile) and summarise their SASS."""
    from labkit.core.compile import compile_kernel

    out = {}
    for k in kernels:
        compiled = compile_kernel(k, arch)
        text = disassemble(compiled.cubin)
        funcs = parse_sass(text)
        for fn in funcs:
            out[fn] = {**function_summary(text, fn, f"ours: kernels/{k}.cu"),
                       "compile_record": compiled.record.to_json(),
                       "cubin_padded_bytes": complete_cubin(compiled.cubin)[1]}
    return out


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


TORCH_FUNCTIONS = {
    "vectorized_layer_norm_kernel<float, float, false>": "vectorized_layer_norm_kernelIffLb0EE",
    "RowwiseMomentsCUDAKernel<float, float, false>": "RowwiseMomentsCUDAKernelIffLb0EE",
    "LayerNormForwardCUDAKernel<float, float, false>": "LayerNormForwardCUDAKernelIffLb0EE",
}


def torch_wheel_summary(wheel: Path, workdir: Path, arch: str = "sm_90") -> dict:
    """Extract libtorch_cuda.so from a torch CUDA wheel, find the `arch` cubin holding the LayerNorm kernels,
    and summarise their SASS. Everything large stays in `workdir` (never commit it); the return value is small.
    Needs cuobjdump (the wheel is read with zipfile). About a minute and ~1.2 GB of disk for torch 2.11."""
    import zipfile

    wheel, workdir = Path(wheel), Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    lib = workdir / "libtorch_cuda.so"
    commands = []
    if not lib.is_file():
        with zipfile.ZipFile(wheel) as z, z.open("torch/lib/libtorch_cuda.so") as src, open(lib, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
    commands.append(f"unzip -p {wheel.name} torch/lib/libtorch_cuda.so > libtorch_cuda.so")
    with zipfile.ZipFile(wheel) as z:
        version_py = z.read("torch/version.py").decode()
    listing = _run("cuobjdump", "-lelf", str(lib))
    commands.append("cuobjdump -lelf libtorch_cuda.so")
    names = re.findall(r"ELF file\s+\d+:\s+(\S+)", listing)
    candidates = [n for n in names if n.endswith(f".{arch}.cubin")]
    found = None
    cubdir = workdir / arch
    cubdir.mkdir(exist_ok=True)
    existing = sorted(cubdir.glob(f"*.{arch}.cubin"))
    if len(existing) < len(candidates):
        subprocess.run([find_tool("cuobjdump"), "-xelf", arch, str(lib)], cwd=cubdir, check=True,
                       capture_output=True, timeout=1800)
    commands.append(f"cuobjdump -xelf {arch} libtorch_cuda.so")
    key = TORCH_FUNCTIONS["vectorized_layer_norm_kernel<float, float, false>"].encode()
    for path in sorted(cubdir.glob(f"*.{arch}.cubin")):
        if key in path.read_bytes():
            found = path
            break
    if found is None:
        raise RuntimeError(f"no {arch} cubin in {lib} holds vectorized_layer_norm_kernel<float,float,false>")
    text = disassemble(found.read_bytes())
    commands.append(f"cuobjdump -sass {found.name}")
    funcs = parse_sass(text)
    usage = {u.function: u.to_json() for u in resource_usage(found.read_bytes())}
    summaries = {}
    for pretty, frag in TORCH_FUNCTIONS.items():
        mangled = [f for f in funcs if frag in f]
        if len(mangled) != 1:
            raise RuntimeError(f"expected one function matching {frag}, found {mangled}")
        summaries[pretty] = {**function_summary(text, mangled[0], f"torch: {pretty}"),
                             "resource_usage": usage.get(mangled[0])}
    return {"wheel": wheel.name, "wheel_sha256": sha256_file(wheel),
            "torch_version": re.search(r"__version__ = '([^']+)'", version_py).group(1),
            "torch_git_version": re.search(r"git_version = '([^']+)'", version_py).group(1),
            "library": "torch/lib/libtorch_cuda.so", "library_sha256": sha256_file(lib),
            "cubin": found.name, "cubin_sha256": sha256_file(found), "arch": arch,
            "commands": commands, "tools": tool_versions(), "functions": summaries}


CONTRACT_KEYS = ("push_mean", "push_m2", "merge", "merge_m2", "division", "rsqrt", "output")


def _ours_totals(ours_fns: list[dict]) -> dict:
    tot: dict = {}
    for f in ours_fns:
        for k in CONTRACT_KEYS + ("unexplained_count",):
            v = f["contract"].get(k)
            if isinstance(v, dict):
                d = tot.setdefault(k, {})
                for kind, n in v.items():
                    d[kind] = d.get(kind, 0) + n
            else:
                tot[k] = tot.get(k, 0) + (v or 0)
    return tot


def compare(torch_fn: dict, ours_fns: list[dict]) -> list[dict]:
    """Side-by-side rows of the contract patterns: torch's function vs ours (stats + output kernels together),
    with one SASS instruction of each side as an example."""
    ours = _ours_totals(ours_fns)
    rows = []
    for key in CONTRACT_KEYS:
        ex_keys = [k for k in torch_fn["contract"]["examples"] if k == key or k.startswith(key + "_")
                   or (key == "merge" and k == "merge_mean")]
        ex_keys = [k for k in ex_keys if "folded" not in k and "beta_only" not in k] or ex_keys
        ex = ex_keys[0] if ex_keys else None
        ours_ex = next((f["contract"]["examples"][ex]["sass"] for f in ours_fns
                        if ex and ex in f["contract"]["examples"]), "")
        rows.append({"pattern": key, "torch": torch_fn["contract"].get(key), "ours": ours.get(key),
                     "torch SASS": torch_fn["contract"]["examples"].get(ex, {}).get("sass", "") if ex else "",
                     "ours SASS": ours_ex})
    return rows


def verdict(torch_fn: dict, ours_fns: list[dict]) -> dict:
    """Do ours and torch's make the same FMA contractions? Checked pattern by pattern on the kinds present, not on
    how many times each occurs (unrolling differs: torch's loop reads 4 float4 per trip, ours 2)."""
    t, o = torch_fn["contract"], _ours_totals(ours_fns)
    rcp = "rcp(count + 1)"
    checks = {
        "push: new_mean = fma(x - mean, 1/(count+1), mean)": rcp in t["push_mean"] and rcp in o["push_mean"],
        "push: m2 = fma(x - mean, x - new_mean, m2), one per push": t["push_m2"] == sum(t["push_mean"].values())
        and o["push_m2"] == sum(o["push_mean"].values()),
        "merge: mean = fma(nA, A.mean, round(nB*B.mean)), A = the received state":
            bool(t["merge"]) and set(t["merge"]) == set(o["merge"]) and all(k.startswith("first_product")
                                                                            for k in t["merge"]),
        "merge: sigma2 = fma(nB, round(round(delta*delta)*A.count), A.sigma2 + B.sigma2), one per merge":
            t["merge_m2"] == sum(t["merge"].values()) and o["merge_m2"] == sum(o["merge"].values()),
        "finish: m2/N by IEEE division, then rsqrtf(var + eps) (MUFU.RSQ)": t["division"] > 0 and o["division"] > 0
        and t["rsqrt"] > 0 and o["rsqrt"] > 0,
        "output: fma(gamma, round(rstd*round(x - mean)), beta)": t["output"].get("affine", 0) > 0
        and o["output"].get("affine", 0) > 0,
        "every FFMA accounted for (torch)": t["unexplained_count"] == 0,
        "every FFMA accounted for (ours)": o["unexplained_count"] == 0,
    }
    notes = []
    folded = [k for k in o["push_mean"] if k != rcp]
    if folded:
        notes.append("ours: the compiler peels each thread's first float4, where the counts are known, and "
                     "folds its reciprocals (" + ", ".join(folded) + ") into constants: the correctly rounded "
                     "values the IEEE division gives at run time, so the same bits as torch's run-time division")
    if t["output"].get("beta_only"):
        notes.append(f"torch: in its gamma-less path (bias only) {t['output']['beta_only']} outputs are "
                     "fma(rstd, x - mean, beta) and " f"{t['output'].get('beta_only_unfused', 0)} are "
                     "round(rstd*(x - mean)) + beta (FMUL then FADD, the FMUL shared with the no-affine path): "
                     "one float4 component in four rounds twice there. Not used by affine LayerNorm")
    return {"same_contractions": all(checks.values()), "checks": checks, "ours_totals": o, "notes": notes}


def build_comparison(wheel: Path, workdir: Path, arch: str = "sm_90") -> dict:
    """The committed record: torch's LayerNorm kernels from the wheel vs ours, and the verdict."""
    import datetime as _dt

    torch_part = torch_wheel_summary(wheel, workdir, arch)
    ours = our_kernels_summary(arch)
    stats = [v for v in ours.values()]
    vec = torch_part["functions"]["vectorized_layer_norm_kernel<float, float, false>"]
    return {"schema": 1, "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "produced_by": f"python -m labkit.sass --wheel {Path(wheel).name} --workdir <tmp> --arch {arch}",
            "torch": torch_part, "ours": ours, "comparison": compare(vec, stats), "verdict": verdict(vec, stats)}


def committed_comparisons(root: Path = SASS_DIR) -> list[Path]:
    return sorted(Path(root).glob("*.json"))


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Compare torch's LayerNorm SASS (from a CUDA wheel) with ours")
    ap.add_argument("--wheel", required=True, help="torch CUDA wheel, e.g. torch-2.11.0-cp312-...whl")
    ap.add_argument("--workdir", required=True, help="scratch folder outside the repository (GBs)")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--out", default=None, help="JSON to write (default data/sass/<torch version>-<arch>.json)")
    args = ap.parse_args(argv)
    if Path(args.workdir).resolve().is_relative_to(REPO_ROOT):
        raise SystemExit("--workdir must be outside the repository: torch's binaries are never committed")
    record = build_comparison(Path(args.wheel), Path(args.workdir), args.arch)
    out = Path(args.out) if args.out else SASS_DIR / f"layernorm-torch-{record['torch']['torch_version']}-{args.arch}.json"
    from labkit.core.atomic import atomic_write_json

    atomic_write_json(out, record)
    print(f"wrote {out}: same contractions = {record['verdict']['same_contractions']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
