// LayerNorm dX for many rows in torch's own schedule (one 128-thread block per row, thread t on float4 vectors
// t, t+128, ...), with each thread's vectors of x and dy kept in registers between the row sums and the output,
// so x and dy are read once where torch's layer_norm_grad_input_kernel_vectorized reads them twice. dgamma/dbeta
// come from grad_columns.cu's GammaBeta pass (dX off) on the same template torch uses.
//
// Contract kept: grad_ln.cuh's arithmetic in torch's order: the sums push a thread's vectors in order (kept ones
// first, then the rest of a long row from memory), BlockReduceSum, then dX elementwise. With -DLN_BF16 / -DLN_FP16
// x, dy and gamma are four-T vectors converted to float as loaded and dX is rounded to T once at its store
// (dtype.cuh), as torch's kernel for T does; the registers keep the loaded T vectors (half a float4's registers),
// converted again where the output reads them.
#include "dtype.cuh"
#include "grad_ln.cuh"

template <int kMaxVec, bool kTail>
__device__ __forceinline__ void grad_rows_fused(const LN_VEC* __restrict__ x, const LN_VEC* __restrict__ dy,
                                                const LN_VEC* __restrict__ gamma, const float* __restrict__ mean,
                                                const float* __restrict__ rstd, LN_VEC* __restrict__ dx, int n4) {
    __shared__ float warp_sums[2][4];
    __shared__ float sums[2];
    const int tid = threadIdx.x;
    const size_t row = blockIdx.x;
    const LN_VEC* xr = x + row * n4;
    const LN_VEC* dr = dy + row * n4;
    const float m = mean[row];
    const float r = rstd[row];
    LN_VEC kx[kMaxVec], kd[kMaxVec];
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i) {
        const int j = tid + 128 * i;
        if (j < n4) {
            kx[i] = xr[j];
            kd[i] = dr[j];
        }
    }
    float s1 = 0.f, s2 = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i)
        if (tid + 128 * i < n4)
            grad_push4(s1, s2, LN_LOAD4(kx[i]), LN_LOAD4(kd[i]), LN_LOAD4(gamma[tid + 128 * i]), m, r);
    if (kTail)
        for (int j = tid + 128 * kMaxVec; j < n4; j += 128)
            grad_push4(s1, s2, LN_LOAD4(xr[j]), LN_LOAD4(dr[j]), LN_LOAD4(gamma[j]), m, r);
    s1 = grad_warp_sum(s1);
    s2 = grad_warp_sum(s2);
    if ((tid & 31) == 0) {
        warp_sums[0][tid >> 5] = s1;
        warp_sums[1][tid >> 5] = s2;
    }
    __syncthreads();
    if (tid == 0) {
        sums[0] = grad_block_sum4(warp_sums[0][0], warp_sums[0][1], warp_sums[0][2], warp_sums[0][3]);
        sums[1] = grad_block_sum4(warp_sums[1][0], warp_sums[1][1], warp_sums[1][2], warp_sums[1][3]);
    }
    __syncthreads();
    const float t1 = sums[0], t2 = sums[1];
    const float fh = (float)(4 * n4);
    const float term1 = __fmul_rn(r, __frcp_rn(fh));
    LN_VEC* out = dx + row * n4;
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i) {
        const int j = tid + 128 * i;
        if (j < n4) out[j] = LN_STORE4(grad_input4(LN_LOAD4(kx[i]), LN_LOAD4(kd[i]), LN_LOAD4(gamma[j]), m, r, t1, t2, fh,
                                                  term1));
    }
    if (kTail)
        for (int j = tid + 128 * kMaxVec; j < n4; j += 128)
            out[j] = LN_STORE4(grad_input4(LN_LOAD4(xr[j]), LN_LOAD4(dr[j]), LN_LOAD4(gamma[j]), m, r, t1, t2, fh,
                                           term1));
}

// grid: (rows); block: 128. One entry point per register budget (the plan takes the smallest that holds a row);
// only the largest is built for rows longer than its registers (it re-reads the rest: kTail), the others leave
// that loop out and the registers it takes.
#define GRAD_ROWS_FUSED(K, MIN_BLOCKS, TAIL)                                                                   \
    extern "C" __global__ void __launch_bounds__(128, MIN_BLOCKS) grad_rows_fused_reg##K(                       \
        const LN_VEC* x, const LN_VEC* dy, const LN_VEC* gamma, const float* mean, const float* rstd,          \
        LN_VEC* dx, int n4) {                                                                                   \
        grad_rows_fused<K, TAIL>(x, dy, gamma, mean, rstd, dx, n4);                                             \
    }
GRAD_ROWS_FUSED(2, 12, false)
GRAD_ROWS_FUSED(4, 8, false)
GRAD_ROWS_FUSED(8, 5, false)
GRAD_ROWS_FUSED(16, 3, true)
