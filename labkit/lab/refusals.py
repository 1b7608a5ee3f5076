"""The one table of inputs the LayerNorm functions refuse (the invalid-input matrix), each with the condition
its ValueError names (labkit.ops.eligibility's predicate, which every function runs first).

Notebooks and tests read this table; nobody writes a list of bad inputs by hand. Each case builds its tensors on
the device asked for (shapes too large to allocate are meta tensors, checked without memory). Where a case is checked:
  any  the public functions themselves, on any machine (they refuse before touching a GPU);
  cpu  on a GPU the public functions; on a CPU the shared validation they all run first, with the CUDA-device
       check left out (the device check would stop every case first there);
  gpu  needs CUDA tensors (mixed devices): on a CPU the row says so and nothing runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

SHARED = "eligibility.check (shared validation)"
PUBLIC_FUNCTIONS = ("reference_order_layer_norm", "chain_layer_norm", "split_stats_layer_norm")
WITH_OUT = ("reference_order_layer_norm", "chain_layer_norm")  # the functions with an `out` parameter


@dataclass(frozen=True)
class Refusal:
    case: str
    condition: str  # words of the condition the ValueError message names (labkit.ops.eligibility's text)
    make: Callable  # device -> (x, weight, bias, eps) or (x, weight, bias, eps, out)
    where: str = "cpu"  # "any", "cpu" or "gpu": see the module docstring
    needs_out: bool = False  # only the functions with an `out` parameter apply


def _xwb(device, shape=(2, 8, 4)):
    import torch

    return (torch.rand(shape, device=device), torch.ones(shape[1:], device=device),
            torch.zeros(shape[1:], device=device))


def _misaligned(device, shape=(2, 8, 4)):
    import torch

    flat = torch.rand(2 * 32 + 1, device=device)
    return flat[1:].view(shape)  # 4 bytes past a 16-byte boundary, still contiguous


def _meta(rows, n):
    import torch

    return (torch.empty(rows, n, device="meta"), torch.empty(n, device="meta"), torch.empty(n, device="meta"))


def _other_device(device):
    return "cpu" if str(device).startswith("cuda") else "meta"


def _cases() -> tuple[Refusal, ...]:
    import torch

    from labkit.ops.eligibility import MAX_NORMALIZED

    def with_x(f):
        return lambda d: (f(d), *_xwb(d)[1:], 1e-5)

    def with_out(f):
        return lambda d: (*_xwb(d), 1e-5, f(d))

    return (
        Refusal("float64 input", "x must be float32", with_x(lambda d: _xwb(d)[0].double())),
        Refusal("float16 weight", "weight must be float32",
                lambda d: (_xwb(d)[0], _xwb(d)[1].half(), _xwb(d)[2], 1e-5)),
        Refusal("CPU tensors", "x must be a CUDA tensor", lambda d: (*_xwb("cpu"), 1e-5), where="any"),
        Refusal("weight on another device than x", "x, weight and bias must be on one device",
                lambda d: (_xwb(d)[0], torch.ones(8, 4, device=_other_device(d)), _xwb(d)[2], 1e-5)),
        Refusal("missing bias (no affine)", "bias is required", lambda d: (*_xwb(d)[:2], None, 1e-5)),
        Refusal("missing weight (no affine)", "weight is required",
                lambda d: (_xwb(d)[0], None, _xwb(d)[2], 1e-5)),
        Refusal("non-contiguous input", "x must be contiguous",
                with_x(lambda d: torch.rand(2, 4, 8, device=d).transpose(1, 2))),
        Refusal("lazily negated input (torch._neg_view)", "x must not be a lazily negated view",
                with_x(lambda d: torch._neg_view(_xwb(d)[0]))),
        Refusal("ZeroTensor input (no memory behind it)", "x must not be a ZeroTensor",
                with_x(lambda d: torch._efficientzerotensor((2, 8, 4), device=d))),
        Refusal("input 4 bytes off 16-byte alignment", "x must be 16-byte aligned", with_x(_misaligned)),
        Refusal("weight 4 bytes off 16-byte alignment", "weight must be 16-byte aligned",
                lambda d: (_xwb(d)[0], torch.ones(33, device=d)[1:].view(8, 4), _xwb(d)[2], 1e-5)),
        Refusal("bias 4 bytes off 16-byte alignment", "bias must be 16-byte aligned",
                lambda d: (*_xwb(d)[:2], torch.zeros(33, device=d)[1:].view(8, 4), 1e-5)),
        Refusal("normalized size not a multiple of 4", "normalized size N must be a multiple of 4",
                lambda d: (torch.rand(2, 6, device=d), torch.ones(6, device=d), torch.zeros(6, device=d), 1e-5)),
        Refusal("affine shape differs from input's trailing dims", "x's trailing dims must equal normalized_shape",
                lambda d: (_xwb(d)[0], torch.ones(8, 2, 2, device=d), torch.zeros(8, 2, 2, device=d), 1e-5)),
        Refusal("weight and bias shapes differ", "bias.shape must equal normalized_shape",
                lambda d: (*_xwb(d)[:2], torch.zeros(4, 8, device=d), 1e-5)),
        Refusal("N > 2**24 (torch leaves the vectorized path)", "normalized size N must be <= 2**24",
                lambda d: (*_meta(1, MAX_NORMALIZED + 4), 1e-5)),
        Refusal("numel >= 2**31", "x.numel() must be < 2**31", lambda d: (*_meta(1 << 17, 1 << 14), 1e-5)),
        Refusal("empty batch (no rows)", "x must hold at least one row", with_x(lambda d: _xwb(d)[0][:0])),
        Refusal("x requires grad (grad mode on)", "inputs must not require grad",
                with_x(lambda d: _xwb(d)[0].requires_grad_())),
        Refusal("weight requires grad (grad mode on)", "inputs must not require grad",
                lambda d: (_xwb(d)[0], _xwb(d)[1].requires_grad_(), _xwb(d)[2], 1e-5)),
        Refusal("bias requires grad (grad mode on)", "inputs must not require grad",
                lambda d: (*_xwb(d)[:2], _xwb(d)[2].requires_grad_(), 1e-5)),
        Refusal("eps NaN", "eps must be a finite float >= 0", lambda d: (*_xwb(d), float("nan"))),
        Refusal("eps negative", "eps must be a finite float >= 0", lambda d: (*_xwb(d), -1.0)),
        Refusal("eps infinite", "eps must be a finite float >= 0", lambda d: (*_xwb(d), float("inf"))),
        Refusal("out is x (in place)", "out must not overlap x", lambda d: (*(t := _xwb(d)), 1e-5, t[0]),
                needs_out=True),
        Refusal("out overlaps x, shifted by one row", "out must not overlap x",
                lambda d: (*(lambda buf: (buf[:2], *_xwb(d)[1:], 1e-5, buf[1:]))(torch.rand(3, 8, 4, device=d)),),
                needs_out=True),
        Refusal("out of another shape", "out must have shape", with_out(lambda d: torch.empty(2, 32, device=d)),
                needs_out=True),
        Refusal("out 4 bytes off 16-byte alignment", "out must be 16-byte aligned", with_out(_misaligned),
                needs_out=True),
        Refusal("out non-contiguous", "out must be contiguous",
                with_out(lambda d: torch.empty(2, 4, 8, device=d).transpose(1, 2)), needs_out=True),
    )


def _functions() -> dict:
    from labkit.ops.chain import chain_layer_norm
    from labkit.ops.reference_order import reference_order_layer_norm
    from labkit.lab.split_stats import split_stats_layer_norm

    return {"reference_order_layer_norm": reference_order_layer_norm,
            "chain_layer_norm": chain_layer_norm,
            "split_stats_layer_norm": lambda x, w, b, eps, **kw: split_stats_layer_norm(x, w, b, eps,
                                                                                         geometry="interleaved")}


def _shared_validation(x, w, b, eps, out=None):
    from labkit.ops.eligibility import check

    check(x, w, b, eps, out=out, require_cuda=False)


def _outcome(call) -> str:
    try:
        call()
    except ValueError as exc:
        return f"ValueError: {exc}"
    except Exception as exc:  # anything but a ValueError is a defect of the refusal, shown as such
        return f"BUG: {type(exc).__name__}: {exc}"
    return "nothing (BUG: accepted)"


def refusal_rows(device: str = "cpu") -> list[dict]:
    """One row per (case, function): what it raises on `device` ('cuda': the public functions themselves; 'cpu':
    the public functions for cases checked anywhere, else the shared validation they all run first, without its
    device check; a case that needs a GPU says so). Keys: case, function, condition, where, raises,
    names_condition (whether the message is a ValueError naming the condition; None where nothing ran)."""
    rows = []
    on_gpu = str(device).startswith("cuda")
    for case in _cases():
        meta = "2**" in case.case  # meta tensors: validated without allocating, on every machine
        if case.where == "gpu" and not on_gpu:
            rows.append({"case": case.case, "function": "(needs a GPU)", "condition": case.condition,
                         "where": case.where, "raises": "not run here", "names_condition": None})
            continue
        if (on_gpu and not meta) or case.where == "any":
            names = WITH_OUT if case.needs_out else PUBLIC_FUNCTIONS
            targets = {n: f for n, f in _functions().items() if n in names}
        else:
            targets = {SHARED: _shared_validation}
        for name, fn in targets.items():
            args = case.make("meta" if meta else device)
            x, w, b, eps = args[:4]
            kwargs = {"out": args[4]} if len(args) > 4 else {}
            raised = _outcome(lambda: fn(x, w, b, eps, **kwargs))
            rows.append({"case": case.case, "function": name, "condition": case.condition, "where": case.where,
                         "raises": raised,
                         "names_condition": raised.startswith(f"ValueError: {case.condition}")})
    return rows
