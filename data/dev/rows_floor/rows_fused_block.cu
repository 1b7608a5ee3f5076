// Dev variant (data/dev/rows_floor/): torch's arithmetic in torch's own (32, 4) block per row, thread t holding
// torch's thread t's float4s in registers (as rows_fused_reg<K>), with two changes that keep the bits:
// - every merge's quotient 1.f / (a.count + b.count) (torch's warp step's five, its 4-warp tree's three) is made
//   from the counts alone while x is in flight, and the merges take it (welford_merge_given, rows_counted's way);
//   the counts depend on n only: thread t's is 4 per float4 it holds, warp w's 4 sum_i clamp(n4 - 128 i - 32 w, 0, 32);
// - the 4-warp tree runs in every thread from the warps' states in shared memory (welford_tree4, rows_staged's
//   way): one block barrier a row instead of torch's tree barriers and the statistics' broadcast.
// Why: at 8192 x 1024 the warp layout is slow with no statistics at all (floor 21.1 us against Liger's block
// layout with plain sums, 20.8), while rows_fused_reg2 (this layout, torch's divisions, two barriers) is 22.0.
#include "rows_fused.cu"

template <int K>
__device__ __forceinline__ void rows_block_counted(const float4* __restrict__ x, const float4* __restrict__ gamma,
                                                   const float4* __restrict__ beta, float4* __restrict__ y,
                                                   float* __restrict__ mean, float* __restrict__ rstd, int n,
                                                   float eps) {
    __shared__ float st[12];
    const int lane = threadIdx.x, warp = threadIdx.y;
    const int tid = lane + 32 * warp;
    const int n4 = n / 4;
    const float4* row = x + (size_t)blockIdx.x * n4;
    float4 keep[K];
    load_thread<K>(row, keep, tid, n4);
    // the quotients, from the counts alone
    float c = thread_count<K>(tid, n4);
    float coef[5];
#pragma unroll
    for (int k = 0, offset = 16; offset > 0; offset >>= 1, ++k) {
        const float t = c + __shfl_down_sync(0xffffffffu, c, offset);
        coef[k] = t > 0.f ? 1.f / t : 0.f;
        c = t;
    }
    float wc[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        wc[w] = 0.f;
#pragma unroll
        for (int i = 0; i < K; ++i) wc[w] += (float)(4 * min(max(n4 - 128 * i - 32 * w, 0), 32));
    }
    const float t02 = wc[0] + wc[2], t13 = wc[1] + wc[3], tall = t02 + t13;
    const float c02 = t02 > 0.f ? 1.f / t02 : 0.f, c13 = t13 > 0.f ? 1.f / t13 : 0.f;
    const float call = tall > 0.f ? 1.f / tall : 0.f;
    // torch's pushes and warp step
    WelfordLN s = push_thread<K, false>(row, keep, tid, n4);
#pragma unroll
    for (int k = 0, offset = 16; offset > 0; offset >>= 1, ++k) s = welford_merge_given(s, shfl_down_state(s, offset, 32), coef[k]);
    if (lane == 0) {
        st[3 * warp] = s.mean;
        st[3 * warp + 1] = s.m2;
        st[3 * warp + 2] = s.count;
    }
    __syncthreads();
    const WelfordLN q0{st[0], st[1], st[2]}, q1{st[3], st[4], st[5]}, q2{st[6], st[7], st[8]}, q3{st[9], st[10], st[11]};
    float m, r;
    welford_finish(welford_merge_given(welford_merge_given(q0, q2, c02), welford_merge_given(q1, q3, c13), call), n,
                   eps, &m, &r);
    if (tid == 0) {
        mean[blockIdx.x] = m;
        rstd[blockIdx.x] = r;
    }
    write_thread<K, false>(row, keep, gamma, beta, y + (size_t)blockIdx.x * n4, tid, n4, m, r);
}

#define ROWS_BLOCK(NAME, K, MIN_BLOCKS)                                                                       \
    extern "C" __global__ void __launch_bounds__(128, MIN_BLOCKS) NAME(                                        \
        const float4* x, const float4* gamma, const float4* beta, float4* y, float* mean, float* rstd, int n,   \
        float eps) {                                                                                            \
        rows_block_counted<K>(x, gamma, beta, y, mean, rstd, n, eps);                                           \
    }
ROWS_BLOCK(rows_fused_regc2, 2, 12)
ROWS_BLOCK(rows_fused_regc2_b10, 2, 10)
ROWS_BLOCK(rows_fused_regc2_b16, 2, 16)
ROWS_BLOCK(rows_fused_regc4, 4, 8)
