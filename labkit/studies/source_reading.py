"""The reference-order contract: what torch's vectorized CUDA LayerNorm computes, as data.

Read from `aten/src/ATen/native/cuda/layer_norm_kernel.cu` (see `SOURCE` for where and at which lines), checked
against the installed torch (`read_thread_constants`) and against the machine code of torch 2.11.0+cu130
(`labkit.sass`, committed summary under data/sass/). Wrappers that promise torch's bits consult `torch_path`
first: on inputs where torch itself would leave the vectorized path, its order is different and no
reference-order kernel can claim identity.
"""
from __future__ import annotations

import ast
import operator
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labkit.ops.eligibility import PathConditions, torch_path
from labkit.records.check import identical_count

# Where the walkthrough was read. Not at the tag v2.11.0 itself: the forward path was read at a fork commit whose
# kernels have the template signatures compiled into the 2.11.0 wheel (the `rms_norm` bool);
# the headers it relies on are read from the 2.11.0+cu130 wheel itself, and the arithmetic is confirmed on the
# wheel's machine code (data/sass/).
SOURCE = {
    "file": "aten/src/ATen/native/cuda/layer_norm_kernel.cu",
    "tag_described": "v2.11.0",
    "read_at": "cyyever/pytorch@0660972b2e907c38dff07fb1dbbb4c3310791427 (fork of pytorch/pytorch)",
    "lines": {
        "can_vectorize": "51-55",
        "RowwiseMomentsCUDAKernel": "58-100",
        "LayerNormForwardCUDAKernel": "102-126",
        "WelfordDataLN": "128-134",
        "cuWelfordOnlineSum (push)": "136-149",
        "cuWelfordCombine (merge)": "151-175",
        "compute_stats": "177-237",
        "compute_stats: per-thread float4 loop": "188-198",
        "compute_stats: shuffle-down merge": "199-203",
        "compute_stats: inter-warp tree": "205-227",
        "compute_stats: sigma2/float(N)": "228-233",
        "vectorized_layer_norm_kernel_impl": "240-317",
        "vectorized_layer_norm_kernel_impl: rsqrt": "267",
        "vectorized_layer_norm_kernel_impl: affine output": "275-282",
        "vectorized_layer_norm_kernel": "333-345",
        "launch_vectorized_layer_norm_kernel": "host code after the backward kernels (by name)",
        "LayerNormKernelImplInternal": "host code after launch_vectorized_layer_norm_kernel (by name)",
    },
    "headers_from_wheel_2.11.0": {
        "ATen/native/cuda/thread_constants.h": "num_threads() 19-21 (non-ROCm branch)",
        "ATen/native/SharedReduceOps.h": "WelfordData 81-, WelfordOps 99-162 (reduce 104-118, combine 119-137)",
        "ATen/native/cuda/block_reduce.cuh": "kCUDABlockReduceNumThreads 9, WarpReduce 120-127, BlockReduce 129-146",
        "ATen/cuda/DeviceUtils.cuh": "WARP_SHFL_DOWN 71-78 (__shfl_down_sync)",
        "c10/cuda/CUDAMathCompat.h": "rsqrt(float) 123-125 (::rsqrtf)",
    },
}


@dataclass(frozen=True)
class ReferenceContract:
    name: str
    kernel: str
    threads: int
    warp_size: int
    warps: int
    block: tuple[int, int]
    grid: str
    shared_memory: str
    vector_width: int
    load_order: str
    push: str
    push_contractions: tuple[str, ...]
    merge: str
    merge_argument_order: str
    merge_contractions: tuple[str, ...]
    warp_tree: str
    block_tree: str
    block_tree_shape: tuple[int, ...]
    final: str
    output: str
    output_contraction: str
    conditions: PathConditions
    other_path: dict
    verified_on: tuple[tuple[str, str], ...]
    source: dict = field(default_factory=lambda: SOURCE)

    def rows(self, verified=None) -> list[dict]:
        """The contract as (aspect, value) rows for a table; `verified` defaults to the static evidence."""
        skip = {"source", "other_path", "conditions", "verified_on"}
        out = [{"aspect": k, "value": v} for k, v in asdict(self).items() if k not in skip]
        out += [{"aspect": f"condition: {k}", "value": v} for k, v in asdict(self.conditions).items()]
        out += [{"aspect": f"verified on torch {v}", "value": e} for v, e in (verified or self.verified_on)]
        return out

    def to_json(self) -> dict:
        return asdict(self)


OTHER_PATH = {
    "when": "any vectorized-path condition fails (misaligned X/Y/gamma/beta, N % 4 != 0, N > 2**24, double)",
    "statistics_kernel": "RowwiseMomentsCUDAKernel<T, T_ACC>: grid M, block cuda_utils::kCUDABlockReduceNumThreads "
                         "= 512 threads (1-D), static shared WelfordData[C10_WARP_SIZE]",
    "load_order": "thread j reads elements j, j+512, j+1024, ... of its row (scalar loads, no float4)",
    "push": "WelfordOps::reduce: n += 1 (int64), nf = float(n); delta = x - mean; mean = mean + delta / nf "
            "(IEEE division, not a reciprocal multiply); m2 = m2 + delta * (x - mean_new)",
    "merge": "WelfordOps::combine(a, b): empty sides pass through; delta = b.mean - a.mean; nf = a.nf + b.nf; "
             "w = b.nf / nf; mean = a.mean + delta * w; m2 = a.m2 + b.m2 + delta * delta * a.nf * w",
    "tree": "cuda_utils::BlockReduce: WarpReduce (shuffle-down 16..1, combine(own, received)), lane 0 of each "
            "of the 16 warps writes shared[warp], then warp 0 reduces the 16 values with WarpReduce again",
    "final": "project: var = m2 / nf (correction 0); rstd = rsqrt(var + eps)",
    "output_kernel": "LayerNormForwardCUDAKernel<T, T_ACC>: grid M, block kCUDANumThreads = 256, scalar loop",
    "output": "y = (x - mean) * rstd * gamma + beta, i.e. fma(round(round(x - mean) * rstd), gamma, beta) on "
              "torch 2.11 sm_90 (the same rounding sequence as the vectorized path's output: products commute)",
    "status": "no reference-order kernel here covers it; the wrappers refuse such inputs",
}


def _ast_eval(expr: str, names: dict[str, int]) -> int:
    """Integer value of a small C expression (+, -, *, /, <<, parentheses, integer literals, known names)."""
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.Div: operator.floordiv, ast.LShift: operator.lshift, ast.RShift: operator.rshift}
    tree = ast.parse(re.sub(r"(\d+)[uUlL]+\b", r"\1", expr.strip()), mode="eval")

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name) and n.id in names:
            return names[n.id]
        if isinstance(n, ast.BinOp) and type(n.op) in ops:
            return ops[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        raise ValueError(f"cannot evaluate {ast.dump(n)} in {expr!r}")

    return ev(tree)


def _non_rocm_definitions(text: str, pattern: re.Pattern) -> list[tuple[int, re.Match]]:
    """Matches of `pattern` (one per line) outside `USE_ROCM` branches, with 1-based line numbers. A tiny
    preprocessor: only #if/#ifdef/#ifndef/#elif/#else/#endif nesting is tracked, and only USE_ROCM decides."""
    stack: list[str | None] = []  # per open #if: "rocm" (inside a USE_ROCM-true branch), "cuda", or None
    found = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("//", 1)[0].strip()
        directive = re.match(r"#\s*(ifdef|ifndef|if|elif|else|endif)\b(.*)", line)
        if directive:
            kind, cond = directive.group(1), directive.group(2)
            mentions = "USE_ROCM" in cond
            negated = kind == "ifndef" or re.search(r"!\s*defined\s*\(?\s*USE_ROCM", cond) is not None
            if kind in ("if", "ifdef", "ifndef"):
                stack.append(("cuda" if negated else "rocm") if mentions else None)
            elif kind == "elif" and stack:
                stack[-1] = ("cuda" if negated else "rocm") if mentions else (
                    "cuda" if stack[-1] == "rocm" else stack[-1])
            elif kind == "else" and stack:
                stack[-1] = {"rocm": "cuda", "cuda": "rocm"}.get(stack[-1], stack[-1])
            elif kind == "endif" and stack:
                stack.pop()
            continue
        if "rocm" in stack:
            continue
        m = pattern.search(line)
        if m:
            found.append((lineno, m))
    return found


def torch_include_dir(torch_module=None) -> Path | None:
    if torch_module is None:
        try:
            import torch as torch_module
        except ImportError:
            return None
    inc = Path(os.path.dirname(torch_module.__file__)) / "include"
    return inc if inc.is_dir() else None


def read_thread_constants(torch_module=None) -> dict:
    """Read the installed torch's `ATen/native/cuda/thread_constants.h` and derive `num_threads()` (the block size
    of the vectorized LayerNorm: threads = (warp_size, num_threads()/warp_size)).

    Returns a dict with `num_threads` (int) and the raw lines it came from, or `num_threads: None` and `reason`
    when the header (or the warp size) cannot be found — e.g. a torch build without its C++ headers.
    """
    inc = torch_include_dir(torch_module)
    version = getattr(torch_module, "__version__", None)
    if version is None:
        try:
            import torch

            version = torch.__version__
        except ImportError:
            version = None
    base = {"torch": version, "num_threads": None}
    if inc is None:
        return {**base, "reason": "torch has no include/ directory (headers not installed)"}
    header = inc / "ATen" / "native" / "cuda" / "thread_constants.h"
    shown = header.relative_to(inc.parent.parent)  # torch/include/...: where in the installed torch, not the machine
    if not header.is_file():
        return {**base, "header": str(shown), "reason": f"{shown} is absent from this torch installation"}
    text = header.read_text()
    lines = text.splitlines()
    heads = _non_rocm_definitions(text, re.compile(r"\bnum_threads\(\)\s*\{"))
    if not heads:
        return {**base, "header": str(shown), "reason": "no non-ROCm num_threads() definition found"}
    lineno = heads[0][0]
    tail = " ".join(lines[lineno - 1:lineno + 3])
    m = re.search(r"num_threads\(\)\s*\{\s*return\s+([^;]+);", tail)
    if m is None:
        return {**base, "header": str(shown), "line": lineno, "reason": "num_threads() body not understood"}
    expr = m.group(1).strip()
    end = next((i for i in range(lineno - 1, min(len(lines), lineno + 3)) if "}" in lines[i]), lineno)
    raw_lines = "\n".join(lines[lineno - 1:end + 1]).strip()
    warp, warp_src = None, None
    for rel in ("torch/headeronly/macros/Macros.h", "c10/macros/Macros.h"):
        path = inc / rel
        if path.is_file():
            hits = _non_rocm_definitions(path.read_text(), re.compile(r"#\s*define\s+C10_WARP_SIZE\s+(\S.*)$"))
            for ln, hm in hits:
                try:
                    warp = _ast_eval(hm.group(1), {})
                    warp_src = f"{rel}:{ln}: {hm.group(0).strip()}"
                    break
                except ValueError:
                    continue
        if warp is not None:
            break
    if warp is None:
        return {**base, "header": str(shown), "line": lineno, "raw": raw_lines, "expression": expr,
                "reason": "C10_WARP_SIZE's CUDA definition not found in the installed headers"}
    threads = _ast_eval(expr, {"C10_WARP_SIZE": warp})
    return {**base, "header": str(shown), "line": lineno, "raw": raw_lines, "expression": expr,
            "warp_size": warp, "warp_size_source": warp_src, "num_threads": threads,
            "block": (warp, threads // warp)}


# ------------------------------------------------------------------------- which torch's header was read ---

HEADER_RECORD = "thread_constants"  # the record a run would keep read_thread_constants()'s result under


def recorded_thread_constants(root=None) -> dict | None:
    """read_thread_constants()'s result as a committed run recorded it (a `thread_constants` record, newest run
    first), with the run's name under "run"; None when no committed run records it."""
    from labkit.records.run import DATA_RUNS, committed_runs, load_run

    for run_dir in reversed(committed_runs(root=Path(root) if root else DATA_RUNS)):
        try:
            records = load_run(run_dir)["records"]
        except (ValueError, OSError):
            continue
        rec = records.get(HEADER_RECORD)
        if isinstance(rec, dict) and "num_threads" in rec:
            return {**rec, "source": "recorded", "run": run_dir.name}
    return None


def gpu_run_torch_versions(root=None) -> list[str]:
    """The torch versions the committed GPU runs used, read from their provenance (most runs first)."""
    from collections import Counter

    from labkit.records.run import DATA_RUNS, committed_runs, load_run

    seen = Counter()
    for run_dir in committed_runs(root=Path(root) if root else DATA_RUNS):
        try:
            prov = load_run(run_dir)["records"].get("run", {}).get("provenance", {})
        except (ValueError, OSError):
            continue
        if prov.get("gpu") and prov.get("torch"):
            seen[prov["torch"]] += 1
    return [v for v, _ in seen.most_common()]


def page_thread_constants(torch_module=None, root=None) -> dict:
    """The header reading the page shows: a committed run's record of it when one exists, else the installed
    torch's header read now ("source": "installed"); either way with the GPU runs' torch versions beside it."""
    tc = recorded_thread_constants(root) or {**read_thread_constants(torch_module), "source": "installed"}
    return {**tc, "gpu_runs_torch": gpu_run_torch_versions(root)}


def header_source_line(tc: dict) -> str:
    """Which torch's header the reading below comes from, next to the torch the GPU runs used."""
    gpu = ", ".join(tc.get("gpu_runs_torch") or []) or "none committed"
    if tc.get("source") == "recorded":
        return (f"Header read from torch {tc.get('torch')}'s thread_constants.h, as recorded with run {tc['run']} "
                f"(the GPU runs used torch {gpu}).")
    same = tc.get("torch") in (tc.get("gpu_runs_torch") or [])
    return (f"Header read from the torch installed where this page was built, {tc.get('torch')}: no committed run "
            f"records this header, so this is not the header of the torch the GPU runs used ({gpu})"
            + ("." if not same else "; here the two versions are the same."))


def header_rows(tc: dict) -> dict:
    """The header reading as key/value rows for a table: where it was read, then read_thread_constants' fields,
    then the torch versions of the GPU runs (joined, so no list is printed whole)."""
    where = (f"recorded with run {tc['run']}" if tc.get("source") == "recorded"
             else "the torch installed where this page was built")
    skip = {"source", "run", "gpu_runs_torch"}
    return {"read from": where, **{k: v for k, v in tc.items() if k not in skip},
            "torch of the GPU runs": ", ".join(tc.get("gpu_runs_torch") or []) or "none committed"}


# ------------------------------------------------------------------------------------------ verified on ---

def verified_on(contract=None) -> tuple[tuple[str, str], ...]:
    """The post's evidence plus every committed bit-identity run, read when asked (never at import)."""
    out = list((contract or TORCH_VECTORIZED_LN).verified_on)
    from labkit.records.run import committed_runs, load_run

    for name in ("environment", "bit_identity"):
        for run_dir in committed_runs(name):
            try:
                records = load_run(run_dir)["records"]
            except (ValueError, OSError):
                continue
            prov = records.get("run", {}).get("provenance", {})
            cases = records.get("bit_identity", {}).get("cases", [])
            if not cases:
                continue
            ok, n = identical_count(cases)
            gpu = prov.get("gpu") or "GPU"
            rel = f"data/runs/{run_dir.name}"
            out.append((prov.get("torch", "?"),
                        f"{gpu.replace('NVIDIA ', '')} run {rel} ({name}): {ok}/{n} cases bit-identical"))
    return tuple(out)


TORCH_VECTORIZED_LN = ReferenceContract(
    name="torch vectorized CUDA LayerNorm (FP32)",
    kernel="vectorized_layer_norm_kernel<float, float> (compute_stats + affine loop in one kernel)",
    threads=128,
    warp_size=32,
    warps=4,
    block=(32, 4),
    grid="M blocks, one per row (blocks(M)); rows of N elements",
    shared_memory="dynamic, threads.y * 3/2 floats = 6 floats: (mean, sigma2) pairs of the writing warps at "
                  "buf[0..y), their counts at buf[y..3y/2) (y = blockDim.y = 4)",
    vector_width=4,
    load_order="thread t = lane + 32*warp reads float4 vectors t, t+128, t+256, ... of its row and pushes the "
               "components x, y, z, w in that order",
    push="cuWelfordOnlineSum: delta = x - mean; count' = count + 1; mean' = mean + delta * (1.f/count'); "
         "sigma2' = sigma2 + delta * (x - mean')",
    push_contractions=("mean' = fma(delta, 1/count', mean), 1/count' an IEEE division (MUFU.RCP + Newton step "
                       "+ slow path, not an approximation)",
                       "sigma2' = fma(delta, round(x - mean'), sigma2)"),
    merge="cuWelfordCombine(dataB, dataA): delta = B.mean - A.mean; count = A.count + B.count; coef = 1.f/count; "
          "nA = A.count*coef; nB = B.count*coef; mean = nA*A.mean + nB*B.mean; "
          "sigma2 = A.sigma2 + B.sigma2 + delta*delta*A.count*nB (count 0: all zero)",
    merge_argument_order="wd = cuWelfordCombine(wd, wdB): B = the thread's own state, A = the state received "
                         "(shuffled from lane+offset, or read from shared memory in the block tree)",
    merge_contractions=("mean = fma(nA, A.mean, round(nB*B.mean)) (the first product is fused)",
                        "sigma2 = fma(nB, round(round(delta*delta)*A.count), round(A.sigma2 + B.sigma2))"),
    warp_tree="shuffle-down with offsets 16, 8, 4, 2, 1 (__shfl_down_sync, full mask); lane 0 holds the warp",
    block_tree="offset 2: warps 2,3 write (mean, sigma2, count) to shared, warps 0,1 merge them; offset 1: "
               "warp 1 writes, warp 0 merges (lane 0 of each warp only)",
    block_tree_shape=(2, 1),
    final="var = sigma2 / float(N) (IEEE division); rstd = rsqrtf(var + eps) (MUFU.RSQ, hardware approximation); "
          "mean and rstd stored by thread 0",
    output="y = gamma * (rstd * (x - mean)) + beta",
    output_contraction="fma(gamma, round(rstd * round(x - mean)), beta)",
    conditions=PathConditions(),
    other_path=OTHER_PATH,
    verified_on=(("2.5.1", "post: RTX 3090, 30/30 full-size cases"),),
)


def examples(device: str = "cpu") -> list[dict]:
    """torch_path on a few tensors: aligned, a misaligned view, N % 4 != 0, N > 2**24 (meta), float64."""
    import torch

    rows = []
    flat = torch.rand(2 * 64 + 1, device=device)
    w, b = torch.ones(64, device=device), torch.zeros(64, device=device)
    cases = {
        "aligned (2, 64) float32": (torch.rand(2, 64, device=device), w, b, None),
        "view 4 bytes off alignment (flat[1:])": (flat[1:].view(2, 64), w, b, None),
        "N = 6 (N % 4 != 0)": (torch.rand(2, 6, device=device), torch.ones(6, device=device),
                               torch.zeros(6, device=device), None),
        "N = 2**24 + 4 (meta tensors)": (torch.empty(1, (1 << 24) + 4, device="meta"),
                                         torch.empty((1 << 24) + 4, device="meta"),
                                         torch.empty((1 << 24) + 4, device="meta"), None),
        "float64": (torch.rand(2, 64, device=device, dtype=torch.float64), w.double(), b.double(), None),
        "no affine (gamma, beta None)": (torch.rand(2, 64, device=device), None, None, (64,)),
        "non-contiguous input (torch copies it)": (torch.rand(64, 2, device=device).t(), w, b, None),
    }
    for label, (x, weight, bias, shape) in cases.items():
        path, reason = torch_path(x, weight, bias, normalized_shape=shape)
        rows.append({"case": label, "torch path": path, "reason": reason})
    return rows


# ------------------------------------------------------------------------------------------------ figure ---

def reduction_tree_figure(contract: ReferenceContract = TORCH_VECTORIZED_LN):
    """Matplotlib figure of one row's reduction: the shuffle-down merges inside a warp (every lane merges, the
    lanes that feed lane 0 are highlighted), then the shared-memory tree over the warps."""
    import matplotlib.pyplot as plt

    ws, warps = contract.warp_size, contract.warps
    offsets = []
    o = ws // 2
    while o:
        offsets.append(o)
        o //= 2
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 5.2), gridspec_kw={"width_ratios": [3, 1.2]})
    # which lanes' results reach lane 0: at the last level only lane 0; going up, lane i needs i and i+offset
    needed = [{0}]
    for off in reversed(offsets):
        prev = needed[-1]
        needed.append(prev | {i + off for i in prev})
    needed = list(reversed(needed))  # needed[level] before applying offsets[level]
    for level, off in enumerate(offsets):
        y0, y1 = -level, -(level + 1)
        for lane in range(ws):
            src = lane + off
            if src < ws:
                hot = lane in needed[level + 1]
                ax.annotate("", xy=(lane, y1), xytext=(src, y0),
                            arrowprops=dict(arrowstyle="-|>", lw=1.4 if hot else 0.4,
                                            color="C3" if hot else "0.8", shrinkA=3, shrinkB=3))
        ax.text(-1.5, (y0 + y1) / 2, f"shfl_down {off}", ha="right", va="center", fontsize=9)
    for level in range(len(offsets) + 1):
        ax.scatter(range(ws), [-level] * ws, s=14,
                   c=["C3" if lane in needed[level] else "0.6" for lane in range(ws)], zorder=3)
    ax.set_title(f"one warp: lanes 0..{ws - 1}, merge(own = B, received = A) at each step; "
                 f"red = what reaches lane 0", fontsize=10)
    ax.set_xlim(-9, ws)
    ax.set_axis_off()
    # block tree over warps
    level, off = 0, warps // 2
    while off:
        for w in range(off):
            bx.annotate("", xy=(w, -(level + 1)), xytext=(w + off, -level),
                        arrowprops=dict(arrowstyle="-|>", color="C0", lw=1.5, shrinkA=6, shrinkB=6))
            bx.annotate("", xy=(w, -(level + 1)), xytext=(w, -level),
                        arrowprops=dict(arrowstyle="-", color="0.6", lw=1, shrinkA=6, shrinkB=6))
        bx.text(warps - 0.4, -(level + 0.5), f"offset {off}\n(shared memory)", fontsize=8, va="center")
        level += 1
        off //= 2
    for lv in range(level + 1):
        live = warps >> lv if lv else warps
        for w in range(max(live, 1)):
            bx.scatter([w], [-lv], s=260, color="C0" if lv == 0 else "C2", zorder=3)
            bx.text(w, -lv, f"w{w}", ha="center", va="center", color="white", fontsize=8, zorder=4)
    bx.text(0, -(level + 0.45), "thread (0,0): mean, sigma2/N,\nrstd = rsqrtf(var + eps)", ha="left", fontsize=8)
    bx.set_xlim(-0.6, warps + 1.2)
    bx.set_ylim(-(level + 0.9), 0.5)
    bx.set_title(f"{warps} warps -> block tree {contract.block_tree_shape}", fontsize=10)
    bx.set_axis_off()
    fig.suptitle(f"{contract.name}: one row = one block of {contract.threads} threads "
                 f"({contract.block[0]} x {contract.block[1]})", fontsize=11)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------ tables and verdict ---

def source_rows(contract: ReferenceContract = TORCH_VECTORIZED_LN) -> list[dict]:
    """Where each part of the walkthrough was read: the kernel file's lines, then the headers from the wheel."""
    src = contract.source
    rows = [{"file": src["file"], "part": part, "lines": lines} for part, lines in src["lines"].items()]
    rows += [{"file": header, "part": "header from the 2.11.0+cu130 wheel", "lines": lines}
             for header, lines in src["headers_from_wheel_2.11.0"].items()]
    return rows


def header_verdict(tc: dict, contract: ReferenceContract = TORCH_VECTORIZED_LN) -> str:
    """One line on `read_thread_constants`' result against the contract's block."""
    if tc["num_threads"] is None:
        return f"SKIPPED: {tc['reason']}"
    gpu = [v for v in tc.get("gpu_runs_torch") or [] if v != tc.get("torch")]
    also = f"; the GPU runs used torch {', '.join(gpu)}" if gpu else ""
    whose = (f"torch {tc['torch']} (recorded with run {tc['run']}{also})" if tc.get("source") == "recorded"
             else f"torch {tc['torch']} (installed where this ran{also})")
    if tc["num_threads"] == contract.threads and tuple(tc["block"]) == contract.block:
        return (f"{whose}: num_threads() = {tc['expression']} = "
                f"{tc['num_threads']} -> block {tuple(tc['block'])}: matches the contract")
    return (f"MISMATCH: {whose} derives {tc['num_threads']} threads, block "
            f"{tuple(tc['block'])}; the contract says {contract.threads}, {contract.block}")


def contract_rows(contract: ReferenceContract = TORCH_VECTORIZED_LN) -> list[dict]:
    """The contract as (aspect, value) rows, its evidence read from the committed runs now (`verified_on`)."""
    return contract.rows(verified_on(contract))


def other_path_rows(contract: ReferenceContract = TORCH_VECTORIZED_LN) -> list[dict]:
    return [{"aspect": k, "value": v} for k, v in contract.other_path.items()]


def machine_code_record(arch: str | None = None, root=None) -> dict | None:
    """The committed SASS comparison (torch's wheel against our kernels, notebook 06) for a device of `arch`, else
    sm_90's (labkit.studies.kernel_definitions.committed_record), with its file name under "file" and under "note"
    None or the sentence saying it is not `arch`'s; None when data/sass holds neither. `arch` defaults to the CUDA
    device's, else sm_90 (the H200's)."""
    import json

    from labkit.studies.kernel_definitions import FALLBACK_ARCH, committed_record

    if arch is None:
        from labkit.core.compile import device_arch

        try:
            arch = device_arch()
        except ValueError:  # no CUDA device
            arch = FALLBACK_ARCH
    try:
        path, note = committed_record(arch, root)
    except RuntimeError:
        return None
    return {**json.loads(path.read_text()), "file": path.name, "note": note}


def machine_code_rows(record: dict | None) -> list[dict]:
    """The committed comparison's checks: (check, holds) rows; none without a record."""
    return [{"check": k, "holds": v} for k, v in record["verdict"]["checks"].items()] if record else []


def verdict_lines(tc: dict, refusals: list[dict], sass_record: dict | None,
                  contract: ReferenceContract = TORCH_VECTORIZED_LN) -> list[str]:
    """What the reading, the installed header, the wrappers' refusals and the machine code say, from their records."""
    evidence = verified_on(contract)
    runs = sum("data/runs/" in e for _, e in evidence)
    named = sum(bool(r["names_condition"]) for r in refusals)
    # the installed header first: whether the contract still holds is the answer the front page shows
    lines = [f"{'Recorded' if tc.get('source') == 'recorded' else 'Installed'} header: {header_verdict(tc, contract)}",
             f"Contract: {contract.name}, block {contract.block}, tree {contract.block_tree_shape}; "
             f"walkthrough of torch {contract.source['tag_described']}.",
             f"Evidence: {len(evidence)} entries, {runs} of them committed GPU runs read now.",
             f"Refused inputs: {named}/{len(refusals)} raise a ValueError naming their condition."]
    if sass_record is None:
        lines.append("Machine code: no committed SASS comparison under data/sass (notebook 06 makes one).")
    else:
        t = sass_record["torch"]
        lines.append(f"Machine code ({sass_record['file']}): torch {t['torch_version']} ({t['wheel']}) and ours, "
                     f"same FMA contractions: {'yes' if sass_record['verdict']['same_contractions'] else 'no'}.")
        if sass_record.get("note"):
            lines.append(f"Machine code: {sass_record['note']}.")
    return lines


def post_rows(tc: dict) -> list[dict]:
    """The post's threads per block of torch's vectorized path beside the value derived now from the installed
    torch's header (None when the header could not be read: not compared)."""
    from labkit.records import post

    if tc.get("source") == "recorded":
        return post.compare_rows([("source.threads_per_block", tc.get("num_threads"),
                                   f"num_threads() of torch {tc.get('torch')}'s thread_constants.h, recorded with "
                                   f"run {tc.get('run')}")], here="recorded with a GPU run")
    return post.compare_rows([("source.threads_per_block", tc.get("num_threads"),
                               f"num_threads() of the installed torch {tc.get('torch')}'s thread_constants.h")],
                             here="read now from the installed torch")
