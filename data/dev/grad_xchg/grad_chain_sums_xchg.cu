// Dev variant (data/dev/grad_xchg; not in the product, not yet run): kernels/grad_chain_sums.cu's split schedule
// with the products reaching the chain lanes through a per-warp shared-memory tile (one STS.128 and S LDS.128 per
// group of S steps) instead of 4 (S - 1) shuffles. Why: ncu at 1 x 2^24 (data/dev/grad_ncu) put the shuffles first
// among the split8 consumer warps' stall samples (3,302 of 8,167: their own issue), and the chain adds next, a
// quarter of them waiting on shuffled values. Ring, producer, tree and contract unchanged.
#include "async_copy.cuh"
#include "grad_ln.cuh"

namespace {
// Steps per stage and ring depth per split: every split keeps 4 stages of 48 KiB or more in flight (192 KiB of
// shared memory per block); a stage is one tensor copy of kSteps x (512 / S) bytes per array (x, dy, gamma).
template <int S>
struct GradGeometry {
    static constexpr int kChains = 32 / S;                  // chains (lanes that push) per block
    static constexpr int kSteps = 32 * S;
    static constexpr int kStages = 4;
    static constexpr int kArrayBytes = kSteps * 512 / S;
    static constexpr int kStageBytes = 3 * kArrayBytes;
    static constexpr int kAhead = 4;  // steps read from shared memory ahead of the one being accumulated
    static_assert(kSteps % kAhead == 0, "a stage must hold a whole number of prefetch windows");
};
}  // namespace

// The split schedule, for S = 2, 4 or 8 (32 / S chains per block, 4 S blocks per row; S's geometry, maps and
// ring): one warp per sum, and each warp instruction doing the products of S steps. Why: one warp pushing both sums
// issues ~34 instructions per step of 4 elements against the 16 cycles of either dependent chain (above). Here
// lane l holds chain l % C's step S i + l / C (C = 32 / S chains; one contiguous
// 512-byte read per array); the other lanes' products reach the chain lanes (l < C) by S - 1 shuffles each, and
// those lanes push them in torch's order. Per S steps: the s1 warp issues 2 reads + 4 products + 4 (S - 1)
// shuffles + 4 S adds, the s2 warp 3 reads + 12 products + 4 (S - 1) shuffles + 4 S FMAs: 8-14 a step, under the
// chain's 16 cycles. A larger S spreads a row's chains over more SMs, each then carrying fewer chains' bytes through
// its shared memory (the TMA's writes and both warps' reads).
// Measured on the H200 (torch 2.11; data/dev/grad_pairs: the whole backward under graph replay, bits equal at all 14
// shapes and every split), against the one-warp S = 2 served before: 1 x 2^24 630 -> 520 us (S = 8), 2 x 2^23
// 346 -> 290, 4 x 2^22 198 -> 170, 8 x 2^21 127 -> 117 (S = 4), 16 x 2^22 350 -> 350 (S = 2, where x and dy's bytes
// set the pace). The S = 2 form alone times as the one-warp one, so that warp's issue was not the bound; the sums
// still take about 1.6x their chain at 4 cycles an element. Not the copy engine (cp.async in its place timed the
// same) nor one SM's bytes alone (four times fewer per SM bought 17%); ncu at 1 x 2^24 puts the shuffles' issue
// first among the consumer warps' stalls (data/dev/grad_ncu).
// Contract kept: the same values as grad_push, pushed in the same order, into the same tree.
namespace {
constexpr int kGroupsAhead = 2;  // groups of S steps read from shared memory ahead of the one pushed
constexpr unsigned kAll = 0xffffffffu;
template <int S>
struct SplitGeometry {
    using G = GradGeometry<S>;
    static constexpr int kChains = G::kChains;       // 32 / S
    static constexpr int kGroups = G::kSteps / S;    // groups of S steps per stage: 32
    static_assert(kGroups % kGroupsAhead == 0, "a stage must hold a whole number of prefetch windows");
};
}  // namespace

// A lane's reads of group i in a slot: float4 32 i + lane of each array (the s1 warp reads no x).
template <int S, int kSum>
__device__ __forceinline__ void split_read(float4& vx, float4& vd, float4& vg, const float4* at, int group) {
    constexpr int kArray = GradGeometry<S>::kArrayBytes / 16;
    if (kSum == 2) vx = at[32 * group];
    vd = at[kArray + 32 * group];
    vg = at[2 * kArray + 32 * group];
}

// One group: push the one the q slot holds, then refill the slot with group `ahead`'s reads from `at`. The products
// reach the chain lanes through this warp's tile `t` (32 float4, one of two, alternating by group): each lane
// stores its (chain l % C, step S i + l / C) products, and chain lane c reads its S steps' back, in order.
template <int S, int kSum, bool kPartial>
__device__ __forceinline__ void split_group(float& s, float4& qx, float4& qd, float4& qg, const float4* at,
                                            int ahead, int valid, float m, float r, float4* t, int lane) {
    constexpr int C = 32 / S;
    const float4 vx = qx, vd = qd, vg = qg;
    split_read<S, kSum>(qx, qd, qg, at, ahead);
    const float d[4] = {vd.x, vd.y, vd.z, vd.w}, g[4] = {vg.x, vg.y, vg.z, vg.w}, x[4] = {vx.x, vx.y, vx.z, vx.w};
    float p[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float gp = __fmul_rn(d[k], g[k]);
        p[k] = kSum == 1 ? gp : __fmul_rn(gp, __fsub_rn(x[k], m));
    }
    t[lane] = make_float4(p[0], p[1], p[2], p[3]);
    __syncwarp();  // every lane's products stored before any lane reads; the other tile takes the next group's
    float4 q[S];
#pragma unroll
    for (int j = 0; j < S; ++j) q[j] = t[j * C + lane % C];
#pragma unroll
    for (int j = 0; j < S; ++j) {
        if (!kPartial || j < valid) {
            const float v[4] = {q[j].x, q[j].y, q[j].z, q[j].w};
#pragma unroll
            for (int k = 0; k < 4; ++k) s = kSum == 1 ? __fadd_rn(s, v[k]) : __fmaf_rn(r, v[k], s);
        }
    }
}

// One stage of groups: on entry the q arrays hold its first kGroupsAhead groups; on exit, the next stage's (after
// waiting on the next slot's full barrier). kPartial: the last stage, `valid` of its steps existing. The groups
// run kUnroll at a time, the last kUnroll peeled (they read ahead from the next slot): at S = 8 a whole stage
// unrolled is ~2,400 instructions per warp, and the two warps' loops would crowd the instruction cache.
template <int S, int kSum, bool kPartial>
__device__ __forceinline__ void split_stage(float& s, float4 (&qx)[kGroupsAhead], float4 (&qd)[kGroupsAhead],
                                            float4 (&qg)[kGroupsAhead], const float4* cur, const float4* nxt,
                                            unsigned next_full, unsigned next_parity, int valid, float m, float r,
                                            float4* tiles, int lane) {
    constexpr int kGroups = SplitGeometry<S>::kGroups, kUnroll = 8;
    static_assert(kGroups % kUnroll == 0 && kUnroll % kGroupsAhead == 0 && kUnroll >= kGroupsAhead,
                  "whole unrolled windows, each a whole number of prefetch windows");
#pragma unroll 1
    for (int i0 = 0; i0 < kGroups - kUnroll; i0 += kUnroll) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
            split_group<S, kSum, kPartial>(s, qx[u % kGroupsAhead], qd[u % kGroupsAhead], qg[u % kGroupsAhead],
                                           cur, i0 + u + kGroupsAhead, valid - S * (i0 + u), m, r,
                                           tiles + 32 * (u & 1), lane);
    }
    constexpr int i0 = kGroups - kUnroll;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int ahead = i0 + u + kGroupsAhead;
        if (ahead < kGroups) {
            split_group<S, kSum, kPartial>(s, qx[u % kGroupsAhead], qd[u % kGroupsAhead], qg[u % kGroupsAhead],
                                           cur, ahead, valid - S * (i0 + u), m, r, tiles + 32 * (u & 1), lane);
        } else {
            if (ahead == kGroups) mbar_wait(next_full, next_parity);
            split_group<S, kSum, kPartial>(s, qx[u % kGroupsAhead], qd[u % kGroupsAhead], qg[u % kGroupsAhead],
                                           nxt, ahead - kGroups, valid - S * (i0 + u), m, r,
                                           tiles + 32 * (u & 1), lane);
        }
    }
}

// One consumer warp's pass over the ring (grad_stage's structure, by groups of S steps).
template <int S, int kSum>
__device__ __forceinline__ float split_sums(const unsigned char* ring, unsigned full0, unsigned empty0, int steps,
                                            int lane, float m, float r, float4* tiles) {
    using G = GradGeometry<S>;
    const int stages = (steps + G::kSteps - 1) / G::kSteps;
    float s = 0.f;
    float4 qx[kGroupsAhead], qd[kGroupsAhead], qg[kGroupsAhead];
#pragma unroll
    for (int i = 0; i < kGroupsAhead; ++i) qx[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    const auto slot_at = [&](int slot) {
        return reinterpret_cast<const float4*>(ring + slot * G::kStageBytes) + lane;
    };
    int slot = 0;
    unsigned parity = 0;
    if (stages > 0) {
        mbar_wait(full0, 0u);
#pragma unroll
        for (int i = 0; i < kGroupsAhead; ++i) split_read<S, kSum>(qx[i], qd[i], qg[i], slot_at(0), i);
    }
    for (int st = 0; st < stages; ++st) {
        const int next = slot + 1 == G::kStages ? 0 : slot + 1;
        const unsigned next_parity = next == 0 ? parity ^ 1u : parity;
        const int valid = st + 1 < stages || steps % G::kSteps == 0 ? G::kSteps : steps % G::kSteps;
        const float4 *cur = slot_at(slot), *nxt = slot_at(next);
        const unsigned next_full = full0 + 8 * next;
        if (valid == G::kSteps)
            split_stage<S, kSum, false>(s, qx, qd, qg, cur, nxt, next_full, next_parity, valid, m, r, tiles, lane);
        else
            split_stage<S, kSum, true>(s, qx, qd, qg, cur, nxt, next_full, next_parity, valid, m, r, tiles, lane);
        mbar_arrive(empty0 + 8 * slot);  // every lane arrives once its own reads of the slot have been used
        slot = next;
        parity = next_parity;
    }
    return s;
}

// grid: (4 * S, rows) — blockIdx.x is the row's segment of 32 / S chains, blockIdx.y the row; block: 96 threads
// (warp 0 pushes s1, warp 1 s2, warp 2 produces). Dynamic shared memory: kStages * kStageBytes.
template <int S>
__device__ __forceinline__ void grad_chain_sums_split(
    const TensorMap128& x_map,  // as grad_chain_sums<S>'s
    const TensorMap128& dy_map,
    const TensorMap128& g_map,
    const float* __restrict__ mean,   // [rows]
    const float* __restrict__ rstd,   // [rows]
    float* __restrict__ chain_sums,   // [rows, 128, 2] scratch: each chain's two sums
    unsigned* __restrict__ row_done,  // [rows] zero on entry; the last block resets it to zero
    float* __restrict__ s1_out,       // [rows]
    float* __restrict__ s2_out,       // [rows]
    int n) {                          // normalized size, a multiple of 512
    using G = GradGeometry<S>;
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ unsigned long long full[G::kStages], empty[G::kStages];
    __shared__ float4 tiles[2][64];  // per consumer warp: two tiles of 32 float4

    const int seg = blockIdx.x;
    const int row = blockIdx.y;
    const int steps = n / 512;
    const int stages = (steps + G::kSteps - 1) / G::kSteps;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        for (int i = 0; i < G::kStages; ++i) {
            mbar_init(&full[i], 1);
            mbar_init(&empty[i], 64);  // both consumer warps' lanes
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == 2) {  // the producer: grad_chain_sums<S>'s
        if (lane == 0) {
            for (int st = 0; st < stages; ++st) {
                const int slot = st % G::kStages;
                mbar_wait(&empty[slot], ((st / G::kStages) & 1) ^ 1);
                mbar_expect_tx(&full[slot], G::kStageBytes);
                unsigned char* dst = ring + slot * G::kStageBytes;
                tensor_copy_4d(dst, &x_map, 0, seg, st * G::kSteps, row, &full[slot]);
                tensor_copy_4d(dst + G::kArrayBytes, &dy_map, 0, seg, st * G::kSteps, row, &full[slot]);
                tensor_copy_4d(dst + 2 * G::kArrayBytes, &g_map, 0, seg, st * G::kSteps, 0, &full[slot]);
            }
            if (stages > 0) {
                mbar_wait(&empty[stages % G::kStages], ((stages / G::kStages) & 1) ^ 1);
                mbar_arrive(&full[stages % G::kStages]);
            }
        }
        return;
    }

    const unsigned full0 = smem_addr(full), empty0 = smem_addr(empty);
    const float m = mean[row];
    const float r = rstd[row];
    const float s = warp == 0 ? split_sums<S, 1>(ring, full0, empty0, steps, lane, m, r, tiles[0])
                              : split_sums<S, 2>(ring, full0, empty0, steps, lane, m, r, tiles[1]);
    float* sums = chain_sums + (size_t)row * 256;  // [128 chains][2]
    if (lane < G::kChains) sums[2 * (seg * G::kChains + lane) + warp] = s;
    __threadfence();  // publish this warp's chain sums before the block counts them
    asm volatile("bar.sync 1, 64;" ::: "memory");  // both consumer warps (the producer has left)
    if (warp != 0) return;
    unsigned done = 0;
    if (lane == 0) done = atomicAdd(&row_done[row], 1u);
    done = __shfl_sync(kAll, done, 0);
    if (done != 4u * S - 1u) return;
    __threadfence();  // the other blocks' sums are visible once their counts are
    const volatile float* vs = sums;
    float w1[4], w2[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        w1[w] = grad_warp_sum(vs[2 * (32 * w + lane)]);
        w2[w] = grad_warp_sum(vs[2 * (32 * w + lane) + 1]);
    }
    if (lane != 0) return;
    s1_out[row] = grad_block_sum4(w1[0], w1[1], w1[2], w1[3]);
    s2_out[row] = grad_block_sum4(w2[0], w2[1], w2[2], w2[3]);
    row_done[row] = 0u;
}

#define GRAD_CHAIN_SUMS_XCHG(S)                                                                                    \
    extern "C" __global__ void __launch_bounds__(96) grad_chain_sums_xchg##S(                                      \
        const __grid_constant__ TensorMap128 x_map, const __grid_constant__ TensorMap128 dy_map,                  \
        const __grid_constant__ TensorMap128 g_map, const float* __restrict__ mean,                               \
        const float* __restrict__ rstd, float* __restrict__ chain_sums, unsigned* __restrict__ row_done,          \
        float* __restrict__ s1_out, float* __restrict__ s2_out, int n) {                                          \
        grad_chain_sums_split<S>(x_map, dy_map, g_map, mean, rstd, chain_sums, row_done, s1_out, s2_out, n);      \
    }
GRAD_CHAIN_SUMS_XCHG(2)
GRAD_CHAIN_SUMS_XCHG(4)
GRAD_CHAIN_SUMS_XCHG(8)
