"""What the paths' launches (labkit.ops.launches) and the dispatch rule need to know about a GPU, read from the
device itself.

Limits are the device's own (the CUDA runtime's device attributes), never typed per arch: an A100 has 163 KiB of
opt-in shared memory per block, an H200 227 KiB, an RTX 4090 99 KiB. Launches are checked against these numbers, and a
Device can be written by hand where there is no GPU (CPU tests, compile-only checks).

The arch override (CONTRIBUTING.md "GPU runs"): LABKIT_ARCH=compute_80 makes this process treat its GPU as an sm_80 one —
kernels compiled by NVRTC as compute_80 PTX, which the driver JIT-compiles for the GPU present, no tensor maps, and
the opt-in shared memory capped at sm_80's — so that the portable paths are exercised end to end on a newer GPU.
It can only go down (PTX of an older arch runs on a newer GPU, never the reverse).
"""
from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass

# opt-in dynamic shared memory per block by compute capability, bytes (CUDA C++ Programming Guide, "Technical
# Specifications per Compute Capability"): what a device of that arch allows at most; the override caps to it
ARCH_SMEM_OPTIN = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024, 100: 227 * 1024,
                   103: 227 * 1024, 120: 99 * 1024}
OVERRIDE_ENV = "LABKIT_ARCH"


@dataclass(frozen=True)
class Device:
    name: str
    arch: int              # compute capability as major * 10 + minor: 90 for sm_90
    sm_count: int
    smem_optin_bytes: int  # the most dynamic shared memory one block may opt in to
    max_grid_y: int        # grid.y (and grid.z) limit; grid.x is 2**31 - 1 on every arch we build for
    smem_block_bytes: int = 48 * 1024  # what a block gets without opting in (cudaDevAttrMaxSharedMemoryPerBlock)
    ptx: bool = False      # kernels go to the driver as compute_<arch> PTX (the arch override), not sm_<arch> cubins
    native_arch: int | None = None  # under the override: the GPU's own arch

    @property
    def arch_name(self) -> str:
        return f"sm_{self.arch}"

    @property
    def target(self) -> str:
        """What NVRTC compiles for on this device: sm_XY (a cubin) or, under the override, compute_XY (PTX)."""
        return f"compute_{self.arch}" if self.ptx else f"sm_{self.arch}"

    @property
    def label(self) -> str:
        """The device as a reader should see it: its name, and the override when there is one."""
        if self.native_arch is None:
            return f"{self.name} ({self.arch_name})"
        return f"{self.name} (sm_{self.native_arch}) running as {self.target} ({OVERRIDE_ENV})"

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
                from labkit.core.toolkit import check_match

                check_match()  # before CuPy's first runtime call: the CUDA extra must be torch's major
                from cupy.cuda import runtime

                p = runtime.getDeviceProperties(index)
                name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
                d = _devices[index] = overridden(
                    Device(name, p["major"] * 10 + p["minor"], p["multiProcessorCount"], p["sharedMemPerBlockOptin"],
                           p["maxGridSize"][1], p["sharedMemPerBlock"]), os.environ.get(OVERRIDE_ENV, ""))
    return d


def on_chip_storage(index: int) -> dict:
    """What device `index` can hold on chip, in bytes (cudaGetDeviceProperties through CuPy): per SM, its shared
    memory and its register file; and the L2. Notebook 07 bounds schedules that keep data on chip with it."""
    from cupy.cuda import runtime

    p = runtime.getDeviceProperties(index)
    return {"sm_count": p["multiProcessorCount"], "smem_per_sm": p["sharedMemPerMultiprocessor"],
            "registers_per_sm": 4 * p["regsPerMultiprocessor"],  # 32-bit registers, 4 bytes each
            "l2": p["l2CacheSize"]}


def overridden(device: Device, override: str) -> Device:
    """`device` as the arch override `override` ("" for none, else "compute_XY") makes it; ValueError naming the
    value when the override cannot apply (not compute_XY, an arch with no known limits, or above the GPU's own)."""
    if not override:
        return device
    m = re.fullmatch(r"compute_(\d{2,3})", override)
    if m is None:
        raise ValueError(f"{OVERRIDE_ENV} must look like 'compute_80', got {override!r}")
    arch = int(m.group(1))
    if arch not in ARCH_SMEM_OPTIN:
        raise ValueError(f"{OVERRIDE_ENV}={override}: no known limits for sm_{arch} (known: "
                         f"{', '.join(f'sm_{a}' for a in ARCH_SMEM_OPTIN)})")
    if arch > device.arch:
        raise ValueError(f"{OVERRIDE_ENV}={override} is above the GPU's own {device.arch_name}: PTX runs only on its "
                         "arch or a newer one")
    return Device(device.name, arch, device.sm_count, min(device.smem_optin_bytes, ARCH_SMEM_OPTIN[arch]),
                  device.max_grid_y, device.smem_block_bytes, ptx=True, native_arch=device.arch)


def current_index(device) -> int:
    """The index of a torch CUDA device; torch.device("cuda") means the current device, as torch takes it."""
    if device.index is not None:
        return device.index
    import torch

    return torch.cuda.current_device()
