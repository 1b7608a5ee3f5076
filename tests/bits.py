"""The tests' one bit comparison: `assert_bits_equal(actual, expected, what=..., path=...)`.

Two tensors (torch, on any device, or numpy arrays and scalars) are bit-identical when they have one dtype, one
shape and the same bit pattern in every element, compared as integer views of the element's width: int32 for
float32, int16 for float16 and bfloat16, int64 for float64. So -0.0 differs from 0.0 and NaNs compare by payload.
Any other dtype raises ValueError: the comparison is only defined on floats it can view.

On a mismatch the AssertionError names what was compared, the kernel path (when given), how many elements differ
out of the total and the first differing index into the tensors' shape, with both values as floats and hex bits:

    output [path chain]: 1 of 4096 elements differ in bits; first at index (3, 17): actual 0.5 (0x3f000000),
    expected 0.50000006 (0x3f000001)

Import it as `from bits import assert_bits_equal` (pytest puts tests/ on sys.path: it has no __init__.py).
"""
from __future__ import annotations

import sys

import numpy as np

__all__ = ["assert_bits_equal", "int_view_dtype"]

# float dtype name -> (integer view dtype name, hex digits)
_VIEWS = {"float32": ("int32", 8), "float16": ("int16", 4), "bfloat16": ("int16", 4), "float64": ("int64", 16)}


def _is_torch(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _dtype_name(x) -> str:
    return str(x.dtype).removeprefix("torch.")


def int_view_dtype(dtype) -> str:
    """The integer dtype name a float dtype (torch or numpy, or its name) is compared as; ValueError otherwise."""
    torch = sys.modules.get("torch")
    if isinstance(dtype, str) or (torch is not None and isinstance(dtype, torch.dtype)):
        name = str(dtype).removeprefix("torch.")
    else:
        name = np.dtype(dtype).name  # numpy dtypes and scalar types (np.float16)
    if name not in _VIEWS:
        raise ValueError(f"assert_bits_equal compares float32, float16, bfloat16 or float64 as integer views; "
                         f"it cannot view {name}")
    return _VIEWS[name][0]


def _as_array(x):
    """torch tensors stay torch (on their device); everything else becomes a numpy array (scalars 0-d)."""
    if x is None:
        raise TypeError("assert_bits_equal got None")
    if _is_torch(x):
        return x.detach().resolve_neg().resolve_conj()  # a lazily negated view (torch._neg_view) as its values
    return np.asarray(x)


def _to_numpy(t):
    if _dtype_name(t) == "bfloat16":
        raise ValueError("assert_bits_equal cannot compare a bfloat16 torch tensor with a numpy array")
    return t.detach().cpu().numpy()


def _int_view(x, view: str):
    if _is_torch(x):
        import torch

        return x.view(getattr(torch, view))  # same element width: any strides, no copy
    return x.view(view)


def _hex(bits: int, digits: int) -> str:
    return f"0x{bits & ((1 << (4 * digits)) - 1):0{digits}x}"


def assert_bits_equal(actual, expected, *, what: str = "", path: str | None = None) -> None:
    """Fail unless `actual` and `expected` have one dtype, one shape and identical bits in every element."""
    __tracebackhide__ = True
    a, e = _as_array(actual), _as_array(expected)
    if _is_torch(a) != _is_torch(e):  # one torch tensor, one numpy array: compare in numpy, on the host
        a, e = (_to_numpy(v) if _is_torch(v) else v for v in (a, e))
    elif _is_torch(a) and a.device != e.device:  # e.g. a GPU output against a CPU reference: bits travel unchanged
        e = e.to(a.device)
    label = (what or "tensor") + (f" [path {path}]" if path else "")
    view = int_view_dtype(a.dtype)
    if _dtype_name(a) != _dtype_name(e):
        raise AssertionError(f"{label}: dtype differs: actual {_dtype_name(a)}, expected {_dtype_name(e)}")
    if tuple(a.shape) != tuple(e.shape):
        raise AssertionError(f"{label}: shape differs: actual {tuple(a.shape)}, expected {tuple(e.shape)}")
    ia, ie = _int_view(a, view), _int_view(e, view)
    differ = ia != ie
    count = int(differ.sum())
    if count == 0:
        return
    total = int(np.prod(tuple(a.shape), dtype=np.int64))
    flat_differ = differ.reshape(-1)
    if _is_torch(flat_differ):
        import torch

        first = int(flat_differ.to(torch.uint8).argmax())  # argmax returns the first maximal index
    else:
        first = int(np.argmax(flat_differ))
    index = tuple(int(i) for i in np.unravel_index(first, tuple(a.shape)))
    digits = _VIEWS[_dtype_name(a)][1]

    def value(x, ix):
        v, b = float(x.reshape(-1)[first]), int(ix.reshape(-1)[first])
        name = _dtype_name(a)  # the shortest repr that round-trips in the tensors' own precision
        shown = str(getattr(np, name)(v)) if name in ("float32", "float16") else repr(v)
        return f"{shown} ({_hex(b, digits)})"

    raise AssertionError(f"{label}: {count} of {total} elements differ in bits; first at index {index}: "
                         f"actual {value(a, ia)}, expected {value(e, ie)}")
