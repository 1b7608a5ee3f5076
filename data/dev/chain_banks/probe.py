"""Dev probe: does the source form of the Welford push change the chain's cycles per push? (data/dev/chain_banks)

The statically scheduled SASS of kernels/chain_floor.cu and of chain_stats_tma's push loop issues a push every 8
cycles (stall counts 1+3+1+3, the FADD + FFMA dependence), yet both measure about 9.2 cycles per push and the mean
chain alone 8.06 (data/dev/chain_split/floor.json). What is lost is dynamic, and register allocation differs between
forms of the same arithmetic (the chain_split floor probe's form measured 8.81). push_forms.cuh writes the push four
ways with the same operations on the same operands in the same order (same bits):
- part 1, registers only (clock64 cycles per push, one warp a block on 64 blocks, as chain_floor.cu), every form,
  plus four diagnostics that change the arithmetic (never results): the mean chain alone; the m2 update with its
  product replaced by an add, or by a product with an immediate (a two-source instruction in place of the
  three-source FFMA); and the committed form with values and reciprocals as immediates (as kernels/chain_floor.cu);
- part 2, the served statistics kernel built with each form (chain_stats_tma.cu with its push replaced, copied
  into kernels/ for the run and removed after), at 5 chain shapes: bits of y, mean and rstd (int32 views) against
  torch.native_layer_norm on uniform and normal inputs, and the statistics launch alone plus the whole forward
  timed under graph replay (protocol A, 15 rounds of 5), every form in one timing.
Writes chain_banks.json under $OUT. Run from the repository root: python3 data/dev/chain_banks/probe.py"""
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

import cupy as cp  # noqa: E402
import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import chain  # noqa: E402
from labkit.ops.plans import execute, stats_only  # noqa: E402
from labkit.studies import bench  # noqa: E402

FORMS = (0, 1, 2, 3)
SHAPES = ((16, 4194304), (4, 4194304), (1, 16777216), (8, 2097152), (64, 262144))
KERNEL = ROOT / "kernels" / "chain_stats_tma.cu"

FLOOR = r'''
#include "push_forms.cuh"
extern "C" __global__ void floor_k(float* out, long long* cyc, const float* vals, int pushes) {
    WelfordLN s{0.f, 0.f, 0.f};
    PendingM2 p = form_start();
    // Values and reciprocals from memory, so that none folds into an immediate (the served kernel has neither).
    const float4 v4 = reinterpret_cast<const float4*>(vals)[threadIdx.x & 1];
    const float4 r4 = reinterpret_cast<const float4*>(vals)[2 + (threadIdx.x & 1)];
    const long long t0 = clock64();
#pragma unroll 32
    for (int i = 0; i < pushes; i += 4) {
#if DIAG == 1
        s.mean = s.mean + (v4.x - s.mean) * r4.x; s.mean = s.mean + (v4.y - s.mean) * r4.y;
        s.mean = s.mean + (v4.z - s.mean) * r4.z; s.mean = s.mean + (v4.w - s.mean) * r4.w;
#elif DIAG == 2
#define P(c) { float d = v4.c - s.mean; float nm = s.mean + d * r4.c; s.m2 = s.m2 + (v4.c - nm); s.mean = nm; }
        P(x) P(y) P(z) P(w)
#elif DIAG == 3
#define Q(c) { float d = v4.c - s.mean; float nm = s.mean + d * r4.c; s.m2 = s.m2 + 0.5f * (v4.c - nm); s.mean = nm; }
        Q(x) Q(y) Q(z) Q(w)
#elif DIAG == 4
        welford_push4_uncounted(s, make_float4(1.5f, 2.5f, 3.5f, 4.5f), make_float4(0.5f, 0.25f, 0.125f, 0.0625f));
#else
        form_push4(s, p, v4, r4);
#endif
    }
    form_flush(s, p);
    const long long t1 = clock64();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s.mean + s.m2;
    if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}
'''


def floor_part() -> dict:
    res = {}
    vals = cp.asarray([1.5, 2.25, 3.125, 4.0625, 1.75, 2.5, 3.5, 4.5, 0.5, 1 / 3, 0.25, 0.2, 1 / 6, 1 / 7, 0.125,
                       1 / 9], dtype=cp.float32)
    pushes, blocks = 1 << 15, 64
    variants = [(f"form {f}", f, 0) for f in FORMS] + [("mean chain alone (diagnostic)", 0, 1),
                                                       ("m2 by an add (diagnostic)", 0, 2),
                                                       ("m2 product by an immediate (diagnostic)", 0, 3),
                                                       ("values and reciprocals as immediates", 0, 4)]
    for name, form, diag in variants:
        mod = cp.RawModule(code=FLOOR, options=("--std=c++17", "--fmad=true", f"-I{ROOT / 'kernels'}", f"-I{HERE}",
                                                 f"-DPUSH_FORM={form}", f"-DDIAG={diag}"))
        k = mod.get_function("floor_k")
        out = cp.zeros(blocks * 32, dtype=cp.float32)
        cyc = cp.zeros(blocks, dtype=cp.int64)
        per = []
        for _ in range(7):
            k((blocks,), (32,), (out, cyc, vals, cp.int32(pushes)))
            cp.cuda.Device().synchronize()
            per.append(float(cyc.get().mean()) / pushes)
        res[name] = {"cycles_per_push": sorted(per)[3], "all": per}
        print("floor", name, [round(p, 3) for p in per], flush=True)
    return res


def variant_source(form: int) -> str:
    """chain_stats_tma.cu with its push replaced by push_forms.cuh's form `form` (every edit must apply)."""
    text = KERNEL.read_text()
    edits = [
        ('#include "welford_ln.cuh"\n', f'#define PUSH_FORM {form}\n#include "push_forms.cuh"\n'),
        ("void push4(WelfordLN& s, const float4& v, const float4& r) {",
         "void push4(WelfordLN& s, PendingM2& pm, const float4& v, const float4& r) {"),
        ("    welford_push4_uncounted(s, v, r);", "    form_push4(s, pm, v, r);"),
        ("consume_stage(WelfordLN& s, float4", "consume_stage(WelfordLN& s, PendingM2& pm, float4"),
        ("push4(s, v, r);", "push4(s, pm, v, r);"),
        ("consume_slot(WelfordLN& s, float4", "consume_slot(WelfordLN& s, PendingM2& pm, float4"),
        ("consume_stage<kPartial>(s, qv,", "consume_stage<kPartial>(s, pm, qv,"),
        ("    WelfordLN s{0.f, 0.f, 0.f};\n", "    WelfordLN s{0.f, 0.f, 0.f};\n    PendingM2 pm = form_start();\n"),
        ("consume_slot<false>(s, qv,", "consume_slot<false>(s, pm, qv,"),
        ("consume_slot<true>(s, qv,", "consume_slot<true>(s, pm, qv,"),
        ("    s.count = (float)(4 * steps);", "    form_flush(s, pm);\n    s.count = (float)(4 * steps);"),
    ]
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def same(a, b) -> bool:
    return torch.equal(a.reshape(-1).view(torch.int32), b.reshape(-1).view(torch.int32))


def kernel_part(dev) -> dict:
    res = {}
    for rows, n in SHAPES:
        key = f"{rows}x{n}"
        served = chain.plan(rows, n, dev)
        plans = {f"form {f}": dataclasses.replace(served, stats=dataclasses.replace(
            served.stats, kernel=f"chain_stats_tma_form{f}")) for f in FORMS}
        g = torch.Generator(device="cuda").manual_seed(rows * 7 + n)
        w = torch.randn(n, device="cuda", generator=g)
        b = torch.randn(n, device="cuda", generator=g)
        bits = {}
        for dist in ("uniform", "normal"):
            x = (torch.rand(rows, n, device="cuda", generator=g) * 4 - 1 if dist == "uniform"
                 else torch.randn(rows, n, device="cuda", generator=g) * 3 + 2)
            ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
            for name, p in {"served": served, **plans}.items():
                got = execute(p, x, w, b, 1e-5)
                bits.setdefault(name, True)
                bits[name] &= all(same(a, c) for a, c in zip(got, ref))
        x = torch.randn(rows, n, device="cuda", generator=g) + 3
        mean = torch.empty(rows, device="cuda")
        rstd = torch.empty(rows, device="cuda")
        fns = {}
        for name, p in {"served": served, **plans}.items():
            fns[f"{name} stats"] = (lambda p=p: stats_only(p, x, mean, rstd, 1e-5))
            fns[f"{name} forward"] = (lambda p=p: execute(p, x, w, b, 1e-5))
        rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=15))
        res[key] = {"identical": bits, "ms": rec.stats}
        print(key, bits, {k: round(v["median_ms"] * 1e3, 1) for k, v in rec.stats.items()}, flush=True)
    return res


def main():
    t0 = time.perf_counter()
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "floor": floor_part()}
    copied = [ROOT / "kernels" / "push_forms.cuh"]
    shutil.copy(HERE / "push_forms.cuh", copied[0])
    try:
        for f in FORMS:
            path = ROOT / "kernels" / f"chain_stats_tma_form{f}.cu"
            path.write_text(variant_source(f))
            copied.append(path)
        out["kernel"] = kernel_part(device_info(0))
    finally:
        for p in copied:
            p.unlink(missing_ok=True)
    out["seconds"] = time.perf_counter() - t0
    os.makedirs(os.environ.get("OUT", "."), exist_ok=True)
    json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "chain_banks.json"), "w"), indent=1)
    print("seconds", round(out["seconds"], 1), flush=True)


if __name__ == "__main__":
    with torch.cuda.stream(torch.cuda.Stream()):
        main()
