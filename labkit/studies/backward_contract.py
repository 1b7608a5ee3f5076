"""torch's CUDA LayerNorm backward (float32, vectorized dX path) as a contract: what kernels/grad_ln.cuh keeps, where
it was read, and the machine-code evidence for every rounding it claims.

Read from aten/src/ATen/native/cuda/layer_norm_kernel.cu at v2.11.0 (the same fork commit the forward's contract was
read at) and checked against torch 2.11.0+cu130's own sm_90 SASS, extracted from the CUDA wheel on PyPI (sha256 in
the committed record, data/sass/backward/layernorm-backward-torch-2.11.0+cu130-sm_90.json, made by `record_from_cubin`).
`checks(record)` re-derives each claim from the committed instructions; the installed header block_reduce.cuh (the
CPU wheel ships it) is read for BlockReduceSum by `header_checks`.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from labkit.core.compile import REPO_ROOT

SOURCE = {
    "file": "aten/src/ATen/native/cuda/layer_norm_kernel.cu",
    "tag_described": "v2.11.0",
    "read_at": "cyyever/pytorch@0660972b2e907c38dff07fb1dbbb4c3310791427 (fork of pytorch/pytorch)",
    "functions": ("layer_norm_grad_input_kernel_vectorized", "layer_norm_grad_input_kernel",
                  "blockReduceGammaBetaBackwardsHelper", "GammaBetaBackwardCUDAKernelTemplate",
                  "LaunchGammaBetaBackwardCUDAKernel", "LayerNormBackwardKernelImplInternal"),
}
RECORD = REPO_ROOT / "data" / "sass" / "backward" / "layernorm-backward-torch-2.11.0+cu130-sm_90.json"

# Mangled-name fragments of the float32 kernels in torch's sm_90 cubin.
TORCH_FUNCTIONS = {
    "layer_norm_grad_input_kernel_vectorized<float, float, false>": "layer_norm_grad_input_kernel_vectorizedIffLb0E",
    "GammaBetaBackwardCUDAKernelTemplate<float, float, 32, 1, 8, true, true, false>":
        "GammaBetaBackwardCUDAKernelTemplateIffLj32ELj1ELj8ELb1ELb1ELb0E",
    "GammaBetaBackwardCUDAKernelTemplate<float, float, 32, 32, 256, false, true, false>":
        "GammaBetaBackwardCUDAKernelTemplateIffLj32ELj32ELj256ELb0ELb1ELb0E",
}


@dataclass(frozen=True)
class BackwardContract:
    dx_kernel: str = "layer_norm_grad_input_kernel_vectorized<T, T_ACC, false>: grid M, block num_threads() = 128 (1-D)"
    dx_when: str = ("dY, X, gamma (null counts as aligned) and dX aligned to 4 * sizeof(T), T float/half/bfloat16, "
                    "N % 4 == 0; else layer_norm_grad_input_kernel (scalar loads)")
    load_order: str = "thread t reads float4 vectors t, t+128, ... of X, dY and gamma (gamma absent: 1.0)"
    push: str = ("gp = round(dy * gamma); stats_x1 = round(stats_x1 + gp) (FADD: the product is shared, not fused); "
                 "stats_x2 = fma(rstd, round(gp * round(x - mean)), stats_x2)")
    reduce: str = ("BlockReduceSum (block_reduce.cuh) on stats_x1, then stats_x2: WarpReduceSum (shuffle-down 16..1, "
                   "val += received) per warp; warp 0 reduces (w0, w1, w2, w3, 0, ..., 0) again")
    output: str = ("fH = float(N); term1 = rstd * round(1 / fH) (correctly rounded reciprocal); dx = round(term1 * "
                   "round(fma(dy, round(fH * gamma), -round(stats_x2 * round(rstd * round(x - mean)))) - stats_x1))")
    gamma_beta_push: str = "dg = fma(rstd, round(dy * round(x - mean)), dg); db = round(db + dy)"
    gamma_beta_templates: str = ("M > 64K and N/32 < SMs/2: block (32, 1), 32 rows per chunk, blocks.y = min(32768 / "
                                 "ceil(N/32), ceil(M/32)) partials, then .sum(0); else M < 64: (32, 1, 8); M < 128: "
                                 "(32, 8, 64); M < 256: (32, 16, 128); else (32, 32, 256); groups folded by "
                                 "WARP_SHFL_XOR butterfly")
    sources: dict = field(default_factory=lambda: SOURCE)

    def rows(self) -> list[dict]:
        return [{"aspect": k, "value": v} for k, v in asdict(self).items() if k != "sources"]


CONTRACT = BackwardContract()


def record_from_cubin(cubin: bytes, wheel: str, wheel_sha256: str) -> dict:
    """The committable record: each TORCH_FUNCTIONS kernel's floating-point instructions with operands, in address
    order (labkit.sass.parser.fp_op_sequence), from torch's own sm_90 cubin."""
    import hashlib

    from labkit.sass.parser import fp_op_sequence, parse_sass
    from labkit.sass.tools import disassemble, tool_versions

    funcs = parse_sass(disassemble(cubin))
    out = {}
    for pretty, frag in TORCH_FUNCTIONS.items():
        names = [f for f in funcs if frag in f]
        if len(names) != 1:
            raise RuntimeError(f"expected one function matching {frag}, found {names}")
        out[pretty] = {"mangled": names[0], "fp_ops": fp_op_sequence(funcs[names[0]], operands=True)}
    return {"schema": 1, "wheel": wheel, "wheel_sha256": wheel_sha256,
            "cubin_sha256": hashlib.sha256(cubin).hexdigest(), "tools": tool_versions(), "functions": out}


def _first_loop(ops: list[str]) -> list[str]:
    """The instructions before the first shuffle: the dX kernel's accumulation loops."""
    end = next((i for i, o in enumerate(ops) if o.startswith("SHFL")), len(ops))
    return ops[:end]


def _regs(op: str) -> list[str]:
    return [t.strip() for t in op.split(" ", 1)[1].split(",")] if " " in op else []


def _first_vector(loop: list[str]) -> list[str]:
    """The first float4's instructions: up to the loop's fourth FFMA (the vectorized loop with gamma comes first in
    the code, and each of its elements has exactly one FFMA if the contract holds)."""
    seen = 0
    for i, o in enumerate(loop):
        if o.startswith("FFMA "):
            seen += 1
            if seen == 4:
                return loop[:i + 1]
    return loop


def checks(record: dict) -> list[dict]:
    """Each contract claim re-derived from the committed instructions: {"claim", "holds", "evidence"}."""
    out = []
    fns = record["functions"]
    dx = fns["layer_norm_grad_input_kernel_vectorized<float, float, false>"]["fp_ops"]
    loop = _first_loop(dx)
    body = _first_vector(loop)
    fmul_dst = {_regs(o)[0] for o in body if o.startswith("FMUL ")}
    s1 = [o for o in body if o.startswith("FADD ") and not any(r.startswith("-") for r in _regs(o))
          and any(r in fmul_dst for r in _regs(o)[1:])]
    s2 = [o for o in body if o.startswith("FFMA ") and _regs(o)[0] == _regs(o)[3]]
    out.append({"claim": "stats_x1 adds the rounded dy*gamma: four FADDs of FMUL results per float4",
                "holds": len(s1) == 4 and len({_regs(o)[0] for o in s1}) == 1, "evidence": s1})
    out.append({"claim": "stats_x2 = fma(rstd, p, stats_x2): four FFMAs per float4, one multiplier, one accumulator",
                "holds": len(s2) == 4 and len({_regs(o)[1] for o in s2}) == 1 and len({_regs(o)[0] for o in s2}) == 1,
                "evidence": s2})
    s2_reg = _regs(s2[0])[0] if s2 else None
    out.append({"claim": "no other FFMA in the loop body (the product is not fused into stats_x1)",
                "holds": all(_regs(o)[0] == s2_reg for o in body if o.startswith("FFMA ")),
                "evidence": [o for o in body if o.startswith("FFMA ") and _regs(o)[0] != s2_reg]})
    tail = dx[next((i for i, o in enumerate(dx) if o.startswith("MUFU.RCP")), len(dx)):]
    neg = [o for o in tail if o.startswith("FFMA ") and _regs(o)[3].startswith("-R")]
    chain = []
    for f in neg:
        sub = next((o for o in tail if o.startswith("FADD ") and _regs(o)[1].startswith("-R")
                    and _regs(o)[2] == _regs(f)[0]), None)
        if sub:
            mul = next((o for o in tail if o.startswith("FMUL ") and _regs(sub)[0] in _regs(o)[1:]), None)
            if mul:
                chain = [f, sub, mul]
                break
    out.append({"claim": "dx = term1 * (fma(dy, fH*gamma, -t) - stats_x1): FFMA with a negated register addend, "
                         "FADD subtracting a register from its result, FMUL of that", "holds": bool(chain),
                "evidence": chain})
    rcp = [o for o in tail if o.startswith("MUFU.RCP")]
    out.append({"claim": "1/fH by MUFU.RCP refined to the correctly rounded reciprocal (then FFMA steps)",
                "holds": bool(rcp), "evidence": rcp[:1]})
    for pretty in list(fns)[1:]:
        ops = fns[pretty]["fp_ops"]
        dg = [o for o in ops if o.startswith("FFMA ") and _regs(o)[0] == _regs(o)[3]]
        db = [o for o in ops if o.startswith("FADD ") and not any(r.startswith("-") for r in _regs(o))]
        out.append({"claim": f"{pretty}: dg = fma(rstd, dy*(x-mean), dg); db = db + dy",
                    "holds": bool(dg) and bool(db), "evidence": dg[:1] + db[:1]})
    return out


def header_checks(header_text: str) -> list[dict]:
    """BlockReduceSum as the contract says, read from the installed ATen/native/cuda/block_reduce.cuh."""
    warp = re.search(r"T WarpReduceSum\(T val\)\s*\{.*?for \(int offset = \(C10_WARP_SIZE >> 1\); offset > 0; "
                     r"offset >>= 1\)\s*\{\s*val \+= WARP_SHFL_DOWN\(val, offset\);", header_text, re.S)
    block = re.search(r"T BlockReduceSum\(T val, T\* shared\).*?val = WarpReduceSum\(val\);.*?shared\[wid\] = val;"
                      r".*?val = \(tid < B::Warps\(\)\) \? shared\[lid\] : T\(0\);.*?val = WarpReduceSum\(val\);",
                      header_text, re.S)
    return [{"claim": "WarpReduceSum: shuffle-down 16..1, val += received", "holds": bool(warp)},
            {"claim": "BlockReduceSum: per warp, then warp 0 over the warps' sums and zeros", "holds": bool(block)}]


def installed_header() -> str | None:
    """block_reduce.cuh of the installed torch (CPU and CUDA wheels ship it), or None."""
    from pathlib import Path

    import torch

    path = Path(torch.__file__).parent / "include" / "ATen" / "native" / "cuda" / "block_reduce.cuh"
    return path.read_text() if path.is_file() else None
