// Dev probe (data/dev/chain_banks): alternative source forms of welford_push4_uncounted, each computing the same
// operations on the same operands in the same order (so the same bits), to see whether the form changes how
// ptxas allocates and orders the push's registers and so its cycles per push.
//   PUSH_FORM 0: kernels/welford_ln.cuh as committed.
//   PUSH_FORM 1: the m2 product written (v - new_mean) * delta: the same FFMA with its multiplicands swapped.
//   PUSH_FORM 2: each push's m2 update applied at the next push, after that push's new mean (software-pipelined
//                by one push; the m2 updates keep their order and operands). The last one is applied by flush.
//   PUSH_FORM 3: 2 and 1 together.
#pragma once
#include "welford_ln.cuh"

#ifndef PUSH_FORM
#define PUSH_FORM 0
#endif

struct PendingM2 {
    float d, e;
};

__device__ __forceinline__ void form_push(WelfordLN& a, PendingM2& p, float v, float r) {
#if PUSH_FORM == 0
    welford_push_uncounted(a, v, r);
#elif PUSH_FORM == 1
    float delta = v - a.mean;
    float new_mean = a.mean + delta * r;
    a.m2 = a.m2 + (v - new_mean) * delta;
    a.mean = new_mean;
#else
    float delta = v - a.mean;
    float new_mean = a.mean + delta * r;
#if PUSH_FORM == 2
    a.m2 = a.m2 + p.d * p.e;
#else
    a.m2 = a.m2 + p.e * p.d;
#endif
    p.d = delta;
    p.e = v - new_mean;
    a.mean = new_mean;
#endif
}

// The pipelined forms start with a pending update that adds exactly +0.0 (0 * 0): m2 starts at +0.0 and
// +0.0 + (+0.0) is +0.0, so the bits are those of no update.
__device__ __forceinline__ PendingM2 form_start() { return {0.f, 0.f}; }

__device__ __forceinline__ void form_flush(WelfordLN& a, PendingM2 p) {
#if PUSH_FORM == 2
    a.m2 = a.m2 + p.d * p.e;
#elif PUSH_FORM == 3
    a.m2 = a.m2 + p.e * p.d;
#endif
}

__device__ __forceinline__ void form_push4(WelfordLN& a, PendingM2& p, float4 v, float4 r) {
    form_push(a, p, v.x, r.x);
    form_push(a, p, v.y, r.y);
    form_push(a, p, v.z, r.z);
    form_push(a, p, v.w, r.w);
}
