// Dev variant (data/dev/rows_hints/): rows_fused_warp<K> (the served warp layout, torch's arithmetic, the same
// instructions between the loads and the stores) with cache hints on x's loads and y's stores. Under graph replay
// at 4096 x 768 both x and y (12.6 MB each) fit the 60 MB L2, at 8192 x 1024 (33.6 MB each) together they do not;
// the hints ask L2 to keep or drop what the next replay needs. Load modes: 0 as served (ld.global.nc), 1 __ldcs
// (evict-first), 2 ld.global.nc.L2::256B (a 256-byte L2 fetch), 3 ld.global.nc.L1::no_allocate. Store modes: 0 as
// served, 1 __stcs (evict-first), 2 st.global.L1::no_allocate.
#include "rows_fused.cu"

template <int kMode>
__device__ __forceinline__ float4 load_x(const float4* p) {
    if (kMode == 1) return __ldcs(p);
    float4 v;
    if (kMode == 2) {
        asm volatile("ld.global.nc.L2::256B.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
        return v;
    }
    if (kMode == 3) {
        asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
        return v;
    }
    return *p;
}

template <int kMode>
__device__ __forceinline__ void store_y(float4* p, float4 v) {
    if (kMode == 1) {
        __stcs(p, v);
    } else if (kMode == 2) {
        asm volatile("st.global.L1::no_allocate.v4.f32 [%0], {%1, %2, %3, %4};"
                     ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
    } else {
        *p = v;
    }
}

template <int K, int kLoad, int kStore>
__device__ __forceinline__ void rows_warp_hinted(const float4* __restrict__ x, const float4* __restrict__ gamma,
                                                 const float4* __restrict__ beta, float4* __restrict__ y,
                                                 float* __restrict__ mean, float* __restrict__ rstd, int rows, int n,
                                                 float eps) {
    const int lane = threadIdx.x;
    const size_t r_index = (size_t)blockIdx.x * 4 + threadIdx.y;
    if (r_index >= (size_t)rows) return;
    const int n4 = n / 4;
    const float4* row = x + r_index * n4;
    float4 keep[4][K];
#pragma unroll
    for (int v = 0; v < 4; ++v)
#pragma unroll
        for (int i = 0; i < K; ++i) {
            const int j = lane + 32 * v + 128 * i;
            if (j < n4) keep[v][i] = load_x<kLoad>(row + j);
        }
    WelfordLN q[4];
#pragma unroll
    for (int v = 0; v < 4; ++v) q[v] = push_thread<K, false>(row, keep[v], lane + 32 * v, n4);
    float m, r;
    welford_finish(welford_packed_rows4(q, lane), n, eps, &m, &r);
    m = __shfl_sync(0xffffffffu, m, 0);
    r = __shfl_sync(0xffffffffu, r, 0);
    if (lane == 0) {
        mean[r_index] = m;
        rstd[r_index] = r;
    }
    float4* out = y + r_index * n4;
#pragma unroll
    for (int v = 0; v < 4; ++v)
#pragma unroll
        for (int i = 0; i < K; ++i) {
            const int j = lane + 32 * v + 128 * i;
            if (j < n4) store_y<kStore>(out + j, layer_norm_affine4(keep[v][i], gamma[j], beta[j], m, r));
        }
}

#define ROWS_WARP_HINTED(K, MIN_BLOCKS, L, S)                                                                  \
    extern "C" __global__ void __launch_bounds__(128, MIN_BLOCKS) rows_fused_warp##K##_l##L##s##S(              \
        const float4* x, const float4* gamma, const float4* beta, float4* y, float* mean, float* rstd, int rows, \
        int n, float eps) {                                                                                     \
        rows_warp_hinted<K, L, S>(x, gamma, beta, y, mean, rstd, rows, n, eps);                                 \
    }
#define ROWS_WARP_HINTS(K, MIN_BLOCKS)    \
    ROWS_WARP_HINTED(K, MIN_BLOCKS, 0, 0) \
    ROWS_WARP_HINTED(K, MIN_BLOCKS, 0, 1) \
    ROWS_WARP_HINTED(K, MIN_BLOCKS, 0, 2) \
    ROWS_WARP_HINTED(K, MIN_BLOCKS, 1, 0) \
    ROWS_WARP_HINTED(K, MIN_BLOCKS, 1, 1) \
    ROWS_WARP_HINTED(K, MIN_BLOCKS, 2, 0) \
    ROWS_WARP_HINTED(K, MIN_BLOCKS, 2, 1) \
    ROWS_WARP_HINTED(K, MIN_BLOCKS, 3, 0)
ROWS_WARP_HINTS(1, 10)
ROWS_WARP_HINTS(2, 8)
