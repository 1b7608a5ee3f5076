"""Dev probe: the dependence floor of the mean chain alone (FADD x - mean, FFMA the new mean) against the whole
Welford push (kernels/chain_floor.cu's arithmetic), both with values and reciprocals in registers, clock64 cycles
per push, one warp a block on 64 blocks. Does taking the m2 update off the mean chain's warp lower its floor?
Writes floor.json under $OUT. Run: python3 data/dev/chain_split/floor_probe.py"""
import json
import os

import cupy as cp

SRC = r'''
struct W { float mean, m2; };
__device__ __forceinline__ void push(W& a, float v, float r) {
    float delta = v - a.mean;
    float nm = a.mean + delta * r;
    a.m2 = a.m2 + delta * (v - nm);
    a.mean = nm;
}
__device__ __forceinline__ void push_mean(float& m, float v, float r) {
    float delta = v - m;
    m = m + delta * r;
}
extern "C" __global__ void full(float* out, long long* cyc, int pushes, float seed) {
    W s{0.f, 0.f};
    const float v = seed + threadIdx.x;
    long long t0 = clock64();
#pragma unroll 32
    for (int i = 0; i < pushes; i += 4) {
        push(s, v, 0.5f); push(s, v + 1.f, 0.25f); push(s, v + 2.f, 0.125f); push(s, v + 3.f, 0.0625f);
    }
    long long t1 = clock64();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s.mean + s.m2;
    if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}
extern "C" __global__ void mean_only(float* out, long long* cyc, int pushes, float seed) {
    float m = 0.f;
    const float v = seed + threadIdx.x;
    long long t0 = clock64();
#pragma unroll 32
    for (int i = 0; i < pushes; i += 4) {
        push_mean(m, v, 0.5f); push_mean(m, v + 1.f, 0.25f); push_mean(m, v + 2.f, 0.125f);
        push_mean(m, v + 3.f, 0.0625f);
    }
    long long t1 = clock64();
    out[blockIdx.x * blockDim.x + threadIdx.x] = m;
    if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}
'''
mod = cp.RawModule(code=SRC, options=("--fmad=true",))
pushes, blocks = 1 << 15, 64
res = {}
for name in ("full", "mean_only"):
    k = mod.get_function(name)
    out = cp.zeros(blocks * 32, dtype=cp.float32)
    cyc = cp.zeros(blocks, dtype=cp.int64)
    per = []
    for _ in range(5):
        k((blocks,), (32,), (out, cyc, cp.int32(pushes), cp.float32(1.5)))
        cp.cuda.Device().synchronize()
        per.append(float(cyc.get().mean()) / pushes)
    res[name] = {"cycles_per_push": sorted(per)[2], "all": per}
    print(name, [round(p, 3) for p in per])
os.makedirs(os.environ.get("OUT", "."), exist_ok=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "floor.json"), "w"), indent=1)
