"""The portable paths checked on a newer GPU: an sm_90 GPU (H200 or H100) run as compute_80 (LABKIT_ARCH, see
labkit.core.device), so that the paths an sm_80 GPU is offered run end to end without one. It is not an A100: the
SM count stays 132, torch's own kernel stays its sm_90 code, and the machine code of ours is what the driver's JIT
makes of compute_80 PTX (sm_86/89's 99 KiB of shared memory would need compute_86/89). Kernels reach the
driver as compute_80 PTX and are JIT-compiled by it, tensor maps are off, shared memory is capped at sm_80's; the
chain statistics then take their cp.async ring (labkit.ops.chain), and the drop-in has no committed table for the
device until `labkit tune` measures one. scripts/arch_override.py runs `run` into a run named "arch_override"; the
records are read back by `served_rows`/`verdict_lines` (notebook 08) and `chain_rows`/`chain_lines` (notebook 07:
the chain below sm_90, with the same GPU's sm_90 chain timed by a process without the override, `chain_timing`).
"""
from __future__ import annotations

import time

from labkit.records.text import speed
from labkit.tasks import L1_40

SHAPES = ((16, 1 << 22), (1, 1 << 24), (64, 65536), (4096, 768), (8192, 4096), (32768, 2048), (3, 1000))
CHAIN_SEEDS = (0, 1, 2)  # notebook 01's matrix at L1/40: 3 seeds x 2 affines x 5 distributions
# GPUs the chain's floors are projected onto (an estimate, not a measurement): SMs, DRAM GB/s, boost clock GHz
ESTIMATED = {"RTX 3090 (sm_86)": (82, 936.0, 1.695), "A100 80GB SXM (sm_80)": (108, 2039.0, 1.41)}


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


def chain_matrix(cases: int = 60, seed: int | None = None, max_numel: int = 1 << 26) -> dict:
    """The chain schedule forced on shapes, distributions and eps drawn here, none of them a test's: rows 1-64,
    N a multiple of 512 (equal chains, what the tma and ring blockings take) up to 2^24, x = scale * (normal or
    uniform) + offset over six decades, eps log-uniform in [1e-7, 1e-1]; y, mean and rstd against
    torch.native_layer_norm as int32 views. `seed` defaults to the clock's, recorded."""
    import random
    import time as _time

    import torch

    from labkit.studies import parallel_stats
    from labkit.studies.identity import compare_to_native

    seed = int(_time.time()) if seed is None else seed
    rnd = random.Random(seed)
    out = []
    for i in range(cases):
        n = 512 * rnd.randint(1, (1 << 24) // 512)
        rows = max(1, min(rnd.randint(1, 64), max_numel // n))
        scale, offset = 10 ** rnd.uniform(-3, 3), rnd.choice((0.0, 1.0, -50.0, 1e3))
        eps = 10 ** rnd.uniform(-7, -1)
        g = torch.Generator(device="cuda").manual_seed(rnd.randrange(1 << 31))
        draw = torch.randn if rnd.random() < 0.5 else torch.rand
        x = draw((rows, n), device="cuda", generator=g) * scale + offset
        w, b = torch.randn(n, device="cuda", generator=g), torch.randn(n, device="cuda", generator=g)
        case = {"rows": rows, "n": n, "scale": scale, "offset": offset, "eps": eps, "draw": draw.__name__}
        r = compare_to_native(parallel_stats.chain_candidate, x, w, b, eps, case)
        out.append({**case, "identical": r["identical"]})
        del x, w, b
    return {"seed": seed, "cases": out}


def chain_timing(rounds: int = 35) -> dict:
    """notebook 07's timing study at L1/40 (protocol A: graph replay) on this process's device: native, the post's
    design (reference order), split statistics, Inductor and the chain (the ring under the override)."""
    from labkit.studies import parallel_stats

    return parallel_stats.timing_study([L1_40], "full", rounds)


def run_chain(session_run, rounds: int = 35, log=None) -> None:
    """The chain's records under the override: its bits at L1/40 (notebook 01's matrix), the drawn matrix, and its
    time beside the post's design and torch's kernel (the same GPU's sm_90 chain comes from the script's second
    process: `chain_timing_native`)."""
    from labkit.studies import parallel_stats

    log = log or (lambda line: None)
    t0 = time.perf_counter()
    session_run.write("chain_bits", parallel_stats.bit_identity(L1_40, CHAIN_SEEDS))
    log(f"[override] chain bits at L1/40: {time.perf_counter() - t0:.0f} s")
    session_run.write("chain_matrix", chain_matrix())
    log(f"[override] chain matrix: {time.perf_counter() - t0:.0f} s")
    session_run.write("chain_timing", chain_timing(rounds))
    log(f"[override] chain timing: {time.perf_counter() - t0:.0f} s")


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
    run_chain(session_run, log=log)
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
    """What the drop-in served on the GPU under the override, before and after `labkit tune`, with its bits."""
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
        return [f"the GPU under the override: {session.source}"]
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
            f"paths planned there: {', '.join(sorted(offered))}; backward schedules "
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


# --- the chain below sm_90, read back (notebook 07) ----------------------------------------------------------------

CHAIN_METHODS = {"native": "torch's kernel", "reference_order": "the post's design (reference order)",
                 "chain": "the chain"}


def _medians(timing_record: dict | None) -> dict:
    """{method: (median, q25, q75) ms} at L1/40 under protocol A (graph replay), random affine."""
    from labkit.studies.timing import l1_40_case

    case = l1_40_case(timing_record) if timing_record else None
    stats = ((case or {}).get("timing") or {}).get("A", {}).get("stats", {})
    return {m: (s["median_ms"], s["q25_ms"], s["q75_ms"]) for m, s in stats.items()}


def _paired(timing_record: dict | None, num: str, den: str) -> float | None:
    from labkit.studies.timing import l1_40_case, paired

    return paired(l1_40_case(timing_record), "A", num, den) if timing_record else None


def chain_rows(session) -> list[dict]:
    """L1/40 under graph replay on one GPU: each method as compute_80 PTX (the chain then fed by its cp.async ring)
    and as the GPU's own sm_90 code (the chain fed by tensor maps), medians with quartiles."""
    under, native = _medians(session.record("chain_timing")), _medians(session.record("chain_timing_native"))
    if not under:
        return [{"override run": f"{session.source}: no chain records (made before the chain ran below sm_90)"}]
    target = (session.record("device") or {}).get("target", "the override")

    def cell(t):
        return f"{t[0]:.3f} ({t[1]:.3f}-{t[2]:.3f})" if t else "—"

    return [{"method": label, f"as {target}, ms (q25-q75)": cell(under.get(m)),
             "as the GPU's own arch, ms (q25-q75)": cell(native.get(m)),
             f"{target} / own": f"{under[m][0] / native[m][0]:.2f}x" if m in under and m in native else "—"}
            for m, label in CHAIN_METHODS.items()]


def estimates(cycles_per_push: float, shape=L1_40) -> list[dict]:
    """What the chain would take at `shape` on ESTIMATED's GPUs, from two floors: the statistics pass is the longer
    of the dependent pushes (torch's chains: 4 * N / 512 pushes each at `cycles_per_push`, measured on an sm_90 GPU,
    in waves of SMs) and reading x once at the GPU's DRAM bandwidth; the output pass reads x and writes y at that
    bandwidth. An estimate: neither GPU was measured."""
    import math

    rows, n = shape[0], math.prod(shape[1:])
    pushes, x_bytes = 4 * n // 512, 4 * rows * n
    out = []
    for gpu, (sms, gbps, ghz) in ESTIMATED.items():
        waves = -(-4 * rows // sms)
        chain_ms = waves * pushes * cycles_per_push / (ghz * 1e6)
        stats_ms = max(chain_ms, x_bytes / gbps / 1e6)
        output_ms = 2 * x_bytes / gbps / 1e6
        out.append({"GPU (estimate)": gpu, "push chain floor, ms": round(chain_ms, 3),
                    "x read once, ms": round(x_bytes / gbps / 1e6, 3), "output pass floor, ms": round(output_ms, 3),
                    "chain, ms (estimate)": round(stats_ms + output_ms, 3)})
    return out


def chain_lines(session, floor: dict | None, floor_gpu: str = "") -> list[str]:
    """The chain below sm_90, generated from the override run's records, and estimates from `floor` (a chain_floor
    record: its cycles per push, measured on `floor_gpu`)."""
    from labkit.records.check import identical_count

    bits, matrix = session.record("chain_bits"), session.record("chain_matrix")
    under, native = _medians(session.record("chain_timing")), _medians(session.record("chain_timing_native"))
    if not (bits and under):
        return [f"the chain below sm_90: {session.source} has no chain records"]
    dev = session.record("device") or {}
    k, n = identical_count(bits.get("cases", []))
    cases = (matrix or {}).get("cases", [])
    lines = [f"{dev.get('label', 'the GPU')}: the chain's statistics fed by a cp.async ring (no tensor maps, no bulk "
             f"copies), the same consumer and push order as the sm_90 kernel ({session.source})",
             f"bits at L1/40, the chain forced: {k}/{n} cases identical to torch.native_layer_norm (output, mean, rstd "
             f"as int32 views; " + " x ".join(f"{len({c[f] for c in bits['cases']})} {f}s"
                                              for f in ("seed", "affine", "distribution")) + ")"]
    if cases:
        lines.append(f"drawn matrix (seed {matrix['seed']}: rows 1-64, N up to 2^24, scales 1e-3..1e3, offsets, eps "
                     f"1e-7..1e-1): {sum(c['identical'] for c in cases)}/{len(cases)} identical")
    ring_vs_ref = _paired(session.record("chain_timing"), "reference_order", "chain")
    ring_vs_torch = _paired(session.record("chain_timing"), "native", "chain")
    if ring_vs_ref and ring_vs_torch:
        lines.append(f"graph replay at L1/40, as {dev.get('target', 'the override')}: the chain "
                     f"{under['chain'][0]:.3f} ms, "
                     f"{speed(ring_vs_ref)} than the post's design and {speed(ring_vs_torch)} than torch's kernel "
                     f"(paired medians, one process)")
    if "chain" in native:
        r = under["chain"][0] / native["chain"][0]
        lines.append(f"against the same GPU's sm_90 chain ({native['chain'][0]:.3f} ms, tensor maps): {r:.2f}x its "
                     f"time (ratio of medians, two processes of one run; goal <= 1.3x: "
                     f"{'met' if r <= 1.3 else 'missed'})")
    cycles_per_push = (floor or {}).get("cycles_per_push")
    if cycles_per_push:
        lines.append(f"estimates from the floors ({cycles_per_push:.1f} cycles per push as measured on "
                     f"{floor_gpu or 'an sm_90 GPU'}, each "
                     f"GPU's DRAM bandwidth and boost clock; not measured): " + "; ".join(
                         f"{e['GPU (estimate)']} about {e['chain, ms (estimate)']:.2f} ms" for e in estimates(
                             cycles_per_push)))
    return lines
