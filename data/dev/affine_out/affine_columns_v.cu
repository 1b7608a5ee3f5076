// Dev variants of kernels/affine_columns.cu (the chain schedule's output pass), same expression per element
// (layer_norm_affine4), so the same bits; only the schedule and cache hints differ. Entry affine_v_T_U_S_L_R:
// T threads a block, U rows loaded before any is written, S streaming stores (st.global.cs), L streaming loads
// (ld.global.cs), R blocks from the last columns to the first (as served; 0: first to last).
#include "welford_ln.cuh"

template <int kThreads, int kUnroll, bool kStreamStore, bool kStreamLoad, bool kReverse>
__device__ __forceinline__ void affine_cols(const float4* __restrict__ x, const float* __restrict__ mean,
                                            const float* __restrict__ rstd, const float4* __restrict__ gamma,
                                            const float4* __restrict__ beta, float4* __restrict__ y, int rows,
                                            int n4) {
    const int b = kReverse ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int j = b * kThreads + threadIdx.x;
    if (j >= n4) return;
    const float4 g = gamma[j];
    const float4 be = beta[j];
    int r = 0;
    for (; r + kUnroll <= rows; r += kUnroll) {
        float4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const float4* p = x + (size_t)(r + u) * n4 + j;
            v[u] = kStreamLoad ? __ldcs(p) : *p;
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const float4 o = layer_norm_affine4(v[u], g, be, mean[r + u], rstd[r + u]);
            float4* q = y + (size_t)(r + u) * n4 + j;
            if (kStreamStore) __stcs(q, o); else *q = o;
        }
    }
    for (; r < rows; ++r) {
        const float4* p = x + (size_t)r * n4 + j;
        const float4 o = layer_norm_affine4(kStreamLoad ? __ldcs(p) : *p, g, be, mean[r], rstd[r]);
        float4* q = y + (size_t)r * n4 + j;
        if (kStreamStore) __stcs(q, o); else *q = o;
    }
}

#define AFFINE_V(T, U, S, L, R)                                                                                    \
    extern "C" __global__ void __launch_bounds__(T) affine_v_##T##_##U##_##S##_##L##_##R(                          \
        const float4* __restrict__ x, const float* __restrict__ mean, const float* __restrict__ rstd,            \
        const float4* __restrict__ gamma, const float4* __restrict__ beta, float4* __restrict__ y, int rows,     \
        int n4) {                                                                                                  \
        affine_cols<T, U, S, L, R>(x, mean, rstd, gamma, beta, y, rows, n4);                                      \
    }

AFFINE_V(256, 4, 0, 0, 1)   // the served kernel
AFFINE_V(256, 4, 0, 0, 0)   // first columns first: what the L2 reuse is worth
AFFINE_V(256, 4, 1, 0, 1)
AFFINE_V(256, 4, 1, 1, 1)
AFFINE_V(256, 8, 0, 0, 1)
AFFINE_V(256, 8, 1, 0, 1)
AFFINE_V(256, 16, 0, 0, 1)
AFFINE_V(256, 16, 1, 0, 1)
AFFINE_V(128, 8, 1, 0, 1)
AFFINE_V(512, 4, 1, 0, 1)
AFFINE_V(512, 8, 1, 0, 1)
