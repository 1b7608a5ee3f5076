"""The element types our LayerNorm kernels are built for, and the compile options that select each
(kernels/dtype.cuh): float32 by default, bfloat16 and float16 with the arithmetic of torch's vectorized kernel for
them (loads converted to float, float statistics, the output rounded to T once at the store).

Kernel files that take the options: rows_fused.cu (every entry point), and the chain's chain_stats_tma.cu (its tma
and ring blockings) and affine_columns.cu (its output pass); for the backward grad_row_sums.cu, grad_chain_sums.cu,
grad_rows_fused.cu and grad_columns.cu (`KERNELS`). The drop-in serves bfloat16/float16 forwards through them
(labkit.ops.paths.DTYPES) and their backwards through the backward's (labkit.ops.backward.DROP_IN_DTYPES).
GPU tests: tests/test_gpu_low_precision.py; docs/decisions.md#how_people_train, #low_precision_backward.
"""
from __future__ import annotations

FLOAT32 = "float32"
LOW_PRECISION = ("bfloat16", "float16")
KERNELS = ("rows_fused", "chain_stats_tma", "affine_columns",  # the kernel files built for LOW_PRECISION too
           "grad_row_sums", "grad_chain_sums", "grad_rows_fused", "grad_columns")

_OPTIONS = {FLOAT32: (), "bfloat16": ("-DLN_BF16",), "float16": ("-DLN_FP16",)}


def options(dtype: str) -> tuple[str, ...]:
    """The -D flags of kernels/dtype.cuh for `dtype` (a torch dtype's name: 'float32', 'bfloat16', 'float16');
    none for float32, so its cubins are the default ones. ValueError naming the value for any other."""
    if dtype not in _OPTIONS:
        raise ValueError(f"dtype must be one of {tuple(_OPTIONS)}, got {dtype!r}")
    return _OPTIONS[dtype]


def itemsize(dtype: str) -> int:
    """Bytes per element: a kernel's 4-element vector is 4 * itemsize bytes, the alignment it needs."""
    options(dtype)
    return 4 if dtype == FLOAT32 else 2
