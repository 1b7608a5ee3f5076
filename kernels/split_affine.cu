// Split-statistics LayerNorm output: statistics come from elsewhere (torch.var_mean), then
// y = gamma * ((x - mean) * (1 / sqrt(var + eps))) + beta.
//
// Contract: NOT reference-order. var_mean reduces in a different tree, and this expression differs from
// torch's LayerNorm output; it exists to show what changing the statistics does to the answer.
// Two launch geometries with identical arithmetic: flat (tiles of one row run together) and row-interleaved
// (blockIdx.x = row, so neighbouring blocks share a gamma/beta tile).
template <bool kInterleaved>
__device__ __forceinline__ void split_affine(const float4* __restrict__ x, const float* __restrict__ var,
                                             const float* __restrict__ mean, const float4* __restrict__ gamma,
                                             const float4* __restrict__ beta, float4* __restrict__ y, int n4,
                                             float eps) {
    const int row = kInterleaved ? blockIdx.x : blockIdx.y;
    const int tile = kInterleaved ? blockIdx.y : blockIdx.x;
    const int j = tile * blockDim.x + threadIdx.x;
    if (j >= n4) return;
    const float r = 1.f / sqrtf(var[row] + eps);
    const float m = mean[row];
    const size_t at = (size_t)row * n4 + j;
    const float4 v = x[at];
    const float4 g = gamma[j];
    const float4 b = beta[j];
    float4 out;
    out.x = g.x * ((v.x - m) * r) + b.x;
    out.y = g.y * ((v.y - m) * r) + b.y;
    out.z = g.z * ((v.z - m) * r) + b.z;
    out.w = g.w * ((v.w - m) * r) + b.w;
    y[at] = out;
}

// Arguments of both: x [rows, n/4], var [rows], mean [rows], gamma [n/4], beta [n/4], y [rows, n/4], n/4, eps.
extern "C" __global__ void __launch_bounds__(256) split_affine_flat(
    const float4* x, const float* var, const float* mean, const float4* gamma, const float4* beta, float4* y,
    int n4, float eps) {
    split_affine<false>(x, var, mean, gamma, beta, y, n4, eps);
}

extern "C" __global__ void __launch_bounds__(256) split_affine_interleaved(
    const float4* x, const float* var, const float* mean, const float4* gamma, const float4* beta, float4* y,
    int n4, float eps) {
    split_affine<true>(x, var, mean, gamma, beta, y, n4, eps);
}
