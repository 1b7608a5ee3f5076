"""Cubin images as NVRTC hands them over, made whole before they are hashed, cached or disassembled."""
from __future__ import annotations

import struct


def _elf_extent(blob: bytes) -> int:
    """Bytes an ELF64 file declares: the furthest end of its header tables and section contents."""
    if len(blob) < 64 or not blob.startswith(b"\x7fELF") or blob[4] != 2:
        raise ValueError("not an ELF64 file")
    e_phoff, e_shoff = struct.unpack_from("<QQ", blob, 0x20)
    e_phentsize, e_phnum, e_shentsize, e_shnum = struct.unpack_from("<HHHH", blob, 0x36)
    end = max(64, e_phoff + e_phentsize * e_phnum, e_shoff + e_shentsize * e_shnum)
    for i in range(e_shnum):
        at = e_shoff + i * e_shentsize
        if at + 64 > len(blob):
            break
        sh_type, = struct.unpack_from("<I", blob, at + 4)
        sh_offset, sh_size = struct.unpack_from("<QQ", blob, at + 0x18)
        if sh_type != 8:  # SHT_NOBITS occupies no file bytes
            end = max(end, sh_offset + sh_size)
    return end


def complete_cubin(cubin: bytes) -> tuple[bytes, int]:
    """The cubin padded to the size its ELF headers declare, and how many bytes were missing.

    CuPy 14.2's `nvrtc.getCUBIN` returns the image one byte short (it drops the final byte as if it were a C
    string's terminator). NVRTC places the program header table last, so the missing byte is the top byte of the
    last entry's 8-byte alignment field, which is zero: padding with zeros restores the exact image (checked in
    tests against nvrtcGetCUBIN called through ctypes). The driver loads the short image anyway; the disassemblers
    refuse it, hence this function.
    """
    missing = _elf_extent(cubin) - len(cubin)
    if missing < 0:
        return cubin, 0
    if missing > 8:
        raise ValueError(f"cubin is {missing} bytes shorter than its ELF headers declare: truncated, not padded")
    return cubin + b"\0" * missing, missing
