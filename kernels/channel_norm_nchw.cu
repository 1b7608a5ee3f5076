// Small-channel normalization straight on NCHW: one thread per (sample, spatial position) group reduces over the
// C channels, reading them at stride H*W, then writes y = x / scale for the same channels.
//
// Why this order: eager torch computes the channel reduction in aten's Reduce.cuh with the "vectorize along
// output" configuration (the reduced dim is not the fastest-moving one). There, for each output, S warps split
// the channels (warp w takes channels w, w+S, w+2S, ...; S = block_height when each thread would still sum at least
// min(16*block_height, 256) values, else 1), each thread keeps vt0 = 4 accumulators (its m-th value goes to
// accumulator m % 4), folds them as ((a0+a1)+a2)+a3, and the warps meet in a shared-memory tree
// (offset S/2, S/4, ..., 1). labkit.ops.channel_norm.reduction_plan computes S exactly as setReduceConfig does;
// this kernel reproduces that tree per output, so its sums carry the same bits. The arithmetic of each eager op
// is rounded separately, so every step here uses an explicitly rounded intrinsic: --fmad=true must not contract
// x*x + acc where torch rounded x**2 in its own kernel (RMS), and must contract it where torch's NormTwoOps
// writes acc + x*x in one expression (L2, see NORM_L2_FMA / NORM_L2_MUL).
//
// Families (KernelBench L1/36, L1/38, L1/39):
//   RMS       x / sqrt(mean(x**2, dim=1) + eps)   mean = sum * factor (MeanOps' project), factor from the host
//   MEAN_ABS  x / mean(abs(x), dim=1)
//   L2        x / norm(x, p=2, dim=1)             sum via fma(x, x, acc) (L2) or rounded x*x then add (L2_MUL)
#define FAMILY_RMS 0
#define FAMILY_MEAN_ABS 1
#define FAMILY_L2 2
#define FAMILY_L2_MUL 3

template <int FAMILY>
__device__ __forceinline__ float accumulate(float acc, float v) {
    if (FAMILY == FAMILY_RMS) return __fadd_rn(acc, __fmul_rn(v, v));
    if (FAMILY == FAMILY_MEAN_ABS) return __fadd_rn(acc, fabsf(v));
    if (FAMILY == FAMILY_L2) return __fmaf_rn(v, v, acc);
    return __fadd_rn(acc, __fmul_rn(v, v));
}

template <int FAMILY>
__device__ __forceinline__ float scale_of(float sum, float factor, float eps) {
    if (FAMILY == FAMILY_RMS) return __fsqrt_rn(__fadd_rn(__fmul_rn(sum, factor), eps));
    if (FAMILY == FAMILY_MEAN_ABS) return __fmul_rn(sum, factor);
    return __fsqrt_rn(sum);
}

// The per-output tree described above, for one float (VEC lanes handled by the caller in lockstep).
template <int FAMILY, int S, int VEC>
__device__ __forceinline__ void channel_sums(const float* __restrict__ x, size_t base, int c_count, size_t hw,
                                             float (&total)[VEC]) {
    float acc[S][4][VEC];
#pragma unroll
    for (int w = 0; w < S; ++w)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int v = 0; v < VEC; ++v) acc[w][j][v] = 0.f;
    for (int m0 = 0; S * m0 < c_count; m0 += 4) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
            for (int w = 0; w < S; ++w) {
                const int c = w + S * (m0 + j);
                if (c < c_count) {
                    const size_t at = base + (size_t)c * hw;
                    if (VEC == 4) {
                        const float4 q = __ldg(reinterpret_cast<const float4*>(x + at));
                        acc[w][j][0] = accumulate<FAMILY>(acc[w][j][0], q.x);
                        acc[w][j][VEC > 1 ? 1 : 0] = accumulate<FAMILY>(acc[w][j][VEC > 1 ? 1 : 0], q.y);
                        acc[w][j][VEC > 2 ? 2 : 0] = accumulate<FAMILY>(acc[w][j][VEC > 2 ? 2 : 0], q.z);
                        acc[w][j][VEC > 3 ? 3 : 0] = accumulate<FAMILY>(acc[w][j][VEC > 3 ? 3 : 0], q.w);
                    } else {
                        acc[w][j][0] = accumulate<FAMILY>(acc[w][j][0], __ldg(x + at));
                    }
                }
            }
        }
    }
    float warp_sum[S][VEC];
#pragma unroll
    for (int w = 0; w < S; ++w)
#pragma unroll
        for (int v = 0; v < VEC; ++v)
            warp_sum[w][v] = __fadd_rn(__fadd_rn(__fadd_rn(acc[w][0][v], acc[w][1][v]), acc[w][2][v]), acc[w][3][v]);
#pragma unroll
    for (int off = S / 2; off > 0; off /= 2)
#pragma unroll
        for (int w = 0; w < off; ++w)
#pragma unroll
            for (int v = 0; v < VEC; ++v) warp_sum[w][v] = __fadd_rn(warp_sum[w][v], warp_sum[w + off][v]);
#pragma unroll
    for (int v = 0; v < VEC; ++v) total[v] = warp_sum[0][v];
}

// groups = N * hw / VEC; each thread owns VEC consecutive spatial positions of one sample (hw % VEC == 0).
template <int FAMILY, int S, int VEC>
__device__ __forceinline__ void channel_norm(const float* __restrict__ x, float* __restrict__ y, long long groups,
                                             int c_count, long long hw, float factor, float eps) {
    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= groups) return;
    const long long per_sample = hw / VEC;
    const long long n = g / per_sample;
    const size_t base = (size_t)n * c_count * hw + (size_t)(g - n * per_sample) * VEC;
    float sum[VEC];
    channel_sums<FAMILY, S, VEC>(x, base, c_count, (size_t)hw, sum);
    float scale[VEC];
#pragma unroll
    for (int v = 0; v < VEC; ++v) scale[v] = scale_of<FAMILY>(sum[v], factor, eps);
    // Second read of x: this thread's C x VEC floats were just read by its block, so they come from L1/L2.
    for (int c = 0; c < c_count; ++c) {
        const size_t at = base + (size_t)c * hw;
        if (VEC == 4) {
            const float4 q = __ldg(reinterpret_cast<const float4*>(x + at));
            float4 r;
            r.x = __fdiv_rn(q.x, scale[0]);
            r.y = __fdiv_rn(q.y, scale[VEC > 1 ? 1 : 0]);
            r.z = __fdiv_rn(q.z, scale[VEC > 2 ? 2 : 0]);
            r.w = __fdiv_rn(q.w, scale[VEC > 3 ? 3 : 0]);
            *reinterpret_cast<float4*>(y + at) = r;
        } else {
            y[at] = __fdiv_rn(__ldg(x + at), scale[0]);
        }
    }
}

#define NCHW_KERNEL(NAME, FAMILY, S, VEC)                                                                        \
    extern "C" __global__ void __launch_bounds__(128) NAME(const float* __restrict__ x, float* __restrict__ y,   \
                                                           long long groups, int c_count, long long hw,          \
                                                           float factor, float eps) {                            \
        channel_norm<FAMILY, S, VEC>(x, y, groups, c_count, hw, factor, eps);                                    \
    }

#define NCHW_SPLITS(FAM, FAMILY, VEC)                        \
    NCHW_KERNEL(nchw_##FAM##_s1_v##VEC, FAMILY, 1, VEC)      \
    NCHW_KERNEL(nchw_##FAM##_s2_v##VEC, FAMILY, 2, VEC)      \
    NCHW_KERNEL(nchw_##FAM##_s4_v##VEC, FAMILY, 4, VEC)      \
    NCHW_KERNEL(nchw_##FAM##_s8_v##VEC, FAMILY, 8, VEC)      \
    NCHW_KERNEL(nchw_##FAM##_s16_v##VEC, FAMILY, 16, VEC)

#define NCHW_FAMILY(FAM, FAMILY) NCHW_SPLITS(FAM, FAMILY, 1) NCHW_SPLITS(FAM, FAMILY, 4)

NCHW_FAMILY(rms, FAMILY_RMS)
NCHW_FAMILY(mean_abs, FAMILY_MEAN_ABS)
NCHW_FAMILY(l2, FAMILY_L2)
NCHW_FAMILY(l2_mul, FAMILY_L2_MUL)
