// The elementwise ops that follow LayerNorm, applied in its output pass: out = act(y) * scale + residual, each
// op computed as torch's own CUDA kernel computes it on float32 (opmath float), so that the fused output has the
// bits of the eager chain F.layer_norm -> activation -> * scale -> + residual.
//
// Contract kept, op by op (aten/src/ATen/native/cuda, torch 2.11):
// - GELU, exact (ActivationGeluKernel.cu): x * 0.5f * (1.f + erff(x * float(M_SQRT1_2)));
// - GELU, tanh: 0.5f * x * (1.f + tanhf(kBeta * (x + kKappa * (x * x * x)))), kBeta = float(M_SQRT2 * M_2_SQRTPI *
//   0.5), kKappa = float(0.044715);
// - ReLU (F.relu is clamp_min(x, 0), TensorCompare.cu's Min branch): x < 0 ? +0 : x, so NaN and -0.0 pass as they are;
// - SiLU (ActivationSiluKernel.cu): x / (1.f + expf(-x));
// - scale (mul by a Python scalar: the scalar rounded to float once, then one float product);
// - residual (add, alpha 1: a + 1 * b, whose fma is the plain sum).
// Each op's own expression is written as torch's source writes it, so --fmad=true contracts it as nvcc contracts
// torch's; between ops the product and the sum are intrinsics (__fmul_rn, __fadd_rn), which the compiler never
// fuses: in eager each op's result is rounded to float in memory before the next op reads it, and a product fused
// into the next op's sum (act(y) * scale + residual as one fma) would not round it.
//
// Compile-time options, all unset in the default build (the kernels' preprocessed text is then what it was before
// this header, and so are their cubins): EPILOGUE turns the output pass's epilogue on and adds two kernel
// parameters, `residual` (a float4 tensor shaped as y, read only with EPILOGUE_RESIDUAL) and `scale` (used only with
// EPILOGUE_SCALE); EPILOGUE_ACT picks the activation (1 GELU, 2 GELU tanh, 3 ReLU, 4 SiLU; 0 or unset: none).
#pragma once

#ifdef EPILOGUE
#define EPILOGUE_PARAMS , const float4* __restrict__ residual, float scale
#define EPILOGUE_ARGS , residual, scale
// the residual of the output pass's row `offset` (in float4s), as the row's y pointer is offset
#define EPILOGUE_ROW_ARGS(offset) , residual + (offset), scale
// y's float4 at index `j` of a row (or of the tensor) whose residual pointer is `residual`
#define EPILOGUE4(value, j) epilogue4(value, residual, j, scale)

#ifndef EPILOGUE_ACT
#define EPILOGUE_ACT 0
#endif

__device__ __forceinline__ float epilogue_activation(float x) {
#if EPILOGUE_ACT == 1
    constexpr float kAlpha = 0.70710678118654752440;  // M_SQRT1_2
    return x * 0.5f * (1.f + erff(x * kAlpha));
#elif EPILOGUE_ACT == 2
    constexpr float kBeta = 1.41421356237309504880 * 1.12837916709551257390 * 0.5f;  // M_SQRT2 * M_2_SQRTPI * 0.5
    constexpr float kKappa = 0.044715;
    const float x_cube = x * x * x;
    const float inner = kBeta * (x + kKappa * x_cube);
    return 0.5f * x * (1.f + tanhf(inner));
#elif EPILOGUE_ACT == 3
    return x < 0.f ? 0.f : x;
#elif EPILOGUE_ACT == 4
    return x / (1.f + expf(-x));
#else
    return x;
#endif
}

__device__ __forceinline__ float epilogue1(float y, float residual, float scale) {
    float v = epilogue_activation(y);
#ifdef EPILOGUE_SCALE
    v = __fmul_rn(v, scale);
#endif
#ifdef EPILOGUE_RESIDUAL
    v = __fadd_rn(v, residual);
#endif
    return v;
}

__device__ __forceinline__ float4 epilogue4(float4 y, const float4* __restrict__ residual, size_t j, float scale) {
#ifdef EPILOGUE_RESIDUAL
    const float4 r = residual[j];
#else
    const float4 r = make_float4(0.f, 0.f, 0.f, 0.f);  // not read: epilogue1 adds no residual
#endif
    return make_float4(epilogue1(y.x, r.x, scale), epilogue1(y.y, r.y, scale), epilogue1(y.z, r.z, scale),
                       epilogue1(y.w, r.w, scale));
}
#else
#define EPILOGUE_PARAMS
#define EPILOGUE_ARGS
#define EPILOGUE_ROW_ARGS(offset)
#define EPILOGUE4(value, j) value
#endif
