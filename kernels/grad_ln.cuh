// torch's LayerNorm backward arithmetic (aten/src/ATen/native/cuda/layer_norm_kernel.cu at v2.11.0, float32), one
// helper per step, each rounding written out with an intrinsic so that nvcc's --fmad=true can contract nothing
// on its own. What each helper keeps was read from torch's own sm_90 SASS (data/sass/, labkit.studies
// .backward_contract): layer_norm_grad_input_kernel_vectorized<float, float, false> and
// GammaBetaBackwardCUDAKernelTemplate<float, float, 32, G, 8G, ...>. torch's kernels for bfloat16/float16 run the
// same source on values converted to float as loaded (docs/decisions.md#low_precision_reading): the 2-byte builds
// of the kernels that include this header (kernels/dtype.cuh) call these helpers on those floats; that their bits
// match torch's is what tests/test_gpu_low_precision.py checks (their SASS was not read).
#pragma once

// One element of a dX row's two running sums (torch's stats_x1, stats_x2). torch's compiler computes dy * gamma
// once and uses the rounded product twice: stats_x1 += that (FADD, not FFMA), and stats_x2 = fma(rstd,
// round(that * round(x - mean)), stats_x2). With no gamma, torch multiplies by 1.0: pass ones.
__device__ __forceinline__ void grad_push(float& s1, float& s2, float x, float dy, float g, float mean, float rstd) {
    const float gp = __fmul_rn(dy, g);
    s1 = __fadd_rn(s1, gp);
    s2 = __fmaf_rn(rstd, __fmul_rn(gp, __fsub_rn(x, mean)), s2);
}

__device__ __forceinline__ void grad_push4(float& s1, float& s2, float4 x, float4 dy, float4 g, float mean,
                                           float rstd) {
    grad_push(s1, s2, x.x, dy.x, g.x, mean, rstd);
    grad_push(s1, s2, x.y, dy.y, g.y, mean, rstd);
    grad_push(s1, s2, x.z, dy.z, g.z, mean, rstd);
    grad_push(s1, s2, x.w, dy.w, g.w, mean, rstd);
}

// torch's WarpReduceSum (block_reduce.cuh): shuffle-down by 16, 8, 4, 2, 1, val += received; lane 0 holds the sum.
__device__ __forceinline__ float grad_warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, offset));
    return v;
}

// The second step of torch's BlockReduceSum for a 128-thread block, on the four warps' sums: warp 0's lanes hold
// w0..w3 and zeros, and WarpReduceSum adds them: each w gains three +0.0 additions (offsets 16, 8, 4: they turn
// -0.0 into +0.0), then (w0 + w2) + (w1 + w3).
__device__ __forceinline__ float grad_block_sum4(float w0, float w1, float w2, float w3) {
    const float z = 0.f;
    w0 = __fadd_rn(__fadd_rn(__fadd_rn(w0, z), z), z);
    w1 = __fadd_rn(__fadd_rn(__fadd_rn(w1, z), z), z);
    w2 = __fadd_rn(__fadd_rn(__fadd_rn(w2, z), z), z);
    w3 = __fadd_rn(__fadd_rn(__fadd_rn(w3, z), z), z);
    return __fadd_rn(__fadd_rn(w0, w2), __fadd_rn(w1, w3));
}

// torch's dX for one element, with fH = (float)N, term1 = (1/fH) * rstd, and the row's reduced sums:
// f = fH * gamma * dy - (x - mean) * rstd * s2 - s1, times term1; torch's SASS fuses the first product into the
// subtraction of the (rounded) second: fma(dy, round(fH * gamma), -round(s2 * round(rstd * round(x - mean)))).
__device__ __forceinline__ float grad_input(float x, float dy, float g, float mean, float rstd, float s1, float s2,
                                            float fh, float term1) {
    const float t = __fmul_rn(s2, __fmul_rn(rstd, __fsub_rn(x, mean)));
    const float f = __fmaf_rn(dy, __fmul_rn(fh, g), -t);
    return __fmul_rn(term1, __fsub_rn(f, s1));
}

__device__ __forceinline__ float4 grad_input4(float4 x, float4 dy, float4 g, float mean, float rstd, float s1,
                                              float s2, float fh, float term1) {
    return make_float4(grad_input(x.x, dy.x, g.x, mean, rstd, s1, s2, fh, term1),
                       grad_input(x.y, dy.y, g.y, mean, rstd, s1, s2, fh, term1),
                       grad_input(x.z, dy.z, g.z, mean, rstd, s1, s2, fh, term1),
                       grad_input(x.w, dy.w, g.w, mean, rstd, s1, s2, fh, term1));
}

// One row's contribution to a column's dgamma and dbeta (torch's GammaBeta template): dg = fma(rstd,
// round(dy * round(x - mean)), dg); db = db + dy.
__device__ __forceinline__ void gamma_beta_push(float& dg, float& db, float x, float dy, float mean, float rstd) {
    dg = __fmaf_rn(rstd, __fmul_rn(dy, __fsub_rn(x, mean)), dg);
    db = __fadd_rn(db, dy);
}
