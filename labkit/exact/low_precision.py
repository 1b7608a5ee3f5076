"""torch's vectorized LayerNorm on bfloat16/float16 inputs, emulated on the CPU from the float32 emulator.

torch's kernel for T = BFloat16 or Half (docs/decisions.md#low_precision_reading) converts each loaded element to
float (exact), runs the float32 arithmetic (the same Welford order, float mean and rstd, the output expression in
float with its fused multiply-add) and converts the output to T once at the store, rounding to nearest even. So the
emulation is the float32 emulator (labkit.exact.emulator) between two conversions:

- `to_float32`: T's bits to float32, exact for every value;
- `round_to`: float32 to T's bits, round to nearest even (what the GPU's cvt.rn does, and torch's CPU `.to(dtype)`
  for finite values and infinities); NaN becomes 0x7FFF, the canonical NaN PTX's cvt writes (torch's CPU
  conversions write other NaN bits: a NaN's bits are the platform's);
- `reference_stats` and `reference_output`: the float32 emulator's on the converted values, the output rounded;
- `layer_norm_backward`: labkit.exact.backward's float32 emulation of torch's backward on the converted x, dy and
  gamma, dX, dgamma and dbeta rounded to T once (torch's partials too, before the .sum(0) torch runs on them).

Elements travel as their bits (numpy uint16), since numpy has no bfloat16: from a torch tensor `t`,
`t.view(torch.int16).numpy().view(numpy.uint16)`.
"""
from __future__ import annotations

import numpy as np

from labkit.exact import backward, emulator

DTYPES = ("bfloat16", "float16")
CANONICAL_NAN = 0x7FFF  # what cvt.rn.bf16.f32 and cvt.rn.f16.f32 write for a NaN (PTX ISA: canonical NaN)

__all__ = ["DTYPES", "to_float32", "round_to", "reference_stats", "reference_output", "layer_norm_backward"]


def _require_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")


def _require_bits(name: str, bits, dtype: str) -> np.ndarray:
    _require_dtype(dtype)
    if not isinstance(bits, np.ndarray) or bits.dtype != np.uint16:
        got = f"{bits.dtype} array" if isinstance(bits, np.ndarray) else type(bits).__name__
        raise ValueError(f"{name} must be a uint16 numpy array of {dtype} bits, got {got}")
    return bits


def to_float32(bits: np.ndarray, dtype: str) -> np.ndarray:
    """The float32 values of `dtype` elements given as bits (exact: every bfloat16 and float16 is a float32)."""
    bits = _require_bits("bits", bits, dtype)
    if dtype == "bfloat16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return bits.view(np.float16).astype(np.float32)


def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 `values` rounded to nearest even in `dtype`, as bits (uint16), as the GPU's cvt.rn: overflow goes to
    infinity, NaN to CANONICAL_NAN."""
    _require_dtype(dtype)
    values = np.asarray(values)
    if values.dtype != np.float32:
        raise ValueError(f"values must be float32, got {values.dtype}")
    if dtype == "float16":
        with np.errstate(over="ignore", invalid="ignore"):
            rounded = values.astype(np.float16).view(np.uint16)  # numpy's conversion rounds to nearest even
    else:
        u = values.view(np.uint32)
        # add half an ulp of the kept 16 bits, less one unless the kept part is odd: ties go to the even neighbour;
        # a carry into the exponent gives the next binade, or infinity past the largest finite value
        rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(CANONICAL_NAN), rounded)


def reference_stats(x_bits: np.ndarray, dtype: str, eps: float, *, contraction: str = "first_product") -> dict:
    """emulator.reference_stats of the rows of `x_bits` ([rows, N] bits of `dtype`) converted to float32: mean and
    rstd are float32 in torch's kernel for every dtype."""
    return emulator.reference_stats(to_float32(x_bits, dtype), eps, contraction=contraction)


def reference_output(x_bits, mean, rstd, gamma_bits, beta_bits, dtype: str, *, rounded: bool = True) -> np.ndarray:
    """y of torch's kernel for `dtype`: emulator.reference_output on the float32 values of x, gamma and beta (bits of
    `dtype`), given float32 mean and rstd (torch's own, to reproduce its output), then rounded to `dtype` (bits);
    `rounded=False` returns the float32 values before that rounding."""
    y = emulator.reference_output(to_float32(x_bits, dtype), mean, rstd, to_float32(gamma_bits, dtype),
                                  to_float32(beta_bits, dtype))
    return round_to(y, dtype) if rounded else y


def layer_norm_backward(x_bits, dy_bits, gamma_bits, mean, rstd, dtype: str, sm_count: int):
    """(dx, dgamma, dbeta, partial_groups) of torch's backward for `dtype`, as bits of it: x_bits, dy_bits
    ([rows, N]) and gamma_bits ([N], or None: torch multiplies by one) are bits of `dtype`, mean and rstd float32.
    dgamma/dbeta are None without gamma; with partial_groups > 1 they are the partials torch then sums."""
    x = to_float32(_require_bits("x_bits", x_bits, dtype), dtype)
    dy = to_float32(_require_bits("dy_bits", dy_bits, dtype), dtype)
    gamma = None if gamma_bits is None else to_float32(_require_bits("gamma_bits", gamma_bits, dtype), dtype)
    dx, dg, db, parts = backward.layer_norm_backward(x, dy, gamma, mean, rstd, sm_count)
    if gamma is None:
        return round_to(dx, dtype), None, None, parts
    return round_to(dx, dtype), round_to(dg, dtype), round_to(db, dtype), parts
