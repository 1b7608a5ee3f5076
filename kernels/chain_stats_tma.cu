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
#include "welford_ln.cuh"
#include "async_copy.cuh"

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
                                            unsigned long long* full, unsigned long long* empty, int lane) {
#if CHAIN_VARIANT == 2
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
        v[i] = make_float4(__int_as_float(0x3f800000 + lane + i), 1.f, 2.f, 3.f);
        r[i] = make_float4(0.5f, 0.25f, 0.125f, 0.0625f);
    }
#else
    const int slot = st % kStages;
    mbar_wait(&full[slot], (st / kStages) & 1);
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
extern "C" __global__ void __launch_bounds__(64) chain_stats_tma(
    const __grid_constant__ TensorMap128 map,  // x as [rows][steps][4 warps][128 floats], innermost first
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
        for (int st = 0; st < stages; ++st) {
            const int slot = st % kStages;
            mbar_wait(&empty[slot], ((st / kStages) & 1) ^ 1);
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
#endif
        return;
    }

    // With short stages, stage st+1 is read into registers (and its slot released) before stage st's pushes,
    // so shared-memory latency overlaps the dependent chain; long stages would need too many registers for
    // two copies, and their one exposed read per stage costs little.
    WelfordLN s{0.f, 0.f, 0.f};
    float4 v[kSteps], r[kSteps];
    constexpr bool kPipelined = kSteps <= 8;
    if (kPipelined && stages > 0) fetch_stage(v, r, 0, ring, recs, full, empty, lane);
    for (int st = 0; st < stages; ++st) {
        float4 cv[kSteps], cr[kSteps];
        if (kPipelined) {
#pragma unroll
            for (int i = 0; i < kSteps; ++i) {
                cv[i] = v[i];
                cr[i] = r[i];
            }
            if (st + 1 < stages) fetch_stage(v, r, st + 1, ring, recs, full, empty, lane);
        } else {
            fetch_stage(cv, cr, st, ring, recs, full, empty, lane);
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
