// Reference-order LayerNorm output pass for few, long rows: y = gamma * (rstd * (x - mean)) + beta.
//
// Contract kept: layer_norm_affine4 is torch's output expression (welford_ln.cuh). What differs from
// affine_rows.cu is only the schedule, for the chain schedule's output pass:
// - one thread per float4 column, looping over the rows: gamma and beta are read once, not once per row;
// - each thread reads its first kEarlyRows rows before waiting for the statistics. Launched as a programmatic
//   dependent of the statistics kernel (labkit.pdl), the blocks that fit beside it load their x while the
//   chains still run, so that part of x is on chip when mean and rstd land;
// - the first `early_tiles` blocks (those that can be resident early) take the first columns; the others run
//   from the last column back, because the statistics pass reads rows front to back and the rows' tails are
//   what L2 still holds when it ends.
#include "welford_ln.cuh"
#include "grid_dependency.cuh"

#ifndef AFFINE_EARLY_ROWS
#define AFFINE_EARLY_ROWS 14  // with three 256-thread blocks per SM, the most that fits in registers unspilled
#endif
#ifndef AFFINE_MIN_BLOCKS
#define AFFINE_MIN_BLOCKS 3
#endif

// grid: ceil(n4 / 256); block: 256. Early rows of three blocks per SM fill most of the register file.
extern "C" __global__ void __launch_bounds__(256, AFFINE_MIN_BLOCKS) affine_columns(
    const float4* __restrict__ x,      // [rows, n/4]
    const float* __restrict__ mean,    // [rows], written by the statistics kernel
    const float* __restrict__ rstd,    // [rows], written by the statistics kernel
    const float4* __restrict__ gamma,  // [n/4]
    const float4* __restrict__ beta,   // [n/4]
    float4* __restrict__ y,            // [rows, n/4]
    int rows,
    int n4,                            // n / 4
    int early_tiles) {                 // 0 <= early_tiles <= gridDim.x
    constexpr int kEarlyRows = AFFINE_EARLY_ROWS;
    const int b = blockIdx.x;
    const int tile = b < early_tiles ? b : gridDim.x - 1 - (b - early_tiles);
    const int j = tile * blockDim.x + threadIdx.x;
    if (j >= n4) return;
    const float4 g = gamma[j];
    const float4 bt = beta[j];
    float4 v[kEarlyRows];
#pragma unroll
    for (int r = 0; r < kEarlyRows; ++r)
        if (r < rows) v[r] = x[(size_t)r * n4 + j];
    grid_dependency_wait();
#pragma unroll
    for (int r = 0; r < kEarlyRows; ++r)
        if (r < rows) y[(size_t)r * n4 + j] = layer_norm_affine4(v[r], g, bt, mean[r], rstd[r]);
    for (int r = kEarlyRows; r < rows; r += 4) {
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (r + u < rows) v[u] = x[(size_t)(r + u) * n4 + j];
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (r + u < rows) y[(size_t)(r + u) * n4 + j] = layer_norm_affine4(v[u], g, bt, mean[r + u], rstd[r + u]);
    }
}
