"""May our kernels take this LayerNorm input? One predicate, each condition written once.

`refusal(...)` returns the first condition an input violates (a `Reason`: the condition and the actual value) or
None. The kernel functions raise ValueError with it before anything is allocated or launched (`check`); the
drop-in routes the input to torch's own kernel with it (policy DROP_IN: affine optional, autograd recorded above,
addresses checked per call); `torch_path` and the refusal table (labkit.lab.refusals) are derived from it.

Some conditions are torch's own: where torch's LayerNormKernelImplInternal (aten/src/ATen/native/cuda/
layer_norm_kernel.cu) leaves its vectorized kernel — N > 2**24, N % 4 != 0, X/Y/gamma/beta not aligned to the
vector width — it reduces in another order (RowwiseMomentsCUDAKernel), so no kernel here can promise its bits.
Those are `PathConditions`, held as data for the contract (notebook 05 checks them against the installed source),
and marked `torch_path=True` in a Reason.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.ops.dtypes import FLOAT32, LOW_PRECISION

VECTORIZED = "vectorized"
ROWWISE = "rowwise_moments"
UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class PathConditions:
    """When LayerNormKernelImplInternal launches vectorized_layer_norm_kernel (all must hold)."""

    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")  # double always takes the other path
    max_n: int = 1 << 24  # `1ULL << std::numeric_limits<float>::digits`: counts are floats
    n_multiple: int = 4  # vec_size: every row starts aligned when the tensor does
    alignment: str = "vec_size * sizeof(T) bytes (16 for float32, 8 for float16/bfloat16)"
    aligned_buffers: tuple[str, ...] = ("X", "Y", "gamma", "beta")
    may_be_null: tuple[str, ...] = ("gamma", "beta")  # an undefined gamma/beta counts as aligned
    note: str = ("torch makes X, gamma and beta contiguous first (expect_contiguous): a non-contiguous input is "
                 "copied to a fresh, aligned buffer, so only contiguous misaligned views reach the other path")

    def alignment_bytes(self, itemsize: int) -> int:
        return self.n_multiple * itemsize


CONDITIONS = PathConditions()
MAX_NORMALIZED = CONDITIONS.max_n
VECTOR = CONDITIONS.n_multiple               # float4 loads
ALIGN_BYTES = CONDITIONS.alignment_bytes(4)  # float32
MAX_NUMEL = (1 << 31) - 1                    # 32-bit element indices in the kernels


def misaligned(*addresses: int, align: int = ALIGN_BYTES) -> bool:
    """Whether any address is off `align` bytes (default float32's 4-element vector, 16): the drop-in's per-call
    check (addresses are not part of the drop-in plan's signature), torch's can_vectorize on X, gamma and beta
    (8 bytes for 2-byte dtypes: labkit.ops.dropin.plan.KernelPlan.align)."""
    mask = 0
    for a in addresses:
        mask |= a
    return bool(mask & (align - 1))


@dataclass(frozen=True)
class Reason:
    """Why an input is refused: the condition it violates and the actual value."""

    condition: str
    actual: object
    torch_path: bool = False  # torch itself leaves its vectorized path here

    def __str__(self) -> str:
        return f"{self.condition} (got {self.actual})"


@dataclass(frozen=True)
class Policy:
    """What a caller of the predicate handles itself."""

    affine_required: bool  # weight and bias must be given (the kernel functions); else None is allowed
    autograd: bool         # the caller records autograd (the drop-in); else grad-requiring inputs are refused
    addresses: bool        # check alignment now; else the caller checks each call's addresses (misaligned)
    # x's dtypes the caller's kernels are built for (labkit.ops.dtypes); weight and bias must be x's dtype
    dtypes: tuple[str, ...] = (FLOAT32,)


KERNEL_FUNCTIONS = Policy(affine_required=True, autograd=False, addresses=True)
# The drop-in's forward takes bfloat16/float16 too (the paths built for them: labkit.ops.paths.DTYPES), and so does its
# backward (labkit.ops.backward.DROP_IN_DTYPES); the fused consumer takes float32 only: torch's kernels serve the rest.
DROP_IN = Policy(affine_required=False, autograd=True, addresses=False, dtypes=(FLOAT32,) + LOW_PRECISION)
# The functions that launch the bfloat16/float16 builds directly (labkit.ops.rows_fused.low_precision_layer_norm).
LOW_PRECISION_FUNCTIONS = Policy(affine_required=True, autograd=False, addresses=True,
                                 dtypes=(FLOAT32,) + LOW_PRECISION)


@dataclass(frozen=True)
class RowLayout:
    rows: int
    n: int  # normalized size, elements per row
    dtype: str = FLOAT32  # x's (and y's, weight's, bias's) element type


def _dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


# --- torch's own conditions (PathConditions) ---------------------------------------------------------------------

def _torch_n(n: int, cond: PathConditions) -> Reason | None:
    if n > cond.max_n:
        return Reason(f"normalized size N must be <= 2**24 = {cond.max_n}: beyond it float counts lose integers "
                      "and torch takes its other path (RowwiseMomentsCUDAKernel)", n, torch_path=True)
    if n % cond.n_multiple:
        return Reason(f"normalized size N must be a multiple of {cond.n_multiple}: rows would not start "
                      "float4-aligned, and torch takes its other path (RowwiseMomentsCUDAKernel)", n, torch_path=True)
    return None


def _torch_alignment(buffers: dict, itemsize: int, cond: PathConditions, names=None) -> Reason | None:
    """The first of `buffers` ({X, Y, gamma, beta}: tensor or None) off torch's alignment; torch copies a
    non-contiguous X to a fresh aligned buffer first, and None counts as aligned."""
    align = cond.alignment_bytes(itemsize)
    for name in cond.aligned_buffers:
        t = buffers.get(name)
        if t is None or (name == "X" and not t.is_contiguous()):
            continue
        if t.numel() and t.data_ptr() % align:
            label = (names or {}).get(name, name)
            return Reason(f"{label} must be {align}-byte aligned: torch's can_vectorize fails and it takes its "
                          "other path", f"{t.data_ptr() % align} bytes past a {align}-byte boundary", torch_path=True)
    return None


_OUR_NAMES = {"X": "x", "gamma": "weight", "beta": "bias"}


def torch_path(x, weight, bias, y=None, normalized_shape=None,
               conditions: PathConditions = CONDITIONS) -> tuple[str, str]:
    """Which forward path torch's CUDA LayerNorm takes for these tensors: ("vectorized" | "rowwise_moments" |
    "unsupported", reason), decided as LayerNormKernelImplInternal does from dtype, N (the product of
    normalized_shape, default weight's or bias's shape) and the addresses of X, Y, gamma and beta (`y`: the output
    buffer if the caller has one). Only dtype, shape and data_ptr are read: tensors may live on any device."""
    if normalized_shape is None:
        ref = weight if weight is not None else bias
        if ref is None:
            raise ValueError("pass normalized_shape when both weight and bias are None")
        normalized_shape = tuple(ref.shape)
    n = math.prod(int(d) for d in normalized_shape)
    dtype = _dtype_name(x)
    if dtype == "float64":
        return ROWWISE, "dtype float64: torch's vectorized kernel handles float32/float16/bfloat16 only"
    if dtype not in conditions.dtypes:
        return UNSUPPORTED, f"dtype {dtype}: torch's CUDA LayerNorm is for floating types"
    why = _torch_n(n, conditions) or _torch_alignment({"X": x, "Y": y, "gamma": weight, "beta": bias},
                                                      x.element_size(), conditions)
    if why is not None:
        return ROWWISE, str(why)
    align = conditions.alignment_bytes(x.element_size())
    return VECTORIZED, (f"{dtype}, N = {n} <= 2**24, N % 4 == 0, X/Y/gamma/beta {align}-byte aligned "
                        f"(absent gamma/beta count as aligned)")


# --- the predicate -----------------------------------------------------------------------------------------------

def _not_tensor(name: str, t) -> Reason | None:
    import torch

    return None if isinstance(t, torch.Tensor) else Reason(f"{name} must be a torch.Tensor", type(t).__name__)


def _dtype(name: str, t, x, dtypes: tuple[str, ...]) -> Reason | None:
    """x's dtype one of `dtypes`; any other tensor's x's own: torch's kernel for T reads gamma and beta as T and
    takes no float parameters beside T data (autocast makes everything float first)."""
    if t is x:
        if _dtype_name(x) not in dtypes:
            return Reason(f"x must be {' or '.join(dtypes)}", t.dtype)
        return None
    if t.dtype != x.dtype:
        why = "" if _dtype_name(x) == FLOAT32 else ": torch's kernel for x's dtype reads its parameters as that dtype"
        return Reason(f"{name} must be {_dtype_name(x)}, as x is{why}", t.dtype)
    return None


def _tensor(name: str, t, require_cuda: bool, aligned: bool = False) -> Reason | None:
    """device and layout of one tensor (its dtype: _dtype); `aligned`: the kernels' vector alignment too (16 bytes
    for float32, 8 for 2-byte types), as for `out` (X/gamma/beta alignment is torch's condition, checked by
    _torch_alignment)."""
    if why := _not_tensor(name, t):
        return why
    if require_cuda and t.device.type != "cuda":
        return Reason(f"{name} must be a CUDA tensor", t.device)
    if not t.is_contiguous():
        return Reason(f"{name} must be contiguous", f"strides {tuple(t.stride())} for shape {tuple(t.shape)}")
    if t.is_neg():  # torch._neg_view: its memory holds -t, which torch resolves before its kernel reads it
        return Reason(f"{name} must not be a lazily negated view", "is_neg() is True")
    if t._is_zerotensor():  # torch._efficientzerotensor: no memory behind it (data_ptr() is 0)
        return Reason(f"{name} must not be a ZeroTensor", "_is_zerotensor() is True")
    align = CONDITIONS.alignment_bytes(t.element_size())
    if aligned and t.numel() and t.device.type != "meta" and t.data_ptr() % align:
        return Reason(f"{name} must be {align}-byte aligned for 4-element vector stores",
                      f"address % {align} = {t.data_ptr() % align}")
    return None


def _span(t) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


def _output(out, x, require_cuda: bool) -> Reason | None:
    """A caller's output buffer: like x, and sharing no byte with it (in place or shifted, one block's writes could
    change another block's input). Its alignment is this kernel's limit, not torch's (torch allocates its own Y)."""
    import torch

    # its dtype first: the alignment it needs is 4 elements of x's dtype, not of whatever out holds
    if why := (_not_tensor("out", out) or _dtype("out", out, x, (_dtype_name(x),))
               or _tensor("out", out, require_cuda, aligned=True)):
        return why
    if tuple(out.shape) != tuple(x.shape) or out.device != x.device:
        return Reason(f"out must have shape {tuple(x.shape)} on {x.device}", (tuple(out.shape), out.device))
    if out.numel() and x.numel() and out.device.type != "meta":
        (a0, a1), (b0, b1) = _span(out), _span(x)
        if a0 < b1 and b0 < a1:
            return Reason("out must not overlap x", f"out bytes [{a0:#x}, {a1:#x}), x bytes [{b0:#x}, {b1:#x})")
    if torch.is_grad_enabled() and out.requires_grad:
        return Reason("out must not require grad while grad mode is on: these kernels have no backward",
                      "out.requires_grad=True")
    return None


def refusal(x, weight, bias, eps, normalized_shape=None, *, out=None, policy: Policy = KERNEL_FUNCTIONS,
            require_cuda: bool = True) -> Reason | None:
    """The first condition (x, weight, bias, eps[, out]) violates for our kernels, or None. `normalized_shape`
    defaults to weight's shape; `require_cuda=False` leaves the device check out (the refusal table on a CPU)."""
    import torch

    for name, t in (("weight", weight), ("bias", bias)):
        if t is None and policy.affine_required:
            return Reason(f"{name} is required: these kernels implement affine LayerNorm (elementwise_affine=True)",
                          None)
    if weight is None and bias is not None:
        # torch computes (rstd * (x - mean)) + beta, which its compiler contracts into one fma; our output
        # expression is gamma * (rstd * (x - mean)) + beta, which with gamma = 1 rounds the product first.
        return Reason("bias without weight is not taken: torch's output expression contracts differently from ours",
                      "weight=None, bias given")
    given = [(name, t) for name, t in (("x", x), ("weight", weight), ("bias", bias)) if t is not None or name == "x"]
    for name, t in given:
        if why := _not_tensor(name, t):
            return why
    if len({t.device for _, t in given}) > 1:
        return Reason("x, weight and bias must be on one device", tuple(t.device for _, t in given))
    for name, t in given:
        if why := _dtype(name, t, x, policy.dtypes) or _tensor(name, t, require_cuda):
            return why
    shape = (tuple(weight.shape) if weight is not None else tuple(bias.shape) if bias is not None else None) \
        if normalized_shape is None else tuple(int(d) for d in normalized_shape)
    if shape is None:
        return Reason("normalized_shape is required when weight and bias are None", None)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != shape:
            return Reason(f"{name}.shape must equal normalized_shape {shape}", tuple(t.shape))
    if not shape or x.dim() < len(shape) or tuple(x.shape[x.dim() - len(shape):]) != shape:
        return Reason(f"x's trailing dims must equal normalized_shape {shape}", tuple(x.shape))
    if not policy.autograd and torch.is_grad_enabled():
        wanting = [n for n, t in (("x", x), ("weight", weight), ("bias", bias)) if t is not None and t.requires_grad]
        if wanting:
            # an output without a grad_fn would silently drop the gradient a user asked for
            return Reason("inputs must not require grad while grad mode is on: these kernels have no backward "
                          "(call under torch.no_grad() or pass detached tensors)",
                          f"requires_grad on {', '.join(wanting)}")
    n = math.prod(shape)
    if n <= 0:
        return Reason("normalized size N must be positive", n)
    if why := _torch_n(n, CONDITIONS):
        return why
    if policy.addresses and x.device.type != "meta" and (
            why := _torch_alignment({"X": x, "gamma": weight, "beta": bias}, x.element_size(), CONDITIONS,
                                    _OUR_NAMES)):
        return why
    if x.numel() > MAX_NUMEL:
        return Reason("x.numel() must be < 2**31: the kernels index elements with 32 bits", x.numel())
    if x.numel() // n <= 0:
        return Reason("x must hold at least one row", tuple(x.shape))
    if isinstance(eps, bool) or not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps >= 0):
        return Reason("eps must be a finite float >= 0", eps)
    if out is not None:
        return _output(out, x, require_cuda)
    return None


def check(x, weight, bias, eps, normalized_shape=None, *, out=None, require_cuda: bool = True,
          policy: Policy = KERNEL_FUNCTIONS) -> RowLayout:
    """The (rows, N, dtype) view of a kernel-function call, or ValueError naming the first refused condition.
    `policy`: KERNEL_FUNCTIONS (float32), or LOW_PRECISION_FUNCTIONS for the functions that launch the
    bfloat16/float16 builds."""
    why = refusal(x, weight, bias, eps, normalized_shape, out=out, policy=policy, require_cuda=require_cuda)
    if why is not None:
        raise ValueError(str(why))
    shape = normalized_shape if normalized_shape is not None else (weight if weight is not None else bias).shape
    n = math.prod(shape)
    return RowLayout(x.numel() // n, n, _dtype_name(x))
