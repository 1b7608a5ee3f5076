// Measurement kernel, not a LayerNorm: the latency floor of the reference contract's Welford chain.
//
// Each lane runs one dependent chain of `pushes` Welford pushes (reciprocals and values in registers, no
// memory traffic) and reports the SM cycles it took. A chain's pushes cannot overlap, so no schedule of the
// contract can finish a row's statistics faster than this; it is the floor the chain kernels are judged by.
#include "welford_ln.cuh"

// grid: blocks; block: one warp. out [blocks*32] keeps the chains live; cycles [blocks] from clock64.
extern "C" __global__ void chain_floor(float* __restrict__ out, long long* __restrict__ cycles, int pushes,
                                       float seed) {
    WelfordLN s{0.f, 0.f, 0.f};
    const float v = seed + threadIdx.x;
    const float r = 0.5f;
    const long long t0 = clock64();
    // Count left out of the loop, as the chain kernels do (welford_push_uncounted).
    const float4 v4 = make_float4(v, v + 1.f, v + 2.f, v + 3.f);
    const float4 r4 = make_float4(r, r * 0.5f, r * 0.25f, r * 0.125f);
    // Unrolled so that loop bookkeeping does not sit in the chain: this must be a floor, not a schedule.
#pragma unroll 32
    for (int i = 0; i < pushes; i += 4) welford_push4_uncounted(s, v4, r4);
    s.count = (float)pushes;
    const long long t1 = clock64();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s.mean + s.m2 + s.count;
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}
