// The two row sums of torch's LayerNorm dX for few, long rows: torch's 128 per-thread chains of a row spread over
// 4 * S blocks (S = 1, 2, 4: 32 / S chains each), fed by tensor-map copies of x, dy and gamma, then torch's
// WarpReduceSum and BlockReduceSum order over all 128 chains in the row's last block.
//
// Why a block has prep warps: a chain's only dependent work per element is one FADD (s1) and one FFMA (s2); the
// rest of torch's push (dy * gamma, x - mean, their product) depends on no earlier element. One warp doing all of
// it issues about 25 instructions per 4 elements and runs ~8.6 cycles per element, issue-bound. Two prep warps
// compute gp = dy * gamma and prod = gp * (x - mean) for each landed stage, in place (gp over dy, prod over x),
// so the chain warp issues 2 shared loads and 8 dependent operations per 4 elements and runs at the chains'
// dependence (4 cycles per element). Same roundings, same order: the bits are the same.
// Why S: with the chains at their dependence, 32 chains on one SM ask ~96 bytes per cycle of x, dy and gamma,
// more than an SM's path from L2 carries; S splits a warp's chains over S blocks (adjacent columns: each copy
// row is 512 / S contiguous bytes).
//
// Contract kept: each chain is torch's thread t = 32 * warp + lane of layer_norm_grad_input_kernel_vectorized,
// pushing the components of float4 vectors t, t+128, ... in order (grad_ln.cuh's grad_push, split into
// grad_push_prep and grad_push_chain). Blocks write each chain's two sums; the row's last block gives lane l of
// its warp chain 32 * w + l of each warp w, so grad_warp_sum forms WarpReduceSum's tree exactly as in torch, then
// grad_block_sum4 BlockReduceSum's second step over w0..w3. Which block runs a chain changes nothing in its
// order. Requirement (the plan checks it): N a multiple of 512, so every chain has the same number of steps.
#include "async_copy.cuh"
#include "grad_ln.cuh"

namespace {
constexpr int kSteps = 32;       // steps per stage: one tensor copy of kSteps x (512 / S) bytes per array
constexpr int kAhead = 4;        // steps read from shared memory ahead of the one being accumulated
constexpr int kPrepThreads = 64;  // two prep warps
static_assert(kSteps % kAhead == 0, "a stage must hold a whole number of prefetch windows");

template <int S>
struct GradGeometry {
    static constexpr int kChains = 32 / S;               // chains (lanes that push) per block
    static constexpr int kStages = 4 * S;                // 192 KiB of ring whatever S
    static constexpr int kArrayBytes = kSteps * 512 / S;
    static constexpr int kStageBytes = 3 * kArrayBytes;  // x (then prod), dy (then gp), gamma
};
}  // namespace

// The part of grad_push that no earlier element feeds: gp = dy * gamma and prod = gp * (x - mean), rounded as
// torch rounds them.
__device__ __forceinline__ void grad_push_prep(float& prod, float& gp, float x, float dy, float g, float mean) {
    gp = __fmul_rn(dy, g);
    prod = __fmul_rn(gp, __fsub_rn(x, mean));
}

// The chain's part: s1 += gp (FADD), s2 = fma(rstd, prod, s2).
__device__ __forceinline__ void grad_push_chain4(float& s1, float& s2, float4 prod, float4 gp, float rstd) {
    s1 = __fadd_rn(s1, gp.x);
    s2 = __fmaf_rn(rstd, prod.x, s2);
    s1 = __fadd_rn(s1, gp.y);
    s2 = __fmaf_rn(rstd, prod.y, s2);
    s1 = __fadd_rn(s1, gp.z);
    s2 = __fmaf_rn(rstd, prod.z, s2);
    s1 = __fadd_rn(s1, gp.w);
    s2 = __fmaf_rn(rstd, prod.w, s2);
}

// grid: (4 * S, rows) — blockIdx.x is the row's segment (torch's warp blockIdx.x / S, its chains from
// (blockIdx.x % S) * 32 / S), blockIdx.y the row; block: 128 threads (warp 0 runs the chains, warp 1 produces,
// warps 2-3 prep). Dynamic shared memory: kStages * kStageBytes.
template <int S>
__device__ __forceinline__ void grad_chain_sums(
    const TensorMap128& x_map,   // x as [rows][steps][4 S segments][128 / S floats], innermost first
    const TensorMap128& dy_map,  // dy, the same layout
    const TensorMap128& g_map,   // gamma as one such row (ones when the forward had no weight)
    const float* __restrict__ mean,   // [rows]
    const float* __restrict__ rstd,   // [rows]
    float* __restrict__ chain_sums,   // [rows, 128, 2] scratch: each chain's two sums
    unsigned* __restrict__ row_done,  // [rows] zero on entry; the last block resets it to zero
    float* __restrict__ s1_out,       // [rows]
    float* __restrict__ s2_out,       // [rows]
    int n) {                          // normalized size, a multiple of 512
    using G = GradGeometry<S>;
    constexpr int kStages = G::kStages, kChains = G::kChains;
    extern __shared__ __align__(128) unsigned char ring[];
    // full: the copies landed; ready: prepped (prod over x, gp over dy); empty: the chain warp is done with it
    __shared__ unsigned long long full[kStages], ready[kStages], empty[kStages];

    const int seg = blockIdx.x;
    const int row = blockIdx.y;
    const int steps = n / 512;
    const int stages = (steps + kSteps - 1) / kSteps;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        for (int i = 0; i < kStages; ++i) {
            mbar_init(&full[i], 1);              // the producer's expect_tx arrive, then the copies' bytes
            mbar_init(&ready[i], kPrepThreads);  // every prep thread, after its stores
            mbar_init(&empty[i], 32);            // the chain warp's lanes, each after its own reads
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == 1) {  // producer
        if (lane == 0) {
            for (int st = 0; st < stages; ++st) {
                const int slot = st % kStages;
                mbar_wait(&empty[slot], ((st / kStages) & 1) ^ 1);
                // A partial last stage still lands whole: the maps' step dimension ends there, and TMA fills
                // out-of-range steps with zeros and counts their bytes.
                mbar_expect_tx(&full[slot], G::kStageBytes);
                unsigned char* dst = ring + slot * G::kStageBytes;
                tensor_copy_4d(dst, &x_map, 0, seg, st * kSteps, row, &full[slot]);
                tensor_copy_4d(dst + G::kArrayBytes, &dy_map, 0, seg, st * kSteps, row, &full[slot]);
                tensor_copy_4d(dst + 2 * G::kArrayBytes, &g_map, 0, seg, st * kSteps, 0, &full[slot]);
            }
            // Complete the phase after the last stage without data: the chain warp waits on it unconditionally
            // (through the prep warps' ready).
            if (stages > 0) {
                mbar_wait(&empty[stages % kStages], ((stages / kStages) & 1) ^ 1);
                mbar_arrive(&full[stages % kStages]);
            }
        }
        return;
    }

    const float m = mean[row];
    if (warp >= 2) {  // prep: each landed stage in place, then ready; the data-less phase after the last too
        const int t = threadIdx.x - 64;
        for (int st = 0; st <= stages && stages > 0; ++st) {
            const int slot = st % kStages;
            mbar_wait(&full[slot], (st / kStages) & 1);
            if (st < stages) {
                float4* xs = reinterpret_cast<float4*>(ring + slot * G::kStageBytes);
                float4* ds = xs + G::kArrayBytes / 16;
                const float4* gs = ds + G::kArrayBytes / 16;
                for (int i = t; i < G::kArrayBytes / 16; i += kPrepThreads) {
                    const float4 vx = xs[i], vd = ds[i], vg = gs[i];
                    float4 prod, gp;
                    grad_push_prep(prod.x, gp.x, vx.x, vd.x, vg.x, m);
                    grad_push_prep(prod.y, gp.y, vx.y, vd.y, vg.y, m);
                    grad_push_prep(prod.z, gp.z, vx.z, vd.z, vg.z, m);
                    grad_push_prep(prod.w, gp.w, vx.w, vd.w, vg.w, m);
                    xs[i] = prod;
                    ds[i] = gp;
                }
            }
            mbar_arrive(&ready[slot]);
        }
        return;
    }

    // The chain warp. Lanes past the block's chains read a pushing lane's data and push into sums nobody keeps:
    // the warp stays whole for the barriers and the final reduction.
    const int chain_lane = lane % kChains;
    const unsigned ready0 = smem_addr(ready), empty0 = smem_addr(empty);
    const float r = rstd[row];
    float s1 = 0.f, s2 = 0.f;
    float4 qp[kAhead], qg[kAhead];
    auto at = [&](int slot) {
        return reinterpret_cast<const float4*>(ring + slot * G::kStageBytes) + chain_lane;
    };
    int slot = 0;
    unsigned parity = 0;
    if (stages > 0) {
        mbar_wait(ready0, 0u);
        const float4* a = at(0);
#pragma unroll
        for (int i = 0; i < kAhead; ++i) {
            qp[i] = a[kChains * i];
            qg[i] = a[G::kArrayBytes / 16 + kChains * i];
        }
    }
    for (int st = 0; st < stages; ++st) {
        const int next = slot + 1 == kStages ? 0 : slot + 1;
        const unsigned next_parity = next == 0 ? parity ^ 1u : parity;
        const int valid = st + 1 < stages || steps % kSteps == 0 ? kSteps : steps % kSteps;
        const float4* cur = at(slot);
        const float4* nxt = at(next);
#pragma unroll
        for (int j = 0; j < kSteps; ++j) {
            const float4 vp = qp[j % kAhead], vg = qg[j % kAhead];
            const int ahead = j + kAhead;
            if (ahead < kSteps) {
                qp[j % kAhead] = cur[kChains * ahead];
                qg[j % kAhead] = cur[G::kArrayBytes / 16 + kChains * ahead];
            } else {
                if (ahead == kSteps) mbar_wait(ready0 + 8 * next, next_parity);
                qp[j % kAhead] = nxt[kChains * (ahead - kSteps)];
                qg[j % kAhead] = nxt[G::kArrayBytes / 16 + kChains * (ahead - kSteps)];
            }
            if (j < valid) grad_push_chain4(s1, s2, vp, vg, r);
        }
        // the prep warps' generic-proxy stores to this slot come before the next tensor copy into it
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        mbar_arrive(empty0 + 8 * slot);  // every lane arrives once its own reads of the slot have been used
        slot = next;
        parity = next_parity;
    }

    float* sums = chain_sums + (size_t)row * 256;  // [128 chains][2]
    if (lane < kChains) {
        const int chain = seg * kChains + lane;  // = 32 * (seg / S) + (seg % S) * kChains + lane
        sums[2 * chain] = s1;
        sums[2 * chain + 1] = s2;
    }
    __threadfence();  // publish this block's chain sums before counting them
    __syncwarp();
    unsigned done = 0;
    if (lane == 0) done = atomicAdd(&row_done[row], 1u);
    done = __shfl_sync(0xffffffffu, done, 0);
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

#define GRAD_CHAIN_SUMS(S)                                                                                         \
    extern "C" __global__ void __launch_bounds__(128) grad_chain_sums_s##S(                                        \
        const __grid_constant__ TensorMap128 x_map, const __grid_constant__ TensorMap128 dy_map,                  \
        const __grid_constant__ TensorMap128 g_map, const float* __restrict__ mean,                               \
        const float* __restrict__ rstd, float* __restrict__ chain_sums, unsigned* __restrict__ row_done,          \
        float* __restrict__ s1_out, float* __restrict__ s2_out, int n) {                                          \
        grad_chain_sums<S>(x_map, dy_map, g_map, mean, rstd, chain_sums, row_done, s1_out, s2_out, n);            \
    }
GRAD_CHAIN_SUMS(1)
GRAD_CHAIN_SUMS(2)
GRAD_CHAIN_SUMS(4)
