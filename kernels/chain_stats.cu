// Chain-parallel reference-order LayerNorm statistics (sm_90).
//
// Contract kept: torch's vectorized-path statistics, bit for bit. In torch, thread t (0..127) of a row's block
// runs an independent Welford chain over float4 vectors t, t+128, t+256, ... until the warp merge. The bits
// depend only on each chain's push order and on the merge tree, not on where a chain runs or how its data
// arrives. So here each (row, warp) pair gets its own block: one consumer warp runs that warp's 32 chains,
// one producer thread streams their data into a shared-memory ring with bulk async copies (TMA), so the
// dependent push chain never waits on DRAM. Reciprocals 1/n come from a table of correctly rounded IEEE
// quotients (the same bits as torch's in-loop 1.f/n, without the division's latency on the chain).
// The consumer warp does torch's shuffle-down merge; the last of a row's four blocks to finish does torch's
// inter-warp tree and writes mean and rstd.
#include "welford_ln.cuh"
#include "async_copy.cuh"

namespace {

constexpr int kLanes = 32;
constexpr int kThreadsPerRow = 128;             // torch's block: chains per row
constexpr int kSegmentBytes = kLanes * 16;      // one step of one warp: 32 float4
constexpr int kStepsPerStage = 8;
constexpr int kRecipBytes = kStepsPerStage * 16;  // 4 reciprocals per step

}  // namespace

// Correctly rounded reciprocals: table[i] = 1.f / (i + 1), IEEE division (--prec-div=true), as torch's push.
extern "C" __global__ void reciprocal_table(float* __restrict__ table, int count) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) table[i] = 1.f / (float)(i + 1);
}

// One block runs kWarps consecutive warps of torch's block for one row (kWarps = 4: the whole row, so each
// stage is one contiguous bulk copy; kWarps = 1: one 512-byte copy per step). Threads: 32 * (kWarps + 1);
// the last warp's lane 0 produces. grid: (4 / kWarps, rows).
// Dynamic shared memory: kStagesW * (kStepsPerStage * kWarps * 512 + kRecipBytes).
template <int kWarps, int kStagesW>
__device__ __forceinline__ void chain_stats_impl(const float* __restrict__ x, const float* __restrict__ recip,
                                                 float* __restrict__ warp_state, unsigned* __restrict__ row_done,
                                                 float* __restrict__ mean, float* __restrict__ rstd, int n,
                                                 float eps) {
    constexpr int kBlockSeg = kWarps * kSegmentBytes;       // one step of this block
    constexpr int kStageBytesW = kStepsPerStage * kBlockSeg;
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ unsigned long long full[kStagesW], empty[kStagesW];

    const int row = blockIdx.y;
    const int n4 = n / 4;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;                    // kWarps = producer
    const int first_warp = blockIdx.x * kWarps;           // torch's threadIdx.y of this block's first warp
    const int first = kLanes * first_warp;                 // first vector index of this block
    const int steps = n4 > first ? (n4 - first + kThreadsPerRow - 1) / kThreadsPerRow : 0;
    const int stages = (steps + kStepsPerStage - 1) / kStepsPerStage;
    unsigned char* data = smem;
    unsigned char* recs = smem + kStagesW * kStageBytesW;

    if (threadIdx.x == 0) {
        for (int i = 0; i < kStagesW; ++i) {
            mbar_init(&full[i], 1);
            mbar_init(&empty[i], kWarps * 32);  // every consumer lane
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == kWarps) {
        if (lane == 0) {
            const char* row_bytes = reinterpret_cast<const char*>(x + (size_t)row * n);
            for (int st = 0; st < stages; ++st) {
                const int slot = st % kStagesW;
                mbar_wait(&empty[slot], ((st / kStagesW) & 1) ^ 1);
                const int k0 = st * kStepsPerStage;
                const int k1 = min(k0 + kStepsPerStage, steps);
                unsigned char* dst = data + slot * kStageBytesW;
                if (kWarps == 4) {
                    // Steps of the whole row are contiguous: one copy for the stage.
                    const int v0 = k0 * kThreadsPerRow;
                    const unsigned bytes = (min(k1 * kThreadsPerRow, n4) - v0) * 16;
                    mbar_expect_tx(&full[slot], bytes + (k1 - k0) * 16);
                    bulk_copy(recs + slot * kRecipBytes, recip + 4 * k0, (k1 - k0) * 16, &full[slot]);
                    bulk_copy(dst, row_bytes + (size_t)v0 * 16, bytes, &full[slot]);
                } else {
                    unsigned bytes = (k1 - k0) * 16;
                    for (int k = k0; k < k1; ++k) bytes += min(kWarps * kLanes, n4 - (first + k * kThreadsPerRow)) * 16;
                    mbar_expect_tx(&full[slot], bytes);
                    bulk_copy(recs + slot * kRecipBytes, recip + 4 * k0, (k1 - k0) * 16, &full[slot]);
                    for (int k = k0; k < k1; ++k) {
                        const int v0 = first + k * kThreadsPerRow;
                        bulk_copy(dst + (k - k0) * kBlockSeg, row_bytes + (size_t)v0 * 16,
                                  min(kWarps * kLanes, n4 - v0) * 16, &full[slot]);
                    }
                }
            }
        }
        return;
    }

    // Consumer warp `warp` runs the chains of torch's threads 32 * (first_warp + warp) + lane.
    const int my_first = first + kLanes * warp + lane;
    WelfordLN s{0.f, 0.f, 0.f};
    int pushes = 0;  // chains of one block may differ in length by a step (ragged N / 4 % 128)
    for (int st = 0; st < stages; ++st) {
        const int slot = st % kStagesW;
        mbar_wait(&full[slot], (st / kStagesW) & 1);
        const float4* vec = reinterpret_cast<const float4*>(data + slot * kStageBytesW) + kLanes * warp + lane;
        const float4* rc = reinterpret_cast<const float4*>(recs + slot * kRecipBytes);
        const int k0 = st * kStepsPerStage;
        // Read the whole stage first so shared-memory latency overlaps the dependent pushes.
        float4 v[kStepsPerStage], r[kStepsPerStage];
#pragma unroll
        for (int i = 0; i < kStepsPerStage; ++i) {
            v[i] = vec[i * (kBlockSeg / 16)];
            r[i] = rc[i];
        }
#pragma unroll
        for (int i = 0; i < kStepsPerStage; ++i) {
            if (k0 + i < steps && my_first + (k0 + i) * kThreadsPerRow < n4) {
                welford_push4_uncounted(s, v[i], r[i]);
                pushes += 4;
            }
        }
        // Each lane releases the slot after its own reads. One arrive per warp after __syncwarp is ordered too,
        // but compute-sanitizer's racecheck does not follow that chain and reported the next copy into the slot
        // against every lane's reads (kernels/sanitize/tma_ring.cu shows the same on the full side).
        mbar_arrive(&empty[slot]);
    }

    s.count = (float)pushes;
    welford_row_merge_across_blocks(s, row, first_warp + warp, n, eps, warp_state, row_done, mean, rstd);
}

// Arguments of both: x [rows, n], recip (reciprocal_table, >= 4 * ceil(n / 512) entries), warp_state
// [rows, 4, 3] scratch, row_done [rows] (zero on entry, left zero), mean [rows], rstd [rows], n, eps.
extern "C" __global__ void __launch_bounds__(64) chain_stats_w1(const float* x, const float* recip,
                                                                float* warp_state, unsigned* row_done,
                                                                float* mean, float* rstd, int n, float eps) {
    chain_stats_impl<1, 16>(x, recip, warp_state, row_done, mean, rstd, n, eps);
}

extern "C" __global__ void __launch_bounds__(160) chain_stats_w4(const float* x, const float* recip,
                                                                 float* warp_state, unsigned* row_done,
                                                                 float* mean, float* rstd, int n, float eps) {
    chain_stats_impl<4, 12>(x, recip, warp_state, row_done, mean, rstd, n, eps);
}
