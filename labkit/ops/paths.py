"""The kernel paths our LayerNorm can take, by name: what the drop-in dispatches between and what the dispatch
measurement times. Each is an op module (or, for an entry point of another path's kernel file, an object such as
rows_fused.rows_counted) exporting PATH, KERNELS (its kernels/*.cu files), MIN_ARCH and launches(rows, n, device),
and KERNEL_MIN_ARCH where one of its files needs a later arch than the path (the chain's w1/w4 blockings).
Adding a path is adding it here; "native" (torch's own kernel) is not a path of ours.
"""
from __future__ import annotations

from labkit.core.device import Device
from labkit.ops import chain, dtypes, reference_order, rows_cluster, rows_fused, rows_staged
from labkit.ops.rows_fused import rows_counted, rows_counted_block

NATIVE = "native"
PATHS = {m.PATH: m for m in (chain, rows_fused, rows_counted, rows_counted_block, rows_staged, rows_cluster,
                             reference_order)}


def _module(path: str):
    if path not in PATHS:
        raise ValueError(f"path must be one of {tuple(PATHS)}, got {path!r}")
    return PATHS[path]


# The element types each path serves (labkit.ops.dtypes): the chain's tma and ring blockings and rows_fused read
# bfloat16/float16 too; every other path float32 only. The counted entry points are built for 2-byte rows as well
# (rows_fused.cu) but not offered: with no 2-byte table the rule reads float32's scores, where they win by 2-4% at
# N = 768-1024, and in bf16 both were slower than rows_fused at every ordinary shape probed (H100, graph replay:
# 8192x1024 rows_counted_block 20.5 us, rows_counted 15.5, rows_fused 13.8; docs/decisions.md#how_people_train).
DTYPES = {name: (dtypes.FLOAT32,) + (dtypes.LOW_PRECISION if name in (chain.PATH, rows_fused.PATH) else ())
          for name in PATHS}


def launches(path: str, rows: int, n: int, device: Device, dtype: str = dtypes.FLOAT32):
    """The frozen launches of `path` for rows x N of `dtype` on `device`; ValueError where that path cannot take
    it."""
    m = _module(path)
    if dtype not in DTYPES[path]:
        raise ValueError(f"path {path} is built for {' and '.join(DTYPES[path])}, got dtype {dtype}")
    return m.launches(rows, n, device) if dtype == dtypes.FLOAT32 else m.launches(rows, n, device, dtype=dtype)


def candidates(rows: int, n: int, device: Device, dtype: str = dtypes.FLOAT32) -> dict:
    """{path: launches} for every path that can take rows x N of `dtype` on `device`."""
    out = {}
    for name in PATHS:
        try:
            out[name] = launches(name, rows, n, device, dtype)
        except ValueError:
            continue
    return out


def public_function(path: str):
    """`path`'s own public LayerNorm function (`<path>_layer_norm`: validate, describe the launches, launch), or
    None for the paths that run only through chain_layer_norm's schedules (chain, rows_fused)."""
    if path == chain.PATH:
        return None
    m = _module(path)
    owner = rows_fused if isinstance(m, rows_fused.CountedPath) else m  # an entry point's function is in its file's
    return getattr(owner, f"{path}_layer_norm", None)


def kernels(path: str, arch: int | None = None) -> tuple[str, ...]:
    """`path`'s kernel files; with `arch`, those built for it."""
    if path == NATIVE:
        return ()
    m = PATHS[path]
    floor = getattr(m, "KERNEL_MIN_ARCH", {})
    return tuple(k for k in m.KERNELS if arch is None or arch >= floor.get(k, m.MIN_ARCH))


def candidate_kernels(arch: int) -> tuple[str, ...]:
    """Every kernel file of every path built for `arch`: what a measurement there could make the rule pick."""
    return tuple(k for name, m in PATHS.items() if arch >= m.MIN_ARCH for k in kernels(name, arch))
