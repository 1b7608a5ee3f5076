// Welford state, push and merge of torch's vectorized CUDA LayerNorm statistics (FP32).
//
// Contract kept: the expressions below are written exactly as torch's cuWelfordOnlineSum / cuWelfordCombine
// (aten/src/ATen/native/cuda/layer_norm_kernel.cu, verified on torch 2.5.1 by the post and 2.11.0 on the H200),
// so that with --fmad=true the compiler makes the same FMA contractions. Do not "simplify" them: rewriting
// u + d*r as fmaf(d, r, u) by hand, or reordering the merge, changes which operations round.
// Arithmetic follows the BSD-licensed PyTorch implementation (licenses/PYTORCH_LICENSE.txt).


struct WelfordLN {
    float mean;
    float m2;     // running sum of squared deviations (torch: sigma2)
    float count;  // kept as float, as torch does
};

// One sample into a chain. `inv_count` must equal the IEEE quotient 1.f/(count+1): callers either divide
// in place (torch's way) or read a table of correctly rounded reciprocals, which gives the same bits.
__device__ __forceinline__ WelfordLN welford_push(WelfordLN a, float v, float inv_count) {
    float delta = v - a.mean;
    float new_mean = a.mean + delta * inv_count;
    return {new_mean, a.m2 + delta * (v - new_mean), a.count + 1.f};
}

__device__ __forceinline__ WelfordLN welford_push(WelfordLN a, float v) {
    float new_count = a.count + 1.f;
    return welford_push(a, v, 1.f / new_count);
}

// torch's argument order: b is the caller's own state, a the one received (shuffled or from shared memory).
__device__ __forceinline__ WelfordLN welford_merge(WelfordLN b, WelfordLN a) {
    float delta = b.mean - a.mean;
    float count = a.count + b.count;
    if (count > 0.f) {
        float coef = 1.f / count;
        float na = a.count * coef;
        float nb = b.count * coef;
        return {na * a.mean + nb * b.mean, a.m2 + b.m2 + delta * delta * a.count * nb, count};
    }
    return {0.f, 0.f, count};
}

// torch's warp step: shuffle-down by 16, 8, 4, 2, 1; lane 0 ends with the warp's state.
__device__ __forceinline__ WelfordLN welford_warp_reduce(WelfordLN s) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        WelfordLN other{__shfl_down_sync(0xffffffffu, s.mean, offset),
                        __shfl_down_sync(0xffffffffu, s.m2, offset),
                        __shfl_down_sync(0xffffffffu, s.count, offset)};
        s = welford_merge(s, other);
    }
    return s;
}

// torch's inter-warp tree for 4 warps: warps 2,3 fold into 0,1, then 1 into 0. Call from every thread of a
// (32, 4) block; `buf` holds 12 floats. Only thread (0, 0)'s result is the block's.
__device__ __forceinline__ WelfordLN welford_block_tree4(WelfordLN s, float* buf) {
    const int lane = threadIdx.x;
    const int warp = threadIdx.y;
    float* mean_m2 = buf;      // 2 floats per slot
    float* count = buf + 8;    // torch puts counts after blockDim.y*2 floats; any layout gives the same values
#pragma unroll
    for (int offset = 2; offset > 0; offset >>= 1) {
        if (lane == 0 && warp >= offset && warp < 2 * offset) {
            const int slot = warp - offset;
            mean_m2[2 * slot] = s.mean;
            mean_m2[2 * slot + 1] = s.m2;
            count[slot] = s.count;
        }
        __syncthreads();
        if (lane == 0 && warp < offset) {
            s = welford_merge(s, WelfordLN{mean_m2[2 * warp], mean_m2[2 * warp + 1], count[warp]});
        }
        __syncthreads();
    }
    return s;
}

// torch: sigma2 / float(N) by IEEE division, then rsqrt(var + eps) (the hardware rsqrtf, as torch's compat::rsqrt).
__device__ __forceinline__ void welford_finish(WelfordLN s, int n, float eps, float* mean, float* rstd) {
    *mean = s.mean;
    *rstd = rsqrtf(s.m2 / (float)n + eps);
}
// Shared-memory mbarriers and bulk asynchronous copies (TMA) for sm_90, as thin inline-PTX wrappers.
// Why a header: the chain kernels (per-step copies and tensor-map copies) share them.


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

static __device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

static __device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" ::"r"(smem_addr(bar)),
        "r"(parity)
        : "memory");
}

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
// Chain-parallel reference-order LayerNorm statistics, one warp of chains per block, fed by tensor-map TMA.
//
// Contract kept: torch's vectorized-path statistics bit for bit (see chain_stats.cu for why spreading the
// chains keeps the bits). Why this variant: a warp's data is a 512-byte segment every 2048 bytes, and one
// 1-D bulk copy per segment makes the copy engine, not DRAM, the limit. A 4-D tensor map (floats in a
// segment, warp, step, row) fetches sixteen strided segments per copy, so 64 SMs each issue one copy per
// sixteen steps. The producer warp writes each stage's reciprocals next to its data, so the push loop reads
// only shared memory.
//
// Requirement (the wrapper checks it): N a multiple of 512, so every chain has the same length (no ragged step).

#ifndef TMA_STEPS
#define TMA_STEPS 16  // steps per stage: one tensor copy of TMA_STEPS x 512 bytes (the map's box must match)
#endif
#ifndef TMA_STAGES
#define TMA_STAGES 24  // ring depth: 192 KiB in flight per SM by default
#endif

namespace {
constexpr int kSteps = TMA_STEPS;
constexpr int kStages = TMA_STAGES;
constexpr int kStageBytes = kSteps * 512;
constexpr int kRecBytes = kSteps * 16;  // 4 reciprocals per step, beside each stage's data
}  // namespace

#ifndef CHAIN_VARIANT
#define CHAIN_VARIANT 0  // 1 = loads only, 2 = chains only: stage-breakdown experiments, never results
#endif

__device__ long long g_wait_dummy;
#define g_wait wait_acc
__device__ __forceinline__ void push4(WelfordLN& s, const float4& v, const float4& r) {
#if CHAIN_VARIANT == 1
    s.mean += v.x + v.y + v.z + v.w + r.x;
#else
    s = welford_push(s, v.x, r.x);
    s = welford_push(s, v.y, r.y);
    s = welford_push(s, v.z, r.z);
    s = welford_push(s, v.w, r.w);
#endif
}

// Stage `st` of this warp into registers; releases its ring slot to the producer once read.
__device__ __forceinline__ void fetch_stage(float4 (&v)[kSteps], float4 (&r)[kSteps], int st,
                                            const unsigned char* ring, const unsigned char* recs,
                                            unsigned long long* full, unsigned long long* empty, int lane,
                                            long long& wait_acc) {
#if CHAIN_VARIANT == 2
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
        v[i] = make_float4(__int_as_float(0x3f800000 + lane + i), 1.f, 2.f, 3.f);
        r[i] = make_float4(0.5f, 0.25f, 0.125f, 0.0625f);
    }
#else
    const int slot = st % kStages;
    long long t0 = clock64();
    mbar_wait(&full[slot], (st / kStages) & 1);
    g_wait += clock64() - t0;
    const float4* seg = reinterpret_cast<const float4*>(ring + slot * kStageBytes) + lane;
    const float4* rec = reinterpret_cast<const float4*>(recs + slot * kRecBytes);
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
        v[i] = seg[32 * i];
#if CHAIN_VARIANT == 0
        r[i] = rec[i];
#else
        r[i] = make_float4(0.5f, 0.25f, 0.125f, 0.0625f);
#endif
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[slot]);
#endif
}

// grid: (4, rows) — blockIdx.x is torch's warp index, blockIdx.y the row; block: 64 threads (warp 0 runs the
// chains, warp 1 produces). Dynamic shared memory: kStages * (kStageBytes + kRecBytes).
extern "C" __global__ void __launch_bounds__(64) chain_stats_probe(
    const __grid_constant__ TensorMap128 map,  // x as [rows][steps][4 warps][128 floats], innermost first
    long long* __restrict__ probe,
    float* __restrict__ warp_state,            // [rows, 4, 3] scratch: each warp's merged (mean, m2, count)
    unsigned* __restrict__ row_done,           // [rows] zero on entry; the last block resets it to zero
    float* __restrict__ mean,                  // [rows]
    float* __restrict__ rstd,                  // [rows]
    int n,                                     // normalized size, a multiple of 512
    float eps) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ unsigned long long full[kStages], empty[kStages];

    const int w = blockIdx.x;
    const int row = blockIdx.y;
    const int steps = n / 512;
    const int stages = (steps + kSteps - 1) / kSteps;
    unsigned char* ring = smem;
    unsigned char* recs = smem + kStages * kStageBytes;  // per slot: the 4 reciprocals of each of its steps
    const int lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        for (int i = 0; i < kStages; ++i) {
            mbar_init(&full[i], 1);
            mbar_init(&empty[i], 1);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (threadIdx.x >= 32) {
        // The producer warp computes each stage's reciprocals 1.f/(count+1) with IEEE division (the same
        // quotient torch's push divides in place), so the table needs no memory traffic; lane 0 issues the copy.
#if CHAIN_VARIANT != 2
        long long pw = 0, pt0 = clock64();
        for (int st = 0; st < stages; ++st) {
            const int slot = st % kStages;
            long long q0 = clock64();
            mbar_wait(&empty[slot], ((st / kStages) & 1) ^ 1);
            pw += clock64() - q0;
#if CHAIN_VARIANT == 0
            float* rs = reinterpret_cast<float*>(recs + slot * kRecBytes);
            for (int i = lane; i < 4 * kSteps; i += 32) rs[i] = 1.f / (float)(4 * st * kSteps + i + 1);
            __syncwarp();  // lane 0's arrive below releases the other lanes' stores too
#endif
            if (lane == 0) {
                // A partial last stage still lands whole: the map's step dimension ends there, and TMA fills
                // out-of-range steps with zeros and counts their bytes.
                mbar_expect_tx(&full[slot], kStageBytes);
                tensor_copy_4d(ring + slot * kStageBytes, &map, 0, w, st * kSteps, row, &full[slot]);
            }
        }
        if (lane == 0) {
            probe[8 * gridDim.y + 2 * (row * 4 + w)] = pw;
            probe[8 * gridDim.y + 2 * (row * 4 + w) + 1] = clock64() - pt0;
        }
#endif
        return;
    }

    // With short stages, stage st+1 is read into registers (and its slot released) before stage st's pushes,
    // so shared-memory latency overlaps the dependent chain; long stages would need too many registers for
    // two copies, and their one exposed read per stage costs little.
    WelfordLN s{0.f, 0.f, 0.f};
    long long wait_acc = 0, t_start = clock64();
    float4 v[kSteps], r[kSteps];
    constexpr bool kPipelined = kSteps <= 8;
    if (kPipelined && stages > 0) fetch_stage(v, r, 0, ring, recs, full, empty, lane, wait_acc);
    for (int st = 0; st < stages; ++st) {
        float4 cv[kSteps], cr[kSteps];
        if (kPipelined) {
#pragma unroll
            for (int i = 0; i < kSteps; ++i) {
                cv[i] = v[i];
                cr[i] = r[i];
            }
            if (st + 1 < stages) fetch_stage(v, r, st + 1, ring, recs, full, empty, lane, wait_acc);
        } else {
            fetch_stage(cv, cr, st, ring, recs, full, empty, lane, wait_acc);
        }
        if ((st + 1) * kSteps <= steps) {
#pragma unroll
            for (int i = 0; i < kSteps; ++i) push4(s, cv[i], cr[i]);
        } else {
#pragma unroll
            for (int i = 0; i < kSteps; ++i)  // unrolled and predicated: a dynamic index would spill cv to memory
                if (st * kSteps + i < steps) push4(s, cv[i], cr[i]);
        }
    }

    s = welford_warp_reduce(s);
    if (lane == 0) {
        float* out = warp_state + ((size_t)row * 4 + w) * 3;
        out[0] = s.mean;
        out[1] = s.m2;
        out[2] = s.count;
        probe[2 * (row * 4 + w)] = wait_acc;
        probe[2 * (row * 4 + w) + 1] = clock64() - t_start;
        __threadfence();  // publish this warp's state before counting it
    }
    if (lane == 0 && atomicAdd(&row_done[row], 1u) == 3u) {
        __threadfence();  // the other three warps' states are visible once their counts are
        const volatile float* st = warp_state + (size_t)row * 12;
        WelfordLN q[4];
        for (int i = 0; i < 4; ++i) q[i] = WelfordLN{st[3 * i], st[3 * i + 1], st[3 * i + 2]};
        // torch's tree for 4 warps: 2 -> 0 and 3 -> 1, then 1 -> 0, each as merge(own, received).
        q[0] = welford_merge(q[0], q[2]);
        q[1] = welford_merge(q[1], q[3]);
        q[0] = welford_merge(q[0], q[1]);
        welford_finish(q[0], n, eps, mean + row, rstd + row);
        row_done[row] = 0u;  // ready for the next launch (and graph replay)
    }
}
