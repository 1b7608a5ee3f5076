"""Small-channel normalization over dim 1 (KernelBench L1/36 RMS, L1/38 mean-abs, L1/39 L2), three routes:

  direct NCHW  kernels/channel_norm_nchw.cu reads the channels at stride H*W, in eager torch's reduction tree
  rows         kernels/channel_norm_rows.cu on channels-last rows (..., C), one warp per row
  conversion   what a user writes to reach the rows kernel from NCHW:
               x.permute(0,2,3,1).contiguous() -> rows kernel -> .permute(0,3,1,2).contiguous()

The eager references are the tasks' forward expressions as KernelBench writes them (pinned revision 423217d),
beside the builtins the post compared (rms_norm over a moved axis, vector_norm ord 1, normalize p=2 eps 0).
Every wrapper validates before it allocates or launches: ValueError naming the condition and the actual value.

No `from __future__ import annotations`: TorchScript compiles the reference functions from this file's source.
"""
import math

import numpy as np
import torch

from labkit.core.launch import launch
from labkit.lab.scripted import script

FAMILIES = ("rms", "mean_abs", "l2")
EPS = 1e-5  # L1/36's eps; the other two tasks have none
MAX_NUMEL = (1 << 31) - 1  # the kernels index elements of one sample with 32-bit channel counts, totals 64-bit
SPLITS = (1, 2, 4, 8, 16)  # warp splits kernels/channel_norm_nchw.cu is instantiated for
NCHW_THREADS = 128
ROWS_THREADS = 256
VT0 = 4  # Reduce.cuh's accumulators per thread (ReduceOp's default vt0)
MAX_NUM_THREADS = 512  # Reduce.cuh's mnt_wrapper<float>::MAX_NUM_THREADS
WARP = 32


# --- eager references: the tasks' forward expressions --------------------------------------------------------

def rms_reference(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """L1/36: x / sqrt(mean(x**2, dim=1, keepdim=True) + eps)."""
    return x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + eps)


def mean_abs_reference(x: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """L1/38: x / mean(abs(x), dim=1, keepdim=True) (eps unused: the task has none)."""
    return x / torch.mean(torch.abs(x), dim=1, keepdim=True)


def l2_reference(x: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """L1/39: x / norm(x, p=2, dim=1, keepdim=True) (eps unused: the task has none)."""
    return x / torch.norm(x, p=2, dim=1, keepdim=True)


REFERENCES = {"rms": rms_reference, "mean_abs": mean_abs_reference, "l2": l2_reference}


def reference(family: str, x, eps: float = EPS):
    return REFERENCES[_family(family)](x, eps)


def scripted_reference(family: str):
    """The family's reference compiled by TorchScript (labkit.lab.scripted's one cache)."""
    return script(REFERENCES[_family(family)])


def builtin(family: str, x, eps: float = EPS):
    """The post's library-builtin baselines (its norm_baselines.py): rms_norm over the channel axis moved last,
    vector_norm ord 1 divided by C, normalize p=2 with eps 0."""
    family = _family(family)
    c = x.shape[1]
    if family == "rms":
        return torch.nn.functional.rms_norm(x.movedim(1, -1), (c,), eps=eps).movedim(-1, 1).contiguous()
    if family == "mean_abs":
        return x / (torch.linalg.vector_norm(x, ord=1, dim=1, keepdim=True) / c)
    return torch.nn.functional.normalize(x, p=2, dim=1, eps=0.0)


# --- validation ---------------------------------------------------------------------------------------------

def _fail(condition: str, actual):
    raise ValueError(f"{condition} (got {actual})")


def _family(family):
    if family not in FAMILIES:
        _fail(f"family must be one of {FAMILIES}", repr(family))
    return family


def _check_common(x, eps, family):
    _family(family)
    if not isinstance(x, torch.Tensor):
        _fail("x must be a torch.Tensor", type(x).__name__)
    if x.dtype != torch.float32:
        _fail("x must be float32", x.dtype)
    if not x.is_contiguous():
        _fail("x must be contiguous", f"strides {tuple(x.stride())} for shape {tuple(x.shape)}")
    if x.numel() > MAX_NUMEL:
        _fail("x.numel() must be < 2**31", x.numel())
    if x.numel() == 0:
        _fail("x must not be empty", tuple(x.shape))
    if not (isinstance(eps, (int, float)) and not isinstance(eps, bool) and math.isfinite(eps) and eps >= 0):
        _fail("eps must be a finite float >= 0", eps)
    if torch.is_grad_enabled() and x.requires_grad:
        _fail("x must not require grad while grad mode is on: these kernels have no backward", "requires_grad=True")


def _check_device(x):
    if x.device.type != "cuda":
        _fail("x must be a CUDA tensor", x.device)
    if x.data_ptr() % 16:
        _fail("x must be 16-byte aligned for float4 access", f"address % 16 = {x.data_ptr() % 16}")


def reduction_plan(channels: int, outer: int, inner: int) -> dict:
    """How eager torch (aten Reduce.cuh, setReduceConfig) reduces dim 1 of a contiguous (outer, channels, inner)
    float32 tensor with inner >= 2: the output-vectorized configuration. Returns the output vector width, block
    shape, `split` (warps that share one output's channels; 1 = one thread sums them all) and whether the input
    would also be split across blocks (then the order depends on the SM count, and this module refuses).

    The vector width: Reduce.cuh's get_output_vec_size halves 4 until it divides the first non-reduced size
    (inner) and the input's strides (inner, channels*inner); torch's allocations are 512-byte aligned."""
    for name, v in (("channels", channels), ("outer", outer), ("inner", inner)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            _fail(f"{name} must be a positive int", v)
    if inner < 2:
        _fail("inner (H*W) must be >= 2: with one spatial position torch reduces along the fastest dim instead",
              inner)
    vec = 4
    for n in (inner, channels * inner):
        while n % vec:
            vec //= 2
    max_threads = MAX_NUM_THREADS // vec
    num_outputs = outer * inner
    dim0, dim1 = num_outputs // vec, channels

    def last_pow2(n):
        return 1 << (int(n).bit_length() - 1)

    dim0_pow2 = last_pow2(dim0) if dim0 < max_threads else max_threads
    dim1_pow2 = last_pow2(dim1) if dim1 < max_threads else max_threads
    width = min(dim0_pow2, WARP)
    height = min(dim1_pow2, max_threads // width)
    width = min(dim0_pow2, max_threads // height)
    split_across_warps = channels >= min(height * 16, 256)
    split = height if split_across_warps else 1
    per_thread = -(-channels // split)
    return {"output_vec": vec, "block": [width, height], "split": split, "values_per_thread": per_thread,
            "global_split_possible": split_across_warps and per_thread >= 256}


def nchw_layout(x, family: str = "rms", eps: float = EPS) -> dict:
    """Validate a direct-NCHW call and return its layout and reduction plan (CPU tensors pass every check but the
    device's, so the conditions can be tested without a GPU)."""
    _check_common(x, eps, family)
    if x.dim() < 3:
        _fail("x must be (N, C, spatial...) with at least one spatial dim: the direct kernel reduces over dim 1 "
              "at each spatial position", tuple(x.shape))
    n, c = int(x.shape[0]), int(x.shape[1])
    inner = math.prod(int(d) for d in x.shape[2:])
    if c < 2:
        _fail("C (dim 1) must be >= 2", c)
    plan = reduction_plan(c, n, inner)
    if plan["global_split_possible"]:
        _fail("C / split must be < 256: torch would split each output over several blocks, in an order that "
              "depends on the SM count", f"C={c}, split={plan['split']}")
    if plan["split"] not in SPLITS:
        _fail(f"torch's warp split must be one of {SPLITS} (the instantiated kernels)", plan["split"])
    return {"n": n, "c": c, "inner": inner, "plan": plan}


def rows_layout(x, family: str = "rms", eps: float = EPS) -> dict:
    """Validate a rows call: (..., C) contiguous, normalized over the last dim."""
    _check_common(x, eps, family)
    if x.dim() < 2:
        _fail("x must be (..., C) with at least two dims: rows of C channels", tuple(x.shape))
    c = int(x.shape[-1])
    return {"rows": x.numel() // c, "c": c}


def mean_factor(channels: int, outputs: int) -> np.float32:
    """MeanOps' factor as mean_kernel_impl computes it: float(num_outputs) / numel, in float32."""
    return np.float32(np.float32(outputs) / np.float32(outputs * channels))


# --- routes -------------------------------------------------------------------------------------------------

def direct_nchw(family: str, x, eps: float = EPS, *, out=None, l2_fma: bool = True):
    """The family over dim 1 of an NCHW (N, C, spatial...) tensor, reading channels at stride H*W, in eager
    torch's reduction tree. l2_fma=False sums L2's squares rounded before the add (the alternative to
    NormTwoOps' contracted acc + x*x), kept to show which one eager uses."""
    lay = nchw_layout(x, family, eps)
    _check_device(x)
    if out is not None and (out.shape != x.shape or out.dtype != x.dtype or out.device != x.device
                            or not out.is_contiguous()):
        _fail(f"out must be a contiguous float32 tensor of shape {tuple(x.shape)} on {x.device}",
              (tuple(out.shape), out.dtype, out.device))
    y = torch.empty_like(x) if out is None else out
    vec = 4 if lay["inner"] % 4 == 0 else 1
    groups = lay["n"] * lay["inner"] // vec
    name = "l2_mul" if (family == "l2" and not l2_fma) else family
    fn = f"nchw_{name}_s{lay['plan']['split']}_v{vec}"
    launch("channel_norm_nchw", fn, (-(-groups // NCHW_THREADS),), (NCHW_THREADS,),
           (x, y, np.int64(groups), np.int32(lay["c"]), np.int64(lay["inner"]),
            mean_factor(lay["c"], lay["n"] * lay["inner"]), np.float32(eps)), x.device)
    return y


def rows(family: str, x, eps: float = EPS, *, out=None):
    """The family over the last dim of channels-last rows (..., C)."""
    lay = rows_layout(x, family, eps)
    _check_device(x)
    y = torch.empty_like(x) if out is None else out
    warps_per_block = ROWS_THREADS // WARP
    launch("channel_norm_rows", f"rows_{family}", (-(-lay["rows"] // warps_per_block),), (ROWS_THREADS,),
           (x, y, np.int64(lay["rows"]), np.int32(lay["c"]), mean_factor(lay["c"], lay["rows"]), np.float32(eps)),
           x.device)
    return y


def to_rows(x):
    """NCHW -> channels-last rows (N, H, W, C), contiguous: the conversion a user writes."""
    return x.permute(0, *range(2, x.dim()), 1).contiguous()


def from_rows(y):
    """(N, H, W, C) rows -> NCHW, contiguous."""
    return y.permute(0, y.dim() - 1, *range(1, y.dim() - 1)).contiguous()


def conversion(family: str, x, eps: float = EPS):
    """The conversion route on NCHW input: to rows, the rows kernel, back to NCHW (both copies counted)."""
    _check_common(x, eps, family)  # before any copy
    if x.dim() < 3:
        _fail("x must be (N, C, spatial...) with at least one spatial dim", tuple(x.shape))
    _check_device(x)
    return from_rows(rows(family, to_rows(x), eps))


ROUTES = {"direct_nchw": direct_nchw, "rows": rows, "conversion": conversion}


# --- the reduction tree on the CPU ----------------------------------------------------------------------------

def tree_sum(values, split: int, terms: str = "square") -> np.float32:
    """One output's float32 sum in the order kernels/channel_norm_nchw.cu (and eager torch's Reduce.cuh) use:
    warp w takes values w, w+split, ...; its m-th value goes to accumulator m % 4; ((a0+a1)+a2)+a3; then the
    warps' tree at offsets split/2, ..., 1. terms: "square" (rounded x*x), "abs", "fma" (fma(x, x, acc))."""
    v = np.asarray(values, dtype=np.float32)
    if split not in SPLITS:
        _fail(f"split must be one of {SPLITS}", split)
    if terms not in ("square", "abs", "fma"):
        _fail("terms must be 'square', 'abs' or 'fma'", repr(terms))
    warp = []
    for w in range(split):
        acc = [np.float32(0)] * VT0
        for m, x in enumerate(v[w::split]):
            if terms == "abs":
                acc[m % VT0] = np.float32(acc[m % VT0] + abs(x))
            elif terms == "square":
                acc[m % VT0] = np.float32(acc[m % VT0] + np.float32(x * x))
            else:  # one rounding of x*x + acc, as an FMA does
                acc[m % VT0] = np.float32(np.float64(x) * np.float64(x) + np.float64(acc[m % VT0]))
        warp.append(np.float32(np.float32(np.float32(acc[0] + acc[1]) + acc[2]) + acc[3]))
    off = split // 2
    while off:
        for w in range(off):
            warp[w] = np.float32(warp[w] + warp[w + off])
        off //= 2
    return warp[0]
