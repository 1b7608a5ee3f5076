// Reference-order LayerNorm statistics: one (32, 4) block per row, exactly torch's vectorized-path order.
//
// Contract kept: thread t = lane + 32*warp reads float4 vectors t, t+128, ... of its row and pushes their four
// components in order; shuffle-down merge; the 4-warp tree; m2/N; rsqrtf(var + eps). Bit-identical to
// torch.native_layer_norm's mean and rstd wherever torch takes the vectorized path (labkit.ops.torch_path says
// where; labkit.core.validate checks the rest).
#include "welford_ln.cuh"

extern "C" __global__ void __launch_bounds__(128) reference_order_stats(
    const float* __restrict__ x,  // [rows, n], 16-byte aligned
    float* __restrict__ mean,     // [rows]
    float* __restrict__ rstd,     // [rows]
    int n,                        // normalized size, a multiple of 4
    float eps) {
    __shared__ float buf[12];
    const int tid = threadIdx.x + 32 * threadIdx.y;
    const float4* row = reinterpret_cast<const float4*>(x + (size_t)blockIdx.x * n);
    WelfordLN s{0.f, 0.f, 0.f};
    for (int j = tid; j < n / 4; j += 128) s = welford_push4(s, row[j]);
    s = welford_warp_reduce(s);
    s = welford_block_tree4(s, buf);
    if (tid == 0) welford_finish(s, n, eps, mean + blockIdx.x, rstd + blockIdx.x);
}
