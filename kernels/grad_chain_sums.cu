// The two row sums of torch's LayerNorm dX for few, long rows: torch's 128 per-thread chains of a row spread over
// 4 * S blocks (32 / S chains each), fed by tensor-map copies of x, dy and gamma (sm_90) or by a cp.async ring
// (sm_80-89, which have no tensor maps), then torch's WarpReduceSum and BlockReduceSum order over all 128 chains in
// the row's last block. Entry points: grad_chain_sums_s1 (32 chains a block, one warp pushing both sums) and
// grad_chain_sums_split2/4/8 (a warp per sum: below); below sm_90 grad_chain_sums_ring_s1 and
// grad_chain_sums_ring_split2/4/8.
//
// Below sm_90: the same ring layout, consumers and reductions; each producer lane copies 16 bytes at a time with
// cp.async exactly what the tensor copies' boxes land (zeros for steps past the row's end), and a stage's barrier
// completes once every lane's copies have landed. The order of the pushes, hence the bits, does not depend on how the
// ring is filled. The ring is GRAD_STAGES deep, fewer stages where the device's shared memory holds fewer (the host
// chooses: labkit.ops.backward.chain_stages).
//
// Why S: with up to 16 rows, four blocks per row leave SMs idle and give each SM 32 chains' bytes; S = 2 puts a
// warp's chains on two SMs (adjacent columns: each copy row is 256 contiguous bytes). Measured on the H200 at
// 1-16 rows of 2^20-2^24 (torch 2.11), with one warp pushing both sums: S = 2 was 5-10% faster than S = 1; S = 4,
// 8, 16 were 2-4x slower (their stages unrolled 128 steps); a block whose chain warp only accumulated, with prep
// warps computing dy * gamma and its product with x - mean in place, was 2x slower (the ring's shared memory
// traffic doubles). The one warp issued ~34 instructions per step of 4 elements against the 16 cycles of its
// dependent FADD/FFMA chain; that warp's issue was the suspected bound, and grad_chain_sums_split<S> the test of it
// (below: it was not the bound at S = 2; spreading the chains over more SMs is what paid).
//
// Contract kept: each chain is torch's thread t = 32 * warp + lane of layer_norm_grad_input_kernel_vectorized,
// pushing the components of float4 vectors t, t+128, ... in order (grad_ln.cuh's grad_push). Blocks write each
// chain's two sums; the row's last block gives lane l of its warp chain 32 * w + l of each warp w, so
// grad_warp_sum forms WarpReduceSum's tree exactly as in torch, then grad_block_sum4 BlockReduceSum's second step
// over w0..w3. Which block runs a chain changes nothing in its order. Requirement (the plan checks it): N a
// multiple of 512, so every chain has the same number of steps.
//
// With -DLN_BF16 / -DLN_FP16 (dtype.cuh): x, dy and gamma are 2-byte elements, a step of a row still 512 of them
// (torch's 128 threads x a vector of 4 T), so a block's segment of a step is 256 / S bytes and a stage half the
// float32 one; the tensor maps have 2-byte elements (host: labkit.ops.backward), the sm_80 ring copies 8 bytes a
// lane and piece (cp.async.ca); the consumers read their lane's 8 bytes and convert them as they read, so each
// chain pushes the same floats in the same order as torch's kernel for T does. With -DLN_X_BF16 / -DLN_X_FP16 (the
// autocast build) x alone is of T: a stage's x array is half the size of its dy and gamma arrays (the ring holds
// them in that order, and a stage's bytes are their sum), x's tensor map has 2-byte elements and its ring copies 8
// bytes a piece; the floats pushed are those of the float32 build on x converted to float.
#include "async_copy.cuh"
#include "dtype.cuh"
#include "grad_ln.cuh"

#ifndef GRAD_STAGES
#define GRAD_STAGES 4  // ring depth: 192 KiB of shared memory per block
#endif
// Two at least: the consumers read the next slot's first steps before releasing the current one.
static_assert(GRAD_STAGES >= 2, "the ring needs two stages");

// GRAD_FULL_ARRIVALS: the arrivals that complete a full[] phase. (Macros, not constants: NVRTC emits every named
// constant into the PTX, and the sm_90 cubins stay those the committed runs measured.)
#if __CUDA_ARCH__ >= 900
#define GRAD_TMA 1
#define GRAD_FULL_ARRIVALS 1  // the producer's expect_tx arrive, then the copies' bytes
#else
#define GRAD_TMA 0
#define GRAD_FULL_ARRIVALS 32  // every producer lane, once its copies have landed
#endif

namespace {
// Steps per stage and ring depth per split: every split keeps GRAD_STAGES stages of 48 KiB in flight (192 KiB of
// shared memory per block by default; 24 KiB stages in the 2-byte builds, 40 KiB in the autocast build); a stage is
// one tensor copy of kSteps x (512 / S) bytes per array (x, dy, gamma; 256 / S for an array of 2-byte elements).
template <int S>
struct GradGeometry {
    static constexpr int kChains = 32 / S;                  // chains (lanes that push) per block
    static constexpr int kSteps = 32 * S;
    static constexpr int kStages = GRAD_STAGES;
    static constexpr int kXArrayBytes = kSteps * LN_X_SEGMENT_BYTES / S;  // x's array, first in a stage
    static constexpr int kArrayBytes = kSteps * LN_SEGMENT_BYTES / S;     // dy's, then gamma's
    static constexpr int kStageBytes = kXArrayBytes + 2 * kArrayBytes;
    static constexpr int kAhead = 4;  // steps read from shared memory ahead of the one being accumulated
    static_assert(kSteps % kAhead == 0, "a stage must hold a whole number of prefetch windows");
};
}  // namespace

struct GradSlot {
    const LN_X_VEC* x;  // this lane's vector of step 0 in the slot; step s is kChains * s further
    const LN_VEC* dy;
    const LN_VEC* g;
};

template <int S>
__device__ __forceinline__ GradSlot grad_slot(const unsigned char* ring, int slot, int lane) {
    using G = GradGeometry<S>;
    const unsigned char* base = ring + slot * G::kStageBytes;
    const LN_VEC* dy = reinterpret_cast<const LN_VEC*>(base + G::kXArrayBytes) + lane;
    return GradSlot{reinterpret_cast<const LN_X_VEC*>(base) + lane, dy, dy + G::kArrayBytes / LN_VEC_BYTES};
}

template <int S>
__device__ __forceinline__ void grad_read(float4& vx, float4& vd, float4& vg, GradSlot at, int step) {
    constexpr int c = GradGeometry<S>::kChains;
    vx = LN_X_LOAD4(at.x[c * step]);
    vd = LN_LOAD4(at.dy[c * step]);
    vg = LN_LOAD4(at.g[c * step]);
}

// One stage: on entry the q arrays hold its first kAhead steps; on exit, the next stage's (after waiting on the
// next slot's full barrier; after the last stage the producer completes that barrier without data).
template <int S, bool kPartial>
__device__ __forceinline__ void grad_stage(float& s1, float& s2, float4 (&qx)[GradGeometry<S>::kAhead],
                                           float4 (&qd)[GradGeometry<S>::kAhead],
                                           float4 (&qg)[GradGeometry<S>::kAhead], GradSlot cur, GradSlot next,
                                           unsigned next_full, unsigned next_parity, int valid, float m, float r) {
    using G = GradGeometry<S>;
    constexpr int kAhead = G::kAhead;
#pragma unroll
    for (int j = 0; j < G::kSteps; ++j) {
        const float4 vx = qx[j % kAhead], vd = qd[j % kAhead], vg = qg[j % kAhead];
        const int ahead = j + kAhead;
        if (ahead < G::kSteps) {
            grad_read<S>(qx[j % kAhead], qd[j % kAhead], qg[j % kAhead], cur, ahead);
        } else {
            if (ahead == G::kSteps) mbar_wait(next_full, next_parity);
            grad_read<S>(qx[j % kAhead], qd[j % kAhead], qg[j % kAhead], next, ahead - G::kSteps);
        }
        if (!kPartial || j < valid) grad_push4(s1, s2, vx, vd, vg, m, r);
    }
}

#if GRAD_TMA
// The producer (lane 0 of a warp): stage st's x, dy and gamma into ring slot st % kStages once the consumers have
// released it. A partial last stage still lands whole: the maps' step dimension ends there, and TMA fills
// out-of-range steps with zeros and counts their bytes. After the last stage it completes the next slot's barrier
// without data: the consumers wait on it unconditionally.
template <int S>
__device__ __forceinline__ void produce_stages(unsigned char* ring, unsigned long long* full, unsigned long long* empty,
                                               const TensorMap128& x_map, const TensorMap128& dy_map,
                                               const TensorMap128& g_map, int seg, int row, int stages) {
    using G = GradGeometry<S>;
    for (int st = 0; st < stages; ++st) {
        const int slot = st % G::kStages;
        mbar_wait(&empty[slot], ((st / G::kStages) & 1) ^ 1);
        mbar_expect_tx(&full[slot], G::kStageBytes);
        unsigned char* dst = ring + slot * G::kStageBytes;
        tensor_copy_4d(dst, &x_map, 0, seg, st * G::kSteps, row, &full[slot]);
        tensor_copy_4d(dst + G::kXArrayBytes, &dy_map, 0, seg, st * G::kSteps, row, &full[slot]);
        tensor_copy_4d(dst + G::kXArrayBytes + G::kArrayBytes, &g_map, 0, seg, st * G::kSteps, 0, &full[slot]);
    }
    if (stages > 0) {
        mbar_wait(&empty[stages % G::kStages], ((stages / G::kStages) & 1) ^ 1);
        mbar_arrive(&full[stages % G::kStages]);
    }
}
#else
// sm_80: one lane's share of what a tensor copy of stage st lands for one array: the box is kSteps rows of the
// segment's 512 / S bytes (row k: step st * kSteps + k, from `src`, the segment's first element of step 0), 16 bytes
// f = 32 i + lane of it (for an array of 2-byte elements E, 256 / S bytes a row, 8 bytes a piece); zeros for steps
// past the row's last, as the map fills out-of-range steps.
template <int S, typename E>
__device__ __forceinline__ void ring_copy(unsigned char* dst, const E* src, int st, int steps, int lane) {
    using G = GradGeometry<S>;
    constexpr int C = G::kChains;  // 4-element pieces of a step's segment: 16 bytes (8 for a 2-byte type)
    constexpr int kPiece = 4 * sizeof(E);
#pragma unroll 4
    for (int f = lane; f < G::kSteps * C; f += 32) {
        const int step = st * G::kSteps + f / C;
        const bool real = step < steps;
        if constexpr (kPiece == 8)
            cp_async8(dst + 8 * f, src + (size_t)512 * (real ? step : 0) + 4 * (f % C), real ? 8u : 0u);
        else
            cp_async16(dst + 16 * f, src + (size_t)512 * (real ? step : 0) + 4 * (f % C), real ? 16u : 0u);
    }
}

// sm_80: the producer (a whole warp): stage st's x, dy and gamma into ring slot st % kStages once the consumers
// have released it, in the layout the tensor copies give, each lane arriving on the slot's barrier once its copies
// have landed. After the last stage every lane completes the next slot's barrier without data: the consumers wait
// on it unconditionally.
template <int S>
__device__ __forceinline__ void produce_stages(unsigned char* ring, unsigned long long* full, unsigned long long* empty,
                                               const LN_X_ELEM* __restrict__ x, const LN_ELEM* __restrict__ dy,
                                               const LN_ELEM* __restrict__ g, int n, int seg, int row, int stages,
                                               int lane) {
    using G = GradGeometry<S>;
    const int steps = n / 512;
    const size_t at = (size_t)row * n + seg * (128 / S);  // the segment's first float of step 0
    for (int st = 0; st < stages; ++st) {
        const int slot = st % G::kStages;
        mbar_wait(&empty[slot], ((st / G::kStages) & 1) ^ 1);
        unsigned char* dst = ring + slot * G::kStageBytes;
        ring_copy<S>(dst, x + at, st, steps, lane);
        ring_copy<S>(dst + G::kXArrayBytes, dy + at, st, steps, lane);
        ring_copy<S>(dst + G::kXArrayBytes + G::kArrayBytes, g + seg * (128 / S), st, steps, lane);
        cp_async_arrive(&full[slot]);
    }
    if (stages > 0) {
        mbar_wait(&empty[stages % G::kStages], ((stages / G::kStages) & 1) ^ 1);
        mbar_arrive(&full[stages % G::kStages]);
    }
}
#endif

// One warp, after its block's chain sums are in `sums` ([128 chains][2] of the row) and fenced: count the block
// in; the row's last block (of `blocks`) gives lane l of its warp chain 32 * w + l of each warp w, so grad_warp_sum
// forms WarpReduceSum's tree exactly as in torch, then grad_block_sum4 BlockReduceSum's second step over w0..w3.
__device__ __forceinline__ void row_sums_tail(float* sums, unsigned* row_done, float* s1_out, float* s2_out,
                                              int row, int lane, unsigned blocks) {
    unsigned done = 0;
    if (lane == 0) done = atomicAdd(&row_done[row], 1u);
    done = __shfl_sync(0xffffffffu, done, 0);
    if (done != blocks - 1u) return;
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

// grid: (4 * S, rows) — blockIdx.x is the row's segment (torch's warp blockIdx.x / S, chains from
// (blockIdx.x % S) * 32 / S of it), blockIdx.y the row; block: 64 threads (warp 0 runs the chains, warp 1
// produces). Dynamic shared memory: kStages * kStageBytes.
template <int S>
__device__ __forceinline__ void grad_chain_sums(
#if GRAD_TMA
    const TensorMap128& x_map,   // x as [rows][steps][4 S segments][128 / S elements], innermost first
    const TensorMap128& dy_map,  // dy, the same layout
    const TensorMap128& g_map,   // gamma as one such row (ones when the forward had no weight)
#else
    const LN_X_ELEM* __restrict__ x, // [rows, n], 16-byte aligned (8 for a 2-byte type)
    const LN_ELEM* __restrict__ dy,  // [rows, n], as x
    const LN_ELEM* __restrict__ g,   // gamma [n], as x (ones when the forward had no weight)
#endif
    const float* __restrict__ mean,     // [rows]
    const float* __restrict__ rstd,     // [rows]
    float* __restrict__ chain_sums,     // [rows, 128, 2] scratch: each chain's two sums
    unsigned* __restrict__ row_done,    // [rows] zero on entry; the last block resets it to zero
    float* __restrict__ s1_out,         // [rows]
    float* __restrict__ s2_out,         // [rows]
    int n) {                            // normalized size, a multiple of 512
    using G = GradGeometry<S>;
    constexpr int kStages = G::kStages, kSteps = G::kSteps;
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ unsigned long long full[kStages], empty[kStages];

    const int seg = blockIdx.x;
    const int row = blockIdx.y;
    const int steps = n / 512;
    const int stages = (steps + kSteps - 1) / kSteps;
    const int lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        for (int i = 0; i < kStages; ++i) {
            mbar_init(&full[i], GRAD_FULL_ARRIVALS);
            mbar_init(&empty[i], 32);  // the consumer warp's lanes, each after its own reads
        }
        mbar_init_fence();
    }
    __syncthreads();

    if (threadIdx.x >= 32) {
#if GRAD_TMA
        if (lane == 0) produce_stages<S>(ring, full, empty, x_map, dy_map, g_map, seg, row, stages);
#else
        produce_stages<S>(ring, full, empty, x, dy, g, n, seg, row, stages, lane);
#endif
        return;
    }

    // Lanes past the block's chains read a pushing lane's data and push into sums nobody keeps: the warp stays
    // whole for the barriers and the final reduction.
    const int chain_lane = lane % G::kChains;
    const unsigned full0 = smem_addr(full), empty0 = smem_addr(empty);
    const float m = mean[row];
    const float r = rstd[row];
    float s1 = 0.f, s2 = 0.f;
    float4 qx[G::kAhead], qd[G::kAhead], qg[G::kAhead];
    int slot = 0;
    unsigned parity = 0;
    if (stages > 0) {
        mbar_wait(full0, 0u);
#pragma unroll
        for (int i = 0; i < G::kAhead; ++i)
            grad_read<S>(qx[i], qd[i], qg[i], grad_slot<S>(ring, 0, chain_lane), i);
    }
    for (int st = 0; st < stages; ++st) {
        const int next = slot + 1 == kStages ? 0 : slot + 1;
        const unsigned next_parity = next == 0 ? parity ^ 1u : parity;
        const int valid = st + 1 < stages || steps % kSteps == 0 ? kSteps : steps % kSteps;
        const GradSlot cur_at = grad_slot<S>(ring, slot, chain_lane), next_at = grad_slot<S>(ring, next, chain_lane);
        if (valid == kSteps)
            grad_stage<S, false>(s1, s2, qx, qd, qg, cur_at, next_at, full0 + 8 * next, next_parity, kSteps, m, r);
        else
            grad_stage<S, true>(s1, s2, qx, qd, qg, cur_at, next_at, full0 + 8 * next, next_parity, valid, m, r);
        mbar_arrive(empty0 + 8 * slot);  // every lane arrives once its own reads of the slot have been used
        slot = next;
        parity = next_parity;
    }

    float* sums = chain_sums + (size_t)row * 256;  // [128 chains][2]
    if (lane < G::kChains) {
        const int chain = seg * G::kChains + lane;  // = 32 * (seg / S) + (seg % S) * kChains + lane
        sums[2 * chain] = s1;
        sums[2 * chain + 1] = s2;
    }
    __threadfence();  // publish this block's chain sums before counting them
    __syncwarp();
    row_sums_tail(sums, row_done, s1_out, s2_out, row, lane, 4u * S);
}

// The split schedule, for S = 2, 4 or 8 (32 / S chains per block, 4 S blocks per row; S's geometry, maps and
// ring): one warp per sum, and each warp instruction doing the products of S steps. Why: one warp pushing both sums
// issues ~34 instructions per step of 4 elements against the 16 cycles of either dependent chain (above). Here
// lane l holds chain l % C's step S i + l / C (C = 32 / S chains; one contiguous 512-byte read per array); the
// other lanes' products reach the chain lanes (l < C) by S - 1 shuffles each (at S = 8 through a shared-memory
// tile: kTileExchange), and those lanes push them in torch's order. Per S steps: the s1 warp issues 2 reads + 4
// products + 4 (S - 1) shuffles + 4 S adds, the s2 warp 3 reads + 12 products + 4 (S - 1) shuffles + 4 S FMAs:
// 8-14 a step, under the chain's 16 cycles. A larger S spreads a row's chains over more SMs, each then carrying
// fewer chains' bytes through its shared memory (the TMA's writes and both warps' reads).
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

// One group's pushes into this warp's sum (kSum 1: s1 from dy and gamma; 2: s2 from x too). `valid`: the steps
// that exist from the group's first on (S or more but in a partial last stage, where it can be below 1); step j is
// pushed when j < valid. Uniform over the warp.
template <int S, int kSum, bool kPartial>
__device__ __forceinline__ void split_push(float& s, float4 vx, float4 vd, float4 vg, float m, float r, int valid) {
    constexpr int C = 32 / S;
    float p[4];
    const float d[4] = {vd.x, vd.y, vd.z, vd.w}, g[4] = {vg.x, vg.y, vg.z, vg.w}, x[4] = {vx.x, vx.y, vx.z, vx.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float gp = __fmul_rn(d[k], g[k]);
        p[k] = kSum == 1 ? gp : __fmul_rn(gp, __fsub_rn(x[k], m));
    }
#pragma unroll
    for (int j = 0; j < S; ++j) {
        float q[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) q[k] = j == 0 ? p[k] : __shfl_down_sync(kAll, p[k], j * C);
        if (!kPartial || j < valid) {
#pragma unroll
            for (int k = 0; k < 4; ++k) s = kSum == 1 ? __fadd_rn(s, q[k]) : __fmaf_rn(r, q[k], s);
        }
    }
}

// A lane's reads of group i in a slot: vector 32 i + lane of each array (the s1 warp reads no x).
template <int S, int kSum>
__device__ __forceinline__ void split_read(float4& vx, float4& vd, float4& vg, GradSlot at, int group) {
    if (kSum == 2) vx = LN_X_LOAD4(at.x[32 * group]);
    vd = LN_LOAD4(at.dy[32 * group]);
    vg = LN_LOAD4(at.g[32 * group]);
}

// The same pushes with the products reaching the chain lanes through this warp's tile `t` (32 float4, one of
// two, alternating by group): each lane stores its (chain l % C, step S i + l / C) products, and chain lane c reads
// its S steps' back, in order: one STS.128 and S LDS.128 a group in place of 4 (S - 1) shuffles.
template <int S, int kSum, bool kPartial>
__device__ __forceinline__ void split_push_tile(float& s, float4 vx, float4 vd, float4 vg, float m, float r,
                                                int valid, float4* t, int lane) {
    constexpr int C = 32 / S;
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

// Which exchange a split uses. Measured on the H200 (torch 2.11; data/dev/grad_xchg, the whole backward under
// graph replay, bits equal at all 11 probe shapes): at S = 8 the tile beat the shuffles by 7-8% (1 x 2^24 522 ->
// 482 us, 2 x 2^23 291 -> 271, 4 x 2^22 173 -> 161, 1 x 2^20 38.7 -> 35.8); at S = 4 they tied (within 1%) and at
// S = 2 the tile lost by 12-25% (its S LDS.128 and the barrier outweigh S - 1 shuffles).
template <int S>
constexpr bool kTileExchange = S == 8;

// One group: push the one the q slot holds, then refill the slot with group `ahead`'s reads from `at`. `t`: this
// warp's tile for the group where kTileExchange<S>.
template <int S, int kSum, bool kPartial>
__device__ __forceinline__ void split_group(float& s, float4& qx, float4& qd, float4& qg, GradSlot at,
                                            int ahead, int valid, float m, float r, float4* t, int lane) {
    const float4 vx = qx, vd = qd, vg = qg;
    split_read<S, kSum>(qx, qd, qg, at, ahead);
    if constexpr (kTileExchange<S>)
        split_push_tile<S, kSum, kPartial>(s, vx, vd, vg, m, r, valid, t, lane);
    else
        split_push<S, kSum, kPartial>(s, vx, vd, vg, m, r, valid);
}

// One stage of groups: on entry the q arrays hold its first kGroupsAhead groups; on exit, the next stage's (after
// waiting on the next slot's full barrier). kPartial: the last stage, `valid` of its steps existing. The groups
// run kUnroll at a time, the last kUnroll peeled (they read ahead from the next slot): at S = 8 a whole stage
// unrolled is ~2,400 instructions per warp, and the two warps' loops would crowd the instruction cache.
template <int S, int kSum, bool kPartial>
__device__ __forceinline__ void split_stage(float& s, float4 (&qx)[kGroupsAhead], float4 (&qd)[kGroupsAhead],
                                            float4 (&qg)[kGroupsAhead], GradSlot cur, GradSlot nxt,
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

// The pipelined exchange's pieces: a group's products through tile t into qn (the chain lanes' S float4), and the
// chain adds over the exchanged values of steps [j0, j1) of a group.
template <int S, int kSum>
__device__ __forceinline__ void tile_exchange(float4 (&qn)[S], float4 vx, float4 vd, float4 vg, float m, float4* t,
                                              int lane) {
    constexpr int C = 32 / S;
    const float d[4] = {vd.x, vd.y, vd.z, vd.w}, g[4] = {vg.x, vg.y, vg.z, vg.w}, x[4] = {vx.x, vx.y, vx.z, vx.w};
    float p[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float gp = __fmul_rn(d[k], g[k]);
        p[k] = kSum == 1 ? gp : __fmul_rn(gp, __fsub_rn(x[k], m));
    }
    t[lane] = make_float4(p[0], p[1], p[2], p[3]);
    __syncwarp();
#pragma unroll
    for (int j = 0; j < S; ++j) qn[j] = t[j * C + lane % C];
}

template <int S, int kSum, bool kPartial, int j0, int j1>
__device__ __forceinline__ void chain_adds(float& s, const float4 (&q)[S], float r, int valid) {
#pragma unroll
    for (int j = j0; j < j1; ++j) {
        if (!kPartial || j < valid) {
            const float v[4] = {q[j].x, q[j].y, q[j].z, q[j].w};
#pragma unroll
            for (int k = 0; k < 4; ++k) s = kSum == 1 ? __fadd_rn(s, v[k]) : __fmaf_rn(r, v[k], s);
        }
    }
}

// Group i where kTileExchange<S>: qe holds its exchanged values, the q slot group i+1's reads; refill the slot with
// group `ahead`'s, send group i+1 through tile t between the two halves of group i's adds. Why one group ahead:
// ncu at 1 x 2^24 (data/dev/grad_ncu/ncu_tile*) put the consumer warps' samples on the chain's own dependence, the
// exchange's STS, barrier and LDS issued in order between groups, on the chain's path; here their latency overlaps
// the adds. Measured on the H200 (data/dev/grad_pipe, whole backward under graph replay, bits equal at 7 shapes):
// 5-9% faster than the exchange in line (1 x 2^24 476.9 -> 434.2 us, 2 x 2^23 266.1 -> 245.1, 4 x 2^22 159.3 ->
// 151.0); the exchange before all the adds gained 2-4%.
template <int S, int kSum, bool kPartial>
__device__ __forceinline__ void pipe_group(float& s, float4 (&qe)[S], float4& qx, float4& qd, float4& qg,
                                           GradSlot at, int ahead, int valid, float m, float r, float4* t,
                                           int lane) {
    const float4 vx = qx, vd = qd, vg = qg;
    split_read<S, kSum>(qx, qd, qg, at, ahead);
    float4 qn[S];
    chain_adds<S, kSum, kPartial, 0, S / 2>(s, qe, r, valid);
    tile_exchange<S, kSum>(qn, vx, vd, vg, m, t, lane);
    chain_adds<S, kSum, kPartial, S / 2, S>(s, qe, r, valid);
#pragma unroll
    for (int j = 0; j < S; ++j) qe[j] = qn[j];
}

// split_stage with the exchange one group ahead: on entry qe holds the stage's group 0 exchanged and the q arrays
// groups 1 .. kGroupsAhead's reads; on exit, the next stage's likewise.
template <int S, int kSum, bool kPartial>
__device__ __forceinline__ void pipe_stage(float& s, float4 (&qe)[S], float4 (&qx)[kGroupsAhead],
                                           float4 (&qd)[kGroupsAhead], float4 (&qg)[kGroupsAhead], GradSlot cur,
                                           GradSlot nxt, unsigned next_full, unsigned next_parity, int valid,
                                           float m, float r, float4* tiles, int lane) {
    constexpr int kGroups = SplitGeometry<S>::kGroups, kUnroll = 8;
#pragma unroll 1
    for (int i0 = 0; i0 < kGroups - kUnroll; i0 += kUnroll) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int w = (u + 1) % kGroupsAhead;
            pipe_group<S, kSum, kPartial>(s, qe, qx[w], qd[w], qg[w], cur, i0 + u + 1 + kGroupsAhead,
                                                 valid - S * (i0 + u), m, r, tiles + 32 * ((u + 1) & 1), lane);
        }
    }
    constexpr int i0 = kGroups - kUnroll;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int w = (u + 1) % kGroupsAhead;
        const int ahead = i0 + u + 1 + kGroupsAhead;
        if (ahead < kGroups) {
            pipe_group<S, kSum, kPartial>(s, qe, qx[w], qd[w], qg[w], cur, ahead, valid - S * (i0 + u), m,
                                                 r, tiles + 32 * ((u + 1) & 1), lane);
        } else {
            if (ahead == kGroups) mbar_wait(next_full, next_parity);
            pipe_group<S, kSum, kPartial>(s, qe, qx[w], qd[w], qg[w], nxt, ahead - kGroups,
                                                 valid - S * (i0 + u), m, r, tiles + 32 * ((u + 1) & 1), lane);
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
    const auto slot_at = [&](int slot) { return grad_slot<S>(ring, slot, lane); };
    int slot = 0;
    unsigned parity = 0;
    if (stages > 0) {
        mbar_wait(full0, 0u);
#pragma unroll
        for (int i = 0; i < kGroupsAhead; ++i) split_read<S, kSum>(qx[i], qd[i], qg[i], slot_at(0), i);
    }
    float4 qe[S];  // kTileExchange<S>: the next group pushed, already exchanged
    if (kTileExchange<S> && stages > 0) {  // group 0 through tile 0; its slot refilled with group kGroupsAhead's
        const float4 vx = qx[0], vd = qd[0], vg = qg[0];
        split_read<S, kSum>(qx[0], qd[0], qg[0], slot_at(0), kGroupsAhead);
        tile_exchange<S, kSum>(qe, vx, vd, vg, m, tiles, lane);
    }
    for (int st = 0; st < stages; ++st) {
        const int next = slot + 1 == G::kStages ? 0 : slot + 1;
        const unsigned next_parity = next == 0 ? parity ^ 1u : parity;
        const int valid = st + 1 < stages || steps % G::kSteps == 0 ? G::kSteps : steps % G::kSteps;
        const GradSlot cur = slot_at(slot), nxt = slot_at(next);
        const unsigned next_full = full0 + 8 * next;
        if constexpr (kTileExchange<S>) {
            if (valid == G::kSteps)
                pipe_stage<S, kSum, false>(s, qe, qx, qd, qg, cur, nxt, next_full, next_parity, valid, m, r, tiles,
                                           lane);
            else
                pipe_stage<S, kSum, true>(s, qe, qx, qd, qg, cur, nxt, next_full, next_parity, valid, m, r, tiles,
                                          lane);
        } else {
            if (valid == G::kSteps)
                split_stage<S, kSum, false>(s, qx, qd, qg, cur, nxt, next_full, next_parity, valid, m, r, tiles,
                                            lane);
            else
                split_stage<S, kSum, true>(s, qx, qd, qg, cur, nxt, next_full, next_parity, valid, m, r, tiles,
                                           lane);
        }
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
#if GRAD_TMA
    const TensorMap128& x_map,  // as grad_chain_sums<S>'s
    const TensorMap128& dy_map,
    const TensorMap128& g_map,
#else
    const LN_X_ELEM* __restrict__ x,  // as grad_chain_sums<S>'s
    const LN_ELEM* __restrict__ dy,
    const LN_ELEM* __restrict__ g,
#endif
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
    __shared__ float4 tiles[2][kTileExchange<S> ? 64 : 1];  // per consumer warp: two tiles of 32 float4

    const int seg = blockIdx.x;
    const int row = blockIdx.y;
    const int steps = n / 512;
    const int stages = (steps + G::kSteps - 1) / G::kSteps;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        for (int i = 0; i < G::kStages; ++i) {
            mbar_init(&full[i], GRAD_FULL_ARRIVALS);
            mbar_init(&empty[i], 64);  // both consumer warps' lanes
        }
        mbar_init_fence();
    }
    __syncthreads();

    if (warp == 2) {  // the producer
#if GRAD_TMA
        if (lane == 0) produce_stages<S>(ring, full, empty, x_map, dy_map, g_map, seg, row, stages);
#else
        produce_stages<S>(ring, full, empty, x, dy, g, n, seg, row, stages, lane);
#endif
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
    row_sums_tail(sums, row_done, s1_out, s2_out, row, lane, 4u * S);
}

// The entry points: `kernel`'s template at split S as extern "C" grad_chain_sums_<suffix> (sm_90, fed by tensor maps)
// or grad_chain_sums_ring_<suffix> (below sm_90, fed by pointers), with `threads` per block.
#if GRAD_TMA
#define GRAD_CHAIN_SUMS_ENTRY(suffix, kernel, S, threads)                                                          \
    extern "C" __global__ void __launch_bounds__(threads) grad_chain_sums_##suffix(                               \
        const __grid_constant__ TensorMap128 x_map, const __grid_constant__ TensorMap128 dy_map,                  \
        const __grid_constant__ TensorMap128 g_map, const float* __restrict__ mean,                               \
        const float* __restrict__ rstd, float* __restrict__ chain_sums, unsigned* __restrict__ row_done,          \
        float* __restrict__ s1_out, float* __restrict__ s2_out, int n) {                                          \
        kernel<S>(x_map, dy_map, g_map, mean, rstd, chain_sums, row_done, s1_out, s2_out, n);                     \
    }
#else
#define GRAD_CHAIN_SUMS_ENTRY(suffix, kernel, S, threads)                                                          \
    extern "C" __global__ void __launch_bounds__(threads) grad_chain_sums_ring_##suffix(                          \
        const LN_X_ELEM* __restrict__ x, const LN_ELEM* __restrict__ dy, const LN_ELEM* __restrict__ g,           \
        const float* __restrict__ mean, const float* __restrict__ rstd, float* __restrict__ chain_sums,           \
        unsigned* __restrict__ row_done, float* __restrict__ s1_out, float* __restrict__ s2_out, int n) {         \
        kernel<S>(x, dy, g, mean, rstd, chain_sums, row_done, s1_out, s2_out, n);                                 \
    }
#endif
GRAD_CHAIN_SUMS_ENTRY(split2, grad_chain_sums_split, 2, 96)
GRAD_CHAIN_SUMS_ENTRY(split4, grad_chain_sums_split, 4, 96)
GRAD_CHAIN_SUMS_ENTRY(split8, grad_chain_sums_split, 8, 96)
GRAD_CHAIN_SUMS_ENTRY(s1, grad_chain_sums, 1, 64)
