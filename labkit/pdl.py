"""Programmatic dependent launch (sm_90) through the driver's cuLaunchKernelEx, by ctypes.

CuPy's launcher has no launch attributes, so a kernel that should start while the previous kernel on its stream
is still running goes through here. With CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION the dependent
grid is launched once every block of the previous grid has executed griddepcontrol.launch_dependents (or
exited); the dependent must execute griddepcontrol.wait, which returns when the previous grid has completed
and its memory is visible, before it reads anything that grid wrote. Stream capture records this as a
programmatic edge, so it works under CUDA graphs as well.
"""
from __future__ import annotations

import ctypes

import numpy as np

_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID


class _Attribute(ctypes.Structure):
    # CUlaunchAttribute: a 4-byte id, padding to 8, then a 64-byte value union whose first int is used here.
    _fields_ = [("id", ctypes.c_uint32), ("pad", ctypes.c_uint32), ("value", ctypes.c_int32),
                ("rest", ctypes.c_uint8 * 60)]


class _Config(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint32 * 3), ("block", ctypes.c_uint32 * 3), ("shared_mem", ctypes.c_uint32),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_Attribute)), ("num_attrs", ctypes.c_uint32)]


_lib = None


def _driver():
    global _lib
    if _lib is None:
        _lib = ctypes.CDLL("libcuda.so.1")
        _lib.cuLaunchKernelEx.restype = ctypes.c_int
    return _lib


def kernel_params(args) -> tuple[ctypes.Array, list]:
    """cuLaunchKernel's kernelParams: one pointer per argument to a copy of its value (tensors by data_ptr,
    numpy scalars by their C type, 128-byte tensor maps by their bytes); the list keeps the copies alive."""
    keep = []
    for a in args:
        if hasattr(a, "data_ptr"):
            keep.append(ctypes.c_void_p(a.data_ptr()))
        elif isinstance(a, np.ndarray) and a.dtype.kind == "V":
            keep.append(ctypes.create_string_buffer(a.tobytes(), a.nbytes))
        elif isinstance(a, np.int32):
            keep.append(ctypes.c_int32(int(a)))
        elif isinstance(a, np.float32):
            keep.append(ctypes.c_float(float(a)))
        else:
            raise ValueError(f"programmatic launch: unsupported kernel argument type {type(a).__name__}")
    params = (ctypes.c_void_p * len(keep))(*[ctypes.cast(ctypes.pointer(k), ctypes.c_void_p) for k in keep])
    return params, keep


def launch_programmatic(function_ptr: int, grid, block, args, shared_mem: int, stream_ptr: int) -> None:
    grid, block = (tuple(grid) + (1, 1))[:3], (tuple(block) + (1, 1))[:3]
    attr = _Attribute(id=_PROGRAMMATIC_STREAM_SERIALIZATION, value=1)
    config = _Config((ctypes.c_uint32 * 3)(*grid), (ctypes.c_uint32 * 3)(*block), shared_mem,
                     ctypes.c_void_p(stream_ptr), ctypes.pointer(attr), 1)
    params, keep = kernel_params(args)
    res = _driver().cuLaunchKernelEx(ctypes.byref(config), ctypes.c_void_p(function_ptr), params, None)
    del keep
    if res != 0:
        raise RuntimeError(f"cuLaunchKernelEx failed with CUresult {res}")
