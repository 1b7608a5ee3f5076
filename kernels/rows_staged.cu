// Reference-order LayerNorm for long rows: torch's per-row arithmetic with x staged in shared memory by bulk
// asynchronous copies (TMA). x is read from memory once wherever a row fits the ring, and the next rows load while
// this row's arithmetic runs.
//
// Contract kept: torch's vectorized-path arithmetic (welford_ln.cuh). Thread t of torch's 128 pushes float4s t,
// t + 128, ... of its row in order. Each warp shuffles down, the 4-warp tree merges the warps, and the output is
// gamma * (rstd * (x - mean)) + beta. Only where the bytes come from differs from rows_fused.cu.
//
// Schedule: a persistent grid with one block per SM. Block b takes rows b, b + gridDim.x, .... Three warp-specialized
// groups form a pipeline per block:
// - Producer warp. It streams every row's chunks (kChunk float4s: the next kPerThread float4s of each of the 128
//   chains) through a ring of `slots` chunks of shared memory.
// - Chain group (warps 0-3, torch's (32, 4) block). It pushes each chunk as it lands, merges in torch's trees, and
//   hands mean and rstd to the output group through a small ring of statistics.
// - Output group (kOutWarps warps). It writes the row while the chain group pushes the next one. The row's kept
//   chunks come from the ring and are released once their values are used. The earlier chunks of a row longer than
//   the ring come from memory: the chain group released them once pushed, so that the row could stream through.
//   The global operands of each chunk (gamma, beta, and x where it is re-read) are loaded kOutAhead chunks ahead,
//   across rows too. Its width is what keeps enough of those loads in flight: 16 warps one chunk ahead measured
//   faster than 8 (2048 x 16384: 77 against 99 us under graph replay), and two chunks ahead spilled.
// Why groups: one group that did both measured 3-4x under the copy ceiling (data/dev/rows_staged/). Each row then
// paid its chains, its trees' divisions and a round trip to L2 for gamma and beta, one after another.
//
// Releases: a row's early chunks are released by the chain group, its kept chunks by the output group. Each has its
// own empty barrier per slot, and the producer waits on the one that owns the slot's previous chunk.
//
// Reciprocals: the block first writes the table 1.f/k by IEEE division (the quotient torch's push divides in place).
// A push reads its four reciprocals as one broadcast float4. The chain group's pieces (pushes, reciprocals, the
// row's finish) are staged_chain.cuh's, which rows_cluster.cu shares.
#include "welford_ln.cuh"
#include "async_copy.cuh"
#include "staged_chain.cuh"

#ifndef STAGED_OUT_WARPS
#define STAGED_OUT_WARPS 16  // rows_staged.OUT_THREADS / 32: faster than 8 at 6 of 8 shapes, 4% slower at N = 4096
#endif
#ifndef STAGED_OUT_AHEAD
#define STAGED_OUT_AHEAD 1  // 2 spills the operands to local memory: 2x slower (data/dev/rows_staged/variants.log)
#endif

namespace {
constexpr int kOutWarps = STAGED_OUT_WARPS;
constexpr int kOutAhead = STAGED_OUT_AHEAD;    // chunks whose global operands are in flight ahead of the one written
constexpr int kOutThreads = 32 * kOutWarps;
constexpr int kOutPer = kChunk / kOutThreads;  // float4s of a chunk per output thread
constexpr int kStatsRing = 4;                  // rows the chain group may run ahead of the output group
constexpr int kBlock = kThreads + kOutThreads + 32;
}  // namespace

#ifndef STAGED_EARLY_RELEASE
#define STAGED_EARLY_RELEASE 0  // 1: release slots and statistics right after reading them (debugging only)
#endif

// One output thread's global operands for one chunk of one row.
struct OutOps {
    float4 g[kOutPer], b[kOutPer], x[kOutPer];
};

// Where the output group is: row r (the block's k-th), the step-th chunk it writes of that row.
struct OutStep {
    int r, step, k;
    __device__ __forceinline__ OutStep next(int chunks, int grid) const {
        return step + 1 < chunks ? OutStep{r, step + 1, k} : OutStep{r + grid, 0, k + 1};
    }
};

__device__ __forceinline__ void load_ops(OutOps& o, const float4* __restrict__ x, const float4* __restrict__ gamma,
                                         const float4* __restrict__ beta, size_t row_at, int j0, int n4,
                                         bool from_memory) {
#pragma unroll
    for (int i = 0; i < kOutPer; ++i) {
        const int j = j0 + kOutThreads * i;
        if (j < n4) {
            o.g[i] = gamma[j];
            o.b[i] = beta[j];
            if (from_memory) o.x[i] = x[row_at + j];
        }
    }
}

// Arguments: x [rows, n/4] float4, gamma/beta [n/4], y [rows, n/4], mean/rstd [rows], rows, n, eps, slots.
// grid: (min(rows, SMs),); block: kBlock threads (chain group, output group, producer warp). Dynamic shared
// memory (labkit.ops.rows_staged.smem_bytes): the ring, the reciprocals, the barriers, the statistics ring and the
// warp states.
extern "C" __global__ void __launch_bounds__(kBlock, 1) rows_staged(
    const float4* __restrict__ x, const float4* __restrict__ gamma, const float4* __restrict__ beta,
    float4* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd, int rows, int n, float eps,
    int slots) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int n4 = n / 4;
    const int chunks = (n4 + kChunk - 1) / kChunk;
    const int kept = min(chunks, slots - 1);           // one slot is always left to the next row's first chunk
    const int early = chunks - kept;                   // chunks re-read from memory for the output
    const int steps = (n4 + kThreads - 1) / kThreads;  // float4s of the longest chain
    float4* const ring = reinterpret_cast<float4*>(smem);
    float4* const recip = ring + (size_t)slots * kChunk;
    unsigned long long* const full = reinterpret_cast<unsigned long long*>(recip + steps);
    unsigned long long* const empty_chain = full + slots;  // released by the chain group: early chunks
    unsigned long long* const empty_out = empty_chain + slots;  // by the output group: kept chunks
    unsigned long long* const stats_full = empty_out + slots;
    unsigned long long* const stats_empty = stats_full + kStatsRing;
    float2* const stats = reinterpret_cast<float2*>(stats_empty + kStatsRing);  // (mean, rstd) per ring entry
    float* const states = reinterpret_cast<float*>(stats + kStatsRing);  // [row parity][warp][mean, m2, count]
    const int tid = threadIdx.x;

    if (tid == 0) {
        for (int i = 0; i < slots; ++i) {
            mbar_init(&full[i], 1);  // the producer's expect_tx; the copy's bytes complete it
            mbar_init(&empty_chain[i], kThreads);
            mbar_init(&empty_out[i], kOutThreads);
        }
        for (int i = 0; i < kStatsRing; ++i) {
            mbar_init(&stats_full[i], 1);
            mbar_init(&stats_empty[i], kOutThreads);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    fill_reciprocals(recip, steps);
    __syncthreads();

    if (tid >= kThreads + kOutThreads) {  // the producer warp; lane 0 issues
        if (tid != kThreads + kOutThreads) return;
        int slot = 0, p = 0;
        unsigned chain_phase = 0, out_phase = 0;  // per slot: the parity of the next release to wait for
        for (int r = blockIdx.x; r < rows; r += gridDim.x) {
            const float4* src = x + (size_t)r * n4;
            for (int c = 0; c < chunks; ++c, ++p) {
                if (p >= slots) {  // wait until whoever owns the slot's previous chunk has released it
                    if ((p - slots) % chunks < early) {
                        mbar_wait(&empty_chain[slot], (chain_phase >> slot) & 1u);
                        chain_phase ^= 1u << slot;
                    } else {
                        mbar_wait(&empty_out[slot], (out_phase >> slot) & 1u);
                        out_phase ^= 1u << slot;
                    }
                }
                const unsigned bytes = 16u * (unsigned)min(kChunk, n4 - c * kChunk);
                mbar_expect_tx(&full[slot], bytes);
                bulk_copy(ring + (size_t)slot * kChunk, src + (size_t)c * kChunk, bytes, &full[slot]);
                if (++slot == slots) slot = 0;
            }
        }
        return;
    }

    if (tid < kThreads) {  // the chain group: torch's 128 threads
        const unsigned full0 = smem_addr(full), empty0 = smem_addr(empty_chain);
        const float count = chain_count(tid, n4);
        const int full_chunks = n4 / kChunk;
        int slot = 0;
        unsigned use = 0;
        int k = 0;
        for (int r = blockIdx.x; r < rows; r += gridDim.x, ++k) {
            WelfordLN s{0.f, 0.f, 0.f};
            for (int c = 0; c < chunks; ++c) {
                mbar_wait(full0 + 8 * slot, use & 1u);
                push_staged(s, ring + (size_t)slot * kChunk, recip, c, full_chunks, tid, n4);
                if (c < early) mbar_arrive(empty0 + 8 * slot);
                if (++slot == slots) {
                    slot = 0;
                    ++use;
                }
            }
            s.count = count;
            float m, rs;
            chain_group_finish(s, states, k, n, eps, &m, &rs);
            if (tid == 0) {
                mean[r] = m;
                rstd[r] = rs;
                const int e = k % kStatsRing;
                mbar_wait(&stats_empty[e], ((k / kStatsRing) & 1) ^ 1);  // a fresh barrier's previous phase is done
                stats[e] = make_float2(m, rs);
                mbar_arrive(&stats_full[e]);
            }
        }
        return;
    }

    // The output group: rows in the block's order, each row's kept chunks first (their release lets the producer
    // go on), then its early chunks; kOutAhead chunks' global operands in flight ahead of the one being written
    // (across rows too: gamma, beta and a re-read x do not depend on the row's statistics).
    const int o = tid - kThreads;
    const unsigned full0 = smem_addr(full), empty0 = smem_addr(empty_out);
    auto chunk_at = [&](int step) { return step < kept ? early + step : step - kept; };
    OutStep at[kOutAhead + 1];
    OutOps ops[kOutAhead + 1];
    at[0] = OutStep{(int)blockIdx.x, 0, 0};
#pragma unroll
    for (int i = 1; i <= kOutAhead; ++i) at[i] = at[i - 1].next(chunks, gridDim.x);
#pragma unroll
    for (int i = 0; i < kOutAhead; ++i)
        if (at[i].r < rows) {
            const int c = chunk_at(at[i].step);
            load_ops(ops[i], x, gamma, beta, (size_t)at[i].r * n4, c * kChunk + o, n4, c < early);
        }
    float m = 0.f, rs = 0.f;
    while (at[0].r < rows) {
        if (at[kOutAhead].r < rows) {
            const int c = chunk_at(at[kOutAhead].step);
            load_ops(ops[kOutAhead], x, gamma, beta, (size_t)at[kOutAhead].r * n4, c * kChunk + o, n4, c < early);
        }
        const int k = at[0].k;
        if (at[0].step == 0) {
            const int e = k % kStatsRing;
            mbar_wait(&stats_full[e], (k / kStatsRing) & 1);
            const float2 ms = stats[e];
            m = ms.x;
            rs = ms.y;
#if STAGED_EARLY_RELEASE
            mbar_arrive(&stats_empty[e]);
#endif
        }
        const int c = chunk_at(at[0].step);
        const OutOps& cur = ops[0];
        float4* dst = y + (size_t)at[0].r * n4 + c * kChunk + o;
        const int j0 = c * kChunk + o;
        if (c >= early) {
            const int pos = k * chunks + c;
            const int slot = pos % slots;
            mbar_wait(full0 + 8 * slot, (pos / slots) & 1);  // completed already: the chain group pushed it
            const float4* src = ring + (size_t)slot * kChunk + o;
            float4 v[kOutPer];
#pragma unroll
            for (int i = 0; i < kOutPer; ++i)
                if (j0 + kOutThreads * i < n4) v[i] = src[kOutThreads * i];
#if STAGED_EARLY_RELEASE
            mbar_arrive(empty0 + 8 * slot);
#endif
#pragma unroll
            for (int i = 0; i < kOutPer; ++i)
                if (j0 + kOutThreads * i < n4)
                    dst[kOutThreads * i] = layer_norm_affine4(v[i], cur.g[i], cur.b[i], m, rs);
#if !STAGED_EARLY_RELEASE
            // Released once its values are used: an arrive right after the reads were issued let the next copy
            // overwrite a slot still being read (data/dev/rows_staged/race.log).
            mbar_arrive(empty0 + 8 * slot);
#endif
        } else {
#pragma unroll
            for (int i = 0; i < kOutPer; ++i)  // a whole chunk: only a row's last chunk can be partial
                dst[kOutThreads * i] = layer_norm_affine4(cur.x[i], cur.g[i], cur.b[i], m, rs);
        }
#if !STAGED_EARLY_RELEASE
        if (at[0].step == chunks - 1) mbar_arrive(&stats_empty[k % kStatsRing]);  // the row's m and rs are used
#endif
#pragma unroll
        for (int i = 0; i < kOutAhead; ++i) {  // constant indices once unrolled: the operands stay in registers
            at[i] = at[i + 1];
            ops[i] = ops[i + 1];
        }
        at[kOutAhead] = at[kOutAhead - 1].next(chunks, gridDim.x);
    }
}
