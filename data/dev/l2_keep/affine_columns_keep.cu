// Dev variants of kernels/affine_columns.cu for data/dev/l2_keep: the same expression per element
// (layer_norm_affine4), last columns first as served; only cache hints differ. Entry affine_k_L_S_P:
// L = 1: x loaded with an L2::evict_first policy (its last use); S = 1: y stored with st.global.cs;
// P = 1: every 128-byte line of x read is put back to evict_normal (applypriority), so no evict_last line
// outlives the call.
#include "welford_ln.cuh"

template <bool kLoadFirst, bool kStreamStore, bool kNormal>
__device__ __forceinline__ float4 load_x(const float4* p, unsigned long long drop) {
    float4 v;
    if (kLoadFirst) {
        asm volatile("ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                     : "l"(p), "l"(drop));
    } else {
        v = *p;
    }
    if (kNormal && (threadIdx.x & 7) == 0)
        asm volatile("applypriority.global.L2::evict_normal [%0], 128;" ::"l"(p) : "memory");
    return v;
}

template <bool kLoadFirst, bool kStreamStore, bool kNormal, int kPart = 0>
__device__ __forceinline__ void affine_keep(const float4* __restrict__ x, const float* __restrict__ mean,
                                            const float* __restrict__ rstd, const float4* __restrict__ gamma,
                                            const float4* __restrict__ beta, float4* __restrict__ y, int rows,
                                            int n4) {
    constexpr int kUnroll = 4;
    // kPart (retention.py): 0 = every column; 1 = only the last gridDim.x * 256 columns; 2 = only the first
    const int base = kPart == 1 ? n4 - (int)gridDim.x * (int)blockDim.x : 0;
    const int j = base + (gridDim.x - 1 - blockIdx.x) * blockDim.x + threadIdx.x;
    if (j >= n4) return;
    unsigned long long drop;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(drop));
    const float4 g = gamma[j];
    const float4 be = beta[j];
    int r = 0;
    for (; r + kUnroll <= rows; r += kUnroll) {
        float4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
            v[u] = load_x<kLoadFirst, kStreamStore, kNormal>(x + (size_t)(r + u) * n4 + j, drop);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const float4 o = layer_norm_affine4(v[u], g, be, mean[r + u], rstd[r + u]);
            float4* q = y + (size_t)(r + u) * n4 + j;
            if (kStreamStore) __stcs(q, o); else *q = o;
        }
    }
    for (; r < rows; ++r) {
        const float4 o = layer_norm_affine4(load_x<kLoadFirst, kStreamStore, kNormal>(x + (size_t)r * n4 + j, drop),
                                            g, be, mean[r], rstd[r]);
        float4* q = y + (size_t)r * n4 + j;
        if (kStreamStore) __stcs(q, o); else *q = o;
    }
}

#define AFFINE_K(L, S, P)                                                                                          \
    extern "C" __global__ void __launch_bounds__(256) affine_k_##L##_##S##_##P(                                   \
        const float4* __restrict__ x, const float* __restrict__ mean, const float* __restrict__ rstd,            \
        const float4* __restrict__ gamma, const float4* __restrict__ beta, float4* __restrict__ y, int rows,     \
        int n4) {                                                                                                  \
        affine_keep<L, S, P>(x, mean, rstd, gamma, beta, y, rows, n4);                                            \
    }

AFFINE_K(0, 0, 0)  // the served kernel's schedule
AFFINE_K(0, 0, 1)
AFFINE_K(1, 0, 0)
AFFINE_K(1, 1, 0)
AFFINE_K(0, 1, 1)
AFFINE_K(1, 1, 1)

// retention.py's partial output passes: the served schedule over the rows' last or first columns only
#define AFFINE_PART(NAME, PART)                                                                                    \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                                        \
        const float4* __restrict__ x, const float* __restrict__ mean, const float* __restrict__ rstd,            \
        const float4* __restrict__ gamma, const float4* __restrict__ beta, float4* __restrict__ y, int rows,     \
        int n4) {                                                                                                  \
        affine_keep<false, false, false, PART>(x, mean, rstd, gamma, beta, y, rows, n4);                          \
    }
AFFINE_PART(affine_tail, 1)
AFFINE_PART(affine_head, 2)

// Puts every 128-byte line of x back to evict_normal: run between the probe's variants, so no variant's evict_last
// lines carry into the next one's timing. grid: ceil(lines / 256); block 256.
extern "C" __global__ void l2_normal(const float4* __restrict__ x, long long lines) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < lines) asm volatile("applypriority.global.L2::evict_normal [%0], 128;" ::"l"(x + 8 * i) : "memory");
}
