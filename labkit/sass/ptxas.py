"""ptxas's own report (`--ptxas-options=-v`): registers, barriers, shared memory, stack frame and spills per
entry function, parsed from the NVRTC log of a recompilation with the book's options."""
from __future__ import annotations

import re

from labkit.core.compile import BASE_OPTIONS, compile_kernel, nvrtc_compile
from labkit.sass.elf import text_sections


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
    options = BASE_OPTIONS + (f"--gpu-architecture={arch}", "--ptxas-options=-v")
    verbose_cubin, log = nvrtc_compile(kernel, options)
    cached = compile_kernel(kernel, arch)
    return {"kernel": kernel, "arch": arch, "options": list(options),
            "functions": parse_ptxas_log(log.rstrip("\0")),
            "code_identical": text_sections(verbose_cubin) == text_sections(cached.cubin)}
