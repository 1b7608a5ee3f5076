// Dev variant (data/dev/staged_prefetch/): kernels/rows_staged.cu with one change. Where a row is longer than the
// ring, the output group re-reads the row's first (early) chunks from memory after writing its kept ones, and ncu
// (data/dev/staged_out/) has those re-reads coming from DRAM (339 MB read at 1024 x 65536, x being 268), each waited
// on one chunk at a time. Here thread 0 of the output group asks L2 for the row's early chunks
// STAGED_PREFETCH_LEAD chunks before it reaches them (cp.async.bulk.prefetch.L2), so the re-reads meet L2. Nothing
// else changes: the same values reach the same arithmetic, so the same bits.
#ifndef STAGED_PREFETCH_LEAD
#define STAGED_PREFETCH_LEAD 4
#endif
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
// A push reads its four reciprocals as one broadcast float4.
#include "welford_ln.cuh"
#include "async_copy.cuh"

#ifndef STAGED_OUT_WARPS
#define STAGED_OUT_WARPS 16  // rows_staged.OUT_THREADS / 32: faster than 8 at 6 of 8 shapes, 4% slower at N = 4096
#endif
#ifndef STAGED_OUT_AHEAD
#define STAGED_OUT_AHEAD 1  // 2 spills the operands to local memory: 2x slower (data/dev/rows_staged/variants.log)
#endif

namespace {
constexpr int kThreads = 128;                  // torch's threads per row: the chain group
constexpr int kPerThread = 8;                  // float4s of each chain in one chunk
constexpr int kChunk = kThreads * kPerThread;  // float4s per chunk: 16 KiB
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

__device__ __forceinline__ void chain_group_sync() { asm volatile("bar.sync 1, 128;" ::: "memory"); }

// A chunk's pushes for this chain: kFull when every chain has all kPerThread float4s in it (no guard, so the
// shared-memory reads can all be issued ahead of the dependent pushes).
template <bool kFull>
__device__ __forceinline__ void push_chunk(WelfordLN& s, const float4* at, const float4* rc, int j0, int n4) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i)
        if (kFull || j0 + kThreads * i < n4) welford_push4_uncounted(s, at[kThreads * i], rc[i]);
}

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
    for (int q = tid; q < steps; q += blockDim.x)
        recip[q] = make_float4(1.f / (float)(4 * q + 1), 1.f / (float)(4 * q + 2), 1.f / (float)(4 * q + 3),
                               1.f / (float)(4 * q + 4));
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
        const int lane = tid & 31;
        const int warp = tid >> 5;
        const unsigned full0 = smem_addr(full), empty0 = smem_addr(empty_chain);
        // This chain's pushes: 4 per float4 it holds. Counted once (welford_push_uncounted): exact in float.
        const float count = tid < n4 ? (float)(4 * ((n4 - 1 - tid) / kThreads + 1)) : 0.f;
        const int full_chunks = n4 / kChunk;
        int slot = 0;
        unsigned use = 0;
        int k = 0;
        for (int r = blockIdx.x; r < rows; r += gridDim.x, ++k) {
            WelfordLN s{0.f, 0.f, 0.f};
            for (int c = 0; c < chunks; ++c) {
                mbar_wait(full0 + 8 * slot, use & 1u);
                const float4* at = ring + (size_t)slot * kChunk + tid;
                if (c < full_chunks)
                    push_chunk<true>(s, at, recip + c * kPerThread, c * kChunk + tid, n4);
                else
                    push_chunk<false>(s, at, recip + c * kPerThread, c * kChunk + tid, n4);
                if (c < early) mbar_arrive(empty0 + 8 * slot);
                if (++slot == slots) {
                    slot = 0;
                    ++use;
                }
            }
            s.count = count;
            s = welford_warp_reduce(s);
            // torch's 4-warp tree on the four warps' states, computed by every thread from shared memory: one
            // barrier per row. The states alternate by row parity: a warp can be one row ahead, never two.
            float* st = states + 12 * (k & 1);
            if (lane == 0) {
                st[3 * warp] = s.mean;
                st[3 * warp + 1] = s.m2;
                st[3 * warp + 2] = s.count;
            }
            chain_group_sync();
            const WelfordLN q[4] = {{st[0], st[1], st[2]}, {st[3], st[4], st[5]}, {st[6], st[7], st[8]},
                                    {st[9], st[10], st[11]}};
            float m, rs;
            welford_finish(welford_tree4(q), n, eps, &m, &rs);
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
#if STAGED_PREFETCH_LEAD > 0
        if (o == 0 && early > 0 && at[0].step == max(kept - STAGED_PREFETCH_LEAD, 0)) {
            const float4* first = x + (size_t)at[0].r * n4;
            for (int c = 0; c < early; ++c)  // early chunks are whole: only a row's last chunk can be partial
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(first + (size_t)c * kChunk),
                             "r"(16u * kChunk) : "memory");
        }
#endif
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
