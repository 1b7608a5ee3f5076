// Chain-parallel reference-order LayerNorm statistics, one warp of chains per block, fed by tensor-map TMA (sm_90)
// or by a cp.async ring (sm_80-89, which have no tensor maps or bulk copies).
//
// Contract kept: torch's vectorized-path statistics bit for bit (see chain_stats.cu for why spreading the
// chains keeps the bits). Why this variant: a warp's data is a 512-byte segment every 2048 bytes, and one
// 1-D bulk copy per segment makes the copy engine, not DRAM, the limit. A 4-D tensor map (floats in a
// segment, warp, step, row) fetches TMA_STEPS strided segments per copy (64 by default), so each block issues
// one copy per TMA_STEPS steps. The producer warp writes each stage's reciprocals next to its data, so the
// push loop reads only shared memory.
//
// Below sm_90 (chain_stats_ring): the same ring, the same consumer, the same layout of a stage in shared memory;
// each producer lane copies its 16 bytes of every step's segment with cp.async and the stage's barrier completes
// when every lane's copies have landed. The load scheme is not the chain's floor (the dependent pushes are), and
// the order of the pushes, hence the bits, does not depend on it.
//
// Why the consumer is pipelined by step, not by stage: one warp issues both its shared-memory reads and its
// dependent pushes, in order. Reading a whole stage before pushing it put 32 LDS.128 (about 4 issue cycles
// each) in series with the chain, about 2 extra cycles per push on a ~8-cycle chain. Reads issued kAhead steps
// ahead fill the chain's idle issue slots instead. The count FADD chain is left out of the loop for the same
// reason (welford_push_uncounted): every chain here has exactly 4 * N / 512 pushes.
//
// Requirement (the wrapper checks it): N a multiple of 512, so every chain has the same length (no ragged step).
//
// With -DLN_BF16 or -DLN_FP16 (dtype.cuh) x is of that type: a warp's segment of a step is 128 elements (256 bytes),
// the ring holds the elements as loaded, and the consumer converts its lane's 4 elements to float as it reads them,
// so the pushes, their order and the merges are the float32 kernel's on the converted values (torch's kernel for
// that type). The tensor map then has 2-byte elements; the cp.async ring copies 8 bytes a lane and step.
#include "welford_ln.cuh"
#include "async_copy.cuh"
#include "dtype.cuh"

#ifndef TMA_STEPS
#define TMA_STEPS 64  // steps per stage: one tensor copy of TMA_STEPS segments (the map's box must match)
#endif
#ifndef TMA_STAGES
#define TMA_STAGES 6  // ring depth: 192 KiB in flight per SM by default (96 KiB for a 2-byte type)
#endif
#ifndef TMA_AHEAD
#define TMA_AHEAD 8  // steps read from shared memory ahead of the one being pushed
#endif

namespace {
constexpr int kSteps = TMA_STEPS;
constexpr int kStages = TMA_STAGES;
// a stage holds kSteps segments back to back: a warp's 128 elements of a step each (dtype.cuh)
constexpr int kStageBytes = kSteps * LN_SEGMENT_BYTES;
constexpr int kRecBytes = kSteps * 16;  // 4 reciprocals per step, beside each stage's data
constexpr int kAhead = TMA_AHEAD;
static_assert(kSteps % kAhead == 0, "a stage must hold a whole number of prefetch windows");
}  // namespace

#ifndef CHAIN_VARIANT
#define CHAIN_VARIANT 0  // 1 = loads only, 2 = chains only: stage-breakdown experiments, never results
#endif

#if __CUDA_ARCH__ >= 900
#define CHAIN_TMA 1
// Arrivals that complete a full[] phase (besides the TMA bytes): every producer lane when the lanes also store
// the stage's reciprocals, else lane 0 alone.
constexpr unsigned kFullArrivals = CHAIN_VARIANT == 0 ? 32 : 1;
#else
#define CHAIN_TMA 0
// Every producer lane arrives once its copies have landed, and once more after its reciprocal stores.
constexpr unsigned kFullArrivals = CHAIN_VARIANT == 0 ? 64 : 32;
#endif

__device__ __forceinline__ void push4(WelfordLN& s, const float4& v, const float4& r) {
#if CHAIN_VARIANT == 1
    s.mean += v.x + v.y + v.z + v.w + r.x;
#else
    welford_push4_uncounted(s, v, r);
#endif
}

// Where the consumer reads one ring slot: this lane's vector of each step, and the step's 4 reciprocals.
struct Slot {
    const LN_VEC* seg;
    const float4* rec;
};

// The lane's 4 elements of `step` (converted to float as read, for a 2-byte type) and the step's reciprocals.
__device__ __forceinline__ void read_step(float4& v, float4& r, Slot at, int step) {
#if CHAIN_VARIANT != 2
    v = LN_LOAD4(at.seg[32 * step]);
#if CHAIN_VARIANT == 0
    r = at.rec[step];
#endif
#endif
}

// One stage of pushes. On entry qv/qr hold this stage's first kAhead steps; on exit, the next stage's
// (`next_full` is its barrier's shared-memory address; after the last stage the producer completes that
// barrier without data, so the wait needs no branch around it). kPartial: only the first `valid` steps are real.
template <bool kPartial>
__device__ __forceinline__ void consume_stage(WelfordLN& s, float4 (&qv)[kAhead], float4 (&qr)[kAhead], Slot cur,
                                              Slot next, unsigned next_full, unsigned next_parity, int valid) {
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
        const float4 v = qv[j % kAhead];
        const float4 r = qr[j % kAhead];
        const int ahead = j + kAhead;
        if (ahead < kSteps) {
            read_step(qv[j % kAhead], qr[j % kAhead], cur, ahead);
        } else {
#if CHAIN_VARIANT != 2
            if (ahead == kSteps) mbar_wait(next_full, next_parity);
#endif
            // After the last stage this reads a slot that holds no data for us: harmless and never pushed.
            read_step(qv[j % kAhead], qr[j % kAhead], next, ahead - kSteps);
        }
        if (!kPartial || j < valid) push4(s, v, r);
    }
}

// consume_stage on ring slot `slot`, then release the slot and step the ring position.
template <bool kPartial>
__device__ __forceinline__ void consume_slot(WelfordLN& s, float4 (&qv)[kAhead], float4 (&qr)[kAhead], int& slot,
                                             unsigned& parity, const LN_VEC* seg0, const float4* rec0,
                                             unsigned full0, unsigned empty0, int valid) {
    const int next = slot + 1 == kStages ? 0 : slot + 1;
    const unsigned next_parity = next == 0 ? parity ^ 1u : parity;
    consume_stage<kPartial>(s, qv, qr, Slot{seg0 + slot * (kStageBytes / LN_VEC_BYTES), rec0 + slot * kSteps},
                            Slot{seg0 + next * (kStageBytes / LN_VEC_BYTES), rec0 + next * kSteps}, full0 + 8 * next,
                            next_parity, valid);
#if CHAIN_VARIANT != 2
    mbar_arrive(empty0 + 8 * slot);  // every lane arrives once its own reads of the slot have been pushed
#endif
    slot = next;
    parity = next_parity;
}

#if !CHAIN_TMA
// sm_80: the producer lane's share of stage `st`: its 16 bytes of each step's 512-byte segment of warp w's chains,
// zeros past the row's last step (the consumer never pushes those), then one arrival once they have landed. For a
// 2-byte type its 8 bytes of each 256-byte segment, so that x need only be 8-byte aligned, as torch asks.
__device__ __forceinline__ void ring_copy_stage(unsigned char* dst, const LN_ELEM* __restrict__ x, int n, int w,
                                                int row, int st, int steps, int lane, unsigned long long* full) {
    const LN_ELEM* src = x + (size_t)row * n + 128 * w + 4 * lane;
    for (int k = 0; k < kSteps; ++k) {
        const int step = st * kSteps + k;
        const bool real = step < steps;
#ifdef LN_LOW_PRECISION
        cp_async8(dst + LN_SEGMENT_BYTES * k + LN_VEC_BYTES * lane, src + (size_t)512 * (real ? step : 0),
                  real ? 8u : 0u);
#else
        cp_async16(dst + 512 * k + 16 * lane, src + (size_t)512 * (real ? step : 0), real ? 16u : 0u);
#endif
    }
    cp_async_arrive(full);
}
#endif

// grid: (4, rows) — blockIdx.x is torch's warp index, blockIdx.y the row; block: 64 threads (warp 0 runs the
// chains, warp 1 produces). Dynamic shared memory: kStages * (kStageBytes + kRecBytes).
#if CHAIN_TMA
extern "C" __global__ void __launch_bounds__(64) chain_stats_tma(
    const __grid_constant__ TensorMap128 map,  // x as [rows][steps][4 warps][128 elements], innermost first
#else
extern "C" __global__ void __launch_bounds__(64) chain_stats_ring(
    const LN_ELEM* __restrict__ x,             // [rows, n], 16-byte aligned (8 for a 2-byte type)
#endif
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
            mbar_init(&full[i], kFullArrivals);
            mbar_init(&empty[i], 32);  // the consumer warp's lanes
        }
        mbar_init_fence();
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
            // Each lane's arrive releases its own stores (lane 0's arrive is the expect_tx below). Releasing them
            // all through __syncwarp and one arrive is ordered too, but compute-sanitizer's racecheck does not
            // model that chain and reported every reciprocal read (kernels/sanitize/tma_ring.cu: ring_ok).
            if (lane != 0) mbar_arrive(&full[slot]);
#endif
#if CHAIN_TMA
            if (lane == 0) {
                // A partial last stage still lands whole: the map's step dimension ends there, and TMA fills
                // out-of-range steps with zeros and counts their bytes.
                mbar_expect_tx(&full[slot], kStageBytes);
                tensor_copy_4d(ring + slot * kStageBytes, &map, 0, w, st * kSteps, row, &full[slot]);
            }
#else
#if CHAIN_VARIANT == 0
            if (lane == 0) mbar_arrive(&full[slot]);  // lane 0's too: here no expect_tx arrival stands for it
#endif
            ring_copy_stage(ring + slot * kStageBytes, x, n, w, row, st, steps, lane, &full[slot]);
#endif
        }
#endif
#if CHAIN_VARIANT != 2
        // Complete the barrier after the last stage without data: the consumer waits on it unconditionally.
#if CHAIN_TMA
        if ((kFullArrivals == 32 || lane == 0) && stages > 0) {
            mbar_wait(&empty[stages % kStages], ((stages / kStages) & 1) ^ 1);
            mbar_arrive(&full[stages % kStages]);
        }
#else
        if (stages > 0) {
            mbar_wait(&empty[stages % kStages], ((stages / kStages) & 1) ^ 1);
            for (unsigned i = 0; i < kFullArrivals / 32; ++i) mbar_arrive(&full[stages % kStages]);
        }
#endif
#endif
        return;
    }

    // The ring position advances by counters rather than st % kStages (a division per stage is ~40 issue
    // cycles of the warp that runs the chain), and barriers are addressed as 32-bit shared offsets.
    const unsigned full0 = smem_addr(full), empty0 = smem_addr(empty);
    const LN_VEC* const seg0 = reinterpret_cast<const LN_VEC*>(ring) + lane;
    const float4* const rec0 = reinterpret_cast<const float4*>(recs);
    WelfordLN s{0.f, 0.f, 0.f};
    float4 qv[kAhead], qr[kAhead];
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
        // Chains-only and loads-only variants push register values that the compiler cannot fold.
        qv[i] = make_float4(__int_as_float(0x3f800000 + lane + i), eps, 2.f * eps, 3.f * eps);
        qr[i] = make_float4(0.5f * eps, 0.25f * eps, 0.125f * eps, 0.0625f * eps);
    }
    int slot = 0;
    unsigned parity = 0;
    if (stages > 0) {
#if CHAIN_VARIANT != 2
        mbar_wait(full0, 0u);
#endif
#pragma unroll
        for (int i = 0; i < kAhead; ++i) read_step(qv[i], qr[i], Slot{seg0, rec0}, i);
    }
    // Full stages in a loop whose body has no branch but the barrier wait, so the compiler can hide the ring
    // bookkeeping in the chain's idle issue slots; a partial last stage after it.
    for (int st = 0; st < steps / kSteps; ++st)
        consume_slot<false>(s, qv, qr, slot, parity, seg0, rec0, full0, empty0, kSteps);
    if (steps % kSteps != 0) consume_slot<true>(s, qv, qr, slot, parity, seg0, rec0, full0, empty0, steps % kSteps);
    s.count = (float)(4 * steps);
    welford_row_merge_across_blocks(s, row, w, n, eps, warp_state, row_done, mean, rstd);
}
