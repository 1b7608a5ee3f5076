// Reference-order LayerNorm for many short rows: torch's per-row arithmetic, statistics then output from the same
// registers, so x is read from memory once.
//
// Contract kept: the statistics are torch's vectorized-path order (welford_ln.cuh) and the output is
// gamma * (rstd * (x - mean)) + beta, contracted as torch's; with -DEPILOGUE the ops that follow LayerNorm are
// applied to it as torch's kernels apply them (epilogue.cuh). Rows longer than the largest entry point's registers
// (kMaxVec * 512 floats) re-read the rest of themselves for the output pass (from L2), as torch does. With -DLN_BF16
// or -DLN_FP16 the same arithmetic runs on x, gamma and beta of that type, converted to float exactly, and y is
// converted once at the store, as torch's kernel for that type does (dtype.cuh). The vectors a thread keeps stay as
// loaded (LN_VEC: 8 bytes, two registers, where float4 takes four) and are converted at each use: the same floats,
// and about a third fewer registers for the entry points that keep 8 vectors or more (more blocks on an SM).
//
// Two layouts of the same arithmetic. rows_fused_reg<K>: torch's own (32, 4) block per row, thread t of the row's
// 128 holding its own vectors. rows_fused_warp<K>: one warp per row, lane l standing in for torch's threads l, l+32,
// l+64 and l+96 (their four chains side by side: four independent dependence chains per lane), merged by torch's
// four warp reductions and its 4-warp tree with each merge made once (welford_packed_rows4). No shared memory and
// no __syncthreads, four rows per 128-thread block: for rows of at most 1024 floats. The packing is what makes the
// warp layout pay above 512 floats: without it a lane made all four warps' 20 merges, and rows of 768 to 2048
// floats ran slower in it than in the block (data/dev/rows_layout/); with it, rows of 768 and 1000 to 1024 floats
// ran as fast or faster (up to 13% at 4096 x 768) and rows of 1536 and 2048 still slower (data/dev/rows_packed/).
#include "welford_ln.cuh"
#include "epilogue.cuh"
#include "dtype.cuh"

// Push thread `tid`'s kept vectors (its chain's (4i+1)-th to (4i+4)-th pushes) with constant reciprocals: a
// thread's vectors run out in order, and the compiler folds a constant IEEE quotient to the same correctly
// rounded value the in-loop division gives, so no division is left here. Then, with kTail, the rest of a long row
// from memory; entry points without it are only launched on rows that fit (labkit.ops.rows_fused.function_for),
// and leaving the tail out saves the registers its division and addressing take.
template <int kMaxVec, bool kTail>
__device__ __forceinline__ WelfordLN push_thread(const LN_VEC* __restrict__ row, const LN_VEC (&keep)[kMaxVec],
                                                 int tid, int n4) {
    WelfordLN s{0.f, 0.f, 0.f};
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i) {
        if (tid + 128 * i < n4) {
            welford_push4_uncounted(s, LN_LOAD4(keep[i]),
                                    make_float4(1.f / (4 * i + 1), 1.f / (4 * i + 2), 1.f / (4 * i + 3),
                                                1.f / (4 * i + 4)));
            s.count = (float)(4 * i + 4);
        }
    }
    if (kTail)
        for (int j = tid + 128 * kMaxVec; j < n4; j += 128) s = welford_push4(s, LN_LOAD4(row[j]));
    return s;
}

template <int kMaxVec>
__device__ __forceinline__ void load_thread(const LN_VEC* __restrict__ row, LN_VEC (&keep)[kMaxVec], int tid, int n4) {
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i) {
        const int j = tid + 128 * i;
        if (j < n4) keep[i] = row[j];
    }
}

template <int kMaxVec, bool kTail>
__device__ __forceinline__ void write_thread(const LN_VEC* __restrict__ row, const LN_VEC (&keep)[kMaxVec],
                                             const LN_VEC* __restrict__ gamma, const LN_VEC* __restrict__ beta,
                                             LN_VEC* __restrict__ out, int tid, int n4, float m,
                                             float r EPILOGUE_PARAMS) {
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i) {
        const int j = tid + 128 * i;
        if (j < n4)
            out[j] = LN_STORE4(
                EPILOGUE4(layer_norm_affine4(LN_LOAD4(keep[i]), LN_LOAD4(gamma[j]), LN_LOAD4(beta[j]), m, r), j));
    }
    if (kTail)
        for (int j = tid + 128 * kMaxVec; j < n4; j += 128)
            out[j] = LN_STORE4(EPILOGUE4(
                layer_norm_affine4(LN_LOAD4(row[j]), LN_LOAD4(gamma[j]), LN_LOAD4(beta[j]), m, r), j));
}

template <int kMaxVec, bool kTail>
__device__ __forceinline__ void rows_fused(const LN_VEC* __restrict__ x, const LN_VEC* __restrict__ gamma,
                                           const LN_VEC* __restrict__ beta, LN_VEC* __restrict__ y,
                                           float* __restrict__ mean, float* __restrict__ rstd, int n,
                                           float eps EPILOGUE_PARAMS) {
    __shared__ float buf[12];
    __shared__ float stats[2];
    const int tid = threadIdx.x + 32 * threadIdx.y;
    const int n4 = n / 4;
    const LN_VEC* row = x + (size_t)blockIdx.x * n4;
    LN_VEC keep[kMaxVec];
    load_thread<kMaxVec>(row, keep, tid, n4);
    WelfordLN s = push_thread<kMaxVec, kTail>(row, keep, tid, n4);
    s = welford_warp_reduce(s);
    s = welford_block_tree4(s, buf);
    if (tid == 0) {
        welford_finish(s, n, eps, &stats[0], &stats[1]);
        mean[blockIdx.x] = stats[0];
        rstd[blockIdx.x] = stats[1];
    }
    __syncthreads();
    write_thread<kMaxVec, kTail>(row, keep, gamma, beta, y + (size_t)blockIdx.x * n4, tid, n4, stats[0],
                                 stats[1] EPILOGUE_ROW_ARGS((size_t)blockIdx.x * n4));
}

// One Welford state moved between lanes as a unit (its three floats), within segments of `width` lanes.
__device__ __forceinline__ WelfordLN shfl_state(WelfordLN s, int src, int width = 32) {
    return {__shfl_sync(0xffffffffu, s.mean, src, width), __shfl_sync(0xffffffffu, s.m2, src, width),
            __shfl_sync(0xffffffffu, s.count, src, width)};
}

__device__ __forceinline__ WelfordLN shfl_down_state(WelfordLN s, int delta, int width) {
    return {__shfl_down_sync(0xffffffffu, s.mean, delta, width), __shfl_down_sync(0xffffffffu, s.m2, delta, width),
            __shfl_down_sync(0xffffffffu, s.count, delta, width)};
}

__device__ __forceinline__ WelfordLN shfl_up_state(WelfordLN s, int delta) {
    return {__shfl_up_sync(0xffffffffu, s.mean, delta), __shfl_up_sync(0xffffffffu, s.m2, delta),
            __shfl_up_sync(0xffffffffu, s.count, delta)};
}

// The moves of a count alone: the counted entry point's count pass (below).
__device__ __forceinline__ float shfl_state(float c, int src, int width = 32) {
    return __shfl_sync(0xffffffffu, c, src, width);
}

__device__ __forceinline__ float shfl_down_state(float c, int delta, int width) {
    return __shfl_down_sync(0xffffffffu, c, delta, width);
}

__device__ __forceinline__ float shfl_up_state(float c, int delta) { return __shfl_up_sync(0xffffffffu, c, delta); }

// torch's four warp reductions and its 4-warp tree over the four chains each lane holds (q[v] of lane l is torch's
// thread l + 32 v), with every merge torch makes made once and the lanes whose results torch never reads reused.
// torch's shuffle-down by `offset` only feeds its lanes below `offset`, from lanes below 2 * offset: after the
// step by 16 a warp's 16 lanes that matter fit half a warp, so two of torch's warps share one of ours for the step by
// 8, and after it all four share one warp (8 lanes each) for the steps by 4, 2 and 1. Each merge still takes
// (own, received) as torch's does, so the bits are the same: 11 merges a lane instead of 4 x 5 plus the tree.
// `merge(own, received)` is torch's merge of states of type S (a Welford state, or a count alone for the count
// pass). Returns lane 0's state as the row's; the other lanes' are not meaningful.
template <class S, class Merge>
__device__ __forceinline__ S welford_packed_tree(S (&q)[4], int lane, Merge merge) {
#pragma unroll
    for (int v = 0; v < 4; ++v) q[v] = merge(q[v], shfl_down_state(q[v], 16, 32));
    // halves: lanes 0-15 torch's warp 2h's lanes 0-15, lanes 16-31 warp 2h+1's
    const bool upper = lane >= 16;
    const S up1 = shfl_up_state(q[1], 16), up3 = shfl_up_state(q[3], 16);
    S h0 = upper ? up1 : q[0], h1 = upper ? up3 : q[2];
    h0 = merge(h0, shfl_down_state(h0, 8, 16));
    h1 = merge(h1, shfl_down_state(h1, 8, 16));
    // eighths: lanes 8g..8g+7 torch's warp g's lanes 0-7 (warp g is in half g & 1 of h0 or h1)
    const int seg = lane >> 3, src = (lane & 7) + (seg & 1) * 16;
    const S from0 = shfl_state(h0, src), from1 = shfl_state(h1, src);
    S e = seg < 2 ? from0 : from1;
#pragma unroll
    for (int offset = 4; offset > 0; offset >>= 1) e = merge(e, shfl_down_state(e, offset, 8));
    // torch's tree: warps 2, 3 into 0, 1 (lanes 0 and 8 receive lanes 16 and 24), then 1 into 0
    e = merge(e, shfl_down_state(e, 16, 32));
    return merge(e, shfl_down_state(e, 8, 32));
}

constexpr int kPackedMerges = 11;  // merges a lane makes in welford_packed_tree: 4 + 2 + 3 + 2

__device__ __forceinline__ WelfordLN welford_packed_rows4(WelfordLN (&q)[4], int lane) {
    return welford_packed_tree(q, lane, [](WelfordLN own, WelfordLN received) { return welford_merge(own, received); });
}

// torch thread `tid`'s count after push_thread: 4 per vector it holds.
template <int kMaxVec>
__device__ __forceinline__ float thread_count(int tid, int n4) {
    float c = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i)
        if (tid + 128 * i < n4) c = (float)(4 * i + 4);
    return c;
}

// torch's merge (welford_merge) with its quotient 1.f / (a.count + b.count) given: the same operations on the same
// values, written in the contraction torch's SASS has (the received product fused, the own one rounded; m2 as
// fma(nb, round(round(delta * delta) * a.count), a.m2 + b.m2)). Spelled in intrinsics because, with the quotient
// from elsewhere, the compiler fused the other product of welford_merge's source and lost the bits
// (data/dev/rows_coef/).
__device__ __forceinline__ WelfordLN welford_merge_given(WelfordLN b, WelfordLN a, float coef) {
    const float delta = b.mean - a.mean;
    const float count = a.count + b.count;
    if (count > 0.f) {
        const float na = a.count * coef;
        const float nb = b.count * coef;
#ifndef ROWS_FUSED_GIVEN_AS_SOURCE
        return {__fmaf_rn(a.mean, na, __fmul_rn(nb, b.mean)),
                __fmaf_rn(nb, __fmul_rn(__fmul_rn(delta, delta), a.count), __fadd_rn(a.m2, b.m2)), count};
#else  // welford_merge's source: the counterexample tests/test_sass.py builds (the matcher must reject it)
        return {na * a.mean + nb * b.mean, a.m2 + b.m2 + delta * delta * a.count * nb, count};
#endif
    }
    return {0.f, 0.f, count};
}

// The same merges with the counts run first, on the counts alone, keeping each merge's quotient: the 11 divisions
// depend on nothing but n, so they are made while x is still in flight, and the merges of the data wait on none.
// Returns the row's state (lane 0's).
template <int kMaxVec>
__device__ __forceinline__ WelfordLN welford_packed_rows4_counted(WelfordLN (&q)[4], int lane, int n4) {
    float c[4];
#pragma unroll
    for (int v = 0; v < 4; ++v) c[v] = thread_count<kMaxVec>(lane + 32 * v, n4);
    float coef[kPackedMerges];
    int k = 0;
    welford_packed_tree(c, lane, [&](float own, float received) {
        const float count = received + own;
        coef[k++] = count > 0.f ? 1.f / count : 0.f;
        return count;
    });
    k = 0;
    return welford_packed_tree(q, lane, [&](WelfordLN own, WelfordLN received) {
        return welford_merge_given(own, received, coef[k++]);
    });
}

template <int kMaxVec, bool kCounted>
__device__ __forceinline__ void rows_fused_warp(const LN_VEC* __restrict__ x, const LN_VEC* __restrict__ gamma,
                                                const LN_VEC* __restrict__ beta, LN_VEC* __restrict__ y,
                                                float* __restrict__ mean, float* __restrict__ rstd, int rows, int n,
                                                float eps EPILOGUE_PARAMS) {
    const int lane = threadIdx.x;
    const size_t r_index = (size_t)blockIdx.x * 4 + threadIdx.y;  // rows may come within 3 of INT_MAX
    if (r_index >= (size_t)rows) return;  // a whole warp leaves: the shuffles below only involve warps of live rows
    const int n4 = n / 4;
    const LN_VEC* row = x + r_index * n4;
    LN_VEC keep[4][kMaxVec];  // [torch's warp v][vector i] of torch's thread lane + 32 v
#pragma unroll
    for (int v = 0; v < 4; ++v) load_thread<kMaxVec>(row, keep[v], lane + 32 * v, n4);
    WelfordLN q[4];
#pragma unroll
    for (int v = 0; v < 4; ++v) q[v] = push_thread<kMaxVec, false>(row, keep[v], lane + 32 * v, n4);
    float m, r;
    welford_finish(kCounted ? welford_packed_rows4_counted<kMaxVec>(q, lane, n4) : welford_packed_rows4(q, lane), n,
                   eps, &m, &r);
    m = __shfl_sync(0xffffffffu, m, 0);  // lane 0's result, broadcast
    r = __shfl_sync(0xffffffffu, r, 0);
    if (lane == 0) {
        mean[r_index] = m;
        rstd[r_index] = r;
    }
    LN_VEC* out = y + r_index * n4;
#pragma unroll
    for (int v = 0; v < 4; ++v)
        write_thread<kMaxVec, false>(row, keep[v], gamma, beta, out, lane + 32 * v, n4, m,
                                     r EPILOGUE_ROW_ARGS(r_index * n4));
}

// Arguments: x [rows, n/4] float4, gamma/beta [n/4] float4, y [rows, n/4] float4, mean/rstd [rows], n, eps; with
// -DEPILOGUE then residual [rows, n/4] float4 and scale (epilogue.cuh). With -DLN_BF16 or -DLN_FP16, x, gamma, beta
// and y are vectors of four bfloat16 or float16 (dtype.cuh), mean and rstd float.
// rows_fused_reg<K>: grid rows, block (32, 4). rows_fused_warp<K> (rows as an extra argument): grid ceil(rows/4),
// block (32, 4), warp y on row 4 * block + y. One entry point per register budget: short rows need few vectors
// per thread, and fewer registers let more blocks share an SM (labkit.ops.rows_fused picks the smallest that holds
// the row; only the largest block entry point takes rows longer than its registers).
#define ROWS_FUSED(K, MIN_BLOCKS, TAIL)                                                                        \
    extern "C" __global__ void __launch_bounds__(128, MIN_BLOCKS) rows_fused_reg##K(                            \
        const LN_VEC* x, const LN_VEC* gamma, const LN_VEC* beta, LN_VEC* y, float* mean, float* rstd, int n,   \
        float eps EPILOGUE_PARAMS) {                                                                            \
        rows_fused<K, TAIL>(x, gamma, beta, y, mean, rstd, n, eps EPILOGUE_ARGS);                               \
    }
ROWS_FUSED(2, 12, false)
ROWS_FUSED(4, 8, false)
ROWS_FUSED(8, 6, false)
ROWS_FUSED(16, 5, false)
ROWS_FUSED(32, 3, true)  // the largest: rows longer than 16384 floats re-read the rest

#define ROWS_FUSED_WARP(K, MIN_BLOCKS)                                                                         \
    extern "C" __global__ void __launch_bounds__(128, MIN_BLOCKS) rows_fused_warp##K(                           \
        const LN_VEC* x, const LN_VEC* gamma, const LN_VEC* beta, LN_VEC* y, float* mean, float* rstd, int rows, \
        int n, float eps EPILOGUE_PARAMS) {                                                                     \
        rows_fused_warp<K, false>(x, gamma, beta, y, mean, rstd, rows, n, eps EPILOGUE_ARGS);                   \
    }
ROWS_FUSED_WARP(1, 10)
ROWS_FUSED_WARP(2, 8)  // four vectors per torch thread (16 per lane) measured slower than the block: not built

// The counted form (welford_packed_rows4_counted) at 7 blocks per SM, where it has registers enough not to spill.
// Measured 2-4% faster than rows_fused_warp2 from 8192 rows of 768-1024 floats up and 10-20% slower at 4096 rows
// (data/dev/rows_coef/, data/dev/rows_stream/), so it is a path of its own (labkit.ops.rows_counted) and the dispatch
// table measures where it serves. Only the two-vector form: the one-vector count pass measured slower.
extern "C" __global__ void __launch_bounds__(128, 7) rows_fused_warp2_counted(
    const LN_VEC* x, const LN_VEC* gamma, const LN_VEC* beta, LN_VEC* y, float* mean, float* rstd, int rows, int n,
    float eps EPILOGUE_PARAMS) {
    rows_fused_warp<2, true>(x, gamma, beta, y, mean, rstd, rows, n, eps EPILOGUE_ARGS);
}

// torch's (32, 4) block per row (rows_fused<K>'s layout: thread t holds torch's thread t's float4s) with the merges'
// quotients counted ahead and one block barrier a row. Every quotient 1.f / (a.count + b.count) of torch's warp step
// (five) and its 4-warp tree (three) depends on n alone, so it is made while x is in flight and the merges take it
// (welford_merge_given): thread t's count is 4 per float4 it holds, warp w's 4 sum_i clamp(n4 - 128 i - 32 w, 0, 32).
// The tree runs in every thread from the four warps' states in shared memory (welford_tree4's order, as
// rows_staged.cu's chain group does), so one barrier serves the tree and the statistics' broadcast; torch's tree
// and rows_fused<K> take two or more. Why a block: at 8192 x 1024 the warp layout with no statistics at all is
// slower than Liger's block layout with its plain sums (21.1 against 20.7 us), and this form ran 21.3 against the
// warp layout's 21.8 (data/dev/rows_floor/). It is slower where rows are few (4,096) or short (N <= 768): the
// dispatch table measures where it serves (labkit.ops.rows_counted_block).
template <int K>
__device__ __forceinline__ void rows_fused_block_counted(const LN_VEC* __restrict__ x,
                                                         const LN_VEC* __restrict__ gamma,
                                                         const LN_VEC* __restrict__ beta, LN_VEC* __restrict__ y,
                                                         float* __restrict__ mean, float* __restrict__ rstd, int n,
                                                         float eps EPILOGUE_PARAMS) {
    __shared__ float st[12];
    const int lane = threadIdx.x, warp = threadIdx.y;
    const int tid = lane + 32 * warp;
    const int n4 = n / 4;
    const LN_VEC* row = x + (size_t)blockIdx.x * n4;
    LN_VEC keep[K];
    load_thread<K>(row, keep, tid, n4);
    float c = thread_count<K>(tid, n4);
    float coef[5];
#pragma unroll
    for (int k = 0, offset = 16; offset > 0; offset >>= 1, ++k) {
        const float t = c + shfl_down_state(c, offset, 32);
        coef[k] = t > 0.f ? 1.f / t : 0.f;
        c = t;
    }
    float wc[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        wc[w] = 0.f;
#pragma unroll
        for (int i = 0; i < K; ++i) wc[w] += (float)(4 * min(max(n4 - 128 * i - 32 * w, 0), 32));
    }
    const float t02 = wc[0] + wc[2], t13 = wc[1] + wc[3], t_all = t02 + t13;
    const float c02 = t02 > 0.f ? 1.f / t02 : 0.f, c13 = t13 > 0.f ? 1.f / t13 : 0.f;
    const float c_all = t_all > 0.f ? 1.f / t_all : 0.f;
    WelfordLN s = push_thread<K, false>(row, keep, tid, n4);
#pragma unroll
    for (int k = 0, offset = 16; offset > 0; offset >>= 1, ++k)
        s = welford_merge_given(s, shfl_down_state(s, offset, 32), coef[k]);
    if (lane == 0) {
        st[3 * warp] = s.mean;
        st[3 * warp + 1] = s.m2;
        st[3 * warp + 2] = s.count;
    }
    __syncthreads();
    const WelfordLN q0{st[0], st[1], st[2]}, q1{st[3], st[4], st[5]}, q2{st[6], st[7], st[8]}, q3{st[9], st[10], st[11]};
    float m, r;
    welford_finish(welford_merge_given(welford_merge_given(q0, q2, c02), welford_merge_given(q1, q3, c13), c_all), n,
                   eps, &m, &r);
    if (tid == 0) {
        mean[blockIdx.x] = m;
        rstd[blockIdx.x] = r;
    }
    write_thread<K, false>(row, keep, gamma, beta, y + (size_t)blockIdx.x * n4, tid, n4, m,
                           r EPILOGUE_ROW_ARGS((size_t)blockIdx.x * n4));
}

// Two vectors a thread (rows of at most 1,024 floats) at rows_fused_reg2's 12 blocks per SM (40 registers, no spill);
// four (N <= 2,048) measured 0.5-0.6% slower than rows_fused_reg4 at 8192 and 32768 x 2048 and is not built
// (data/dev/rows_floor/).
extern "C" __global__ void __launch_bounds__(128, 12) rows_fused_reg2_counted(
    const LN_VEC* x, const LN_VEC* gamma, const LN_VEC* beta, LN_VEC* y, float* mean, float* rstd, int n,
    float eps EPILOGUE_PARAMS) {
    rows_fused_block_counted<2>(x, gamma, beta, y, mean, rstd, n, eps EPILOGUE_ARGS);
}
