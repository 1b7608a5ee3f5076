"""The one table of inputs the LayerNorm functions refuse, each with the condition its ValueError names.

Notebooks, tests and the README read this table; nobody writes a list of bad inputs by hand. Each case builds its
tensors on the device asked for (shapes too large to allocate are meta tensors, checked without memory). On a GPU
every public function is called; on a CPU the device check would stop every case first, so the cases run through
the shared validation with the device check left out, which is the same code the functions call next.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Refusal:
    case: str
    condition: str  # a regular expression the ValueError message matches
    make: Callable  # device -> (x, weight, bias, eps)


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


def _cases() -> tuple[Refusal, ...]:
    import torch

    from labkit.core.validate import MAX_NORMALIZED

    def with_x(f):
        return lambda d: (f(d), *_xwb(d)[1:], 1e-5)

    return (
        Refusal("float64 input", r"(x must be float32|float64)", with_x(lambda d: _xwb(d)[0].double())),
        Refusal("missing bias (no affine)", r"bias is required", lambda d: (*_xwb(d)[:2], None, 1e-5)),
        Refusal("missing weight (no affine)", r"weight is required",
                lambda d: (_xwb(d)[0], None, _xwb(d)[2], 1e-5)),
        Refusal("non-contiguous input", r"x must be contiguous",
                with_x(lambda d: torch.rand(2, 4, 8, device=d).transpose(1, 2))),
        Refusal("input 4 bytes off 16-byte alignment", r"(16-byte aligned|alignment)", with_x(_misaligned)),
        Refusal("weight 4 bytes off 16-byte alignment", r"(weight must be 16-byte aligned|gamma is 4 bytes off)",
                lambda d: (_xwb(d)[0], torch.ones(33, device=d)[1:].view(8, 4), _xwb(d)[2], 1e-5)),
        Refusal("bias 4 bytes off 16-byte alignment", r"(bias must be 16-byte aligned|beta is 4 bytes off)",
                lambda d: (*_xwb(d)[:2], torch.zeros(33, device=d)[1:].view(8, 4), 1e-5)),
        Refusal("normalized size not a multiple of 4", r"(multiple of 4|% 4)",
                lambda d: (torch.rand(2, 6, device=d), torch.ones(6, device=d), torch.zeros(6, device=d), 1e-5)),
        Refusal("affine shape differs from input's trailing dims", r"trailing dims",
                lambda d: (_xwb(d)[0], torch.ones(8, 2, 2, device=d), torch.zeros(8, 2, 2, device=d), 1e-5)),
        Refusal("N > 2**24 (torch leaves the vectorized path)", r"2\*\*24", lambda d: (*_meta(1, MAX_NORMALIZED + 4), 1e-5)),
        Refusal("numel >= 2**31", r"2\*\*31", lambda d: (*_meta(1 << 17, 1 << 14), 1e-5)),
        Refusal("empty batch (no rows)", r"at least one row", with_x(lambda d: _xwb(d)[0][:0])),
        Refusal("x requires grad (grad mode on)", r"require grad",
                with_x(lambda d: _xwb(d)[0].requires_grad_())),
        Refusal("weight requires grad (grad mode on)", r"require grad",
                lambda d: (_xwb(d)[0], _xwb(d)[1].requires_grad_(), _xwb(d)[2], 1e-5)),
        Refusal("eps NaN", r"eps", lambda d: (*_xwb(d), float("nan"))),
        Refusal("eps negative", r"eps", lambda d: (*_xwb(d), -1.0)),
        Refusal("eps infinite", r"eps", lambda d: (*_xwb(d), float("inf"))),
    )


def _functions() -> dict:
    from labkit.ops.chain import chain_layer_norm
    from labkit.ops.reference_order import reference_order_layer_norm
    from labkit.ops.split_stats import split_stats_layer_norm

    return {"reference_order_layer_norm": reference_order_layer_norm,
            "chain_layer_norm": chain_layer_norm,
            "split_stats_layer_norm": lambda x, w, b, eps: split_stats_layer_norm(x, w, b, eps, geometry="interleaved")}



def _outcome(call) -> str:
    try:
        call()
    except ValueError as exc:
        return f"ValueError: {exc}"
    return "nothing (BUG: accepted)"


def refusal_rows(device: str = "cpu") -> list[dict]:
    """One row per (case, function): what it raises on `device` ('cuda': the public functions themselves; 'cpu':
    the shared validation they all run first, without its device check). Keys: case, function, condition, raises,
    names_condition (whether the message matches the condition)."""
    import re

    from labkit.core.validate import layer_norm_layout

    rows = []
    for case in _cases():
        meta = "2**" in case.case  # meta tensors: validated without allocating, on every machine
        if device == "cuda" and not meta:
            targets = _functions()
        else:
            targets = {"layer_norm_layout (shared validation)":
                       lambda x, w, b, eps: layer_norm_layout(x, w, b, eps, require_cuda=False)}
        for name, fn in targets.items():
            x, w, b, eps = case.make("meta" if meta else device)
            raised = _outcome(lambda: fn(x, w, b, eps))
            rows.append({"case": case.case, "function": name, "condition": case.condition, "raises": raised,
                         "names_condition": bool(re.search(case.condition, raised)) and raised.startswith("ValueError")})
    return rows
