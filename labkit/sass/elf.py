"""A cubin's ELF sections: each function's machine code, and its resource usage (registers, shared memory,
stack, local memory) from cuobjdump or, without it, from the `.nv.info` records and section sizes."""
from __future__ import annotations

import re
import struct
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from labkit.core.cubin import complete_cubin
from labkit.sass.tools import find_tool, run_tool


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
            text = run_tool("cuobjdump", "--dump-resource-usage", str(path))
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
