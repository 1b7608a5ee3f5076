"""The cubin NVRTC hands over through CuPy, made whole (labkit.core.cubin)."""
import pytest

from labkit.core.compile import compile_kernel
from labkit.core.cubin import _elf_extent, complete_cubin


def test_complete_cubin_restores_the_byte_cupy_drops(cache_dir):
    import ctypes
    import os

    from cupy_backends.cuda.libs import nvrtc

    from labkit.core.compile import BASE_OPTIONS, kernel_sources

    cubin = compile_kernel("affine_rows", "sm_90").cubin
    full, missing = complete_cubin(cubin)
    assert 0 <= missing <= 8 and len(full) == _elf_extent(full)
    # Against NVRTC itself: nvrtcGetCUBINSize / nvrtcGetCUBIN through ctypes on a fresh program.
    src, headers = kernel_sources("affine_rows")
    prog = nvrtc.createProgram(src, "affine_rows.cu", tuple(h.encode() for h in headers.values()),
                               tuple(n.encode() for n in headers))
    try:
        nvrtc.compileProgram(prog, BASE_OPTIONS + ("--gpu-architecture=sm_90",))
        libs = [line.split()[-1] for line in open(f"/proc/{os.getpid()}/maps") if "libnvrtc.so" in line]
        if not libs:
            pytest.skip("libnvrtc not visible in /proc/self/maps")
        lib = ctypes.CDLL(libs[0])
        size = ctypes.c_size_t()
        assert lib.nvrtcGetCUBINSize(ctypes.c_void_p(prog), ctypes.byref(size)) == 0
        buf = ctypes.create_string_buffer(size.value)
        assert lib.nvrtcGetCUBIN(ctypes.c_void_p(prog), buf) == 0
        assert complete_cubin(nvrtc.getCUBIN(prog))[0] == buf.raw
    finally:
        nvrtc.destroyProgram(prog)


def test_complete_cubin_refuses_real_truncation():
    cubin = compile_kernel("affine_rows", "sm_90").cubin
    with pytest.raises(ValueError, match="truncated"):
        complete_cubin(cubin[:-200])
