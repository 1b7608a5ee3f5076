"""The element types our LayerNorm kernels are built for, and the compile options that select each
(kernels/dtype.cuh): float32 by default, bfloat16 and float16 with the arithmetic of torch's vectorized kernel for
them (loads converted to float, float statistics, the output rounded to T once at the store).

Kernel files that take the options: rows_fused.cu (every entry point), and the chain's chain_stats_tma.cu (its tma
and ring blockings) and affine_columns.cu (its output pass); for the backward grad_row_sums.cu, grad_chain_sums.cu,
grad_rows_fused.cu and grad_columns.cu (`KERNELS`). The drop-in serves bfloat16/float16 forwards through them
(labkit.ops.paths.DTYPES) and their backwards through the backward's (labkit.ops.backward.DROP_IN_DTYPES).
The autocast builds ("autocast_bfloat16", "autocast_float16": AUTOCAST) are what CUDA autocast's float32 policy
gives torch's kernel without its casts: x (and dX) of T, gamma, beta, y, dy, dgamma and dbeta float32
(-DLN_X_BF16 / -DLN_X_FP16). The chain schedule's files take them (AUTOCAST_KERNELS; its statistics pass reads
only x, so it runs the T build); the drop-in serves them through labkit.ops.dropin.autocast.
GPU tests: tests/test_gpu_low_precision.py, test_gpu_autocast.py; docs/decisions.md#how_people_train,
#low_precision_backward, #autocast_build.
"""
from __future__ import annotations

FLOAT32 = "float32"
LOW_PRECISION = ("bfloat16", "float16")
KERNELS = ("rows_fused", "chain_stats_tma", "affine_columns",  # the kernel files built for LOW_PRECISION too
           "grad_row_sums", "grad_chain_sums", "grad_rows_fused", "grad_columns")

AUTOCAST = ("autocast_bfloat16", "autocast_float16")
AUTOCAST_KERNELS = ("affine_columns", "grad_chain_sums", "grad_columns")  # built for AUTOCAST too

_OPTIONS = {FLOAT32: (), "bfloat16": ("-DLN_BF16",), "float16": ("-DLN_FP16",),
            "autocast_bfloat16": ("-DLN_X_BF16",), "autocast_float16": ("-DLN_X_FP16",)}


def options(dtype: str) -> tuple[str, ...]:
    """The -D flags of kernels/dtype.cuh for `dtype` (a torch dtype's name: 'float32', 'bfloat16', 'float16', or
    an autocast build); none for float32, so its cubins are the default ones. ValueError naming the value for any
    other."""
    if dtype not in _OPTIONS:
        raise ValueError(f"dtype must be one of {tuple(_OPTIONS)}, got {dtype!r}")
    return _OPTIONS[dtype]


def itemsize(dtype: str) -> int:
    """Bytes per element of x: a kernel's 4-element vector of x is 4 * itemsize bytes, the alignment it needs."""
    options(dtype)
    return 4 if dtype == FLOAT32 else 2


def x_dtype(dtype: str) -> str:
    """x's torch dtype name in a build: T for an autocast build, the build's name otherwise."""
    options(dtype)
    return dtype.removeprefix("autocast_")


def param_dtype(dtype: str) -> str:
    """The torch dtype name of gamma, beta, y, dy and the parameter gradients in a build: float32 in the autocast
    builds, x's elsewhere."""
    return FLOAT32 if dtype in AUTOCAST else x_dtype(dtype)

