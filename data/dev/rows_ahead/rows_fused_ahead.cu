// Dev variant (data/dev/rows_ahead/): rows_fused.cu's warp layout with each warp asking L2 for the row that the
// warp in its slot one (or two) waves later will read. Nothing else changes: the same loads, pushes, merges and
// stores as rows_fused_warp, so the same bits; only when the bytes of a later row leave DRAM differs.
//
// Why: ncu at 8192 x 1024 (data/dev/rows_ncu/) has rows_fused_warp2_counted at 28 resident warps a SM, 37% of its
// stall samples on the first push waiting for the row's loads, and its warps have no bytes in flight while they
// push, merge and write; Liger's 4 warps a row reach 48. A prefetch of a later row keeps DRAM busy meanwhile
// without registers. Modes: kLanes, every lane one 128-byte line of the later row (prefetch.global.L2, sm_80);
// else one bulk prefetch of the whole row by lane 0 (cp.async.bulk.prefetch.L2, sm_90).
#include "rows_fused.cu"

__device__ __forceinline__ unsigned sm_count() {
    unsigned n;
    asm("mov.u32 %0, %%nsmid;" : "=r"(n));
    return n;
}

template <bool kLanes>
__device__ __forceinline__ void prefetch_row(const float* row, int n, int lane) {
    if (kLanes) {  // rows of the warp layout are at most 4 KiB: 32 lines, and a 33rd where the row is not aligned
        const int bytes = n * 4;
        const char* p = (const char*)row;
        if (lane * 128 < bytes) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + lane * 128));
        if (lane == 0) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + bytes - 1));
    } else if (lane == 0) {
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(row), "r"(n * 4) : "memory");
    }
}

template <int kMaxVec, bool kCounted, int kMinBlocks, int kAhead, bool kLanes>
__device__ __forceinline__ void rows_ahead(const float4* __restrict__ x, const float4* __restrict__ gamma,
                                           const float4* __restrict__ beta, float4* __restrict__ y,
                                           float* __restrict__ mean, float* __restrict__ rstd, int rows, int n,
                                           float eps) {
    const int lane = threadIdx.x;
    const size_t r_index = (size_t)blockIdx.x * 4 + threadIdx.y;
    if (r_index >= (size_t)rows) return;
    const int n4 = n / 4;
    const float4* row = x + r_index * n4;
    float4 keep[4][kMaxVec];
#pragma unroll
    for (int v = 0; v < 4; ++v) load_thread<kMaxVec>(row, keep[v], lane + 32 * v, n4);
    if (kAhead > 0) {  // after this row's own loads: they are the ones its warp waits on
        const size_t later = r_index + (size_t)kAhead * sm_count() * kMinBlocks * 4;
        if (later < (size_t)rows) prefetch_row<kLanes>((const float*)(x + later * n4), n, lane);
    }
    WelfordLN q[4];
#pragma unroll
    for (int v = 0; v < 4; ++v) q[v] = push_thread<kMaxVec, false>(row, keep[v], lane + 32 * v, n4);
    float m, r;
    welford_finish(kCounted ? welford_packed_rows4_counted<kMaxVec>(q, lane, n4) : welford_packed_rows4(q, lane), n,
                   eps, &m, &r);
    m = __shfl_sync(0xffffffffu, m, 0);
    r = __shfl_sync(0xffffffffu, r, 0);
    if (lane == 0) {
        mean[r_index] = m;
        rstd[r_index] = r;
    }
    float4* out = y + r_index * n4;
#pragma unroll
    for (int v = 0; v < 4; ++v) write_thread<kMaxVec, false>(row, keep[v], gamma, beta, out, lane + 32 * v, n4, m, r);
}

#define AHEAD(NAME, K, COUNTED, MIN_BLOCKS, AHEAD_WAVES, LANES)                                                \
    extern "C" __global__ void __launch_bounds__(128, MIN_BLOCKS)                                              \
        NAME(const float4* x, const float4* gamma, const float4* beta, float4* y, float* mean, float* rstd,    \
             int rows, int n, float eps) {                                                                     \
        rows_ahead<K, COUNTED, MIN_BLOCKS, AHEAD_WAVES, LANES>(x, gamma, beta, y, mean, rstd, rows, n, eps);   \
    }
AHEAD(rows_fused_warp_ahead_counted_a0, 2, true, 7, 0, true)   // rows_fused_warp2_counted rebuilt here: the control
AHEAD(rows_fused_warp_ahead_counted_a1, 2, true, 7, 1, true)
AHEAD(rows_fused_warp_ahead_counted_a2, 2, true, 7, 2, true)
AHEAD(rows_fused_warp_ahead_counted_b1, 2, true, 7, 1, false)
AHEAD(rows_fused_warp_ahead_counted_b2, 2, true, 7, 2, false)
AHEAD(rows_fused_warp_ahead_warp2_a1, 2, false, 8, 1, true)
AHEAD(rows_fused_warp_ahead_warp2_b1, 2, false, 8, 1, false)
AHEAD(rows_fused_warp_ahead_warp2_b2, 2, false, 8, 2, false)
AHEAD(rows_fused_warp_ahead_warp1_a1, 1, false, 10, 1, true)
AHEAD(rows_fused_warp_ahead_warp1_b1, 1, false, 10, 1, false)
AHEAD(rows_fused_warp_ahead_warp1_b2, 1, false, 10, 2, false)
