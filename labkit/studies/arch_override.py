"""The portable paths checked on a newer GPU: the H200 run as compute_80 (LABKIT_ARCH, see
labkit.core.device), so that the paths an sm_80 GPU is offered run end to end without one. It is not an A100: the
SM count stays 132, torch's own kernel stays its sm_90 code, and the machine code of ours is what the driver's JIT
makes of compute_80 PTX (sm_86/89's 99 KiB of shared memory would need compute_86/89). Kernels reach the
driver as compute_80 PTX and are JIT-compiled by it, tensor maps are off, shared memory is capped at sm_80's; the
chain path is then not planned, and the drop-in has no committed table for the device until `labkit tune` measures
one. scripts/arch_override.py runs `run` into a run named "arch_override"; the records are read back by
`rows`/`verdict_lines` (notebook 08).
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
            "offered": [{"shape": [r, n], "forward": list(paths.candidates(r, n, dev)),
                         "backward": list(backward.candidates(r, n, dev))} for r, n in SHAPES]}


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


def run(session_run, fuzz_cases: int = 2000, training_cases: int = 2000, budget_s: float = 90.0, log=None) -> dict:
    """Every record of the override run into `session_run` (a labkit.records.run.Run); returns the summary."""
    from labkit.studies import reliability as rel
    from labkit.studies import training_backward
    from labkit.studies.tune import tune

    log = log or (lambda line: None)
    t0 = time.perf_counter()
    session_run.write("device", device_record())
    session_run.write("served_before_tune", served())
    log(f"[override] served before tune: {time.perf_counter() - t0:.0f} s")
    fz = rel.fuzz(fuzz_cases, seed=25, time_budget_s=budget_s, max_random_numel=1 << 24)
    session_run.write("fuzz", fz)
    log(f"[override] fuzz {rel.fuzz_counts(fz)}: {time.perf_counter() - t0:.0f} s")
    tf = training_backward.fuzz(training_cases, seed=25, time_budget_s=budget_s)
    session_run.write("training_fuzz", tf)
    log(f"[override] training fuzz {training_backward.fuzz_counts(tf)}: {time.perf_counter() - t0:.0f} s")
    tuned = tune(progress=False)
    session_run.write("tune", tuned)
    log(f"[override] tune {tuned['seconds']} s: {time.perf_counter() - t0:.0f} s")
    after = served()
    session_run.write("served_after_tune", after)
    return summary({"fuzz": fz, "training_fuzz": tf, "tune": tuned, "served_after_tune": after})


def summary(records: dict) -> dict:
    from labkit.studies import reliability as rel
    from labkit.studies import training_backward

    after = records.get("served_after_tune") or []
    return {"fuzz": rel.fuzz_counts(records["fuzz"]) if records.get("fuzz") else None,
            "training_fuzz": training_backward.fuzz_counts(records.get("training_fuzz")),
            "served_ours_after_tune": sum(r["path"] != "native" for r in after),
            "served_bits": f"{sum(all(r['bits'].values()) for r in after)}/{len(after)}",
            "table": (records.get("tune") or {}).get("path")}


# --- reading the run back (notebook 08) ----------------------------------------------------------------------------

def _short_source(text: str) -> str:
    """A rule_source without the GPU machine's directories: the tuned table by its file name."""
    import re

    return re.sub(r"read from \S*/([^/\s]+\.json)", r"read from the table cache's \1", text)


def served_rows(session) -> list[dict]:
    """What the drop-in served on the H200 as compute_80, before and after `labkit tune`, with its bits."""
    before = {tuple(r["shape"]): r for r in session.record("served_before_tune") or []}
    rows = []
    for r in session.record("served_after_tune") or []:
        b = before.get(tuple(r["shape"]), {})
        rows.append({"shape": " x ".join(map(str, r["shape"])), "before tune": b.get("path", "—"),
                     "after tune": r["path"], "launched by": r["launches"].split(" (")[0],
                     "torch's bits (y, dx, dweight, dbias)": "✓" if all(r["bits"].values()) else
                     ", ".join(k for k, v in r["bits"].items() if not v) + " differ"})
    return rows or [{"override run": session.source}]


def _tests_line(session) -> str:
    """The override's GPU test counts and why tests were skipped, read from the log attached to the run."""
    import re
    from pathlib import Path

    log = Path(session.replay_path or "") / "override_tests.log"
    if not session.replay_path or not log.is_file():
        return "GPU tests under the override: no log in the run"
    text = log.read_text()
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error)", text.strip().splitlines()[-1])}
    skips: dict[str, int] = {}
    for n, reason in re.findall(r"^SKIPPED \[(\d+)\] [^:]+(?::\d+)?: (.*)$", text, re.M):
        key = "need the chain path" if reason.startswith(("needs sm_90", "needs the chain path")) else reason
        skips[key] = skips.get(key, 0) + int(n)
    why = "; ".join(f"{n} {k}" for k, n in sorted(skips.items(), key=lambda kv: -kv[1]))
    return (f"GPU tests under the override: {counts.get('passed', 0)} passed, {counts.get('failed', 0)} failed, "
            f"{counts.get('skipped', 0)} skipped ({why or 'none'})")


def verdict_lines(session) -> list[str]:
    """The override run's findings, generated from its records."""
    from labkit.studies import reliability as rel
    from labkit.studies import training_backward

    dev = session.record("device")
    if not dev:
        return [f"the H200 as compute_80: {session.source}"]
    fz = rel.fuzz_counts(session.record("fuzz") or {})
    tf = training_backward.fuzz_counts(session.record("training_fuzz"))
    tune = session.record("tune") or {}
    after = session.record("served_after_tune") or []
    before = session.record("served_before_tune") or []
    ours = [r for r in after if r["path"] != "native"]
    offered = {p for o in dev["offered"] for p in o["forward"]}
    return [f"{dev['label']}: kernels as {dev['target']} PTX JIT-compiled by the driver, tensor maps "
            f"{'on' if dev['tensor_maps'] else 'off'}, {dev['smem_optin_bytes'] // 1024} KiB of shared memory per block "
            f"({session.source})",
            f"paths planned there: {', '.join(sorted(offered))} (the chain needs sm_90); backward schedules "
            f"{', '.join(sorted({p for o in dev['offered'] for p in o['backward']}))}",
            _tests_line(session),
            f"forward fuzz: {fz['cases']} cases, {fz['checks']} path checks, {fz['mismatches']} mismatch(es) against "
            f"torch.native_layer_norm (output, mean, rstd as int32 views)",
            f"backward fuzz: {tf['cases']} cases, {tf['checks']} schedule checks, {tf['mismatches']} mismatch(es) against "
            f"native_layer_norm_backward (dx, dweight, dbias)",
            f"before `labkit tune` ({_short_source(before[0]['rule_source']) if before else 'n/a'}) torch's kernel served "
            f"{sum(r['path'] == 'native' for r in before)} of {len(before)} shapes; `labkit tune` "
            f"({tune.get('shapes', '?')} shapes, {tune.get('seconds', '?')} s) wrote this GPU's table, and then our kernels "
            f"served {len(ours)} of {len(after)} shapes, with torch's bits in y and all three gradients at "
            f"{sum(all(r['bits'].values()) for r in after)} of {len(after)}",
            f"the rule's source after the tune: {_short_source(after[0]['rule_source']) if after else 'n/a'}"]
