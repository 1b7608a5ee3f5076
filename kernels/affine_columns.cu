// Reference-order LayerNorm output pass for few, long rows: y = gamma * (rstd * (x - mean)) + beta.
//
// Contract kept: layer_norm_affine4 is torch's output expression (welford_ln.cuh); with -DEPILOGUE the ops that
// follow LayerNorm are applied to it as torch's kernels apply them (epilogue.cuh); with -DLN_BF16 or -DLN_FP16, x,
// gamma, beta and y are of that type, converted to float as loaded and y once at the store (dtype.cuh), mean and
// rstd float; with -DLN_X_BF16 or -DLN_X_FP16 (the autocast build) x alone is of that type, gamma, beta and y
// float. What differs from affine_rows.cu is only the schedule, for the chain schedule's output pass:
// - one thread per float4 column, looping over the rows: gamma and beta are read once, not once per row, and
//   each thread has four independent loads of x in flight;
// - blocks run from the last columns to the first: the statistics pass reads every row front to back, so when
//   it ends the rows' tails are the part of x that L2 still holds.
#include "welford_ln.cuh"
#include "epilogue.cuh"
#include "dtype.cuh"

// grid: ceil(n4 / 256); block: 256.
extern "C" __global__ void __launch_bounds__(256) affine_columns(
    const LN_X_VEC* __restrict__ x,    // [rows, n/4] (float4, or four T with -DLN_BF16/-DLN_FP16/-DLN_X_*)
    const float* __restrict__ mean,    // [rows]
    const float* __restrict__ rstd,    // [rows]
    const LN_VEC* __restrict__ gamma,  // [n/4]
    const LN_VEC* __restrict__ beta,   // [n/4]
    LN_VEC* __restrict__ y,            // [rows, n/4]
    int rows,
    int n4                             // n / 4
    EPILOGUE_PARAMS) {                 // with -DEPILOGUE: residual [rows, n/4], scale (epilogue.cuh)
    constexpr int kUnroll = 4;
    const int j = (gridDim.x - 1 - blockIdx.x) * blockDim.x + threadIdx.x;
    if (j >= n4) return;
    const float4 g = LN_LOAD4(gamma[j]);
    const float4 b = LN_LOAD4(beta[j]);
    int r = 0;
    for (; r + kUnroll <= rows; r += kUnroll) {
        float4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) v[u] = LN_X_LOAD4(x[(size_t)(r + u) * n4 + j]);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
            y[(size_t)(r + u) * n4 + j] = LN_STORE4(
                EPILOGUE4(layer_norm_affine4(v[u], g, b, mean[r + u], rstd[r + u]), (size_t)(r + u) * n4 + j));
    }
    for (; r < rows; ++r)
        y[(size_t)r * n4 + j] = LN_STORE4(EPILOGUE4(
            layer_norm_affine4(LN_X_LOAD4(x[(size_t)r * n4 + j]), g, b, mean[r], rstd[r]), (size_t)r * n4 + j));
}
