// Dev variant of kernels/chain_stats_tma.cu: the mean chain and the m2 chain of each Welford chain on two warps.
//
// Why: ncu at L1/40 (data/dev/chain_ncu) put chain_stats_tma's one consumer warp at about 4.4 issue cycles and 4.0
// fixed-latency wait cycles per push against its 8-cycle critical path (FADD x - mean, FFMA the new mean): the
// warp issues the m2 update (FADD x - new mean, FFMA into m2) and the reads in order beside the mean chain, and
// loses about 1.2 cycles a push where they compete with it. Here warp 0 runs only the mean chain (per push FADD +
// FFMA, per step two LDS.128 and one STS.128 of the four new means) and warp 1 the m2 chain from the data and the
// published means (per push FADD delta, FADD x - new mean, FFMA), on its own scheduler. The same expressions on the
// same operands as welford_push_uncounted, so the same contractions and the same bits. Warp 2 produces, as before.
//
// Ring: SPLIT_STAGES data stages of kSteps steps (x and the stage's reciprocals, as chain_stats_tma), and two
// mean stages of kSteps steps (32 lanes x 4 new means a step). The mean warp waits for a mean slot to be released
// by the m2 warp before it writes it; the m2 warp waits for a data slot and its mean slot and releases both.
// Requirement (the wrapper checks it): N a multiple of 512.
#include "welford_ln.cuh"
#include "async_copy.cuh"

#ifndef SPLIT_STAGES
#define SPLIT_STAGES 4
#endif
#ifndef SPLIT_DELAY_STORE
#define SPLIT_DELAY_STORE 0  // 1: each step's new means stored one step later (data/dev/chain_split/README.md)
#endif

namespace {
constexpr int kSteps = 64;
constexpr int kStages = SPLIT_STAGES;
constexpr int kMeanStages = 2;
constexpr int kStageBytes = kSteps * 512;
constexpr int kRecBytes = kSteps * 16;
constexpr int kMeanBytes = kSteps * 512;
constexpr int kAhead = 8;
static_assert(kSteps % kAhead == 0, "a stage must hold a whole number of prefetch windows");
}  // namespace

// welford_push_uncounted's mean half: the same expressions, so --fmad=true contracts them the same way.
__device__ __forceinline__ float mean_push(float& mean, float v, float inv_count) {
    float delta = v - mean;
    float new_mean = mean + delta * inv_count;
    mean = new_mean;
    return new_mean;
}

// Its m2 half, from the mean before the push (`old`) and after it (`nm`).
__device__ __forceinline__ void m2_push(float& m2, float& old, float v, float nm) {
    float delta = v - old;
    m2 = m2 + delta * (v - nm);
    old = nm;
}

// The mean warp's stage: as chain_stats_tma's consume_stage, with the new means stored to `out` (this lane's
// float4 of step 0 of the mean slot; step j is 32 j further).
template <bool kPartial>
__device__ __forceinline__ void mean_stage(float& mean, float4 (&qv)[kAhead], float4 (&qr)[kAhead],
                                           const float4* cur_seg, const float4* cur_rec, const float4* nxt_seg,
                                           const float4* nxt_rec, unsigned next_full, unsigned next_parity,
                                           float4* out, int valid) {
#if SPLIT_DELAY_STORE
    float4 prev = make_float4(0.f, 0.f, 0.f, 0.f);
#endif
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
        const float4 v = qv[j % kAhead];
        const float4 r = qr[j % kAhead];
        const int ahead = j + kAhead;
        if (ahead < kSteps) {
            qv[j % kAhead] = cur_seg[32 * ahead];
            qr[j % kAhead] = cur_rec[ahead];
        } else {
            if (ahead == kSteps) mbar_wait(next_full, next_parity);
            qv[j % kAhead] = nxt_seg[32 * (ahead - kSteps)];  // after the last stage: read, never pushed
            qr[j % kAhead] = nxt_rec[ahead - kSteps];
        }
        if (!kPartial || j < valid) {
            float4 nm;
            nm.x = mean_push(mean, v.x, r.x);
            nm.y = mean_push(mean, v.y, r.y);
            nm.z = mean_push(mean, v.z, r.z);
            nm.w = mean_push(mean, v.w, r.w);
#if SPLIT_DELAY_STORE
            // store the step before's means: a store reads its registers late, and the next step's FADD would
            // otherwise wait to overwrite them (a write-after-read stall on the chain)
            if (j > 0) out[32 * (j - 1)] = prev;
            prev = nm;
#else
            out[32 * j] = nm;
#endif
        }
    }
#if SPLIT_DELAY_STORE
    const int last = kPartial ? valid - 1 : kSteps - 1;
    if (last >= 0) out[32 * last] = prev;
#endif
}

// The m2 warp's stage, reading ahead within the stage only (it runs faster than the mean warp).
template <bool kPartial>
__device__ __forceinline__ void m2_stage(float& m2, float& old, const float4* seg, const float4* means, int valid) {
    float4 qv[kAhead], qm[kAhead];
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
        qv[i] = seg[32 * i];
        qm[i] = means[32 * i];
    }
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
        const float4 v = qv[j % kAhead];
        const float4 nm = qm[j % kAhead];
        if (j + kAhead < kSteps) {
            qv[j % kAhead] = seg[32 * (j + kAhead)];
            qm[j % kAhead] = means[32 * (j + kAhead)];
        }
        if (!kPartial || j < valid) {
            m2_push(m2, old, v.x, nm.x);
            m2_push(m2, old, v.y, nm.y);
            m2_push(m2, old, v.z, nm.z);
            m2_push(m2, old, v.w, nm.w);
        }
    }
}

// grid: (4, rows) as chain_stats_tma; block: 96 threads (warp 0 the mean chains, warp 1 the m2 chains, warp 2
// produces). Dynamic shared memory: kStages * (kStageBytes + kRecBytes) + kMeanStages * kMeanBytes.
extern "C" __global__ void __launch_bounds__(96) chain_stats_split(
    const __grid_constant__ TensorMap128 map,  // x as [rows][steps][4 warps][128 floats], innermost first
    float* __restrict__ warp_state,            // [rows, 4, 3] scratch
    unsigned* __restrict__ row_done,           // [rows] zero on entry; the last block resets it to zero
    float* __restrict__ mean,                  // [rows]
    float* __restrict__ rstd,                  // [rows]
    int n,                                     // normalized size, a multiple of 512
    float eps) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ unsigned long long full[kStages], empty[kStages], mfull[kMeanStages], mempty[kMeanStages];

    const int w = blockIdx.x;
    const int row = blockIdx.y;
    const int steps = n / 512;
    const int stages = (steps + kSteps - 1) / kSteps;
    unsigned char* ring = smem;
    unsigned char* recs = smem + kStages * kStageBytes;
    float4* mring = reinterpret_cast<float4*>(recs + kStages * kRecBytes);
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;

    if (threadIdx.x == 0) {
        for (int i = 0; i < kStages; ++i) {
            mbar_init(&full[i], 32);   // the producer's lanes (lane 0's arrive is the expect_tx)
            mbar_init(&empty[i], 64);  // both consumer warps' lanes
        }
        for (int i = 0; i < kMeanStages; ++i) {
            mbar_init(&mfull[i], 32);   // the mean warp's lanes
            mbar_init(&mempty[i], 32);  // the m2 warp's lanes
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == 2) {  // producer: as chain_stats_tma's
        for (int st = 0; st < stages; ++st) {
            const int slot = st % kStages;
            mbar_wait(&empty[slot], ((st / kStages) & 1) ^ 1);
            float* rs = reinterpret_cast<float*>(recs + slot * kRecBytes);
            for (int i = lane; i < 4 * kSteps; i += 32) rs[i] = 1.f / (float)(4 * st * kSteps + i + 1);
            if (lane != 0) mbar_arrive(&full[slot]);
            if (lane == 0) {
                mbar_expect_tx(&full[slot], kStageBytes);
                tensor_copy_4d(ring + slot * kStageBytes, &map, 0, w, st * kSteps, row, &full[slot]);
            }
        }
        if (stages > 0) {  // complete the barrier after the last stage without data: the mean warp reads ahead
            mbar_wait(&empty[stages % kStages], ((stages / kStages) & 1) ^ 1);
            mbar_arrive(&full[stages % kStages]);
        }
        return;
    }

    const unsigned full0 = smem_addr(full), empty0 = smem_addr(empty);
    const unsigned mfull0 = smem_addr(mfull), mempty0 = smem_addr(mempty);
    const float4* const seg0 = reinterpret_cast<const float4*>(ring) + lane;
    const float4* const rec0 = reinterpret_cast<const float4*>(recs);
    const int full_stages = steps / kSteps;
    const int tail = steps % kSteps;

    if (warp == 0) {  // the mean chains
        float m = 0.f;
        float4 qv[kAhead], qr[kAhead];
        int slot = 0;
        unsigned parity = 0;
        if (stages > 0) {
            mbar_wait(full0, 0u);
#pragma unroll
            for (int i = 0; i < kAhead; ++i) {
                qv[i] = seg0[32 * i];
                qr[i] = rec0[i];
            }
        }
        for (int st = 0; st < stages; ++st) {
            const int next = slot + 1 == kStages ? 0 : slot + 1;
            const unsigned next_parity = next == 0 ? parity ^ 1u : parity;
            const int ms = st & 1;
            mbar_wait(mempty0 + 8 * ms, ((st >> 1) & 1) ^ 1);
            float4* out = mring + ms * (kMeanBytes / 16) + lane;
            const float4* cs = seg0 + slot * (kStageBytes / 16);
            const float4* cr = rec0 + slot * kSteps;
            const float4* ns = seg0 + next * (kStageBytes / 16);
            const float4* nr = rec0 + next * kSteps;
            if (st < full_stages)
                mean_stage<false>(m, qv, qr, cs, cr, ns, nr, full0 + 8 * next, next_parity, out, kSteps);
            else
                mean_stage<true>(m, qv, qr, cs, cr, ns, nr, full0 + 8 * next, next_parity, out, tail);
            mbar_arrive(empty0 + 8 * slot);
            mbar_arrive(mfull0 + 8 * ms);
            slot = next;
            parity = next_parity;
        }
        return;
    }

    // warp 1: the m2 chains, a stage behind the means at most
    float m2 = 0.f, old = 0.f;
    int slot = 0;
    unsigned parity = 0;
    for (int st = 0; st < stages; ++st) {
        const int ms = st & 1;
        mbar_wait(full0 + 8 * slot, parity);
        mbar_wait(mfull0 + 8 * ms, (st >> 1) & 1);
        const float4* seg = seg0 + slot * (kStageBytes / 16);
        const float4* means = mring + ms * (kMeanBytes / 16) + lane;
        if (st < full_stages)
            m2_stage<false>(m2, old, seg, means, kSteps);
        else
            m2_stage<true>(m2, old, seg, means, tail);
        mbar_arrive(empty0 + 8 * slot);
        mbar_arrive(mempty0 + 8 * ms);
        slot = slot + 1 == kStages ? 0 : slot + 1;
        parity = slot == 0 ? parity ^ 1u : parity;
    }
    WelfordLN s{old, m2, (float)(4 * steps)};  // `old`: the last new mean, the chain's mean
    welford_row_merge_across_blocks(s, row, w, n, eps, warp_state, row_done, mean, rstd);
}
