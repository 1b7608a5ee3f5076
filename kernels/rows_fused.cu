// Reference-order LayerNorm for many short rows: torch's own schedule (one (32, 4) block per row, statistics
// then output in the same block), with each thread's float4 vectors kept in registers between the two passes
// so x is read from memory once.
//
// Contract kept: the statistics are torch's vectorized-path order (welford_ln.cuh) and the output is
// gamma * (rstd * (x - mean)) + beta, contracted as torch's. Rows longer than kMaxVec * 512 floats re-read
// their vectors for the output pass (from L2), as torch does.
#include "welford_ln.cuh"

template <int kMaxVec>
__device__ __forceinline__ void rows_fused(const float4* __restrict__ x, const float4* __restrict__ gamma,
                                           const float4* __restrict__ beta, float4* __restrict__ y,
                                           float* __restrict__ mean, float* __restrict__ rstd, int n, float eps) {
    __shared__ float buf[12];
    __shared__ float stats[2];
    const int tid = threadIdx.x + 32 * threadIdx.y;
    const int n4 = n / 4;
    const float4* row = x + (size_t)blockIdx.x * n4;
    float4 keep[kMaxVec > 0 ? kMaxVec : 1];
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i) {
        const int j = tid + 128 * i;
        if (j < n4) keep[i] = row[j];
    }
    WelfordLN s{0.f, 0.f, 0.f};
    // Registers' vectors are pushed with constant reciprocals: a chain's pushes from keep[i] are always its
    // (4i+1)-th to (4i+4)-th (a thread's vectors run out in order), and the compiler folds a constant IEEE
    // quotient to the same correctly rounded value the in-loop division gives, so no division is left here.
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i) {
        if (tid + 128 * i < n4) {
            welford_push4_uncounted(s, keep[i], make_float4(1.f / (4 * i + 1), 1.f / (4 * i + 2), 1.f / (4 * i + 3),
                                                            1.f / (4 * i + 4)));
            s.count = (float)(4 * i + 4);
        }
    }
    for (int j = tid + 128 * kMaxVec; j < n4; j += 128) s = welford_push4(s, row[j]);
    s = welford_warp_reduce(s);
    s = welford_block_tree4(s, buf);
    if (tid == 0) {
        welford_finish(s, n, eps, &stats[0], &stats[1]);
        mean[blockIdx.x] = stats[0];
        rstd[blockIdx.x] = stats[1];
    }
    __syncthreads();
    const float m = stats[0];
    const float r = stats[1];
    float4* out = y + (size_t)blockIdx.x * n4;
    for (int i = 0, j = tid; j < n4; ++i, j += 128) {
        float4 v;
        if (i < kMaxVec) {
#pragma unroll
            for (int c = 0; c < kMaxVec; ++c)
                if (c == i) v = keep[c];  // register-indexed without local memory
        } else {
            v = row[j];
        }
        out[j] = layer_norm_affine4(v, gamma[j], beta[j], m, r);
    }
}

// Arguments: x [rows, n/4] float4, gamma/beta [n/4] float4, y [rows, n/4] float4, mean/rstd [rows], n, eps.
// grid: rows; block: (32, 4). One entry point per register budget: short rows need few vectors per thread,
// and fewer registers let more blocks share an SM (labkit.ops.chain picks the smallest that holds the row).
#define ROWS_FUSED(K, MIN_BLOCKS)                                                                              \
    extern "C" __global__ void __launch_bounds__(128, MIN_BLOCKS) rows_fused_reg##K(                            \
        const float4* x, const float4* gamma, const float4* beta, float4* y, float* mean, float* rstd, int n,   \
        float eps) {                                                                                            \
        rows_fused<K>(x, gamma, beta, y, mean, rstd, n, eps);                                                   \
    }
ROWS_FUSED(2, 12)
ROWS_FUSED(4, 8)
ROWS_FUSED(8, 6)
