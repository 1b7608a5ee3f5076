// Welford state, push and merge of torch's vectorized CUDA LayerNorm statistics (FP32).
//
// Contract kept: the expressions below are written exactly as torch's cuWelfordOnlineSum / cuWelfordCombine
// (aten/src/ATen/native/cuda/layer_norm_kernel.cu, verified on torch 2.5.1 by the post and 2.11.0 on the H200),
// so that with --fmad=true the compiler makes the same FMA contractions. Do not "simplify" them: rewriting
// u + d*r as fmaf(d, r, u) by hand, or reordering the merge, changes which operations round.
// Arithmetic follows the BSD-licensed PyTorch implementation (licenses/PYTORCH_LICENSE.txt).
#pragma once

struct WelfordLN {
    float mean;
    float m2;     // running sum of squared deviations (torch: sigma2)
    float count;  // kept as float, as torch does
};

// One sample into a chain. `inv_count` must equal the IEEE quotient 1.f/(count+1): callers either divide
// in place (torch's way) or read a table of correctly rounded reciprocals, which gives the same bits.
__device__ __forceinline__ WelfordLN welford_push(WelfordLN a, float v, float inv_count) {
    float delta = v - a.mean;
    float new_mean = a.mean + delta * inv_count;
    return {new_mean, a.m2 + delta * (v - new_mean), a.count + 1.f};
}

__device__ __forceinline__ WelfordLN welford_push(WelfordLN a, float v) {
    float new_count = a.count + 1.f;
    return welford_push(a, v, 1.f / new_count);
}

// torch's argument order: b is the caller's own state, a the one received (shuffled or from shared memory).
__device__ __forceinline__ WelfordLN welford_merge(WelfordLN b, WelfordLN a) {
    float delta = b.mean - a.mean;
    float count = a.count + b.count;
    if (count > 0.f) {
        float coef = 1.f / count;
        float na = a.count * coef;
        float nb = b.count * coef;
        return {na * a.mean + nb * b.mean, a.m2 + b.m2 + delta * delta * a.count * nb, count};
    }
    return {0.f, 0.f, count};
}

// torch's warp step: shuffle-down by 16, 8, 4, 2, 1; lane 0 ends with the warp's state.
__device__ __forceinline__ WelfordLN welford_warp_reduce(WelfordLN s) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        WelfordLN other{__shfl_down_sync(0xffffffffu, s.mean, offset),
                        __shfl_down_sync(0xffffffffu, s.m2, offset),
                        __shfl_down_sync(0xffffffffu, s.count, offset)};
        s = welford_merge(s, other);
    }
    return s;
}

// torch's inter-warp tree for 4 warps: warps 2,3 fold into 0,1, then 1 into 0. Call from every thread of a
// (32, 4) block; `buf` holds 12 floats. Only thread (0, 0)'s result is the block's.
__device__ __forceinline__ WelfordLN welford_block_tree4(WelfordLN s, float* buf) {
    const int lane = threadIdx.x;
    const int warp = threadIdx.y;
    float* mean_m2 = buf;      // 2 floats per slot
    float* count = buf + 8;    // torch puts counts after blockDim.y*2 floats; any layout gives the same values
#pragma unroll
    for (int offset = 2; offset > 0; offset >>= 1) {
        if (lane == 0 && warp >= offset && warp < 2 * offset) {
            const int slot = warp - offset;
            mean_m2[2 * slot] = s.mean;
            mean_m2[2 * slot + 1] = s.m2;
            count[slot] = s.count;
        }
        __syncthreads();
        if (lane == 0 && warp < offset) {
            s = welford_merge(s, WelfordLN{mean_m2[2 * warp], mean_m2[2 * warp + 1], count[warp]});
        }
        __syncthreads();
    }
    return s;
}

// torch: sigma2 / float(N) by IEEE division, then rsqrt(var + eps) (the hardware rsqrtf, as torch's compat::rsqrt).
__device__ __forceinline__ void welford_finish(WelfordLN s, int n, float eps, float* mean, float* rstd) {
    *mean = s.mean;
    *rstd = rsqrtf(s.m2 / (float)n + eps);
}
