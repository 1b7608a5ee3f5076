// Dev variant (data/dev/grad_prep; not in the product): the chain schedule's row sums with the products made apart
// from the chains. grad_chain_sums_split<S> (kernels/grad_chain_sums.cu) ran its few-row sums at ~1.6x their chain
// (4 cycles an element): its chain lanes take S - 1 shuffles of the other lanes' products per element group, and the
// SASS shows each shuffle issued only a few chain steps before its sum consumes it. Here a prep warp turns each
// landed stage into the two products in place (gp = dy * gamma over dy, q = gp * (x - mean) over x), and the chain
// warps read one float4 of them per step, 4 pushes per read, no shuffle: per step 1 read + 4 adds.
// Why only S = 4 and 8 (8 and 4 chains a block): the products cost the ring a write and a read more per element
// (48 bytes landed + 48 read + 32 written + 32 read per chain-step); at 16 chains a block that is 2.5 KB a step, over
// shared memory's 128 bytes a cycle within the chain's 16 cycles (the 2x loss kernels/grad_chain_sums.cu records),
// at 4-8 chains 0.6-1.3 KB.
// Contract kept: grad_push's values (gp = dy * g rounded; q = gp * (x - mean) rounded; s1 += gp; s2 = fma(rstd, q,
// s2)) pushed in the same order, into the same tree (grad_ln.cuh).
#include "async_copy.cuh"
#include "grad_ln.cuh"

namespace {
template <int S>
struct PrepGeometry {
    static constexpr int kChains = 32 / S;       // chains per block
    static constexpr int kSteps = 32 * S;        // steps per stage: the tensor maps' box
    static constexpr int kStages = 4;
    static constexpr int kArrayBytes = kSteps * 16 * kChains;  // 16 KiB
    static constexpr int kStageBytes = 3 * kArrayBytes;
    static constexpr int kChunk = 8;             // steps a chain lane reads ahead
    static_assert(kSteps % kChunk == 0, "whole chunks per stage");
};
constexpr unsigned kAll = 0xffffffffu;
}  // namespace

// The prep warp's pass over one landed stage: lane l takes float4 32 i + l of each array (chain l % C, step
// S i + l / C), and writes gp over dy and q over x.
template <int S>
__device__ __forceinline__ void prep_stage(unsigned char* stage, int lane, float m) {
    using G = PrepGeometry<S>;
    float4* x = reinterpret_cast<float4*>(stage) + lane;
    float4* dy = x + G::kArrayBytes / 16;
    const float4* g = dy + G::kArrayBytes / 16;
#pragma unroll 4
    for (int i = 0; i < G::kSteps / S; ++i) {
        const float4 vx = x[32 * i], vd = dy[32 * i], vg = g[32 * i];
        const float4 gp = make_float4(__fmul_rn(vd.x, vg.x), __fmul_rn(vd.y, vg.y), __fmul_rn(vd.z, vg.z),
                                      __fmul_rn(vd.w, vg.w));
        dy[32 * i] = gp;
        x[32 * i] = make_float4(__fmul_rn(gp.x, __fsub_rn(vx.x, m)), __fmul_rn(gp.y, __fsub_rn(vx.y, m)),
                                __fmul_rn(gp.z, __fsub_rn(vx.z, m)), __fmul_rn(gp.w, __fsub_rn(vx.w, m)));
    }
}

// One chain lane's pushes of a stage's `valid` steps (kSum 1: s1 from gp; 2: s2 from q), reading kChunk steps ahead.
template <int S, int kSum, bool kPartial>
__device__ __forceinline__ void chain_stage(float& s, const float4* at, int valid, float r) {
    using G = PrepGeometry<S>;
    constexpr int C = G::kChains, K = G::kChunk;
    float4 cur[K], nxt[K];
#pragma unroll
    for (int k = 0; k < K; ++k) cur[k] = at[C * k];
#pragma unroll 1
    for (int j0 = 0; j0 < G::kSteps; j0 += K) {
        if (j0 + K < G::kSteps) {
#pragma unroll
            for (int k = 0; k < K; ++k) nxt[k] = at[C * (j0 + K + k)];
        }
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (!kPartial || j0 + k < valid) {
                const float v[4] = {cur[k].x, cur[k].y, cur[k].z, cur[k].w};
#pragma unroll
                for (int e = 0; e < 4; ++e) s = kSum == 1 ? __fadd_rn(s, v[e]) : __fmaf_rn(r, v[e], s);
            }
        }
#pragma unroll
        for (int k = 0; k < K; ++k) cur[k] = nxt[k];
    }
}

// grid: (4 * S, rows); block: 128 threads (warp 0 pushes s1, warp 1 s2, warp 2 preps, warp 3 produces). Dynamic
// shared memory: kStages * kStageBytes. Arguments as grad_chain_sums_split<S>'s.
template <int S>
__device__ __forceinline__ void grad_chain_sums_prep(const TensorMap128& x_map, const TensorMap128& dy_map,
                                                     const TensorMap128& g_map, const float* __restrict__ mean,
                                                     const float* __restrict__ rstd, float* __restrict__ chain_sums,
                                                     unsigned* __restrict__ row_done, float* __restrict__ s1_out,
                                                     float* __restrict__ s2_out, int n) {
    using G = PrepGeometry<S>;
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ unsigned long long full[G::kStages], prepped[G::kStages], empty[G::kStages];

    const int seg = blockIdx.x;
    const int row = blockIdx.y;
    const int steps = n / 512;
    const int stages = (steps + G::kSteps - 1) / G::kSteps;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        for (int i = 0; i < G::kStages; ++i) {
            mbar_init(&full[i], 1);
            mbar_init(&prepped[i], 32);  // the prep warp's lanes
            mbar_init(&empty[i], 64);    // both chain warps' lanes
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == 3) {  // the producer
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
        }
        return;
    }
    const float m = mean[row];
    if (warp == 2) {  // the prep warp: each landed stage into its products, in place
        for (int st = 0; st < stages; ++st) {
            const int slot = st % G::kStages;
            mbar_wait(&full[slot], (st / G::kStages) & 1);
            prep_stage<S>(ring + slot * G::kStageBytes, lane, m);
            mbar_arrive(&prepped[slot]);  // release: the chain warps' wait acquires these writes
        }
        return;
    }

    const float r = rstd[row];
    const int c = lane % G::kChains;  // lanes past the block's chains push copies nobody keeps
    float s = 0.f;
    for (int st = 0; st < stages; ++st) {
        const int slot = st % G::kStages;
        const int valid = st + 1 < stages || steps % G::kSteps == 0 ? G::kSteps : steps % G::kSteps;
        mbar_wait(&prepped[slot], (st / G::kStages) & 1);
        // s1 reads gp (over dy), s2 reads q (over x)
        const float4* at = reinterpret_cast<const float4*>(ring + slot * G::kStageBytes + (warp == 0 ? G::kArrayBytes : 0)) + c;
        if (warp == 0) {
            if (valid == G::kSteps) chain_stage<S, 1, false>(s, at, valid, r);
            else chain_stage<S, 1, true>(s, at, valid, r);
        } else {
            if (valid == G::kSteps) chain_stage<S, 2, false>(s, at, valid, r);
            else chain_stage<S, 2, true>(s, at, valid, r);
        }
        mbar_arrive(&empty[slot]);
    }

    float* sums = chain_sums + (size_t)row * 256;  // [128 chains][2]
    if (lane < G::kChains) sums[2 * (seg * G::kChains + lane) + warp] = s;
    __threadfence();  // publish this warp's chain sums before the block counts them
    asm volatile("bar.sync 1, 64;" ::: "memory");  // both chain warps
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

#define GRAD_CHAIN_SUMS_PREP(S)                                                                                    \
    extern "C" __global__ void __launch_bounds__(128) grad_chain_sums_prep##S(                                    \
        const __grid_constant__ TensorMap128 x_map, const __grid_constant__ TensorMap128 dy_map,                  \
        const __grid_constant__ TensorMap128 g_map, const float* __restrict__ mean,                               \
        const float* __restrict__ rstd, float* __restrict__ chain_sums, unsigned* __restrict__ row_done,          \
        float* __restrict__ s1_out, float* __restrict__ s2_out, int n) {                                          \
        grad_chain_sums_prep<S>(x_map, dy_map, g_map, mean, rstd, chain_sums, row_done, s1_out, s2_out, n);       \
    }
GRAD_CHAIN_SUMS_PREP(4)
GRAD_CHAIN_SUMS_PREP(8)
