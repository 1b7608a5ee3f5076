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

// One sample into a chain's mean and m2, leaving count alone. `inv_count` must equal the IEEE quotient
// 1.f/(count+1): callers either divide in place (torch's way) or read correctly rounded reciprocals, which
// give the same bits. Hot loops use this form and set count once at the end: a chain's count is its number
// of pushes, an integer far below 2^24 wherever torch takes the vectorized path, so float counting is exact
// and the end value has the same bits as torch's running count.
__device__ __forceinline__ void welford_push_uncounted(WelfordLN& a, float v, float inv_count) {
    float delta = v - a.mean;
    float new_mean = a.mean + delta * inv_count;
    a.m2 = a.m2 + delta * (v - new_mean);
    a.mean = new_mean;
}

__device__ __forceinline__ WelfordLN welford_push(WelfordLN a, float v, float inv_count) {
    welford_push_uncounted(a, v, inv_count);
    a.count = a.count + 1.f;
    return a;
}

__device__ __forceinline__ WelfordLN welford_push(WelfordLN a, float v) {
    float new_count = a.count + 1.f;
    return welford_push(a, v, 1.f / new_count);
}

// A float4's components in torch's order (x, y, z, w), with in-place division.
__device__ __forceinline__ WelfordLN welford_push4(WelfordLN a, float4 v) {
    a = welford_push(a, v.x);
    a = welford_push(a, v.y);
    a = welford_push(a, v.z);
    return welford_push(a, v.w);
}

// The same with the four reciprocals given, count left alone (see welford_push_uncounted).
__device__ __forceinline__ void welford_push4_uncounted(WelfordLN& a, float4 v, float4 inv_count) {
    welford_push_uncounted(a, v.x, inv_count.x);
    welford_push_uncounted(a, v.y, inv_count.y);
    welford_push_uncounted(a, v.z, inv_count.z);
    welford_push_uncounted(a, v.w, inv_count.w);
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

// torch's tree for 4 warps on their states held side by side (one thread has all four): 2 -> 0 and 3 -> 1, then
// 1 -> 0, each as merge(own, received); what welford_block_tree4 computes through shared memory.
__device__ __forceinline__ WelfordLN welford_tree4(const WelfordLN (&q)[4]) {
    return welford_merge(welford_merge(q[0], q[2]), welford_merge(q[1], q[3]));
}

// torch: sigma2 / float(N) by IEEE division, then rsqrt(var + eps) (the hardware rsqrtf, as torch's compat::rsqrt).
__device__ __forceinline__ void welford_finish(WelfordLN s, int n, float eps, float* mean, float* rstd) {
    *mean = s.mean;
    *rstd = rsqrtf(s.m2 / (float)n + eps);
}

// The end of a row whose four warps ran in different blocks: each warp (all 32 lanes call this) reduces its
// chains as torch's warp step does and publishes the state; the last of the row's four warps to arrive runs
// torch's 4-warp tree and writes mean and rstd. warp_state is [rows, 4, 3] scratch; row_done[row] is zero on
// entry and is left zero, so the next launch (and graph replay) can reuse it.
__device__ __forceinline__ void welford_row_merge_across_blocks(WelfordLN s, int row, int warp, int n, float eps,
                                                                float* warp_state, unsigned* row_done,
                                                                float* mean, float* rstd) {
    s = welford_warp_reduce(s);
    if ((threadIdx.x & 31) != 0) return;
    float* out = warp_state + ((size_t)row * 4 + warp) * 3;
    out[0] = s.mean;
    out[1] = s.m2;
    out[2] = s.count;
    __threadfence();  // publish this warp's state before counting it
    if (atomicAdd(&row_done[row], 1u) != 3u) return;
    __threadfence();  // the other three warps' states are visible once their counts are
    const volatile float* st = warp_state + (size_t)row * 12;
    WelfordLN q[4];
    for (int i = 0; i < 4; ++i) q[i] = WelfordLN{st[3 * i], st[3 * i + 1], st[3 * i + 2]};
    welford_finish(welford_tree4(q), n, eps, mean + row, rstd + row);
    row_done[row] = 0u;
}

// torch's vectorized-path output for four columns: gamma * (rstd * (x - mean)) + beta, contracted by
// --fmad=true to fma(gamma, rstd * (x - mean), beta) as torch's is.
__device__ __forceinline__ float4 layer_norm_affine4(float4 v, float4 g, float4 b, float m, float r) {
    float4 o;
    o.x = g.x * (r * (v.x - m)) + b.x;
    o.y = g.y * (r * (v.y - m)) + b.y;
    o.z = g.z * (r * (v.z - m)) + b.z;
    o.w = g.w * (r * (v.w - m)) + b.w;
    return o;
}
