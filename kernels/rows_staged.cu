// Reference-order LayerNorm for rows too long to keep in registers: torch's per-row arithmetic with x staged in
// shared memory by bulk asynchronous copies (TMA), so that x is read from memory once wherever a row fits the ring,
// and the next rows' loads run under this row's arithmetic.
//
// Contract kept: torch's vectorized-path arithmetic (welford_ln.cuh). Thread t of torch's 128 pushes float4s t,
// t + 128, ... of its row in order, each warp shuffles down, the 4-warp tree merges, then the output is
// gamma * (rstd * (x - mean)) + beta. Only where the bytes come from differs from rows_fused.cu.
//
// Schedule. A persistent grid: block b takes rows b, b + gridDim.x, .... Its producer warp streams every row's
// chunks (kChunk float4s: the next kPerThread float4s of each of the 128 chains) through a ring of `slots` chunks
// of shared memory; its four consumer warps are torch's (32, 4) block and push each chunk as it lands. The last
// `kept` = min(chunks, slots - 1) chunks of a row stay in the ring for the output pass. Rows longer than that
// release their earlier chunks once pushed, and the output pass re-reads those from memory (mostly L2: a row's time
// ago), after the kept ones, whose release starts the next row's loads. Releases therefore run in stream order,
// which a ring needs. One slot is always left to the next row, so its first chunk loads under this row's output.
//
// Reciprocals: the consumers write the table 1.f/k (IEEE division, the quotient torch's push divides in place)
// once per block; a push reads its four as one broadcast float4.
#include "welford_ln.cuh"
#include "async_copy.cuh"

namespace {
constexpr int kThreads = 128;                  // torch's threads per row
constexpr int kPerThread = 8;                  // float4s of each chain in one chunk
constexpr int kChunk = kThreads * kPerThread;  // float4s per chunk: 16 KiB
}  // namespace

// The consumer warps only: the producer warp has left by then.
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, 128;" ::: "memory"); }

// Arguments: x [rows, n/4] float4, gamma/beta [n/4], y [rows, n/4], mean/rstd [rows], rows, n, eps, slots.
// grid: (min(rows, resident blocks),); block: 160 threads (4 consumer warps, then the producer warp).
// Dynamic shared memory (labkit.ops.rows_staged.smem_bytes): slots * 16 KiB ring, ceil(n/512) float4 reciprocals,
// 2 * slots mbarriers, 24 floats of warp states.
extern "C" __global__ void __launch_bounds__(160, 2) rows_staged(
    const float4* __restrict__ x, const float4* __restrict__ gamma, const float4* __restrict__ beta,
    float4* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd, int rows, int n, float eps,
    int slots) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int n4 = n / 4;
    const int chunks = (n4 + kChunk - 1) / kChunk;
    const int kept = min(chunks, slots - 1);
    const int early = chunks - kept;                   // chunks re-read from memory for the output
    const int steps = (n4 + kThreads - 1) / kThreads;  // float4s of the longest chain
    float4* const ring = reinterpret_cast<float4*>(smem);
    float4* const recip = ring + (size_t)slots * kChunk;
    unsigned long long* const full = reinterpret_cast<unsigned long long*>(recip + steps);
    unsigned long long* const empty = full + slots;
    float* const states = reinterpret_cast<float*>(empty + slots);  // [row parity][warp][mean, m2, count]
    const int tid = threadIdx.x;

    if (tid == 0) {
        for (int i = 0; i < slots; ++i) {
            mbar_init(&full[i], 1);           // the producer's expect_tx; the copy's bytes complete it
            mbar_init(&empty[i], kThreads);   // every consumer thread, once its reads of the slot are done
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    for (int q = tid; q < steps; q += blockDim.x)
        recip[q] = make_float4(1.f / (float)(4 * q + 1), 1.f / (float)(4 * q + 2), 1.f / (float)(4 * q + 3),
                               1.f / (float)(4 * q + 4));
    __syncthreads();

    if (tid >= kThreads) {
        if (tid == kThreads) {
            int slot = 0;
            unsigned use = 0;  // how many times the ring has wrapped: the parity of the slot's phases
            for (int r = blockIdx.x; r < rows; r += gridDim.x) {
                const float4* src = x + (size_t)r * n4;
                for (int c = 0; c < chunks; ++c) {
                    mbar_wait(&empty[slot], (use & 1u) ^ 1u);  // a fresh barrier's previous phase counts as done
                    const unsigned bytes = 16u * (unsigned)min(kChunk, n4 - c * kChunk);
                    mbar_expect_tx(&full[slot], bytes);
                    bulk_copy(ring + (size_t)slot * kChunk, src + (size_t)c * kChunk, bytes, &full[slot]);
                    if (++slot == slots) {
                        slot = 0;
                        ++use;
                    }
                }
            }
        }
        return;
    }

    const int lane = tid & 31;
    const int warp = tid >> 5;
    const unsigned full0 = smem_addr(full), empty0 = smem_addr(empty);
    // This chain's pushes: 4 per float4 it holds. Counted once (welford_push_uncounted): exact in float.
    const float count = tid < n4 ? (float)(4 * ((n4 - 1 - tid) / kThreads + 1)) : 0.f;
    int slot = 0;
    unsigned use = 0;
    int parity = 0;
    for (int r = blockIdx.x; r < rows; r += gridDim.x, parity ^= 1) {
        int kept_slot = slot + early;  // where the row's first kept chunk sits
        while (kept_slot >= slots) kept_slot -= slots;

        WelfordLN s{0.f, 0.f, 0.f};
        for (int c = 0; c < chunks; ++c) {
            mbar_wait(full0 + 8 * slot, use & 1u);
            const float4* at = ring + (size_t)slot * kChunk + tid;
            const float4* rc = recip + c * kPerThread;
            const int j0 = c * kChunk + tid;
#pragma unroll
            for (int i = 0; i < kPerThread; ++i)
                if (j0 + kThreads * i < n4) welford_push4_uncounted(s, at[kThreads * i], rc[i]);
            if (c < early) mbar_arrive(empty0 + 8 * slot);
            if (++slot == slots) {
                slot = 0;
                ++use;
            }
        }
        s.count = count;
        s = welford_warp_reduce(s);
        // torch's 4-warp tree on the four warps' states, computed by every thread from shared memory: one barrier
        // per row. The states alternate by row parity: a warp can be one row ahead, never two (the barrier).
        float* st = states + 12 * parity;
        if (lane == 0) {
            st[3 * warp] = s.mean;
            st[3 * warp + 1] = s.m2;
            st[3 * warp + 2] = s.count;
        }
        consumers_sync();
        const WelfordLN q[4] = {{st[0], st[1], st[2]}, {st[3], st[4], st[5]}, {st[6], st[7], st[8]},
                                {st[9], st[10], st[11]}};
        float m, rs;
        welford_finish(welford_tree4(q), n, eps, &m, &rs);
        if (tid == 0) {
            mean[r] = m;
            rstd[r] = rs;
        }

        float4* dst = y + (size_t)r * n4;
        for (int c = early; c < chunks; ++c) {
            const float4* at = ring + (size_t)kept_slot * kChunk + tid;
            const int j0 = c * kChunk + tid;
#pragma unroll
            for (int i = 0; i < kPerThread; ++i) {
                const int j = j0 + kThreads * i;
                if (j < n4) dst[j] = layer_norm_affine4(at[kThreads * i], gamma[j], beta[j], m, rs);
            }
            mbar_arrive(empty0 + 8 * kept_slot);
            if (++kept_slot == slots) kept_slot = 0;
        }
        const float4* src = x + (size_t)r * n4;
        for (int c = 0; c < early; ++c) {
            const int j0 = c * kChunk + tid;  // a whole chunk: only the last chunk of a row can be partial
#pragma unroll
            for (int i = 0; i < kPerThread; ++i) {
                const int j = j0 + kThreads * i;
                dst[j] = layer_norm_affine4(src[j], gamma[j], beta[j], m, rs);
            }
        }
    }
}
