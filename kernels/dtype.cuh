// The element type a LayerNorm kernel reads x, gamma and beta as and writes y as: float32 by default, bfloat16 with
// -DLN_BF16, float16 with -DLN_FP16 (mean and rstd stay float in every build).
//
// Contract kept (torch's vectorized LayerNorm for T = BFloat16 / Half, docs/decisions.md#low_precision_reading): the
// same vec_size of 4 for every T, so a thread's vector is 4 elements (8 bytes for T of 2 bytes, one 64-bit load),
// each converted to float exactly; the arithmetic is the float32 kernel's on those floats; the output is converted
// to T once, at the store, rounding to nearest even (what c10::BFloat16 and c10::Half do on the device:
// __float2bfloat16 / __float2half, i.e. cvt.rn).
//
// Why inline PTX and not cuda_bf16.h / cuda_fp16.h: NVRTC 13.0 has no built-in copy of those headers (it finds them
// only on an include path into a CUDA toolkit, which a wheel's user may not have). The instructions below are the
// ones those headers' intrinsics emit on sm_80 and later (the oldest arch the kernels are built for):
// cvt.rn.bf16.f32 (__float2bfloat16_rn), cvt.rn.f16.f32 (__float2half_rn), cvt.f32.f16 (__half2float); bfloat16 to
// float is its 16 bits placed high in a float's 32 (__bfloat162float), exact for every value, NaN payloads included.
//
// In the default build the macros below are the float4 code as it was written before this header (LN_VEC is
// float4, LN_LOAD4 and LN_STORE4 leave their argument as it is, the byte counts are the literals the kernels had),
// so the preprocessed text of every default kernel, hence its cubin, is unchanged. Keep it so: NVRTC's machine code
// follows the text, not only its values (writing chain_stats_tma.cu's `kSteps * 512` through constexpr names of the
// same value changed its sm_90 cubin).
#pragma once

#if defined(LN_BF16) + defined(LN_FP16) + defined(LN_X_BF16) + defined(LN_X_FP16) > 1
#error "LN_BF16, LN_FP16, LN_X_BF16 and LN_X_FP16 each name a build: define one at most"
#endif

// The autocast build, -DLN_X_BF16 / -DLN_X_FP16: x (and dX) of T, everything else float (gamma, beta, y, dy,
// dgamma, dbeta). What autocast's float32 policy hands torch's float kernel is x converted to float (exact), and
// what it hands back is dX rounded to T (the cast's backward): reading x as T and rounding dX once at its store
// gives the same values without either cast (docs/decisions.md#autocast_build). The LN_X_* macros below name
// x's type; in the other builds they are the LN_* ones, so a kernel written with them is the same text there.
#if defined(LN_X_BF16) || defined(LN_X_FP16)
#define LN_X_ONLY 1
#endif
#if defined(LN_BF16) || defined(LN_X_BF16)
#define LN_T_BF16 1
#endif

#if defined(LN_BF16) || defined(LN_FP16) || defined(LN_X_ONLY)

__device__ __forceinline__ float ln_to_float(unsigned short bits) {
#ifdef LN_T_BF16
    return __uint_as_float((unsigned)bits << 16);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
#endif
}

__device__ __forceinline__ unsigned short ln_from_float(float f) {
    unsigned short bits;
#ifdef LN_T_BF16
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(f));
#else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(f));
#endif
    return bits;
}

__device__ __forceinline__ float4 ln_load4(uint2 v) {
    return make_float4(ln_to_float((unsigned short)(v.x & 0xffffu)), ln_to_float((unsigned short)(v.x >> 16)),
                       ln_to_float((unsigned short)(v.y & 0xffffu)), ln_to_float((unsigned short)(v.y >> 16)));
}

__device__ __forceinline__ uint2 ln_store4(float4 f) {
    return make_uint2((unsigned)ln_from_float(f.x) | ((unsigned)ln_from_float(f.y) << 16),
                      (unsigned)ln_from_float(f.z) | ((unsigned)ln_from_float(f.w) << 16));
}

#endif

#if defined(LN_BF16) || defined(LN_FP16)
#define LN_LOW_PRECISION 1
// Four elements of T: torch's aligned_vector<T, 4>, as one 8-byte word (elements 0 and 1 in x, low half first).
#define LN_VEC uint2
// One element of T, as its bits: for code that addresses x by element (the chain's copies move bytes only).
#define LN_ELEM unsigned short
#define LN_VEC_BYTES 8        // sizeof(LN_VEC), as a literal for constant expressions
#define LN_SEGMENT_BYTES 256  // a warp's 32 vectors: 128 elements
#define LN_LOAD4(v) ln_load4(v)
#define LN_STORE4(v) ln_store4(v)
#else
#define LN_VEC float4
#define LN_ELEM float
#define LN_VEC_BYTES 16
#define LN_SEGMENT_BYTES 512
#define LN_LOAD4(v) v
#define LN_STORE4(v) v
#endif

// x's vector, element, and their loads and stores (dX is stored as x's type).
#ifdef LN_X_ONLY
#define LN_X_VEC uint2
#define LN_X_ELEM unsigned short
#define LN_X_VEC_BYTES 8
#define LN_X_SEGMENT_BYTES 256
#define LN_X_LOAD4(v) ln_load4(v)
#define LN_X_STORE4(v) ln_store4(v)
#else
#define LN_X_VEC LN_VEC
#define LN_X_ELEM LN_ELEM
#define LN_X_VEC_BYTES LN_VEC_BYTES
#define LN_X_SEGMENT_BYTES LN_SEGMENT_BYTES
#define LN_X_LOAD4(v) LN_LOAD4(v)
#define LN_X_STORE4(v) LN_STORE4(v)
#endif

#if (defined(LN_LOW_PRECISION) || defined(LN_X_ONLY)) && defined(EPILOGUE)
#error "the epilogue (epilogue.cuh) reads and writes float: it has no bfloat16/float16 build yet"
#endif
