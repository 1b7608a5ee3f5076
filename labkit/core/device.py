"""What launch plans and the dispatch rule need to know about a GPU, read from the device itself.

Limits are the device's own (the CUDA runtime's device attributes), never typed per arch: an A100 has 163 KiB of
opt-in shared memory per block, an H200 227 KiB, an RTX 4090 99 KiB. Plans compare against these numbers, and a
Device can be written by hand where there is no GPU (CPU tests, compile-only checks).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class Device:
    name: str
    arch: int              # compute capability as major * 10 + minor: 90 for sm_90
    sm_count: int
    smem_optin_bytes: int  # the most dynamic shared memory one block may opt in to
    max_grid_y: int        # grid.y (and grid.z) limit; grid.x is 2**31 - 1 on every arch we build for
    smem_block_bytes: int = 48 * 1024  # what a block gets without opting in (cudaDevAttrMaxSharedMemoryPerBlock)

    @property
    def arch_name(self) -> str:
        return f"sm_{self.arch}"

    @property
    def tensor_maps(self) -> bool:
        """Tensor-map (TMA) copies and cluster-scope mbarrier transactions: sm_90 and later."""
        return self.arch >= 90


_lock = threading.Lock()
_devices: dict[int, Device] = {}


def device_info(index: int) -> Device:
    """The Device of CUDA device `index`, read once per process (cudaGetDeviceProperties through CuPy)."""
    d = _devices.get(index)
    if d is None:
        with _lock:
            d = _devices.get(index)
            if d is None:
                from cupy.cuda import runtime

                p = runtime.getDeviceProperties(index)
                name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
                d = _devices[index] = Device(name, p["major"] * 10 + p["minor"], p["multiProcessorCount"],
                                             p["sharedMemPerBlockOptin"], p["maxGridSize"][1], p["sharedMemPerBlock"])
    return d


def current_index(device) -> int:
    """The index of a torch CUDA device; torch.device("cuda") means the current device, as torch takes it."""
    if device.index is not None:
        return device.index
    import torch

    return torch.cuda.current_device()
