// Dev floors (data/dev/rows_floor/): rows_fused.cu's schedules with torch's arithmetic taken out, to tell whether
// the warp layout's gap to Liger at rows of <= 1,024 floats lies in the arithmetic the contract fixes or in the
// schedule. Not bit-identical by design (except where said); never served.
//
// rows_fused_warp_floor_none<K>: the served warp layout (a warp per row, four of torch's threads a lane, block
//   (32, 4), the same loads and stores) with no statistics: mean is lane 0's first value (one shuffle), rstd 1.
// rows_fused_warp_floor_sums<K>: the same layout with two-pass plain sums (sum, then squared deviations), each one
//   warp butterfly: what Liger's kernel computes, on our layout.
// rows_fused_reg_floor_sums<K>: Liger's layout in CUDA: a (32, 4) block per row, thread t holding float4s t,
//   t + 128, ..., two-pass plain sums reduced by warp butterflies and a 4-entry shared-memory step.
#include "rows_fused.cu"

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int K, int kMode>  // 0: no statistics, 1: plain sums
__device__ __forceinline__ void floor_warp(const float4* __restrict__ x, const float4* __restrict__ gamma,
                                           const float4* __restrict__ beta, float4* __restrict__ y,
                                           float* __restrict__ mean, float* __restrict__ rstd, int rows, int n,
                                           float eps) {
    const int lane = threadIdx.x;
    const size_t r_index = (size_t)blockIdx.x * 4 + threadIdx.y;
    if (r_index >= (size_t)rows) return;
    const int n4 = n / 4;
    const float4* row = x + r_index * n4;
    float4 keep[4][K];
#pragma unroll
    for (int v = 0; v < 4; ++v) load_thread<K>(row, keep[v], lane + 32 * v, n4);
    float m, r;
    if (kMode == 0) {
        m = __shfl_sync(0xffffffffu, keep[0][0].x, 0);
        r = 1.f;
    } else {
        float s = 0.f;
#pragma unroll
        for (int v = 0; v < 4; ++v)
#pragma unroll
            for (int i = 0; i < K; ++i)
                if (lane + 32 * v + 128 * i < n4) {
                    const float4 k = keep[v][i];
                    s += (k.x + k.y) + (k.z + k.w);
                }
        m = warp_sum(s) / (float)n;
        float q = 0.f;
#pragma unroll
        for (int v = 0; v < 4; ++v)
#pragma unroll
            for (int i = 0; i < K; ++i)
                if (lane + 32 * v + 128 * i < n4) {
                    const float4 k = keep[v][i];
                    const float a = k.x - m, b = k.y - m, c = k.z - m, d = k.w - m;
                    q += (a * a + b * b) + (c * c + d * d);
                }
        r = rsqrtf(warp_sum(q) / (float)n + eps);
    }
    if (lane == 0) {
        mean[r_index] = m;
        rstd[r_index] = r;
    }
    float4* out = y + r_index * n4;
#pragma unroll
    for (int v = 0; v < 4; ++v) write_thread<K, false>(row, keep[v], gamma, beta, out, lane + 32 * v, n4, m, r);
}

template <int K>
__device__ __forceinline__ void floor_block(const float4* __restrict__ x, const float4* __restrict__ gamma,
                                            const float4* __restrict__ beta, float4* __restrict__ y,
                                            float* __restrict__ mean, float* __restrict__ rstd, int n, float eps) {
    __shared__ float part[2][4];
    const int tid = threadIdx.x + 32 * threadIdx.y;
    const int n4 = n / 4;
    const float4* row = x + (size_t)blockIdx.x * n4;
    float4 keep[K];
    load_thread<K>(row, keep, tid, n4);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < K; ++i)
        if (tid + 128 * i < n4) s += (keep[i].x + keep[i].y) + (keep[i].z + keep[i].w);
    s = warp_sum(s);
    if (threadIdx.x == 0) part[0][threadIdx.y] = s;
    __syncthreads();
    const float m = ((part[0][0] + part[0][1]) + (part[0][2] + part[0][3])) / (float)n;
    float q = 0.f;
#pragma unroll
    for (int i = 0; i < K; ++i)
        if (tid + 128 * i < n4) {
            const float a = keep[i].x - m, b = keep[i].y - m, c = keep[i].z - m, d = keep[i].w - m;
            q += (a * a + b * b) + (c * c + d * d);
        }
    q = warp_sum(q);
    if (threadIdx.x == 0) part[1][threadIdx.y] = q;
    __syncthreads();
    const float r = rsqrtf(((part[1][0] + part[1][1]) + (part[1][2] + part[1][3])) / (float)n + eps);
    if (tid == 0) {
        mean[blockIdx.x] = m;
        rstd[blockIdx.x] = r;
    }
    write_thread<K, false>(row, keep, gamma, beta, y + (size_t)blockIdx.x * n4, tid, n4, m, r);
}

#define FLOOR_WARP(NAME, K, MODE, MIN_BLOCKS)                                                                  \
    extern "C" __global__ void __launch_bounds__(128, MIN_BLOCKS) NAME(                                        \
        const float4* x, const float4* gamma, const float4* beta, float4* y, float* mean, float* rstd, int rows, \
        int n, float eps) {                                                                                     \
        floor_warp<K, MODE>(x, gamma, beta, y, mean, rstd, rows, n, eps);                                       \
    }
FLOOR_WARP(rows_fused_warp_floor_none2, 2, 0, 8)  // the served warp2's bounds
FLOOR_WARP(rows_fused_warp_floor_sums2, 2, 1, 8)


extern "C" __global__ void __launch_bounds__(128, 12) rows_fused_reg_floor_sums2(
    const float4* x, const float4* gamma, const float4* beta, float4* y, float* mean, float* rstd, int n, float eps) {
    floor_block<2>(x, gamma, beta, y, mean, rstd, n, eps);
}
