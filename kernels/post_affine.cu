// The post's fast-statistics output pass, as its prototype launched it, for running beside split_affine.cu:
// statistics from torch.var_mean, then one scalar per thread, 256 threads per block, a block per 256-element tile
// of a row: y = gamma * ((x - mean) * (1 / sqrt(var + eps))) + beta.
//
// Why a second kernel: split_affine.cu is this book's version (float4 tiles of 1,024 elements, compiled with the
// book's --fmad=true); the post compiled its prototype with --fmad=false (each product and sum rounded on its
// own) and launched scalars. The plan compiles this file with --fmad=false (labkit.ops.split_stats.POST_OPTIONS),
// so the post's answers and times can be reproduced, not only ours.
//
// Contract: NOT reference-order (the statistics are var_mean's). Two geometries, the same arithmetic: flat (a
// row's tiles run together) and interleaved (blockIdx.x = row).
template <bool kInterleaved>
__device__ __forceinline__ void post_affine(const float* __restrict__ x, const float* __restrict__ var,
                                            const float* __restrict__ mean, const float* __restrict__ gamma,
                                            const float* __restrict__ beta, float* __restrict__ y, int n,
                                            float eps) {
    const int row = kInterleaved ? blockIdx.x : blockIdx.y;
    const int tile = kInterleaved ? blockIdx.y : blockIdx.x;
    const int j = tile * 256 + threadIdx.x;
    if (j >= n) return;
    const float r = 1.f / sqrtf(var[row] + eps);
    const size_t at = (size_t)row * n + j;
    const float z = (x[at] - mean[row]) * r;
    y[at] = gamma[j] * z + beta[j];
}

// Arguments of both: x [rows, n], var [rows], mean [rows], gamma [n], beta [n], y [rows, n], n, eps.
extern "C" __global__ void __launch_bounds__(256) post_affine_flat(
    const float* x, const float* var, const float* mean, const float* gamma, const float* beta, float* y, int n,
    float eps) {
    post_affine<false>(x, var, mean, gamma, beta, y, n, eps);
}

extern "C" __global__ void __launch_bounds__(256) post_affine_interleaved(
    const float* x, const float* var, const float* mean, const float* gamma, const float* beta, float* y, int n,
    float eps) {
    post_affine<true>(x, var, mean, gamma, beta, y, n, eps);
}
