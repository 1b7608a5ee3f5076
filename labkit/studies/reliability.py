"""Reliability evidence (the reliability and training goals): compute-sanitizer over our kernels, forward and
backward, the racecheck experiment on minimal TMA rings, GPU fuzzing against torch bit for bit, and a soak of many
calls (training calls among them).

Everything here returns JSON-able records; scripts/gpu/reliability.sh runs it on the H200 and writes a run. The
parsing and summary functions are pure and run on any machine (tests feed them report text built in the test).
"""
from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")

# Every kernel of ours (kernels/*.cu and kernels/sanitize/*.cu) and nothing of torch's: the sanitizer instruments
# only these, so torch's own kernels (input generation, the reference) neither slow it down nor count.
PRODUCT_KERNELS = r"chain_stats_tma|chain_stats_ring|chain_stats_w1|chain_stats_w4|reciprocal_table|affine_columns|rows_fused_(?:reg|warp)\d+" \
                  r"|rows_fused_(?:warp2|reg2)_counted|rows_staged|rows_cluster2" \
                  r"|reference_order_stats|affine_rows_interleaved|split_affine_flat|split_affine_interleaved" \
                  r"|nchw_\w+|rows_(?:rms|mean_abs|l2)" \
                  r"|grad_row_sums|grad_chain_sums_(?:ring_)?(?:s|split)\d+|grad_rows_fused_reg\d+" \
                  r"|grad_columns_(?:streamed|prefetched|fold|tiled)"
RING_KERNELS = r"ring_\w+"
OUR_KERNELS = rf"^({PRODUCT_KERNELS}|{RING_KERNELS})$"

RING_VARIANTS = ("ring_ok", "ring_all_arrive", "ring_tma_only", "ring_in_order", "ring_race_side",
                 "ring_race_late_wait")
RING_DELIBERATE_RACES = ("ring_race_side", "ring_race_late_wait")
RING_STEPS, RING_STAGES = 64, 6  # kernels/sanitize/tma_ring.cu
RING_SMEM = RING_STAGES * RING_STEPS * (512 + 16)

# ---------------------------------------------------------------------------------------------------------------
# Sanitizer reports
# ---------------------------------------------------------------------------------------------------------------

_NOT_AN_ERROR = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY", "Target application")
_HEADER = re.compile(r"^========= (\S.*)$")
# `Write access at chain_stats_w4+0x2ff0`, or a demangled C++ kernel: `access at void at::native::reduce_kernel<...>(T3)+0x..`
_KERNEL_AT = (re.compile(r"\baccess at (?:void )?([A-Za-z_][\w:]*)"), re.compile(r"\b([A-Za-z_]\w*)\+0x[0-9a-fA-F]+"),
              re.compile(r"\bat 0x[0-9a-fA-F]+ in (?:\S*:)?([A-Za-z_]\w*)"))
_HAZARDS = re.compile(r"\[(\d+) hazards?\]")
_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")


def _kernel_of(block: str) -> str | None:
    """The first kernel a block names, line by line (device frames come before host frames)."""
    for line in block.splitlines():
        if "Host Frame" in line:
            continue
        for pattern in _KERNEL_AT:
            found = pattern.search(line)
            if found:
                return found.group(1)
    return None


def parse_report(text: str) -> dict:
    """Counts of one compute-sanitizer report (any tool).

    Returns errors/warnings as the tool's summary line states them (None when there is no summary line: the tool
    did not finish), and `per_kernel`: {kernel: {errors, warnings, hazards}} from the error blocks, each block
    attributed to the first kernel it names (`name+0x...` or `at 0x... in name`); `unattributed` counts summary
    errors that no block attributes to a kernel (an API error, or a format this parser does not know).
    """
    blocks: list[list[str]] = []
    for line in text.splitlines():
        head = _HEADER.match(line)
        if head and not head.group(1).startswith(_NOT_AN_ERROR):
            blocks.append([line])
        elif line.startswith("=========   ") and blocks:
            blocks[-1].append(line)
        elif head:
            blocks.append([])  # a summary line ends the block before it
    per_kernel: dict[str, dict] = {}
    for block in (b for b in blocks if b):
        body = "\n".join(block)
        kind = "warnings" if block[0].startswith("========= Warning") else "errors"
        entry = per_kernel.setdefault(_kernel_of(body) or "?", {"errors": 0, "warnings": 0, "hazards": 0})
        entry[kind] += 1
        entry["hazards"] += sum(int(h) for h in _HAZARDS.findall(body))
    errors = warnings = None
    if m := _RACE_SUMMARY.search(text):
        errors, warnings = int(m.group(2)), int(m.group(3))
    elif m := _ERROR_SUMMARY.search(text):
        errors, warnings = int(m.group(1)), 0
    attributed = sum(v["errors"] for k, v in per_kernel.items() if k != "?")
    return {"finished": errors is not None, "errors": errors, "warnings": warnings, "per_kernel": per_kernel,
            "unattributed": None if errors is None else max(0, errors - attributed)}


def sanitizer_argv(tool: str, target: list[str], kernel_filter: bool = True) -> list[str]:
    if tool not in TOOLS:
        raise ValueError(f"tool must be one of {TOOLS}, got {tool!r}")
    argv = ["compute-sanitizer", f"--tool={tool}", "--print-limit", "10000"]
    if kernel_filter:
        argv += ["--kernel-name", f"kre={OUR_KERNELS}"]
    return argv + target


def run_sanitizer(tool: str, target: list[str], timeout_s: float, log: Path, label: str,
                  kernel_filter: bool = True) -> dict:
    """One compute-sanitizer invocation with its own timeout (the whole process group is killed when it runs
    out). Returns the parsed report plus the invocation: label, tool, argv, seconds, timed_out, returncode, log."""
    argv = sanitizer_argv(tool, target, kernel_filter)
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=max(1.0, timeout_s))
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc, timed_out = proc.wait(), True
    text = Path(log).read_text(errors="replace")
    rec = {"label": label, "tool": tool, "argv": argv, "kernel_filter": kernel_filter,
           "seconds": round(time.monotonic() - start, 2), "timed_out": timed_out, "returncode": rc,
           "log": Path(log).name, **parse_report(text)}
    rec["filter_rejected"] = kernel_filter and not rec["finished"] and not timed_out and \
        bool(re.search(r"(kernel-name|kre=).*(invalid|unrecogni|unknown|error)", text, re.I | re.S)) and \
        "Target application" not in text
    return rec


# ---------------------------------------------------------------------------------------------------------------
# Targets: what the sanitized child process runs (scripts/gpu/reliability_target.py)
# ---------------------------------------------------------------------------------------------------------------

LAYER_NORM_TARGETS = ("reference_order", "chain_tma", "chain_w4", "chain_w1", "rows_fused", "rows_counted",
                      "rows_counted_block", "rows_staged", "rows_cluster")  # torch's bits
# the backward's schedules (labkit.ops.backward): dx, dweight and dbias against torch's native_layer_norm_backward
BACKWARD_TARGETS = ("grad_chain", "grad_rows", "grad_split")
PRODUCT_TARGETS = LAYER_NORM_TARGETS + BACKWARD_TARGETS + ("split_interleaved", "channel_nchw", "channel_rows")
CHANNEL_TARGETS = ("channel_nchw", "channel_rows")  # notebook 09's kernels: NCHW shapes only
# The sanitizer's small shapes (scripts/gpu/reliability.py runs every target that takes each): NCHW, ragged chains, the
# tma ring's partial stage and wrap-around, and rows that reach each entry point rows_fused and grad_rows_fused pick (a
# warp per row of 256 and of 768 or 1,000 floats, blocks of 2,048, 4,096 and 8,192; tests/test_reliability.py checks
# that every entry point either picks is reached), and 100 rows, where the backward's column pass spreads the GammaBeta
# template's 8 groups over blocks and folds them (grad_columns_prefetched, grad_columns_fold). The 2 x 394,752 rows take
# grad_columns_streamed (torch's layout, many blocks); the other shapes the prefetched one with every group in a block.
# 2,048 x 256 takes grad_columns_tiled (32 groups of 64-row chains, few threads: its shared-memory tiles). The
# backward's chain sums: 3 x 512 * 17 take grad_chain_sums_split2, 2 x 394,752 split4, 1 x 512 * 1,027 split8 (its
# 4-slot ring wraps once, then a last stage of 3 steps).
# Not reached here: the partial form (M > 64K) and the streamed kernel with groups in a block. rows_staged takes every
# shape with N <= 2**18: 2 x 262,144 streams rows longer than its ring (early chunks released by the chain group,
# re-read for the output), and 300 x 1,028 gives its persistent blocks two or three rows each (the hand-off of the
# statistics from row to row) with a partial chunk and chains of unequal length. Neither ring wraps from row to row in
# these shapes (3 of 14 slots, 3 of 4 statistics entries at most): the GPU tests' repeated calls reach that, not the
# sanitizer. rows_cluster takes N up to 2 x (slots - 1) chunks of 4,096 floats: 3 x 8,192 splits a row 1 and 1 chunk
# across the cluster, 5 x 4,096 and 300 x 1,028 leave its second CTA no chunk (it relays and finishes only), and
# 300 rows give its 66 clusters four or five rows each, so its statistics ring wraps.
SANITIZER_SMALL_SHAPES = ((2, 64, 64, 64), (3, 64, 17, 19), (5, 1000), (3, 512 * 17), (2, 512 * (64 * 6 * 2 + 3)),
                          (9, 256), (6, 2048), (5, 4096), (3, 8192), (100, 768), (300, 1028), (2048, 256),
                          (1, 512 * 1027))


def targets_for(shape, names=PRODUCT_TARGETS, device=None) -> list[str]:
    """The targets that exist for a shape on `device` (default: the current GPU): a LayerNorm target where its
    launches take the shape (`takes`), the rings where the tma blocking's do (they reproduce its protocol), the
    channel kernels for an NCHW shape with at least two channels and two spatial positions."""
    import torch

    from labkit.core.device import device_info

    device = device or device_info(torch.cuda.current_device())
    rows, n = shape[0], math.prod(shape[1:])
    nchw = len(shape) >= 3 and 2 <= shape[1] < 256 and math.prod(shape[2:]) >= 2

    def exists(t):
        if t in CHANNEL_TARGETS:
            return nchw
        if t.startswith("ring_") or t.startswith("chain_tma"):
            return takes("chain_tma", rows, n, device)
        return t not in LAYER_NORM_TARGETS + BACKWARD_TARGETS or takes(t, rows, n, device)
    return [t for t in names if exists(t)]


def _other_call(target: str, x, w, b, eps) -> dict:
    """Targets whose contract is not LayerNorm's bits: split statistics (the official predicate against torch) and
    the channel-norm kernels (direct NCHW: eager's bits; rows: the official predicate), each family."""
    from labkit.lab import channel_norm as cn
    from labkit.ops.reference import native_layer_norm
    from labkit.lab.split_stats import split_stats_layer_norm
    from labkit.records.check import official_allclose as close

    if target == "split_interleaved":
        return {"official_pass": close(native_layer_norm(x, w, b, eps)[0], split_stats_layer_norm(x, w, b, eps))}
    out = {}
    for family in cn.FAMILIES:
        ref = cn.reference(family, x)
        if target == "channel_nchw":
            out[f"{family}_bits"] = bits_equal(cn.direct_nchw(family, x), ref)
        else:
            out[f"{family}_official_pass"] = close(ref, cn.from_rows(cn.rows(family, cn.to_rows(x))))
    return out


def _settings(target: str):
    from labkit.ops.chain import ChainSettings

    return {"chain_tma": ChainSettings("chain", "tma"), "chain_w4": ChainSettings("chain", "w4"),
            "chain_w1": ChainSettings("chain", "w1"), "chain_auto": ChainSettings(),
            "rows_fused": ChainSettings("rows_fused")}[target]


def own_path_targets() -> tuple[str, ...]:
    """The targets that are labkit.ops.paths names with a public function of their own (labkit.ops.paths
    .public_function), run through it and their own launches; the others run through chain_layer_norm's schedules
    (_settings)."""
    from labkit.ops import paths

    return tuple(t for t in LAYER_NORM_TARGETS if t in paths.PATHS and paths.public_function(t) is not None)


def takes(target: str, rows: int, n: int, device) -> bool:
    """Whether a LayerNorm target's launches can take rows x N on `device` (labkit.core.device.Device): its
    `launches`, not a copy of its limits, decides (the tma blocking's N % 512, grid.y rows, shared memory)."""
    from labkit.ops import backward, chain, paths

    try:
        if target in BACKWARD_TARGETS:
            backward.launches(rows, n, device, target.removeprefix("grad_"))
        elif target in own_path_targets():
            paths.launches(target, rows, n, device)
        else:
            chain.schedule_launches(rows, n, device, _settings(target))
    except ValueError:
        return False
    return True


def _product_call(target: str, x, w, b, eps):
    from labkit.ops import paths
    from labkit.ops.chain import chain_layer_norm

    if target in own_path_targets():
        return paths.public_function(target)(x, w, b, eps, return_stats=True)
    return chain_layer_norm(x, w, b, eps, return_stats=True, settings=_settings(target))


def _backward_call(target: str, x, w, b, eps, gen) -> dict:
    """dx, dweight and dbias of one backward schedule against torch's native_layer_norm_backward, bit for bit."""
    import torch

    from labkit.ops import backward

    ns = tuple(x.shape[1:])
    dy = torch.randn(x.shape, device=x.device, generator=gen)
    _, mean, rstd = torch.native_layer_norm(x, ns, w, b, eps)
    got = backward.backward(dy, x, ns, mean, rstd, w, b, schedule=target.removeprefix("grad_"))
    ref = torch.ops.aten.native_layer_norm_backward(dy, x, list(ns), mean, rstd, w, b, [True, True, True])
    return {name: bits_equal(g, r) for name, g, r in zip(("dx", "dweight", "dbias"), got, ref)}


def ring_tensor_map(x, rows: int, n: int):
    """The chain kernel's own tensor map for x (its launches' geometry, with the ring's box): the rings reproduce its
    copy protocol."""
    from labkit.core.device import device_info
    from labkit.core.tensormap import TensorMapEncoder
    from labkit.ops import chain

    p = chain.launches(rows, n, device_info(x.device.index),
                   chain.ChainSettings("chain", "tma", chain.TmaConfig(RING_STEPS, RING_STAGES)))
    return TensorMapEncoder(p.tensor_map)(x.data_ptr())


def ring_expected(x, rows: int, n: int):
    """What every ring variant must write: per (row, warp, lane), the sum mod 2**32 of the bit patterns of the
    lane's four floats at every step, plus the side table's four values per step (16 * step + 10)."""
    import torch

    steps = n // 512
    bits = x.reshape(rows, steps, 4, 32, 4).view(torch.int32).to(torch.int64)
    data = bits.sum(dim=(1, 4))  # [rows, 4 warps, 32 lanes]
    side = sum(16 * g + 10 for g in range(steps))
    return ((data + side) & 0xFFFFFFFF).to(torch.int64)


def run_ring(variant: str, x, rows: int, n: int) -> dict:
    """One launch of a kernels/sanitize/tma_ring.cu variant; `exact`: its checksums equal the host's."""
    import torch

    from labkit.core.launch import launch

    if variant not in RING_VARIANTS:
        raise ValueError(f"variant must be one of {RING_VARIANTS}, got {variant!r}")
    if n % 512:
        raise ValueError(f"ring kernels need N % 512 == 0, got N={n}")
    out = torch.zeros(rows * 4 * 32, device=x.device, dtype=torch.int32)
    launch("sanitize/tma_ring", variant, (4, rows), (64,), (ring_tensor_map(x, rows, n), out, np.int32(n)),
           x.device, shared_mem=RING_SMEM)
    got = out.reshape(rows, 4, 32).to(torch.int64) & 0xFFFFFFFF
    want = ring_expected(x, rows, n)
    if variant == "ring_tma_only" or variant == "ring_race_late_wait":
        want = (want - sum(16 * g + 10 for g in range(n // 512))) & 0xFFFFFFFF  # no side table
    return {"variant": variant, "exact": bool(torch.equal(got, want)),
            "lanes_wrong": int((got != want).sum().item())}


def bits_equal(a, b) -> bool:
    import torch

    return a.shape == b.shape and bool(torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32)))


def compare_bits(got, ref) -> dict:
    return {name: bits_equal(g, r) for name, g, r in zip(("output", "mean", "rstd"), got, ref)}


def run_targets(specs: list[dict], seed: int = 0) -> list[dict]:
    """Run each spec {"target", "shape"} once on the GPU: product targets are compared with torch bit for bit,
    ring variants with their exact checksum, `chain_tma_loads_only` (the tma kernel's CHAIN_VARIANT=1, no side
    table) only runs. Errors are recorded, never raised: the sanitizer's report is what counts."""
    import torch

    from labkit.ops.reference import native_layer_norm

    out = []
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for spec in specs:
        shape, target = tuple(spec["shape"]), spec["target"]
        rows, n = shape[0] if len(shape) > 1 else 1, math.prod(shape[1:])
        rec = {"target": target, "shape": list(shape)}
        try:
            x = torch.randn(shape, device="cuda", generator=gen) + 3.0
            if target.startswith("ring_"):
                rec.update(run_ring(target, x, rows, n))
            elif target == "chain_tma_loads_only":
                from labkit.core.device import device_info
                from labkit.ops import chain
                from labkit.lab.stages import stats_only

                mean = torch.empty(rows, device="cuda")
                rstd = torch.empty(rows, device="cuda")
                p = chain.launches(rows, n, device_info(x.device.index),
                               chain.ChainSettings("chain", "tma", options=("-DCHAIN_VARIANT=1",)))
                stats_only(p, x, mean, rstd, 1e-5)
            else:
                w = torch.randn(shape[1:], device="cuda", generator=gen)
                b = torch.randn(shape[1:], device="cuda", generator=gen)
                if target in LAYER_NORM_TARGETS:
                    rec["bits"] = compare_bits(_product_call(target, x, w, b, 1e-5), native_layer_norm(x, w, b, 1e-5))
                elif target in BACKWARD_TARGETS:
                    rec["bits"] = _backward_call(target, x, w, b, 1e-5, gen)
                else:
                    rec["checks"] = _other_call(target, x, w, b, 1e-5)
            torch.cuda.synchronize()
        except Exception as exc:  # recorded: a target that fails under a tool is evidence too
            rec["error"] = f"{type(exc).__name__}: {exc}"
        out.append(rec)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Fuzzing against torch, bit for bit
# ---------------------------------------------------------------------------------------------------------------

VALUE_CLASSES = ("normal", "offset_1000", "huge", "tiny", "subnormal", "mixed_scale", "constant_rows", "nonfinite")
FUZZ_METHODS = ("reference_order", "chain_auto", "chain_tma", "chain_w4", "rows_fused", "rows_counted",
                "rows_counted_block", "rows_staged", "rows_cluster")
EDGE_SHAPES = ((1, 4), (70000, 4), (1, 1 << 24), (3, 64, 17, 19), (5, 1000), (2, 516), (65535, 512),
               (127, (1 << 24) - 4))  # the last: numel 2,130,706,924, just under 2**31


def fuzz_values(kind: str, shape, gen, device="cuda"):
    """An input of one value class: extreme scales, subnormals, mixed signs and scales, constant rows, or a few
    non-finite entries among normal values."""
    import torch

    if kind not in VALUE_CLASSES:
        raise ValueError(f"value class must be one of {VALUE_CLASSES}, got {kind!r}")
    x = torch.randn(shape, device=device, generator=gen)
    if kind == "offset_1000":
        x += 1000
    elif kind == "huge":
        x *= 1e37
    elif kind == "tiny":
        x *= 1e-30
    elif kind == "subnormal":
        x *= 1e-40
    elif kind == "mixed_scale":
        x *= torch.pow(10.0, torch.randint(-30, 31, shape, device=device, generator=gen).float())
    elif kind == "constant_rows":
        rows = x.reshape(-1, math.prod(shape[1:]))
        rows.copy_(rows[:, :1].clone().expand_as(rows))  # a clone: copy_ refuses a source overlapping its target
    elif kind == "nonfinite":
        flat = x.view(-1)
        idx = torch.randint(0, flat.numel(), (3,), device=device, generator=gen)
        flat[idx] = torch.tensor([float("inf"), float("-inf"), float("nan")], device=device)
    return x


def random_shape(rng: np.random.Generator, max_numel: int) -> tuple[int, ...]:
    """Rows log-uniform in [1, 70000], N = 4k with k log-uniform in [1, 2**22], numel <= max_numel; sometimes
    N a multiple of 512 (the tma blocking), sometimes split into several normalized dims."""
    for _ in range(1000):
        rows = int(round(math.exp(rng.uniform(0, math.log(70000)))))
        k = int(round(math.exp(rng.uniform(0, math.log(1 << 22)))))
        if rng.random() < 0.3:
            k = max(128, k - k % 128)
        n = 4 * k
        if rows * n <= max_numel:
            if n % 8 == 0 and rng.random() < 0.3:
                return (rows, 2, n // 2)
            return (rows, n)
    return (1, 4)


def fuzz(n_cases: int, seed: int, time_budget_s: float, max_random_numel: int = 1 << 27,
         edge_shapes=EDGE_SHAPES) -> dict:
    """Edge shapes first, then seeded random shapes and value classes, until n_cases or the time budget; every
    method that exists for the shape against torch.native_layer_norm, output/mean/rstd as int32 views."""
    import torch

    from labkit.core.device import device_info
    from labkit.ops.reference import native_layer_norm

    rng = np.random.default_rng(seed)
    device = device_info(torch.cuda.current_device())
    gen = torch.Generator(device="cuda").manual_seed(seed)
    start, cases = time.monotonic(), []
    shapes = [tuple(s) for s in edge_shapes]
    while len(cases) < n_cases and time.monotonic() - start < time_budget_s:
        shape = shapes[len(cases)] if len(cases) < len(shapes) else random_shape(rng, max_random_numel)
        kind = VALUE_CLASSES[int(rng.integers(len(VALUE_CLASSES)))]
        eps = float(rng.choice([1e-5, 1e-6, 1e-2, 0.0]))
        rows, n = shape[0], math.prod(shape[1:])
        case = {"shape": list(shape), "values": kind, "eps": eps, "methods": {}}
        try:
            x = fuzz_values(kind, shape, gen)
            w = torch.randn(shape[1:], device="cuda", generator=gen)
            b = torch.randn(shape[1:], device="cuda", generator=gen)
            ref = native_layer_norm(x, w, b, eps)
            for method in FUZZ_METHODS:
                if not takes(method, rows, n, device):
                    continue
                try:
                    case["methods"][method] = compare_bits(_product_call(method, x, w, b, eps), ref)
                except Exception as exc:
                    case["methods"][method] = {"error": f"{type(exc).__name__}: {exc}"}
            del x, ref
        except torch.cuda.OutOfMemoryError as exc:
            case["skipped"] = f"OutOfMemoryError: {exc}"
        torch.cuda.empty_cache()
        cases.append(case)
    return {"seed": seed, "seconds": round(time.monotonic() - start, 2), "cases": cases}


def fuzz_counts(record: dict) -> dict:
    """cases (run, not skipped), distinct shapes, (case, method) checks, mismatches (a check not bit-identical in
    output, mean or rstd, or raising)."""
    ran = [c for c in record.get("cases", []) if "skipped" not in c]
    checks = [m for c in ran for m in c["methods"].values()]
    bad = sum("error" in m or not all(m.values()) for m in checks)
    return {"cases": len(ran), "shapes": len({tuple(c["shape"]) for c in ran}), "checks": len(checks),
            "mismatches": bad, "skipped": len(record.get("cases", [])) - len(ran)}


# ---------------------------------------------------------------------------------------------------------------
# Soak
# ---------------------------------------------------------------------------------------------------------------

SOAK_METHODS = ("reference_order", "chain_auto", "chain_w4", "chain_tma", "rows_fused", "rows_counted",
                "rows_counted_block", "rows_staged", "rows_cluster", "train_dropin")
TRAINING = "train_dropin"  # a training call: labkit.layer_norm with grad on, autograd.grad, our backward forced


def _training_call(fn, x, w, b, dy, forced: str | None):
    """y and the grads of x, weight and bias from one forward with grad on and torch.autograd.grad."""
    import torch

    from labkit.ops.dropin.plan import forced_backward

    ts = [t.detach().requires_grad_() for t in (x, w, b)]
    with forced_backward(forced):
        y = fn(ts[0], tuple(x.shape[1:]), ts[1], ts[2], 1e-5)
        grads = torch.autograd.grad(y, ts, dy)
    return (y.detach(), *grads)


def soak(calls: int, seed: int, warmup: int = 200, pool: int = 48, sample_every: int = 97,
         max_numel: int = 1 << 21) -> dict:
    """`calls` calls on random shapes (a pool of `pool` inputs drawn once) and random schedules, training calls
    (TRAINING: the drop-in forward and our backward) among them. Memory: torch's allocated bytes after warm-up and
    after the last call, with the call results released (growth = their difference); every `sample_every`-th
    call is compared with torch bit for bit (a training call: y and all three gradients against F.layer_norm's)."""
    import torch

    import labkit

    from labkit.core.device import device_info
    from labkit.ops.reference import native_layer_norm

    rng = np.random.default_rng(seed)
    device = device_info(torch.cuda.current_device())
    gen = torch.Generator(device="cuda").manual_seed(seed)
    inputs = []
    for _ in range(pool):
        shape = random_shape(rng, max_numel)
        inputs.append((torch.randn(shape, device="cuda", generator=gen) + 1.0,
                       torch.randn(shape[1:], device="cuda", generator=gen),
                       torch.randn(shape[1:], device="cuda", generator=gen),
                       torch.randn(shape, device="cuda", generator=gen)))
    def options_for(x):
        rows, n = x.shape[0], math.prod(x.shape[1:])
        return [m for m in SOAK_METHODS if m == TRAINING or takes(m, rows, n, device)]

    def call(method, x, w, b, dy):
        if method == TRAINING:
            return _training_call(labkit.layer_norm, x, w, b, dy, "auto")
        return _product_call(method, x, w, b, 1e-5)

    # every (input, method) once before the baseline: first calls make what lives as long as the process (drop-in plans,
    # the chain's reciprocal table: 8 MB, made by the first chain call that needs it), which is not growth
    first_errors = []
    for x, w, b, dy in inputs:
        for method in options_for(x):
            try:
                call(method, x, w, b, dy)
            except Exception as exc:  # recorded with the soak's errors, never skipped
                first_errors.append({"call": "first", "method": method, "shape": list(x.shape),
                                     "error": f"{type(exc).__name__}: {exc}"})
    start = time.monotonic()
    errors, sampled, mismatched, baseline = first_errors[:20] + [None] * (len(first_errors) - 20), 0, 0, None
    method_counts = {m: 0 for m in SOAK_METHODS}
    for i in range(warmup + calls):
        if i == warmup:
            torch.cuda.synchronize()
            baseline = torch.cuda.memory_allocated()
        x, w, b, dy = inputs[int(rng.integers(pool))]
        options = options_for(x)
        method = options[int(rng.integers(len(options)))]
        try:
            got = call(method, x, w, b, dy)
            if i >= warmup:
                method_counts[method] += 1
                if (i - warmup) % sample_every == 0:
                    sampled += 1
                    if method == TRAINING:  # inline, so the reference's tensors die here (not counted as growth)
                        mismatched += not all(map(bits_equal, got, _training_call(torch.nn.functional.layer_norm, x,
                                                                                  w, b, dy, None)))
                    else:
                        mismatched += not all(compare_bits(got, native_layer_norm(x, w, b, 1e-5)).values())
            del got
        except Exception as exc:
            if len(errors) < 20:
                errors.append({"call": i, "method": method, "shape": list(x.shape),
                               "error": f"{type(exc).__name__}: {exc}"})
            else:
                errors.append(None)
    torch.cuda.synchronize()
    final = torch.cuda.memory_allocated()
    return {"calls": calls, "warmup": warmup, "seed": seed, "pool_shapes": [list(t[0].shape) for t in inputs],
            "method_calls": method_counts, "seconds": round(time.monotonic() - start, 2),
            "allocated_after_warmup": baseline, "allocated_at_end": final, "growth_bytes": final - baseline,
            "sampled": sampled, "sampled_mismatches": mismatched, "errors": len(errors),
            "first_errors": [e for e in errors if e]}


# ---------------------------------------------------------------------------------------------------------------
# Records -> summary, rows, verdict
# ---------------------------------------------------------------------------------------------------------------

def racecheck_evidence(invocations: list[dict], plain_targets: list[dict]) -> dict:
    """What the minimal rings say about chain_stats_tma's racecheck reports.

    `invocations`: the racecheck invocations (product and evidence); `plain_targets`: run_targets' results
    without a sanitizer (the ring checksums). chain_stats_tma's racecheck errors count as explained when the
    race-free ring with the chain kernel's protocol (ring_ok) computes its exact checksum and racecheck reports it
    too, while at least one deliberate race is reported (the tool sees races there at all)."""
    def errors(label_prefix: str, kernel: str) -> int | None:
        found = [i for i in invocations if i["tool"] == "racecheck" and i["label"].startswith(label_prefix)
                 and i["finished"]]
        if not found:
            return None
        return sum(i["per_kernel"].get(kernel, {}).get("errors", 0) for i in found)

    exact = {}
    for t in plain_targets:
        if t["target"].startswith("ring_"):
            exact[t["target"]] = exact.get(t["target"], True) and bool(t.get("exact"))
    rings = {v: {"racecheck_errors": errors("evidence", v), "exact_without_sanitizer": exact.get(v)}
             for v in RING_VARIANTS}
    chain_full = errors("product", "chain_stats_tma")
    loads_only = errors("evidence", "chain_stats_tma")
    ok = rings["ring_ok"]
    race_seen = any((rings[v]["racecheck_errors"] or 0) > 0 for v in RING_DELIBERATE_RACES)
    explained = bool(ok["exact_without_sanitizer"]) and (ok["racecheck_errors"] or 0) > 0 and race_seen
    lines = [f"chain_stats_tma (full protocol): {chain_full} racecheck error(s); its loads-only variant "
             f"(CHAIN_VARIANT=1, no side table): {loads_only}."]
    for v, r in rings.items():
        lines.append(f"{v}: {r['racecheck_errors']} racecheck error(s), exact checksum without the sanitizer: "
                     f"{r['exact_without_sanitizer']}.")
    late = rings["ring_race_late_wait"]
    if late["racecheck_errors"] == 0 and late["exact_without_sanitizer"] is False:
        lines.append("ring_race_late_wait reads before its TMA copy lands, computes a wrong checksum and is not "
                     "reported: racecheck does not see TMA writes, so it cannot clear a read-before-copy race; the "
                     "bit-for-bit checks (fuzz, soak, the targets above) are what rule that out.")
    if explained:
        lines.append("ring_ok (lanes store, __syncwarp, lane 0 arrives) is ordered and computes its exact checksum, "
                     "yet racecheck reports it: the tool follows each thread's own mbarrier arrive/wait, not lanes "
                     "1-31's accesses through __syncwarp to lane 0's arrive. That was chain_stats_tma's protocol and "
                     "the source of its reports.")
        if (rings["ring_all_arrive"]["racecheck_errors"] or 0) == 0:
            lines.append("With every lane arriving for its own accesses (ring_all_arrive) the report disappears; "
                         "the chain kernels (chain_stats_tma's full barriers, chain_stats_w1/w4's empty barriers) now "
                         "arrive that way.")
    else:
        lines.append("NOT explained: the minimal ring with the same protocol is not reported the same way (or did "
                     "not run); racecheck reports in chain_stats_tma would stay unexplained.")
    return {"rings": rings, "chain_stats_tma_errors": chain_full, "chain_stats_tma_loads_only_errors": loads_only,
            "deliberate_race_reported": race_seen, "explained": explained, "conclusion": lines}


# --- the run's summary and headline (labkit.studies.catalog dispatches here) -------------------------------------

RUN_NAME = "reliability"
NOTEBOOK = None  # a GPU step (scripts/gpu/reliability.sh), not a notebook


def _sanitizer_errors(inv: dict, kernels: str) -> int:
    """Errors of one finished invocation over our product kernels: the tool's own count when it instrumented only
    our kernels (the kernel filter), else the errors its report attributes to a kernel matching `kernels`."""
    import re

    if inv.get("kernel_filter"):
        return int(inv["errors"])
    return sum(c["errors"] for k, c in inv.get("per_kernel", {}).items() if re.fullmatch(kernels, k))


def reliability_block(records: dict) -> dict | None:
    """Headline numbers of the reliability step (scripts/gpu/reliability.sh), keys as the reliability goals name them.

    sanitizer: per tool, errors over our product kernels in the invocations labelled "product..." that finished
    (None when none finished); sanitizer_unattributed: per tool, errors whose report names no kernel the parser
    knows (not counted above; the logs say whose they are); racecheck_unexplained: those racecheck errors less the ones in chain_stats_tma
    when the racecheck evidence record marks them explained (a race-free minimal ring of the same protocol is
    reported the same way); fuzz_*: cases run, distinct shapes, (case, method) checks not bit-identical or
    raising; soak_*: calls after warm-up and growth of torch's allocated bytes over them."""
    san = records.get("sanitizer")
    fuzz, soak, evidence = records.get("fuzz"), records.get("soak"), records.get("racecheck_evidence", {})
    if not (san or fuzz or soak):
        return None
    block: dict = {"sanitizer": {}, "racecheck_unexplained": None}
    invocations = [i for i in (san or {}).get("invocations", []) if i["label"].startswith("product")]
    kernels = (san or {}).get("product_kernels", ".*")
    for tool in ("memcheck", "racecheck", "initcheck", "synccheck"):
        done = [i for i in invocations if i["tool"] == tool and i["finished"]]
        block["sanitizer"][tool] = sum(_sanitizer_errors(i, kernels) for i in done) if done else None
        # errors no report block names a kernel for (could be anyone's): shown, never silently dropped
        block.setdefault("sanitizer_unattributed", {})[tool] = sum(i.get("unattributed") or 0 for i in done
                                                                 if not i.get("kernel_filter")) if done else None
    race = block["sanitizer"]["racecheck"]
    if race is not None:
        explained = 0
        # chain_stats_tma's reports are forgiven only while the race-free ring of its current protocol (every lane
        # arrives: ring_all_arrive) is reported as well; ring_ok is the old protocol and says nothing about it now
        current = ((evidence.get("rings") or {}).get("ring_all_arrive") or {}).get("racecheck_errors") or 0
        if evidence.get("explained") and current > 0:
            explained = sum(i.get("per_kernel", {}).get("chain_stats_tma", {}).get("errors", 0)
                            for i in invocations if i["tool"] == "racecheck" and i["finished"])
        block["racecheck_unexplained"] = max(0, race - explained)
    cases = [c for c in (fuzz or {}).get("cases", []) if "skipped" not in c]
    checks = [m for c in cases for m in c["methods"].values()]
    block.update({"fuzz_cases": len(cases) if fuzz else None,
                  "fuzz_shapes": len({tuple(c["shape"]) for c in cases}) if fuzz else None,
                  "fuzz_mismatches": sum("error" in m or not all(m.values()) for m in checks) if fuzz else None,
                  "soak_calls": soak.get("calls") if soak else None,
                  "soak_mem_growth_bytes": soak.get("growth_bytes") if soak else None})
    if soak and TRAINING in soak.get("method_calls", {}):  # runs from before the soak trained say nothing of it
        block.update({"soak_training_calls": soak["method_calls"][TRAINING],
                      "soak_sampled": soak.get("sampled"), "soak_sampled_mismatches": soak.get("sampled_mismatches"),
                      "soak_errors": soak.get("errors")})
    return block


def reliability_line(r: dict) -> str:
    san = ", ".join(f"{k} {v}" for k, v in r["sanitizer"].items())
    other = sum(v or 0 for v in (r.get("sanitizer_unattributed") or {}).values())
    san += f" (+{other} unattributed, see the logs)" if other else ""
    return (f"reliability: sanitizer errors over our kernels {san}; racecheck unexplained {r['racecheck_unexplained']}; "
            f"fuzz {r['fuzz_cases']} cases, {r['fuzz_shapes']} shapes, {r['fuzz_mismatches']} mismatch(es); soak "
            f"{r['soak_calls']} calls, {r['soak_mem_growth_bytes']} bytes growth"
            + (f" ({r['soak_training_calls']} of them training calls; {r['soak_sampled_mismatches']} of "
               f"{r['soak_sampled']} sampled calls not bit-identical, {r['soak_errors']} errors)"
               if "soak_training_calls" in r else ""))


def summary(records: dict, prov: dict) -> dict:
    block = reliability_block(records)
    return {"reliability": block} if block else {}


def page_headline(records: dict, summary: dict) -> str:
    from labkit.records.text import on_gpu

    r = summary.get("reliability")
    return (reliability_line(r) if r else "reliability: no sanitizer, fuzz or soak record") + f" {on_gpu(summary)}"


def summary_lines(s: dict) -> list[str]:
    return [reliability_line(s["reliability"])] if s.get("reliability") else []
