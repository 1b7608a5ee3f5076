"""Bit identity against torch.native_layer_norm: output, mean and rstd compared as int32 views."""
from __future__ import annotations

from labkit.ops.reference import native_layer_norm
from labkit.records.check import compare


def compare_to_native(candidate, x, weight, bias, eps: float, case: dict | None = None) -> dict:
    """Run `candidate(x, weight, bias, eps) -> (y, mean, rstd)` and torch; one record per output tensor."""
    ref = native_layer_norm(x, weight, bias, eps)
    got = candidate(x, weight, bias, eps)
    records = {name: compare(r, g) for name, r, g in zip(("output", "mean", "rstd"), ref, got)}
    return {**(case or {}), **{k: v.to_json() for k, v in records.items()},
            "identical": all(r.identical for r in records.values())}


SMOKE_DISTRIBUTIONS = ("uniform", "normal_plus_1000")  # KernelBench's input and the offset control


def smoke_cases(candidate, shapes, device, seed: int = 0, eps: float = 1e-5) -> list[dict]:
    """A few bit-identity cases per shape (uniform and the offset control, random affine): the pipeline check
    of the environment notebook, not the full matrix of the bit-identity notebook."""
    import torch

    from labkit.inputs import make_affine, make_input

    cases = []
    for shape in shapes:
        shape = tuple(int(d) for d in shape)
        weight, bias = make_affine("random_normal", shape[1:], seed, device)
        for dist in SMOKE_DISTRIBUTIONS:
            x = make_input(dist, shape, seed, device)
            cases.append(compare_to_native(candidate, x, weight, bias, eps,
                                           {"shape": list(shape), "distribution": dist, "affine": "random_normal",
                                            "seed": seed, "eps": eps}))
            del x
        if str(device).startswith("cuda"):
            torch.cuda.empty_cache()  # the L1/40 smoke input is 256 MiB; free it before the next shape
    return cases
