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
    for (int i = 0; i < pushes; i += 4) {
        s = welford_push(s, v, r);
        s = welford_push(s, v + 1.f, r * 0.5f);
        s = welford_push(s, v + 2.f, r * 0.25f);
        s = welford_push(s, v + 3.f, r * 0.125f);
    }
    const long long t1 = clock64();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s.mean + s.m2 + s.count;
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}
