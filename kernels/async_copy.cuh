// Shared-memory mbarriers and asynchronous copies, as thin inline-PTX wrappers: bulk and tensor-map copies (TMA)
// for sm_90, and 16-byte cp.async copies that complete a barrier for sm_80-89, which have neither.
// Why a header: the chain kernels (per-step copies, tensor-map copies, cp.async rings) share them.
// Why preprocessor branches rather than separate functions: the sm_90 text is left as it was, so its cubins are
// byte for byte those the committed runs measured (docs/decisions.md#chain_on_ampere).
#pragma once

// CUtensorMap is opaque: 128 bytes, 64-byte aligned (cuda.h is not available to NVRTC here).
struct alignas(64) TensorMap128 {
    unsigned long long opaque[16];
};

static __device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

static __device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

static __device__ __forceinline__ void mbar_expect_tx(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

// By shared-memory address: hot loops keep barrier addresses as 32-bit offsets, because converting a generic
// pointer costs several instructions each time.
static __device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
#if __CUDA_ARCH__ >= 900
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
#else
        "mbarrier.test_wait.parity.shared::cta.b64 done, [%0], %1;\n"  // try_wait is sm_90's
#endif
        "@!done bra WAIT_%=;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}

static __device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
    mbar_wait(smem_addr(bar), parity);
}

static __device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

static __device__ __forceinline__ void mbar_arrive(unsigned long long* bar) { mbar_arrive(smem_addr(bar)); }

static __device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(bar))
        : "memory");
}

static __device__ __forceinline__ void tensor_copy_4d(void* dst, const TensorMap128* map, int c0, int c1, int c2,
                                                      int c3, unsigned long long* bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
        : "memory");
}

// sm_80: one 16-byte copy to shared memory, bypassing L1 (.cg); `bytes` 0 fills the 16 bytes with zeros and reads
// nothing (a step past the row's end, as a tensor map fills out-of-range boxes).
static __device__ __forceinline__ void cp_async16(void* dst, const void* src, unsigned bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes)
                 : "memory");
}

#if defined(LN_BF16) || defined(LN_FP16) || defined(LN_X_BF16) || defined(LN_X_FP16)
// sm_80: one 8-byte copy to shared memory (through L1: .cg copies 16 bytes only), zero-filled as cp_async16; for
// 2-byte element types, whose rows torch asks to be 8-byte aligned only (x alone in the autocast build).
static __device__ __forceinline__ void cp_async8(void* dst, const void* src, unsigned bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes)
                 : "memory");
}
#endif

// sm_80: the barrier counts one arrival of this thread once all its earlier cp.async copies have landed (.noinc:
// the arrival is one of those the barrier was initialized to expect).
static __device__ __forceinline__ void cp_async_arrive(unsigned long long* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Makes barrier initialization visible to the copies that will complete it: the cluster-scope fence on sm_90 (bulk
// copies), the block barrier that follows it elsewhere.
static __device__ __forceinline__ void mbar_init_fence() {
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
