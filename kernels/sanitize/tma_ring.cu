// Minimal TMA + mbarrier producer/consumer rings for compute-sanitizer's racecheck: the protocol of
// kernels/chain_stats_tma.cu (same tensor map, ring depth, stage size, read-ahead, side table written by the
// producer warp's lanes next to each stage, barrier completed without data after the last stage) with the Welford
// arithmetic replaced by an exact integer checksum, so every variant's result is checked bit for bit on the host.
//
// Why: racecheck reports hazards in chain_stats_tma between writes and the consumer loop's reads. These variants
// separate what the tool sees from what the protocol guarantees:
//   ring_ok             the chain kernel's former protocol: lanes store the side table, __syncwarp, lane 0
//                       arrives (ordered, but racecheck reported it; the chain kernels moved to ring_all_arrive)
//   ring_all_arrive     the chain kernels' protocol now: every producer lane arrives on the full barrier (count
//                       32), so each store is released by its own thread's arrive
//   ring_tma_only       no side table: only TMA writes shared memory (the chain kernel's CHAIN_VARIANT=1)
//   ring_in_order       side table, no read-ahead into the next slot and no phantom stage
//   ring_race_side      DELIBERATE RACE: side table stored before waiting for the consumer to release the slot
//   ring_race_late_wait DELIBERATE RACE: the consumer reads a stage before waiting for its TMA copy to land
// Launch: grid (4, rows), 64 threads, dynamic shared memory kStages * (kStageBytes + kSideBytes) (see
// labkit/studies/reliability.py). N a multiple of 512, as for the chain kernel.
#include "async_copy.cuh"

namespace {
constexpr int kSteps = 64;
constexpr int kStages = 6;
constexpr int kAhead = 8;
constexpr int kStageBytes = kSteps * 512;
constexpr int kSideBytes = kSteps * 16;

enum Race { kNoRace = 0, kSideBeforeEmpty = 1, kReadBeforeFull = 2 };

__device__ __forceinline__ unsigned mix(uint4 v) { return v.x + v.y + v.z + v.w; }

struct Slot {
    const uint4* seg;   // this lane's uint4 of step 0
    const uint4* side;  // step 0's four side values
};

template <bool kSide>
__device__ __forceinline__ void read_step(uint4& v, uint4& r, Slot at, int step) {
    v = at.seg[32 * step];
    if (kSide) r = at.side[step];
}

// chain_stats_tma.cu's consume_stage: on entry qv/qr hold this stage's first kAhead steps; on exit the next's.
template <bool kSide, bool kPartial>
__device__ __forceinline__ void consume_stage_ahead(unsigned& acc, uint4 (&qv)[kAhead], uint4 (&qr)[kAhead],
                                                    Slot cur, Slot next, unsigned next_full, unsigned next_parity,
                                                    int valid) {
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
        const uint4 v = qv[j % kAhead];
        const uint4 r = qr[j % kAhead];
        const int ahead = j + kAhead;
        if (ahead < kSteps) {
            read_step<kSide>(qv[j % kAhead], qr[j % kAhead], cur, ahead);
        } else {
            if (ahead == kSteps) mbar_wait(next_full, next_parity);
            read_step<kSide>(qv[j % kAhead], qr[j % kAhead], next, ahead - kSteps);  // after the last stage: phantom
        }
        if (!kPartial || j < valid) acc += mix(v) + (kSide ? mix(r) : 0u);
    }
}

template <bool kSide, bool kAllArrive, bool kReadAhead, int kRace>
__device__ __forceinline__ void ring(const TensorMap128& map, unsigned* out, int n) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ unsigned long long full[kStages], empty[kStages];

    const int w = blockIdx.x;
    const int row = blockIdx.y;
    const int steps = n / 512;
    const int stages = (steps + kSteps - 1) / kSteps;
    unsigned char* ring_data = smem;
    unsigned char* sides = smem + kStages * kStageBytes;
    const int lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        for (int i = 0; i < kStages; ++i) {
            mbar_init(&full[i], kSide && kAllArrive ? 32 : 1);
            mbar_init(&empty[i], 32);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (threadIdx.x >= 32) {  // producer warp
        for (int st = 0; st < stages; ++st) {
            const int slot = st % kStages;
            const unsigned empty_parity = ((st / kStages) & 1) ^ 1;
            if (kSide) {
                if (kRace != kSideBeforeEmpty) mbar_wait(&empty[slot], empty_parity);
                unsigned* side = reinterpret_cast<unsigned*>(sides + slot * kSideBytes);
                for (int i = lane; i < 4 * kSteps; i += 32) side[i] = 4u * st * kSteps + i + 1;
                if (kRace == kSideBeforeEmpty) mbar_wait(&empty[slot], empty_parity);  // too late for the stores
                if (kAllArrive) {
                    if (lane != 0) mbar_arrive(&full[slot]);
                } else {
                    __syncwarp();  // lane 0's arrive below releases the other lanes' stores too
                }
            } else {
                mbar_wait(&empty[slot], empty_parity);
            }
            if (lane == 0) {
                mbar_expect_tx(&full[slot], kStageBytes);
                tensor_copy_4d(ring_data + slot * kStageBytes, &map, 0, w, st * kSteps, row, &full[slot]);
            }
        }
        // The read-ahead consumer waits for the slot after the last stage: complete its barrier without data.
        const bool arrives = kSide && kAllArrive ? true : lane == 0;
        if (kReadAhead && arrives && stages > 0) {
            mbar_wait(&empty[stages % kStages], ((stages / kStages) & 1) ^ 1);
            mbar_arrive(&full[stages % kStages]);
        }
        return;
    }

    const unsigned full0 = smem_addr(full), empty0 = smem_addr(empty);
    const uint4* const seg0 = reinterpret_cast<const uint4*>(ring_data) + lane;
    const uint4* const side0 = reinterpret_cast<const uint4*>(sides);
    unsigned acc = 0;
    if (kReadAhead) {
        uint4 qv[kAhead], qr[kAhead];
#pragma unroll
        for (int i = 0; i < kAhead; ++i) qv[i] = qr[i] = make_uint4(0, 0, 0, 0);
        int slot = 0;
        unsigned parity = 0;
        if (stages > 0) {
            mbar_wait(full0, 0u);
#pragma unroll
            for (int i = 0; i < kAhead; ++i) read_step<kSide>(qv[i], qr[i], Slot{seg0, side0}, i);
        }
        for (int st = 0; st < stages; ++st) {
            const int next = slot + 1 == kStages ? 0 : slot + 1;
            const unsigned next_parity = next == 0 ? parity ^ 1u : parity;
            const Slot cur{seg0 + slot * (kStageBytes / 16), side0 + slot * kSteps};
            const Slot nxt{seg0 + next * (kStageBytes / 16), side0 + next * kSteps};
            const int valid = min(kSteps, steps - st * kSteps);
            if (valid == kSteps)
                consume_stage_ahead<kSide, false>(acc, qv, qr, cur, nxt, full0 + 8 * next, next_parity, valid);
            else
                consume_stage_ahead<kSide, true>(acc, qv, qr, cur, nxt, full0 + 8 * next, next_parity, valid);
            mbar_arrive(empty0 + 8 * slot);
            slot = next;
            parity = next_parity;
        }
    } else {
        for (int st = 0; st < stages; ++st) {
            const int slot = st % kStages;
            const unsigned parity = (st / kStages) & 1;
            if (kRace != kReadBeforeFull) mbar_wait(full0 + 8 * slot, parity);
            const Slot cur{seg0 + slot * (kStageBytes / 16), side0 + slot * kSteps};
            const int valid = min(kSteps, steps - st * kSteps);
            for (int j = 0; j < valid; ++j) {
                uint4 v, r = make_uint4(0, 0, 0, 0);
                read_step<kSide>(v, r, cur, j);
                acc += mix(v) + (kSide ? mix(r) : 0u);
            }
            if (kRace == kReadBeforeFull) mbar_wait(full0 + 8 * slot, parity);  // too late for the reads above
            mbar_arrive(empty0 + 8 * slot);
        }
    }
    out[(row * 4 + w) * 32 + lane] = acc;
}
}  // namespace

#define RING_KERNEL(name, side, all_arrive, ahead, race)                                                     \
    extern "C" __global__ void __launch_bounds__(64)                                                        \
        name(const __grid_constant__ TensorMap128 map, unsigned* __restrict__ out, int n) {                 \
        ring<side, all_arrive, ahead, race>(map, out, n);                                                   \
    }

RING_KERNEL(ring_ok, true, false, true, kNoRace)
RING_KERNEL(ring_all_arrive, true, true, true, kNoRace)
RING_KERNEL(ring_tma_only, false, false, true, kNoRace)
RING_KERNEL(ring_in_order, true, false, false, kNoRace)
RING_KERNEL(ring_race_side, true, false, false, kSideBeforeEmpty)
RING_KERNEL(ring_race_late_wait, false, false, false, kReadBeforeFull)
