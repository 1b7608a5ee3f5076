"""Input checks shared by every LayerNorm wrapper: each raises ValueError naming the violated condition and
the actual value, before anything is allocated or launched."""
from __future__ import annotations

import math
from dataclasses import dataclass

# torch takes its vectorized path only for N <= 2**24 (float's 24 significand bits): beyond that its order differs.
MAX_NORMALIZED = 1 << 24
MAX_NUMEL = (1 << 31) - 1  # 32-bit element indices in the kernels
VECTOR = 4  # float4 loads
ALIGN_BYTES = 16


@dataclass(frozen=True)
class RowLayout:
    rows: int
    n: int  # normalized size, elements per row


def _fail(condition: str, actual) -> None:
    raise ValueError(f"{condition} (got {actual})")


def check_tensor(name: str, t, *, require_cuda: bool = True) -> None:
    import torch

    if t is None:
        _fail(f"{name} is required: these kernels implement affine LayerNorm (elementwise_affine=True)", None)
    if not isinstance(t, torch.Tensor):
        _fail(f"{name} must be a torch.Tensor", type(t).__name__)
    if t.dtype != torch.float32:
        _fail(f"{name} must be float32", t.dtype)
    if require_cuda and t.device.type != "cuda":
        _fail(f"{name} must be a CUDA tensor", t.device)
    if not t.is_contiguous():
        _fail(f"{name} must be contiguous", f"strides {tuple(t.stride())} for shape {tuple(t.shape)}")
    if t.numel() and t.data_ptr() % ALIGN_BYTES:
        _fail(f"{name} must be {ALIGN_BYTES}-byte aligned for float4 access", f"address % 16 = {t.data_ptr() % 16}")


def _refuse_autograd(*tensors) -> None:
    """These functions have no backward: an output without a grad_fn would silently drop the gradient a user
    asked for, so grad mode plus an input that requires grad is refused."""
    import torch

    if torch.is_grad_enabled():
        wanting = [name for name, t in zip(("x", "weight", "bias"), tensors) if t.requires_grad]
        if wanting:
            _fail("inputs must not require grad while grad mode is on: these kernels have no backward (call under "
                  "torch.no_grad() or pass detached tensors)", f"requires_grad on {', '.join(wanting)}")


def layer_norm_layout(x, weight, bias, eps: float, normalized_shape=None, *, require_cuda: bool = True) -> RowLayout:
    """Validate a LayerNorm call and return its (rows, N) view; `normalized_shape` defaults to weight's shape."""
    for name, t in (("x", x), ("weight", weight), ("bias", bias)):
        check_tensor(name, t, require_cuda=require_cuda)
    shape = tuple(weight.shape) if normalized_shape is None else tuple(int(d) for d in normalized_shape)
    if tuple(weight.shape) != shape:
        _fail(f"weight.shape must equal normalized_shape {shape}", tuple(weight.shape))
    if tuple(bias.shape) != shape:
        _fail(f"bias.shape must equal normalized_shape {shape}", tuple(bias.shape))
    if not shape or x.dim() < len(shape) or tuple(x.shape[x.dim() - len(shape):]) != shape:
        _fail(f"x's trailing dims must equal normalized_shape {shape}", tuple(x.shape))
    _refuse_autograd(x, weight, bias)
    if x.device != weight.device or x.device != bias.device:
        _fail("x, weight and bias must be on one device", (x.device, weight.device, bias.device))
    n = math.prod(shape)
    if n <= 0:
        _fail("normalized size N must be positive", n)
    if n % VECTOR:
        _fail(f"normalized size N must be a multiple of {VECTOR} (float4 loads)", n)
    if n > MAX_NORMALIZED:
        _fail(f"normalized size N must be <= 2**24 = {MAX_NORMALIZED} (torch's vectorized-path limit)", n)
    if x.numel() > MAX_NUMEL:
        _fail("x.numel() must be < 2**31", x.numel())
    rows = x.numel() // n
    if rows <= 0:
        _fail("x must hold at least one row", tuple(x.shape))
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps >= 0):
        _fail("eps must be a finite float >= 0", eps)
    return RowLayout(rows, n)


def _span(t) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


def check_output(name: str, out, like, *, require_cuda: bool = True) -> None:
    """A caller-provided output buffer: same shape/device as `like` (x), float32, contiguous, aligned, sharing no
    byte with x (in place or shifted, one block's writes could change another block's input), and not requiring
    grad while grad mode is on (these kernels record no backward into it)."""
    import torch

    check_tensor(name, out, require_cuda=require_cuda)
    if tuple(out.shape) != tuple(like.shape) or out.device != like.device:
        _fail(f"{name} must have shape {tuple(like.shape)} on {like.device}", (tuple(out.shape), out.device))
    if out.numel() and like.numel() and out.device.type != "meta":
        (a0, a1), (b0, b1) = _span(out), _span(like)
        if a0 < b1 and b0 < a1:
            _fail(f"{name} must not overlap x", f"{name} bytes [{a0:#x}, {a1:#x}), x bytes [{b0:#x}, {b1:#x})")
    if torch.is_grad_enabled() and out.requires_grad:
        _fail(f"{name} must not require grad while grad mode is on: these kernels have no backward",
              f"{name}.requires_grad=True")
