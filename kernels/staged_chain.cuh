// torch's 128 chains of one row over chunks staged in shared memory: the chain group's part of rows_staged.cu and
// rows_cluster.cu. Both hold a row as 16-KiB chunks (the next kPerThread float4s of each of the 128 chains) and push
// each chunk as it lands; what differs is where the chunks come from and who finishes the row.
//
// Contract kept: thread t of torch's 128 pushes float4s t, t + 128, ... of its row in order, with the reciprocals
// of the table fill_reciprocals writes (the quotient torch's push divides in place, by IEEE division); then torch's
// warp reduction, its 4-warp tree and welford_finish (welford_ln.cuh).
#pragma once
#include "welford_ln.cuh"

namespace {
constexpr int kThreads = 128;                  // torch's threads per row: the chain group
constexpr int kPerThread = 8;                  // float4s of each chain in one chunk
constexpr int kChunk = kThreads * kPerThread;  // float4s per chunk: 16 KiB
}  // namespace

// The chain group's own barrier (named barrier 1, its 128 threads): the rest of the block is busy elsewhere.
__device__ __forceinline__ void chain_group_sync() { asm volatile("bar.sync 1, 128;" ::: "memory"); }

// recip[q] = 1/(4q + 1) .. 1/(4q + 4) for the `steps` float4s of the longest chain, by the whole block.
__device__ __forceinline__ void fill_reciprocals(float4* recip, int steps) {
    for (int q = threadIdx.x; q < steps; q += blockDim.x)
        recip[q] = make_float4(1.f / (float)(4 * q + 1), 1.f / (float)(4 * q + 2), 1.f / (float)(4 * q + 3),
                               1.f / (float)(4 * q + 4));
}

// This chain's pushes: 4 per float4 it holds. Counted once (welford_push_uncounted): exact in float.
__device__ __forceinline__ float chain_count(int tid, int n4) {
    return tid < n4 ? (float)(4 * ((n4 - 1 - tid) / kThreads + 1)) : 0.f;
}

// A chunk's pushes for this chain: kFull when every chain has all kPerThread float4s in it (no guard, so the
// shared-memory reads can all be issued ahead of the dependent pushes).
template <bool kFull>
__device__ __forceinline__ void push_chunk(WelfordLN& s, const float4* at, const float4* rc, int j0, int n4) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i)
        if (kFull || j0 + kThreads * i < n4) welford_push4_uncounted(s, at[kThreads * i], rc[i]);
}

// Row chunk c, landed at `slot_base` (the ring slot holding it), pushed by chain `tid`; the first `full_chunks`
// chunks of a row (n4 / kChunk) are whole.
__device__ __forceinline__ void push_staged(WelfordLN& s, const float4* slot_base, const float4* recip, int c,
                                            int full_chunks, int tid, int n4) {
    const float4* at = slot_base + tid;
    if (c < full_chunks)
        push_chunk<true>(s, at, recip + c * kPerThread, c * kChunk + tid, n4);
    else
        push_chunk<false>(s, at, recip + c * kPerThread, c * kChunk + tid, n4);
}

// The row's mean and rstd from every chain's state (count set): torch's warp reduction, then its 4-warp tree,
// computed by every thread of the group from shared memory, one barrier per row. `states` holds 2 x 4 x 3 floats:
// they alternate by row parity (k & 1), since a warp can be one row ahead of another, never two.
__device__ __forceinline__ void chain_group_finish(WelfordLN s, float* states, int k, int n, float eps, float* m,
                                                   float* rs) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    s = welford_warp_reduce(s);
    float* st = states + 12 * (k & 1);
    if (lane == 0) {
        st[3 * warp] = s.mean;
        st[3 * warp + 1] = s.m2;
        st[3 * warp + 2] = s.count;
    }
    chain_group_sync();
    const WelfordLN q[4] = {{st[0], st[1], st[2]}, {st[3], st[4], st[5]}, {st[6], st[7], st[8]},
                            {st[9], st[10], st[11]}};
    welford_finish(welford_tree4(q), n, eps, m, rs);
}
