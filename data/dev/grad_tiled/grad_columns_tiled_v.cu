// Dev variant of kernels/grad_columns_tiled.cu (data/dev/grad_tiled): the same tiles and chains, with
// - items: a (32-column block, group) pair is an item; block b runs items b, b + gridDim.x, ... (grid.x = items:
//   one item a block as committed; grid.x = 3 SMs: persistent, the next item's first tile loaded while the last
//   tile of this one is pushed, so a block's loads stay in flight across items);
// - the fold fused: where `arrivals` is not null, a block that finishes an item counts itself in for its column
//   block, and the last of the `groups` blocks runs grad_columns_fold's tree over the groups' values (read from L2)
//   and writes dgamma/dbeta. `arrivals` [ceil(n4 / 8)] is zeroed before the launch.
#include "grad_ln.cuh"

constexpr int kVecs = 8;
constexpr int kCols = 4 * kVecs;
constexpr int kLoadRows = 32;
constexpr int kPerThread = 2;
constexpr int kTileRows = kLoadRows * kPerThread;
constexpr int kThreads = kVecs * kLoadRows;

struct TileLoad {
    float4 x[kPerThread], dy[kPerThread];
    float mean[kPerThread], rstd[kPerThread], s1[kPerThread], s2[kPerThread];
};

// grad_columns_fold's tree over `parts` (a power of two, 2..32) values of column c, read through L2.
__device__ __forceinline__ float fold_tree(const float* __restrict__ p, int parts, int n, int c) {
    const int half = parts >> 1;
    float v[16];
#pragma unroll
    for (int l = 0; l < 16; ++l)
        v[l] = l < half ? __fadd_rn(__ldcg(p + (size_t)l * n + c), __ldcg(p + (size_t)(l + half) * n + c)) : 0.f;
#pragma unroll
    for (int d = 8; d > 0; d >>= 1) {
        if (d < half) {
#pragma unroll
            for (int l = 0; l < d; ++l) v[l] = __fadd_rn(v[l], v[l + d]);
        }
    }
    return v[0];
}

extern "C" __global__ void __launch_bounds__(kThreads, 3) grad_columns_tiled_v(
    const float4* __restrict__ x, const float4* __restrict__ dy, const float4* __restrict__ gamma,
    const float* __restrict__ mean, const float* __restrict__ rstd, const float* __restrict__ s1,
    const float* __restrict__ s2, float4* __restrict__ dx, float* __restrict__ out_g, float* __restrict__ out_b,
    int rows, int n4, int rows_per_group, int groups, float* __restrict__ dgamma, float* __restrict__ dbeta,
    unsigned* __restrict__ arrivals) {
    __shared__ float4 prod[2][kTileRows][kVecs];
    __shared__ float4 dys[2][kTileRows][kVecs];
    __shared__ float rs[2][kTileRows];
    const int v = threadIdx.x % kVecs, lr = threadIdx.x / kVecs;
    const int gx = (n4 + kVecs - 1) / kVecs;
    const int items = gx * groups;
    const int shift = __ffs(rows_per_group) - 1;
    const int stride = rows_per_group * groups;
    const bool want_dx = dx != nullptr;
    const int n = 4 * n4;
    const float fh = (float)n;
    const float inv = __frcp_rn(fh);
    auto row_of = [&](int group, int k) {
        return group * rows_per_group + (k >> shift) * stride + (k & (rows_per_group - 1));
    };
    auto load = [&](TileLoad& t, int item, int tile) {
        const int group = item / gx, j4 = (item % gx) * kVecs + v;
#pragma unroll
        for (int h = 0; h < kPerThread; ++h) {
            const int r = row_of(group, tile * kTileRows + h * kLoadRows + lr);
            if (r < rows) {
                t.mean[h] = mean[r];
                t.rstd[h] = rstd[r];
                if (want_dx) {
                    t.s1[h] = s1[r];
                    t.s2[h] = s2[r];
                }
                if (j4 < n4) {
                    const size_t at = (size_t)r * n4 + j4;
                    t.x[h] = x[at];
                    t.dy[h] = dy[at];
                }
            }
        }
    };
    int item = blockIdx.x, tile = 0, buf = 0;
    if (item >= items) return;
    float dg = 0.f, db = 0.f;
    TileLoad cur, next;
    load(cur, item, 0);
    for (;;) {
        const int group = item / gx, xb = item % gx;
        const int j4 = xb * kVecs + v;
        const bool col = j4 < n4;
        int nitem = item, ntile = tile + 1;
        if (row_of(group, ntile * kTileRows) >= rows) {
            nitem = item + gridDim.x;
            ntile = 0;
        }
        const bool more = nitem < items;
        if (more) load(next, nitem, ntile);
        const float4 g = (want_dx && col) ? gamma[j4] : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int h = 0; h < kPerThread; ++h) {
            const int i = h * kLoadRows + lr;
            const int r = row_of(group, tile * kTileRows + i);
            if (r >= rows) continue;
            if (v == 0) rs[buf][i] = cur.rstd[h];
            if (!col) continue;
            const float4 d = cur.dy[h], xv = cur.x[h];
            const float m = cur.mean[h];
            prod[buf][i][v] = make_float4(__fmul_rn(d.x, __fsub_rn(xv.x, m)), __fmul_rn(d.y, __fsub_rn(xv.y, m)),
                                          __fmul_rn(d.z, __fsub_rn(xv.z, m)), __fmul_rn(d.w, __fsub_rn(xv.w, m)));
            dys[buf][i][v] = d;
            if (want_dx)
                dx[(size_t)r * n4 + j4] =
                    grad_input4(xv, d, g, m, cur.rstd[h], cur.s1[h], cur.s2[h], fh, __fmul_rn(cur.rstd[h], inv));
        }
        __syncthreads();
        if (threadIdx.x < kCols) {
            int valid = 0;
#pragma unroll
            for (int h = 0; h < kPerThread; ++h)
                valid += __popc(__ballot_sync(
                    0xffffffffu, row_of(group, tile * kTileRows + h * kLoadRows + threadIdx.x) < rows));
            const float* p = reinterpret_cast<const float*>(&prod[buf][0][0]) + threadIdx.x;
            const float* d = reinterpret_cast<const float*>(&dys[buf][0][0]) + threadIdx.x;
            const float* q = rs[buf];
            if (valid == kTileRows) {
#pragma unroll
                for (int i = 0; i < kTileRows; ++i) {
                    dg = __fmaf_rn(q[i], p[i * kCols], dg);
                    db = __fadd_rn(db, d[i * kCols]);
                }
            } else {
                for (int i = 0; i < valid; ++i) {
                    dg = __fmaf_rn(q[i], p[i * kCols], dg);
                    db = __fadd_rn(db, d[i * kCols]);
                }
            }
            if (ntile == 0) {  // the item's chains are done
                const int c = xb * kCols + threadIdx.x;
                const size_t at = (size_t)group * n + c;
                if (c < n) {
                    if (out_g) out_g[at] = dg;
                    if (out_b) out_b[at] = db;
                }
                dg = db = 0.f;
                if (arrivals != nullptr) {
                    __threadfence();
                    __syncwarp();
                    unsigned ticket = 0;
                    if (threadIdx.x == 0) ticket = atomicAdd(arrivals + xb, 1u);
                    ticket = __shfl_sync(0xffffffffu, ticket, 0);
                    if (ticket == (unsigned)groups - 1) {
                        __threadfence();
                        if (c < n) {
                            if (dgamma) dgamma[c] = fold_tree(out_g, groups, n, c);
                            if (dbeta) dbeta[c] = fold_tree(out_b, groups, n, c);
                        }
                    }
                }
            }
        }
        if (!more) break;
        cur = next;
        item = nitem;
        tile = ntile;
        buf ^= 1;
    }
}
