// The two row sums of torch's LayerNorm dX (stats_x1 = sum dy*gamma, stats_x2 = sum dy*gamma*(x-mean)*rstd), in
// torch's own schedule: one 128-thread block per row, thread t reading float4 vectors t, t+128, ... of x, dy and
// gamma, then BlockReduceSum (grad_ln.cuh). What torch's layer_norm_grad_input_kernel_vectorized computes before
// its output loop, bit for bit; the output (and dgamma/dbeta) come from grad_columns.cu, which reads x and dy once
// for all three, where torch reads them once for the sums, again for dX and a third time for dgamma/dbeta.
// With -DLN_BF16 / -DLN_FP16 x, dy and gamma are vectors of four T converted to float as loaded (dtype.cuh), as
// torch's kernel for T reads them; the sums stay float.
#include "dtype.cuh"
#include "grad_ln.cuh"

// grid: (rows); block: 128.
extern "C" __global__ void __launch_bounds__(128) grad_row_sums(
    const LN_VEC* __restrict__ x,      // [rows, n/4]
    const LN_VEC* __restrict__ dy,     // [rows, n/4]
    const LN_VEC* __restrict__ gamma,  // [n/4] (ones when the forward had no weight: torch multiplies by 1)
    const float* __restrict__ mean,    // [rows]
    const float* __restrict__ rstd,    // [rows]
    float* __restrict__ s1_out,        // [rows]
    float* __restrict__ s2_out,        // [rows]
    int n4) {                          // n / 4
    __shared__ float warp_sums[2][4];
    const int row = blockIdx.x;
    const int tid = threadIdx.x;
    const float m = mean[row];
    const float r = rstd[row];
    const LN_VEC* xr = x + (size_t)row * n4;
    const LN_VEC* dr = dy + (size_t)row * n4;
    float s1 = 0.f, s2 = 0.f;
    for (int v = tid; v < n4; v += 128) grad_push4(s1, s2, LN_LOAD4(xr[v]), LN_LOAD4(dr[v]), LN_LOAD4(gamma[v]), m, r);
    s1 = grad_warp_sum(s1);
    s2 = grad_warp_sum(s2);
    if ((tid & 31) == 0) {
        warp_sums[0][tid >> 5] = s1;
        warp_sums[1][tid >> 5] = s2;
    }
    __syncthreads();
    if (tid == 0) {
        s1_out[row] = grad_block_sum4(warp_sums[0][0], warp_sums[0][1], warp_sums[0][2], warp_sums[0][3]);
        s2_out[row] = grad_block_sum4(warp_sums[1][0], warp_sums[1][1], warp_sums[1][2], warp_sums[1][3]);
    }
}
