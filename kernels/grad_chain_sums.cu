// The two row sums of torch's LayerNorm dX for few, long rows: torch's 128 per-thread chains of a row spread over
// four blocks (one warp of chains each, as chain_stats_tma.cu does for the forward's Welford chains), fed by
// tensor-map copies of x, dy and gamma, then torch's BlockReduceSum order across the four blocks.
//
// Contract kept: each chain is torch's thread t = 32 * warp + lane of layer_norm_grad_input_kernel_vectorized,
// pushing the components of float4 vectors t, t+128, ... in order (grad_ln.cuh's grad_push); the warp's sum is
// WarpReduceSum's and the row's is BlockReduceSum's second step over w0..w3 (grad_block_sum4). Which block runs a
// chain changes nothing in its order. Requirement (the plan checks it): N a multiple of 512, so every chain has
// the same number of steps and a step is one 512-byte segment per warp.
#include "async_copy.cuh"
#include "grad_ln.cuh"

#ifndef GRAD_STEPS
#define GRAD_STEPS 32  // steps per stage: one tensor copy of GRAD_STEPS x 512 bytes per array (x, dy, gamma)
#endif
#ifndef GRAD_STAGES
#define GRAD_STAGES 4  // ring depth: 4 x 48 KiB in flight per SM
#endif
#ifndef GRAD_AHEAD
#define GRAD_AHEAD 4  // steps read from shared memory ahead of the one being accumulated
#endif

namespace {
constexpr int kSteps = GRAD_STEPS;
constexpr int kStages = GRAD_STAGES;
constexpr int kArrayBytes = kSteps * 512;     // one array's share of a stage
constexpr int kStageBytes = 3 * kArrayBytes;  // x, dy, gamma
constexpr int kAhead = GRAD_AHEAD;
static_assert(kSteps % kAhead == 0, "a stage must hold a whole number of prefetch windows");
}  // namespace

struct GradSlot {
    const float4* x;  // this lane's float4 of step 0 in the slot; step s is 32 * s further
    const float4* dy;
    const float4* g;
};

__device__ __forceinline__ GradSlot grad_slot(const unsigned char* ring, int slot, int lane) {
    const float4* base = reinterpret_cast<const float4*>(ring + slot * kStageBytes) + lane;
    return GradSlot{base, base + kArrayBytes / 16, base + 2 * kArrayBytes / 16};
}

__device__ __forceinline__ void grad_read(float4& vx, float4& vd, float4& vg, GradSlot at, int step) {
    vx = at.x[32 * step];
    vd = at.dy[32 * step];
    vg = at.g[32 * step];
}

// One stage: on entry the q arrays hold its first kAhead steps; on exit, the next stage's (after waiting on the
// next slot's full barrier; after the last stage the producer completes that barrier without data).
template <bool kPartial>
__device__ __forceinline__ void grad_stage(float& s1, float& s2, float4 (&qx)[kAhead], float4 (&qd)[kAhead],
                                           float4 (&qg)[kAhead], GradSlot cur, GradSlot next, unsigned next_full,
                                           unsigned next_parity, int valid, float m, float r) {
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
        const float4 vx = qx[j % kAhead], vd = qd[j % kAhead], vg = qg[j % kAhead];
        const int ahead = j + kAhead;
        if (ahead < kSteps) {
            grad_read(qx[j % kAhead], qd[j % kAhead], qg[j % kAhead], cur, ahead);
        } else {
            if (ahead == kSteps) mbar_wait(next_full, next_parity);
            grad_read(qx[j % kAhead], qd[j % kAhead], qg[j % kAhead], next, ahead - kSteps);
        }
        if (!kPartial || j < valid) grad_push4(s1, s2, vx, vd, vg, m, r);
    }
}

// grid: (4, rows) — blockIdx.x is torch's warp index, blockIdx.y the row; block: 64 threads (warp 0 runs the
// chains, warp 1 produces). Dynamic shared memory: kStages * kStageBytes.
extern "C" __global__ void __launch_bounds__(64) grad_chain_sums(
    const __grid_constant__ TensorMap128 x_map,   // x as [rows][steps][4 warps][128 floats], innermost first
    const __grid_constant__ TensorMap128 dy_map,  // dy, the same layout
    const __grid_constant__ TensorMap128 g_map,   // gamma as one such row (ones when the forward had no weight)
    const float* __restrict__ mean,               // [rows]
    const float* __restrict__ rstd,               // [rows]
    float* __restrict__ warp_sums,                // [rows, 4, 2] scratch: each warp's two sums
    unsigned* __restrict__ row_done,              // [rows] zero on entry; the last block resets it to zero
    float* __restrict__ s1_out,                   // [rows]
    float* __restrict__ s2_out,                   // [rows]
    int n) {                                      // normalized size, a multiple of 512
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ unsigned long long full[kStages], empty[kStages];

    const int w = blockIdx.x;
    const int row = blockIdx.y;
    const int steps = n / 512;
    const int stages = (steps + kSteps - 1) / kSteps;
    const int lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        for (int i = 0; i < kStages; ++i) {
            mbar_init(&full[i], 1);    // the producer's expect_tx arrive, then the copies' bytes
            mbar_init(&empty[i], 32);  // the consumer warp's lanes, each after its own reads
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (threadIdx.x >= 32) {
        if (lane == 0) {
            for (int st = 0; st < stages; ++st) {
                const int slot = st % kStages;
                mbar_wait(&empty[slot], ((st / kStages) & 1) ^ 1);
                // A partial last stage still lands whole: the maps' step dimension ends there, and TMA fills
                // out-of-range steps with zeros and counts their bytes.
                mbar_expect_tx(&full[slot], kStageBytes);
                unsigned char* dst = ring + slot * kStageBytes;
                tensor_copy_4d(dst, &x_map, 0, w, st * kSteps, row, &full[slot]);
                tensor_copy_4d(dst + kArrayBytes, &dy_map, 0, w, st * kSteps, row, &full[slot]);
                tensor_copy_4d(dst + 2 * kArrayBytes, &g_map, 0, w, st * kSteps, 0, &full[slot]);
            }
            // Complete the barrier after the last stage without data: the consumer waits on it unconditionally.
            if (stages > 0) {
                mbar_wait(&empty[stages % kStages], ((stages / kStages) & 1) ^ 1);
                mbar_arrive(&full[stages % kStages]);
            }
        }
        return;
    }

    const unsigned full0 = smem_addr(full), empty0 = smem_addr(empty);
    const float m = mean[row];
    const float r = rstd[row];
    float s1 = 0.f, s2 = 0.f;
    float4 qx[kAhead], qd[kAhead], qg[kAhead];
    int slot = 0;
    unsigned parity = 0;
    if (stages > 0) {
        mbar_wait(full0, 0u);
#pragma unroll
        for (int i = 0; i < kAhead; ++i) grad_read(qx[i], qd[i], qg[i], grad_slot(ring, 0, lane), i);
    }
    for (int st = 0; st < stages; ++st) {
        const int next = slot + 1 == kStages ? 0 : slot + 1;
        const unsigned next_parity = next == 0 ? parity ^ 1u : parity;
        const int valid = st + 1 < stages || steps % kSteps == 0 ? kSteps : steps % kSteps;
        if (valid == kSteps)
            grad_stage<false>(s1, s2, qx, qd, qg, grad_slot(ring, slot, lane), grad_slot(ring, next, lane),
                              full0 + 8 * next, next_parity, kSteps, m, r);
        else
            grad_stage<true>(s1, s2, qx, qd, qg, grad_slot(ring, slot, lane), grad_slot(ring, next, lane),
                             full0 + 8 * next, next_parity, valid, m, r);
        mbar_arrive(empty0 + 8 * slot);  // every lane arrives once its own reads of the slot have been used
        slot = next;
        parity = next_parity;
    }

    s1 = grad_warp_sum(s1);
    s2 = grad_warp_sum(s2);
    if (lane != 0) return;
    float* out = warp_sums + ((size_t)row * 4 + w) * 2;
    out[0] = s1;
    out[1] = s2;
    __threadfence();  // publish this warp's sums before counting them
    if (atomicAdd(&row_done[row], 1u) != 3u) return;
    __threadfence();  // the other three warps' sums are visible once their counts are
    const volatile float* ws = warp_sums + (size_t)row * 8;
    s1_out[row] = grad_block_sum4(ws[0], ws[2], ws[4], ws[6]);
    s2_out[row] = grad_block_sum4(ws[1], ws[3], ws[5], ws[7]);
    row_done[row] = 0u;
}
