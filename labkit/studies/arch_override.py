"""The portable paths checked on a newer GPU (issue 25 item 4): the H200 run as compute_80 (LABKIT_ARCH, see
labkit.core.device), so that what an A100 or an RTX 30xx/40xx would get is exercised without one. Kernels reach the
driver as compute_80 PTX and are JIT-compiled by it, tensor maps are off, shared memory is capped at sm_80's; the
chain path is then not planned, and the drop-in has no committed table for the device until `labkit tune` measures
one. scripts/arch_override.py runs `run` into a run named "arch_override"; the records are read back by
`rows`/`verdict_lines` (README "Other GPUs", notebook 08).
"""
from __future__ import annotations

import time

SHAPES = ((16, 1 << 22), (1, 1 << 24), (64, 65536), (4096, 768), (8192, 4096), (32768, 2048), (3, 1000))


def device_record() -> dict:
    import torch

    from labkit.core.device import device_info
    from labkit.ops import backward, paths

    dev = device_info(torch.cuda.current_device())
    return {"label": dev.label, "name": dev.name, "arch": dev.arch, "target": dev.target, "ptx": dev.ptx,
            "native_arch": dev.native_arch, "smem_optin_bytes": dev.smem_optin_bytes, "tensor_maps": dev.tensor_maps,
            "offered": [{"shape": [r, n], "forward": list(paths.plannable(r, n, dev)),
                         "backward": list(backward.plannable(r, n, dev))} for r, n in SHAPES]}


def served(shapes=SHAPES, seed: int = 0) -> list[dict]:
    """Per shape: what the drop-in serves now (labkit.explain) and whether a training call through it keeps
    torch's bits (y, dx, dweight, dbias as int32 views against F.layer_norm)."""
    import torch

    import labkit

    out = []
    for shape in shapes:
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = (torch.randn(shape, device="cuda", generator=g) * 2 + 0.5).requires_grad_()
        w = torch.randn(shape[1:], device="cuda", generator=g).requires_grad_()
        b = torch.randn(shape[1:], device="cuda", generator=g).requires_grad_()
        dy = torch.randn(shape, device="cuda", generator=g)
        ns = tuple(shape[1:])
        how = labkit.explain(x, ns, w, b)
        got, ref = [], []
        for fn, keep in ((labkit.layer_norm, got), (torch.nn.functional.layer_norm, ref)):
            y = fn(x, ns, w, b)
            keep += [y.detach(), *torch.autograd.grad(y, (x, w, b), dy)]
        same = [torch.equal(a.view(torch.int32), c.view(torch.int32)) for a, c in zip(got, ref)]
        out.append({"shape": list(shape), "path": how["path"], "rule_source": how["rule_source"],
                    "launches": how["launches"], "bits": dict(zip(("y", "dx", "dweight", "dbias"), same))})
        del x, w, b, dy, got, ref
    return out


def run(session_run, fuzz_cases: int = 2000, training_cases: int = 2000, budget_s: float = 90.0, log=print) -> dict:
    """Every record of the override run into `session_run` (a labkit.records.run.Run); returns the summary."""
    from labkit.studies import reliability as rel
    from labkit.studies import training
    from labkit.studies.tune import tune

    t0 = time.perf_counter()
    session_run.write("device", device_record())
    session_run.write("served_before_tune", served())
    log(f"[override] served before tune: {time.perf_counter() - t0:.0f} s")
    fz = rel.fuzz(fuzz_cases, seed=25, time_budget_s=budget_s, max_random_numel=1 << 24)
    session_run.write("fuzz", fz)
    log(f"[override] fuzz {rel.fuzz_counts(fz)}: {time.perf_counter() - t0:.0f} s")
    tf = training.fuzz(training_cases, seed=25, time_budget_s=budget_s)
    session_run.write("training_fuzz", tf)
    log(f"[override] training fuzz {training.fuzz_counts(tf)}: {time.perf_counter() - t0:.0f} s")
    tuned = tune(progress=False)
    session_run.write("tune", tuned)
    log(f"[override] tune {tuned['seconds']} s: {time.perf_counter() - t0:.0f} s")
    after = served()
    session_run.write("served_after_tune", after)
    return summary({"fuzz": fz, "training_fuzz": tf, "tune": tuned, "served_after_tune": after})


def summary(records: dict) -> dict:
    from labkit.studies import reliability as rel
    from labkit.studies import training

    after = records.get("served_after_tune") or []
    return {"fuzz": rel.fuzz_counts(records["fuzz"]) if records.get("fuzz") else None,
            "training_fuzz": training.fuzz_counts(records.get("training_fuzz")),
            "served_ours_after_tune": sum(r["path"] != "native" for r in after),
            "served_bits": f"{sum(all(r['bits'].values()) for r in after)}/{len(after)}",
            "table": (records.get("tune") or {}).get("path")}
