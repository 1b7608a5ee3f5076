// Reference-order LayerNorm for rows longer than one SM's shared memory holds well: torch's per-row arithmetic with
// each row held across the shared memory of a cluster of two CTAs, so that x is read from memory once.
//
// Contract kept, as kernels/rows_staged.cu: thread t of torch's 128 pushes float4s t, t + 128, ... of its row in
// order (welford_push4_uncounted with the reciprocal table), then torch's warp reduction, its 4-warp tree and
// welford_finish; the output is layer_norm_affine4. Only where each chunk's pushes run differs: CTA i of the
// cluster holds the row's chunks [i h, (i + 1) h) and pushes them, having received the 128 chains' states from
// CTA i - 1 (distributed shared memory), then hands them to CTA i + 1; the last CTA finishes the row and sends mean
// and rstd to every CTA's output group (its own stores them to memory).
//
// Per CTA (one per SM, persistent): a producer warp streams its part of each of the cluster's rows into a ring of
// `slots` 16-KiB chunks (bulk copies); the chain group (torch's 128 threads) pushes them; the output group (16
// warps) writes them once the row's statistics arrive and releases the slots. Cluster q of G takes rows q, q + G,
// .... Why a cluster: rows_staged's ring holds 12 of a 256-KiB row's 16 chunks, so it re-reads the rest from DRAM,
// and a row's chain, finish and output run mostly one after another; here each CTA holds half a row and the ring
// has room for the next row's part meanwhile (data/dev/rows_cluster/: 165 against 200 us at 1024 x 65536).
//
// Hand-offs between CTAs (states, statistics) are st.async stores that complete the receiver's mbarrier
// transaction, so the sender waits for no round trip: a store then a release at cluster scope stalled a chain
// thread about 0.7 us a row under load, which made the cluster slower than rows_staged (data/dev/rows_cluster/
// backoff.json, trace4_v1.json). Releases of what a thread has only read are relaxed arrives made after it has used
// the values, or arrives with release semantics where it never uses them.
//
// The chain group's pushes, reciprocals and finish are staged_chain.cuh's, as rows_staged.cu's.
#include "welford_ln.cuh"
#include "async_copy.cuh"
#include "staged_chain.cuh"

namespace {
constexpr int kOutWarps = 16;
constexpr int kOutThreads = 32 * kOutWarps;
constexpr int kOutPer = kChunk / kOutThreads;  // float4s of a chunk per output thread
constexpr int kStatsRing = 4;                  // rows the statistics may run ahead of the output groups
constexpr int kRelayRing = 2;                  // rows a CTA's chains may run ahead of the next CTA's
constexpr int kBlock = kThreads + kOutThreads + 32;
}  // namespace

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// The address in CTA `rank`'s shared memory of what is at `local` (a shared::cta address) in this CTA's.
__device__ __forceinline__ unsigned peer_addr(unsigned local, unsigned rank) {
    unsigned a;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(local), "r"(rank));
    return a;
}

// Arrive on a barrier in a peer CTA (or this one), releasing this thread's earlier writes to the cluster.
__device__ __forceinline__ void arrive_peer(unsigned addr) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(addr) : "memory");
}

// Two floats into a peer CTA's shared memory that complete 8 bytes of the transaction count of the peer's barrier
// `bar` (both shared::cluster addresses): the data and its arrival travel together, so the sender waits for no
// round trip (a store then a release at cluster scope stalled the sending thread ~0.7 us under load: backoff.json).
// The receiver's barrier must expect the bytes: an arrive.expect_tx per phase (arrive_expect_tx).
__device__ __forceinline__ void st_async_peer(unsigned addr, float a, float b, unsigned bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(addr),
                 "f"(a), "f"(b), "r"(bar)
                 : "memory");
}

__device__ __forceinline__ void arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// Arrive on a barrier in a peer CTA without ordering this thread's earlier memory operations: for releases of what
// this thread has only read (its values used already, so the reads are complete). A release at cluster scope waits
// until the thread's earlier global stores are performed, a y chunk per output warp and row.
__device__ __forceinline__ void arrive_peer_relaxed(unsigned addr) {
    asm volatile("mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%0];" ::"r"(addr) : "memory");
}

// Waits on a local barrier: at cluster scope (acquire.cluster) for barriers that peers complete (their writes into
// this CTA), at CTA scope for the ring's copies and releases (async_copy.cuh's mbar_wait). Here, not in
// async_copy.cuh: this is the one cluster kernel.
__device__ __forceinline__ void mbar_wait_cluster(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}

__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

template <int kC>
__device__ __forceinline__ void rows_cluster(const float4* __restrict__ x, const float4* __restrict__ gamma,
                                             const float4* __restrict__ beta, float4* __restrict__ y,
                                             float* __restrict__ mean, float* __restrict__ rstd, int rows, int n,
                                             float eps, int slots) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int n4 = n / 4;
    const int chunks = (n4 + kChunk - 1) / kChunk;
    const int per_cta = (chunks + kC - 1) / kC;
    const unsigned rank = cluster_rank();
    const int first = min(chunks, (int)rank * per_cta);  // this CTA's chunks: [first, first + own)
    const int own = min(chunks, first + per_cta) - first;
    const int steps = (n4 + kThreads - 1) / kThreads;
    const int clusters = gridDim.x / kC;
    const int cluster = blockIdx.x / kC;
    const bool last = rank == kC - 1;

    float4* const ring = reinterpret_cast<float4*>(smem);
    float4* const recip = ring + (size_t)slots * kChunk;
    unsigned long long* const full = reinterpret_cast<unsigned long long*>(recip + steps);
    unsigned long long* const empty = full + slots;                 // released by the output group
    unsigned long long* const stats_full = empty + slots;           // 8 bytes from the last CTA (st.async)
    unsigned long long* const stats_empty = stats_full + kStatsRing;  // last CTA only: every output warp arrives
    unsigned long long* const relay_full = stats_empty + kStatsRing;  // 128 x 8 bytes from the previous CTA
    unsigned long long* const relay_empty = relay_full + kRelayRing;  // the next CTA's chains arrive
    float2* const stats = reinterpret_cast<float2*>(relay_empty + kRelayRing);  // (mean, rstd) per entry
    float2* const relay = stats + kStatsRing;                  // [entry][chain] (mean, m2) from the previous CTA
    float* const states = reinterpret_cast<float*>(relay + kRelayRing * kThreads);  // [row parity][warp][3]
    const int tid = threadIdx.x;
    // The plan's layout (labkit.ops.rows_cluster.smem_bytes) must hold what is indexed here, and a CTA's part of a
    // row must fit its ring (the plan keeps own <= slots - 1; more would hang): else an error, not a corruption.
    unsigned dynamic_smem;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_smem));
    if (reinterpret_cast<unsigned char*>(states + 2 * 4 * 3) - smem > dynamic_smem || own > slots) __trap();

    if (tid == 0) {
        for (int i = 0; i < slots; ++i) {
            mbar_init(&full[i], 1);
            mbar_init(&empty[i], kOutThreads);
        }
        for (int i = 0; i < kStatsRing; ++i) {
            mbar_init(&stats_full[i], 1);
            mbar_init(&stats_empty[i], kOutWarps * kC);
        }
        for (int i = 0; i < kRelayRing; ++i) {
            mbar_init(&relay_full[i], 1);
            mbar_init(&relay_empty[i], kThreads);
        }
        // Phase 0 of each barrier that st.async fills expects its bytes; later phases are expected by a thread
        // that consumed the one before (the output group's o = 0, the chain's thread 0).
        for (int i = 0; i < kStatsRing; ++i) arrive_expect_tx(smem_addr(&stats_full[i]), 8);
        for (int i = 0; i < kRelayRing; ++i) arrive_expect_tx(smem_addr(&relay_full[i]), 8 * kThreads);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    fill_reciprocals(recip, steps);
    cluster_sync();  // every CTA's barriers are initialized before any peer arrives on them

    if (tid >= kThreads + kOutThreads) {  // the producer warp; lane 0 issues
        if (tid == kThreads + kOutThreads) {
            int p = 0, q = 0;
            for (int r = cluster; r < rows; r += clusters, ++q) {
                const float4* src = x + (size_t)r * n4;
                for (int u = 0; u < own; ++u, ++p) {
                    const int slot = p % slots;
                    if (p >= slots)
                        mbar_wait(smem_addr(&empty[slot]), ((p - slots) / slots) & 1);
                    const int c = first + u;
                    const unsigned bytes = 16u * (unsigned)min(kChunk, n4 - c * kChunk);
                    mbar_expect_tx(&full[slot], bytes);
                    bulk_copy(ring + (size_t)slot * kChunk, src + (size_t)c * kChunk, bytes, &full[slot]);
                }
            }
        }
    } else if (tid < kThreads) {  // the chain group: torch's 128 threads, relayed across the cluster
        const unsigned full0 = smem_addr(full);
        const float count = chain_count(tid, n4);
        const int full_chunks = n4 / kChunk;
        // Whether this thread pushes a float4 of its CTA's first chunk (the first push reads the relayed state):
        // not where that chunk is the row's partial last one and ends before this thread's column.
        const bool pushes_first = own > 0 && first * kChunk + tid < n4;
        int p = 0, k = 0;
        for (int r = cluster; r < rows; r += clusters, ++k) {
            const int e = k % kRelayRing;
            const unsigned use = (unsigned)(k / kRelayRing) & 1u;
            WelfordLN s{0.f, 0.f, 0.f};
            if (rank > 0) {  // the chains' states after the previous CTA's chunks of this row
                mbar_wait_cluster(smem_addr(&relay_full[e]), use);
                const float2 v = relay[e * kThreads + tid];
                s.mean = v.x;
                s.m2 = v.y;
                // The next phase of this entry cannot complete before every chain thread here has released it
                // (relay_empty), so thread 0 may expect its bytes now.
                if (tid == 0) {
                    arrive_expect_tx(smem_addr(&relay_full[e]), 8 * kThreads);
                }
                // Released once its values are used (a push reads s.mean, so the read is complete, and a relaxed
                // arrive suffices); a thread that pushes nothing here releases at once, with release semantics,
                // which order its read before the arrive (an arrive alone does not wait for a load in flight).
                if (!pushes_first) arrive_peer(peer_addr(smem_addr(&relay_empty[e]), rank - 1));
            }
            for (int u = 0; u < own; ++u, ++p) {
                const int slot = p % slots;
                mbar_wait(full0 + 8 * slot, (p / slots) & 1);
                push_staged(s, ring + (size_t)slot * kChunk, recip, first + u, full_chunks, tid, n4);
                if (rank > 0 && u == 0 && pushes_first)
                    arrive_peer_relaxed(peer_addr(smem_addr(&relay_empty[e]), rank - 1));
            }
            if (!last) {  // hand the states on: wait until the next CTA has read this entry's previous use
                mbar_wait_cluster(smem_addr(&relay_empty[e]), use ^ 1u);
                st_async_peer(peer_addr(smem_addr(&relay[e * kThreads + tid]), rank + 1), s.mean, s.m2,
                              peer_addr(smem_addr(&relay_full[e]), rank + 1));
                continue;
            }
            s.count = count;
            float m, rs;
            chain_group_finish(s, states, k, n, eps, &m, &rs);
            // Every chain thread holds m and rs: thread j sends them to CTA j (one thread sending to all four, each
            // by a store and a release, took about 2 us a row: trace4_v1.json). The last CTA's output group stores
            // mean and rstd to global memory, off the chain's path.
            if (tid < kC) {
                const int se = k % kStatsRing;
                mbar_wait_cluster(smem_addr(&stats_empty[se]), ((unsigned)(k / kStatsRing) & 1u) ^ 1u);
                st_async_peer(peer_addr(smem_addr(&stats[se]), tid), m, rs,
                              peer_addr(smem_addr(&stats_full[se]), tid));
            }
        }
    } else {  // the output group: this CTA's chunks of each row, from the ring
        const int o = tid - kThreads;
        const unsigned full0 = smem_addr(full), empty0 = smem_addr(empty);
        const unsigned stats_done = peer_addr(smem_addr(stats_empty), kC - 1);
        // gamma and beta are loaded one chunk ahead of the chunk written, across rows too (they do not depend on
        // the row): this CTA's chunks are the same in every row. Two and three ahead measured no faster, three
        // spilled (data/dev/rows_cluster/ahead.json).
        float4 g[kOutPer], b[kOutPer], g_next[kOutPer], b_next[kOutPer];
        auto load_gb = [&](int c, float4 (&gg)[kOutPer], float4 (&bb)[kOutPer]) {
#pragma unroll
            for (int i = 0; i < kOutPer; ++i) {
                const int j = c * kChunk + o + kOutThreads * i;
                if (j < n4) {
                    gg[i] = gamma[j];
                    bb[i] = beta[j];
                }
            }
        };
        int next = own > 1 ? 1 : 0;  // this CTA's chunk (0 .. own - 1) whose gamma and beta load next
        if (own > 0) load_gb(first, g, b);
        int p = 0, k = 0;
        for (int r = cluster; r < rows; r += clusters, ++k) {
            const int se = k % kStatsRing;
            mbar_wait_cluster(smem_addr(&stats_full[se]), (unsigned)(k / kStatsRing) & 1u);
            const float2 ms = stats[se];
            if (o == 0 && last) {
                mean[r] = ms.x;
                rstd[r] = ms.y;
            }
            for (int u = 0; u < own; ++u, ++p) {
                const int c = first + u;
                const int j0 = c * kChunk + o;
                load_gb(first + next, g_next, b_next);
                next = next + 1 == own ? 0 : next + 1;
                const int slot = p % slots;
                mbar_wait(full0 + 8 * slot, (p / slots) & 1);  // completed already: the chains pushed it
                const float4* src = ring + (size_t)slot * kChunk + o;
                float4* dst = y + (size_t)r * n4 + j0;
#pragma unroll
                for (int i = 0; i < kOutPer; ++i)
                    if (j0 + kOutThreads * i < n4)
                        dst[kOutThreads * i] = layer_norm_affine4(src[kOutThreads * i], g[i], b[i], ms.x, ms.y);
                mbar_arrive(empty0 + 8 * slot);  // once its values are used (rows_staged.cu: race.log)
#pragma unroll
                for (int i = 0; i < kOutPer; ++i) {
                    g[i] = g_next[i];
                    b[i] = b_next[i];
                }
            }
            // This entry's next phase cannot complete before every output warp of the cluster has released it
            // (stats_empty), so o = 0 may expect its bytes now.
            if (o == 0) arrive_expect_tx(smem_addr(&stats_full[se]), 8);
            // One release for the warp: a lane that wrote has used ms, so its read of stats[se] is complete; a lane
            // with nothing to write may still have that read in flight, but never uses its value.
            __syncwarp();
            if ((o & 31) == 0) arrive_peer_relaxed(stats_done + 8 * se);
        }
    }
    cluster_sync();  // no CTA leaves while a peer may still write into its shared memory or arrive on it
}

// Arguments: x [rows, n/4] float4, gamma/beta [n/4], y [rows, n/4], mean/rstd [rows], rows, n, eps, slots. Grid: 2 G
// CTAs (G clusters), block kBlock, dynamic shared memory labkit.ops.rows_cluster.smem_bytes: the ring, the
// reciprocals, the barriers, the statistics and relay rings, the warp states. Clusters of 2 only: clusters of 4
// (half the ring per row) measured no faster at 1024 x 65536 and slower than rows_staged at 256 x 131072, and only 30
// of the H200's 33 fit at once (data/dev/rows_cluster/waves.json, probe.json).
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kBlock, 1)
    rows_cluster2(const float4* __restrict__ x, const float4* __restrict__ gamma, const float4* __restrict__ beta,
                  float4* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd, int rows, int n,
                  float eps, int slots) {
    rows_cluster<2>(x, gamma, beta, y, mean, rstd, rows, n, eps, slots);
}
