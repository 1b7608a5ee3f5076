// LayerNorm dX, dgamma and dbeta from the row sums (grad_row_sums.cu / grad_chain_sums.cu), reading x and dy once
// for all three: the order of torch's GammaBetaBackwardCUDAKernelTemplate, with torch's dX written from the same
// loads, on a grid that spreads the template's groups over blocks (torch keeps all of a column's groups in one
// block, so N / 32 blocks carry the whole pass, a few SMs where N is a few thousand).
//
// Contract kept (torch v2.11.0's LaunchGammaBetaBackwardCUDAKernel for float, and for bfloat16/float16 below;
// grad_ln.cuh's arithmetic):
// - dX is elementwise given a row's mean, rstd and sums, so any schedule keeps its bits (grad_input).
// - dgamma/dbeta: column j's sums run over G "groups": group g adds rows base + g*R + i (i < R) for base = 0,
//   R*G, 2*R*G, ..., in that order (gamma_beta_push; rows past the end add nothing). torch's templates by M:
//   M < 64: one group (R 8); M < 128: 8 groups; M < 256: 16; else 32 (R 8 each); and for M > 64K with
//   N / 32 < SMs / 2, P partial groups of R = 32 rows, one per grid row, left as partials for torch's own
//   .sum(0) (the caller runs it). The groups then combine like torch's WARP_SHFL_XOR butterfly, whose lane 0 is
//   the tree v[l] += v[l + d] for d = G/2, ..., 1.
// - Which thread runs a (column, group) chain does not change its order; nor does where the tree's steps run.
//   Block b of B (blockIdx.y) holds groups b, b + B, b + 2B, ... (threadIdx.y = i: group b + B*i), so the tree's
//   steps with d >= B stay inside one block (l and l + d are both b mod B) and leave v[b] there; the steps
//   d = B/2, ..., 1 are the same tree over the B blocks' values, which grad_columns_fold runs. B = 1: the block
//   holds every group and writes the result; the partial form is B = P blocks of one group each, whose values
//   are torch's partials.
// - Threads take four columns each (float4): a column's order does not depend on which thread runs it.
// Two entry points differ only in how a thread's loads are issued (push_streamed, push_prefetched).
//
// With -DLN_BF16 / -DLN_FP16 (torch's template for T: dtype.cuh): x, dy and gamma are four-T vectors converted to
// float as loaded, dX is rounded to T once at its store, and the sums stay float until the result is written: the
// column pass and grad_columns_fold round dgamma/dbeta to T once. torch's partial form rounds its partials to T
// (its dgamma_blocks take dgamma's options), and its .sum(0) then runs on those T values: the column pass rounds
// them too. `narrow_out` (these builds only) says which: 1 where out_g/out_b are the result or torch's partials (T),
// 0 where they are the blocks' float values for grad_columns_fold. With -DLN_X_BF16 / -DLN_X_FP16 (the autocast
// build: dtype.cuh) x alone is read as T and dX stored as T; dy, gamma, dgamma and dbeta are float (the float32
// pass's outputs, with no narrow_out).
#include "dtype.cuh"
#include "grad_ln.cuh"

#ifdef LN_LOW_PRECISION
#define GRAD_OUT_PARAM , int narrow_out
#define GRAD_OUT_ARG , narrow_out
#define GRAD_STORE4(out, at, v)                                                      \
    do {                                                                             \
        if (narrow_out) reinterpret_cast<uint2*>(out)[at] = ln_store4(v);            \
        else reinterpret_cast<float4*>(out)[at] = v;                                 \
    } while (0)
#define GRAD_STORE1(out, at, v)                                                      \
    do {                                                                             \
        if (narrow_out) reinterpret_cast<unsigned short*>(out)[at] = ln_from_float(v); \
        else out[at] = v;                                                            \
    } while (0)
#else
#define GRAD_OUT_PARAM
#define GRAD_OUT_ARG
#define GRAD_STORE4(out, at, v) reinterpret_cast<float4*>(out)[at] = v
#define GRAD_STORE1(out, at, v) out[at] = v
#endif

constexpr int kChunk = 8;  // rows of a group loaded together; R (8 or 32) is a multiple of it

struct ChunkRows {
    float4 x[kChunk], dy[kChunk];
    float mean[kChunk], rstd[kChunk], s1[kChunk], s2[kChunk];
};

// The next kChunk rows of one group starting at `first` (rows past `rows` are left unread and not pushed).
__device__ __forceinline__ void load_chunk(ChunkRows& c, const LN_X_VEC* __restrict__ x, const LN_VEC* __restrict__ dy,
                                           const float* __restrict__ mean, const float* __restrict__ rstd,
                                           const float* __restrict__ s1, const float* __restrict__ s2, bool want_dx,
                                           int first, int rows, int n4, int j4) {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
        const int r = first + i;
        if (r < rows) {
            const size_t at = (size_t)r * n4 + j4;
            c.x[i] = LN_X_LOAD4(x[at]);
            c.dy[i] = LN_LOAD4(dy[at]);
            c.mean[i] = mean[r];
            c.rstd[i] = rstd[r];
            if (want_dx) {
                c.s1[i] = s1[r];
                c.s2[i] = s2[r];
            }
        }
    }
}

// One (column, group) chain's rows as the loads arrive: each row loaded where it is pushed (the compiler keeps a
// few in flight), for layouts with enough threads that other warps hide the latency (few registers, many blocks
// per SM).
__device__ __forceinline__ void push_streamed(float4& dg, float4& db, const LN_X_VEC* __restrict__ x,
                                              const LN_VEC* __restrict__ dy, float4 g, const float* __restrict__ mean,
                                              const float* __restrict__ rstd, const float* __restrict__ s1,
                                              const float* __restrict__ s2, LN_X_VEC* __restrict__ dx, int group,
                                              int stride, int rows, int n4, int j4, int rows_per_group, float fh,
                                              float inv) {
    for (int base = group * rows_per_group; base < rows; base += stride) {
        const int end = min(base + rows_per_group, rows);
#pragma unroll 8
        for (int r = base; r < end; ++r) {
            const size_t at = (size_t)r * n4 + j4;
            const float4 vx = LN_X_LOAD4(x[at]), vd = LN_LOAD4(dy[at]);
            const float m = mean[r], rs = rstd[r];
            if (dx) dx[at] = LN_X_STORE4(grad_input4(vx, vd, g, m, rs, s1[r], s2[r], fh, __fmul_rn(rs, inv)));
            gamma_beta_push(dg.x, db.x, vx.x, vd.x, m, rs);
            gamma_beta_push(dg.y, db.y, vx.y, vd.y, m, rs);
            gamma_beta_push(dg.z, db.z, vx.z, vd.z, m, rs);
            gamma_beta_push(dg.w, db.w, vx.w, vd.w, m, rs);
        }
    }
}

// The same rows kChunk at a time, the next chunk's loads issued before this one is pushed: for layouts with few
// threads (the groups spread over small blocks, or the partial form), where each thread must keep more bytes in
// flight itself (more registers, fewer blocks per SM).
__device__ __forceinline__ void push_prefetched(float4& dg, float4& db, const LN_X_VEC* __restrict__ x,
                                                const LN_VEC* __restrict__ dy, float4 g,
                                                const float* __restrict__ mean, const float* __restrict__ rstd,
                                                const float* __restrict__ s1, const float* __restrict__ s2,
                                                LN_X_VEC* __restrict__ dx, int group, int stride, int rows, int n4,
                                                int j4, int rows_per_group, float fh, float inv) {
    const bool want_dx = dx != nullptr;
    const int chunks_per_group = rows_per_group / kChunk;
    auto first_row = [&](int k) {  // first row of the group's k-th chunk
        return group * rows_per_group + (k / chunks_per_group) * stride + (k % chunks_per_group) * kChunk;
    };
    ChunkRows cur, next;
    int k = 0;
    int first = first_row(0);
    if (first < rows) load_chunk(cur, x, dy, mean, rstd, s1, s2, want_dx, first, rows, n4, j4);
    while (first < rows) {
        const int after = first_row(k + 1);
        if (after < rows) load_chunk(next, x, dy, mean, rstd, s1, s2, want_dx, after, rows, n4, j4);
#pragma unroll
        for (int i = 0; i < kChunk; ++i) {
            if (first + i >= rows) break;
            const float4 vx = cur.x[i], vd = cur.dy[i];
            const float m = cur.mean[i], rs = cur.rstd[i];
            if (want_dx)
                dx[(size_t)(first + i) * n4 + j4] =
                    LN_X_STORE4(grad_input4(vx, vd, g, m, rs, cur.s1[i], cur.s2[i], fh, __fmul_rn(rs, inv)));
            gamma_beta_push(dg.x, db.x, vx.x, vd.x, m, rs);
            gamma_beta_push(dg.y, db.y, vx.y, vd.y, m, rs);
            gamma_beta_push(dg.z, db.z, vx.z, vd.z, m, rs);
            gamma_beta_push(dg.w, db.w, vx.w, vd.w, m, rs);
        }
        cur = next;
        first = after;
        ++k;
    }
}

// grid: (ceil(n4 / CX), B or P); block: (CX float4 columns, groups per block), at most 256 threads.
// out_g/out_b: [gridDim.y][4 * n4], each block's value for its columns (dgamma/dbeta themselves when gridDim.y
// is 1; either may be null: not wanted). dx null: dgamma/dbeta only (grad_rows_fused.cu wrote dX): torch's own
// GammaBeta pass. Column tiles run from the last to the first: the row-sum passes read rows front to back, so
// when they end the rows' tails are what L2 still holds.
template <bool kPrefetch>
__device__ __forceinline__ void grad_columns(const LN_X_VEC* __restrict__ x, const LN_VEC* __restrict__ dy,
                                             const LN_VEC* __restrict__ gamma, const float* __restrict__ mean,
                                             const float* __restrict__ rstd, const float* __restrict__ s1,
                                             const float* __restrict__ s2, LN_X_VEC* __restrict__ dx,
                                             float* __restrict__ out_g, float* __restrict__ out_b, int rows, int n4,
                                             int rows_per_group GRAD_OUT_PARAM) {
    __shared__ float fold[2][256 * 4];  // [array][group-in-block * 4 * CX + column-in-block]
    const int cx = blockDim.x, gb = blockDim.y;
    const int j4 = (gridDim.x - 1 - blockIdx.x) * cx + threadIdx.x;
    const int groups = gridDim.y * gb;
    const int group = blockIdx.y + gridDim.y * threadIdx.y;
    const int stride = rows_per_group * groups;
    const bool active = j4 < n4;
    const float fh = (float)(4 * n4);
    const float inv = __frcp_rn(fh);  // torch's 1.f / fH: the correctly rounded reciprocal
    float4 dg = make_float4(0.f, 0.f, 0.f, 0.f), db = dg;
    if (active) {
        if (kPrefetch)
            push_prefetched(dg, db, x, dy, LN_LOAD4(gamma[j4]), mean, rstd, s1, s2, dx, group, stride, rows, n4, j4,
                            rows_per_group, fh, inv);
        else
            push_streamed(dg, db, x, dy, LN_LOAD4(gamma[j4]), mean, rstd, s1, s2, dx, group, stride, rows, n4, j4,
                          rows_per_group, fh, inv);
    }
    const size_t at = (size_t)blockIdx.y * n4 + j4;  // this block's row of the outputs
    if (gb == 1) {
        if (active) {
            if (out_g) GRAD_STORE4(out_g, at, dg);
            if (out_b) GRAD_STORE4(out_b, at, db);
        }
        return;
    }
    const int cols = 4 * cx;  // columns of the block
    float* mine_g = &fold[0][threadIdx.y * cols + 4 * threadIdx.x];
    float* mine_b = &fold[1][threadIdx.y * cols + 4 * threadIdx.x];
    mine_g[0] = dg.x, mine_g[1] = dg.y, mine_g[2] = dg.z, mine_g[3] = dg.w;
    mine_b[0] = db.x, mine_b[1] = db.y, mine_b[2] = db.z, mine_b[3] = db.w;
    __syncthreads();
    // One thread per (array, column) of the block folds the column's gb values in the butterfly's order, in
    // place (that thread owns the column now): v[l] += v[l + d] for d = gb/2, ..., 1.
    const int j0 = 4 * (gridDim.x - 1 - blockIdx.x) * cx;
    for (int t = threadIdx.y * cx + threadIdx.x; t < 2 * cols; t += cx * gb) {
        const int col = t % cols;
        const int array = t / cols;
        float* out = array ? out_b : out_g;
        if (j0 + col >= 4 * n4 || out == nullptr) continue;
        float* v = &fold[array][col];
        for (int d = gb >> 1; d > 0; d >>= 1) {
            for (int l = 0; l < d; ++l) v[l * cols] = __fadd_rn(v[l * cols], v[(l + d) * cols]);
        }
        GRAD_STORE1(out, (size_t)blockIdx.y * 4 * n4 + j0 + col, v[0]);
    }
}

#define GRAD_COLUMNS(NAME, PREFETCH)                                                                                \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                                        \
        const LN_X_VEC* x, const LN_VEC* dy, const LN_VEC* gamma, const float* mean, const float* rstd,            \
        const float* s1, const float* s2, LN_X_VEC* dx, float* out_g, float* out_b, int rows, int n4,              \
        int rows_per_group GRAD_OUT_PARAM) {                                                                        \
        grad_columns<PREFETCH>(x, dy, gamma, mean, rstd, s1, s2, dx, out_g, out_b, rows, n4,                       \
                               rows_per_group GRAD_OUT_ARG);                                                        \
    }
GRAD_COLUMNS(grad_columns_streamed, false)   // torch's layout: 256 threads a block, every group in the block
GRAD_COLUMNS(grad_columns_prefetched, true)  // groups spread over small blocks, or the partial form

// The tree's last steps, over the B blocks' values of each column: v[l] += v[l + d] for d = B/2, ..., 1.
// part_g/part_b: [parts][n], float; dgamma/dbeta: [n] (null: not wanted), T in the 2-byte builds (rounded once
// here). grid: ceil(n / 256); block: 256.
extern "C" __global__ void __launch_bounds__(256) grad_columns_fold(
    const float* __restrict__ part_g, const float* __restrict__ part_b, float* __restrict__ dgamma,
    float* __restrict__ dbeta, int parts, int n) {
    constexpr int kMaxParts = 32;  // the template's most groups
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
#pragma unroll
    for (int array = 0; array < 2; ++array) {
        const float* p = array ? part_b : part_g;
        float* out = array ? dbeta : dgamma;
        if (out == nullptr) continue;
        float v[kMaxParts];
#pragma unroll
        for (int l = 0; l < kMaxParts; ++l) v[l] = l < parts ? p[(size_t)l * n + j] : 0.f;
#pragma unroll
        for (int d = kMaxParts >> 1; d > 0; d >>= 1) {
            if (d < parts) {
#pragma unroll
                for (int l = 0; l < d; ++l) v[l] = __fadd_rn(v[l], v[l + d]);
            }
        }
#ifdef LN_LOW_PRECISION
        reinterpret_cast<unsigned short*>(out)[j] = ln_from_float(v[0]);
#else
        out[j] = v[0];
#endif
    }
}
