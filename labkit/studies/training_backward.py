"""The drop-in's backward on its own (notebook 10): its floor at few long rows (`training_floor`) and its bits
against torch's on the identity cases (`training_identity`) and random inputs (`training_fuzz`), with their rows
and counts. Apart from the forward + backward timings because these call the backward kernels directly."""
from __future__ import annotations

import time

from labkit.studies.bench import us as _us
from labkit.studies.training_sweep import _tensors
from labkit.tasks import shape_key


# --- the backward's floor -------------------------------------------------------------------------------------------

FLOOR_SHAPES = ((16, 64 * 256 * 256), (4, 1 << 22), (2, 1 << 23), (1, 1 << 24))
CHAIN_CYCLES_PER_ELEMENT = 4  # grad_push: one dependent FADD (s1) and one FFMA (s2) per element, 4 cycles each


def floor_check(rounds: int = 15, seed: int = 0, device="cuda") -> dict:
    """The backward's floor at few long rows, measured parts in this run: the row sums cannot finish before their
    chains do (CHAIN_CYCLES_PER_ELEMENT x N/128 cycles at the SM clock measured by labkit.studies.measure.chain_floor)
    nor before x and dy are read once; the output pass reads x and dy again and writes dx. Floor = max(chain, sums'
    bytes at the copy ceiling) + the output pass's bytes at the copy ceiling. Beside it, our backward alone (graph
    replay). The `training_floor` record."""
    from dataclasses import replace

    import torch

    from labkit.ops import backward as grad
    from labkit.studies.bench import PROTOCOL_A, time_methods
    from labkit.studies.measure import chain_floor, copy_ceiling_a

    ceiling = copy_ceiling_a(rounds=rounds, device=device)
    clock = chain_floor(rounds=rounds, device=device)["sm_clock_ghz_implied"]
    gbps = ceiling["read_plus_write_gbps"]
    rows_out = []
    for rows, n in FLOOR_SHAPES:
        x, w, b, dy = _tensors((rows, n), seed, device)
        _, mean, rstd = torch.native_layer_norm(x, (n,), w, b, 1e-5)
        rec = time_methods({"ours": lambda: grad.backward(dy, x, (n,), mean, rstd, w, b)},
                           replace(PROTOCOL_A, rounds=rounds, repeats=3))
        elems = rows * n
        chain_ms = CHAIN_CYCLES_PER_ELEMENT * (n // 128) / (clock * 1e6)
        sums_ms = 2 * 4 * elems / (gbps * 1e6)
        output_ms = 3 * 4 * elems / (gbps * 1e6)
        floor_ms = max(chain_ms, sums_ms) + output_ms
        rows_out.append({"key": shape_key((rows, n)), "rows": rows, "n": n, "chain_ms": chain_ms, "sums_bytes_ms":
                         sums_ms, "output_bytes_ms": output_ms, "floor_ms": floor_ms,
                         "ours": rec.stats["ours"], "schedule": grad.launches(rows, n, _device(x)).schedule})
        x = dy = None  # freed before the next shape is made
    return {"ceiling": ceiling, "sm_clock_ghz": clock, "shapes": rows_out}


def complete_floor_ms(row: dict, gbps: float) -> tuple[float, float]:
    """(sums, output) bytes at the copy ceiling counting every byte the backward must move: the goal's floor counts
    x and dy read and dx written; the row sums also read gamma (N floats), the output pass reads gamma and writes
    dgamma and dbeta (3N floats): half of the output pass's bytes at one row, a third at two, a fifth at four."""
    elems, n = row["rows"] * row["n"], row["n"]
    return 4 * (2 * elems + n) / (gbps * 1e6), 4 * (3 * elems + 3 * n) / (gbps * 1e6)


def floor_rows(floor: dict | None) -> list[dict]:
    """The floor table: the goal's floor (x, dy read, dx written) and the complete one (complete_floor_ms) beside
    our backward's median under graph replay."""
    out = []
    gbps = ((floor or {}).get("ceiling") or {}).get("read_plus_write_gbps")
    for r in (floor or {}).get("shapes", []):
        row = {"shape": r["key"], "schedule": r["schedule"], "chain us": _us(r["chain_ms"]),
               "sums bytes us": _us(r["sums_bytes_ms"]), "output bytes us": _us(r["output_bytes_ms"]),
               "floor us": _us(r["floor_ms"]), "ours (graph) us": _us(r["ours"]["median_ms"]),
               "ours / floor": r["ours"]["median_ms"] / r["floor_ms"]}
        if gbps:
            sums, output = complete_floor_ms(r, gbps)
            complete = max(r["chain_ms"], sums) + output
            row.update({"complete floor us": _us(complete), "ours / complete floor": r["ours"]["median_ms"] / complete})
        out.append(row)
    return out


def _device(x):
    from labkit.core.device import current_index, device_info

    return device_info(current_index(x.device))


# --- bits of the backward at many inputs ------------------------------------------------------------------------------

def identity(device="cuda", eps: float = 1e-5) -> dict:
    """Forward and backward bits (y, grad of x, weight, bias; int32 views) of labkit.layer_norm with our backward
    forced wherever its predicate takes the input, against F.layer_norm with autograd, on the drop-in's identity
    cases (labkit.studies.dropin_bits.identity_cases: our kernels' shapes and every input torch sends down another
    path). The `training_identity` record."""
    import torch

    import labkit
    from labkit.ops.dropin.plan import forced_backward
    from labkit.studies.dropin_bits import identity_cases

    rows = []
    for case in identity_cases(device):
        x, ns, w, b = case["make"]()
        row = {"case": case["case"], "shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")}
        try:
            outs = []
            for fn, path in ((torch.nn.functional.layer_norm, None), (labkit.layer_norm, "auto")):
                ts = [t.detach().clone().requires_grad_() if t is not None else None for t in (x, w, b)]
                with forced_backward(path):
                    y = fn(ts[0], ns, ts[1], ts[2], eps)
                    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(7)).to(y.dtype).to(y.device)
                    if y.numel():
                        y.backward(gy)
                outs.append([y.detach()] + [t.grad if t is not None else None for t in ts])
            equal = [_bits_equal_any(a, c) for a, c in zip(*outs)]
            row.update({"forward": equal[0], "backward": all(equal[1:])})
        except Exception as exc:  # a failure of the drop-in, recorded, never skipped
            row.update({"forward": False, "backward": False, "error": f"{type(exc).__name__}: {exc}"})
        rows.append(row)
    return {"cases": rows}


def _bits_equal_any(a, b) -> bool:
    import torch

    if a is None or b is None:
        return a is None and b is None
    view = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
            torch.float64: torch.int64}[a.dtype]
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.contiguous().view(view),
                                                                     b.contiguous().view(view))


# --- fuzzing the backward against torch -------------------------------------------------------------------------------

def fuzz(n_cases: int = 2000, seed: int = 0, time_budget_s: float = 120.0, max_numel: int = 1 << 22,
         device="cuda") -> dict:
    """Random (rows, N) with N % 4 == 0 (and some ragged N, which must route to torch), value classes (normal,
    offset, huge, tiny, mixed scale, constant rows, non-finite), eps and affines: dx, dweight and dbias of our
    backward (every schedule that takes the shape) against torch.ops.aten.native_layer_norm_backward, int32 views.
    The `training_fuzz` record: per case the shape, values and each schedule's verdict."""
    import numpy as np
    import torch

    from labkit.ops import backward as grad

    rng = np.random.default_rng(seed)
    dev = _device(torch.empty(0, device=device))
    kinds = ("normal", "offset", "huge", "tiny", "mixed", "constant", "nonfinite")
    cases, t0 = [], time.perf_counter()
    while len(cases) < n_cases and time.perf_counter() - t0 < time_budget_s:
        n = 4 * int(np.exp(rng.uniform(0, np.log(max_numel // 4))))
        rows = max(1, int(np.exp(rng.uniform(0, np.log(max(1, max_numel // n))))))
        kind = kinds[int(rng.integers(len(kinds)))]
        eps = float(rng.choice([1e-5, 0.0, 1e-2]))
        affine = str(rng.choice(["both", "weight", "none"]))
        g = torch.Generator(device=device).manual_seed(int(rng.integers(1 << 30)))
        x = torch.randn(rows, n, device=device, generator=g)
        if kind == "offset":
            x += 1000
        elif kind == "huge":
            x *= 1e30
        elif kind == "tiny":
            x *= 1e-30
        elif kind == "mixed":
            x *= torch.exp(8 * torch.randn(rows, n, device=device, generator=g))
        elif kind == "constant":
            x[:] = x[:, :1]
        elif kind == "nonfinite":
            x.view(-1)[:: 1 + int(rng.integers(50))] = float("inf")
        dy = torch.randn(rows, n, device=device, generator=g)
        w = torch.randn(n, device=device, generator=g) if affine != "none" else None
        b = torch.randn(n, device=device, generator=g) if affine == "both" else None
        _, mean, rstd = torch.native_layer_norm(x, (n,), w, b, eps)
        mask = [True, w is not None, b is not None]
        ref = torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, mask)
        case = {"shape": [rows, n], "values": kind, "eps": eps, "affine": affine, "schedules": {}}
        for sch in grad.candidates(rows, n, dev):
            try:
                got = grad.backward(dy, x, (n,), mean, rstd, w, b, tuple(mask), schedule=sch)
                case["schedules"][sch] = all(_bits_equal_any(a, c) for a, c in zip(got, ref))
            except Exception as exc:
                case["schedules"][sch] = f"{type(exc).__name__}: {exc}"
        cases.append(case)
        x = dy = None  # freed before the next case is made
    return {"cases": cases, "seconds": time.perf_counter() - t0, "seed": seed}


def fuzz_counts(record: dict | None) -> dict:
    cases = (record or {}).get("cases", [])
    checks = [v for c in cases for v in c["schedules"].values()]
    return {"cases": len(cases), "shapes": len({tuple(c["shape"]) for c in cases}), "checks": len(checks),
            "mismatches": sum(v is not True for v in checks)}
