// Dev variant (data/dev/rows_blocks/): rows_fused.cu's warp layout in blocks of one or two warps (rows) instead of
// four. The arithmetic is rows_fused_warp's, called as is; only which row a warp takes is computed from blockDim.y.
//
// Why: a block of four independent rows holds its slot on the SM until its slowest row is written, so a row whose
// loads came back late keeps three finished warps' registers idle. Liger's block is one row's four warps, which
// finish together. Blocks of one warp free each row's registers as soon as that row is written. The SM's limit of
// 32 resident blocks then bounds the warps (32), at or above what the registers allow the two-vector forms (28, 32).
#include "rows_fused.cu"

template <int kMaxVec, bool kCounted, int kRows>
__device__ __forceinline__ void rows_blocks(const float4* __restrict__ x, const float4* __restrict__ gamma,
                                            const float4* __restrict__ beta, float4* __restrict__ y,
                                            float* __restrict__ mean, float* __restrict__ rstd, int rows, int n,
                                            float eps) {
    // rows_fused_warp takes row 4 * blockIdx.x + threadIdx.y: give it the same row through an offset base pointer
    // set of arguments instead of copying it. Row r = kRows * blockIdx.x + threadIdx.y is row (r - 4 b) + 4 b of
    // the shifted arrays with b = blockIdx.x, i.e. pass pointers shifted by (kRows - 4) * blockIdx.x rows.
    const long long shift = (long long)(kRows - 4) * blockIdx.x;
    const int n4 = n / 4;
    rows_fused_warp<kMaxVec, kCounted>(x + shift * n4, gamma, beta, y + shift * n4, mean + shift, rstd + shift,
                                       (int)(rows - shift), n, eps);
}

#define BLOCKS(NAME, K, COUNTED, ROWS, MIN_BLOCKS)                                                             \
    extern "C" __global__ void __launch_bounds__(32 * ROWS, MIN_BLOCKS)                                        \
        NAME(const float4* x, const float4* gamma, const float4* beta, float4* y, float* mean, float* rstd,    \
             int rows, int n, float eps) {                                                                     \
        rows_blocks<K, COUNTED, ROWS>(x, gamma, beta, y, mean, rstd, rows, n, eps);                            \
    }
BLOCKS(rows_fused_warp_blocks_counted_r1, 2, true, 1, 28)
BLOCKS(rows_fused_warp_blocks_counted_r2, 2, true, 2, 14)
BLOCKS(rows_fused_warp_blocks_warp2_r1, 2, false, 1, 32)
BLOCKS(rows_fused_warp_blocks_warp2_r2, 2, false, 2, 16)
BLOCKS(rows_fused_warp_blocks_warp1_r1, 1, false, 1, 32)
BLOCKS(rows_fused_warp_blocks_warp1_r2, 1, false, 2, 20)
