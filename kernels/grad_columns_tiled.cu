// LayerNorm dgamma/dbeta (and, where asked, dX) in the order of torch's GammaBetaBackwardCUDAKernelTemplate, with
// the loads spread over eight times the threads that run the chains. grad_columns.cu gives each (column, group)
// chain one thread that also loads its rows; where N is a few thousand or less those threads are too few to keep
// the bytes in flight that HBM needs (grad_columns_streamed at 8192 x 1024: 8,192 threads, 3% achieved occupancy,
// 19% of DRAM bandwidth; ncu in data/dev/grad_ring/). Here a block of 256 threads holds one group's 32 columns:
// all its threads load a tile of the group's next 64 rows (two rows each), each rounds its own products
// dy * (x - mean) into shared memory, and one warp then runs the 32 chains over the tile.
//
// Contract kept (grad_ln.cuh's gamma_beta_push, split where it rounds):
// - column j's chain of group g adds rows base + g*R + i (i < R) for base = 0, R*G, 2*R*G, ... in that order:
//   dg = fma(rstd, round(dy * round(x - mean)), dg), db = db + dy. The product is rounded where it is computed
//   (by the loading thread), the fma and the add run in the chain's order (by the chain's thread): the same
//   roundings in the same order, so the same bits.
// - dX is elementwise given a row's mean, rstd and sums (grad_input): any thread may write it.
// - The groups' values go to out_g/out_b[group][N]: dgamma/dbeta themselves with one group, else the template's
//   values for grad_columns_fold's tree (or, in the partial form, torch's partials for its .sum(0)).
#include "grad_ln.cuh"

constexpr int kVecs = 8;           // float4 columns of a block: 32 floats, 128 bytes of each row
constexpr int kCols = 4 * kVecs;
constexpr int kLoadRows = 32;      // rows one pass of the block's 256 threads loads (a float4 of x and dy each)
constexpr int kPerThread = 2;      // such passes per tile: each thread keeps two rows' loads in flight
constexpr int kTileRows = kLoadRows * kPerThread;
constexpr int kThreads = kVecs * kLoadRows;

// One thread's share of a tile: a float4 of x and dy in each of its rows, those rows' mean and rstd (and sums).
struct TileLoad {
    float4 x[kPerThread], dy[kPerThread];
    float mean[kPerThread], rstd[kPerThread], s1[kPerThread], s2[kPerThread];
};

// grid: (ceil(n4 / 8), groups or partial groups); block: 256, three a SM (ptxas then keeps it in 80 registers
// without spilling). rows_per_group: a power of two (8 or 32).
extern "C" __global__ void __launch_bounds__(kThreads, 3) grad_columns_tiled(
    const float4* __restrict__ x, const float4* __restrict__ dy, const float4* __restrict__ gamma,
    const float* __restrict__ mean, const float* __restrict__ rstd, const float* __restrict__ s1,
    const float* __restrict__ s2, float4* __restrict__ dx, float* __restrict__ out_g, float* __restrict__ out_b,
    int rows, int n4, int rows_per_group) {
    __shared__ float4 prod[2][kTileRows][kVecs];  // round(dy * round(x - mean)), by tile buffer
    __shared__ float4 dys[2][kTileRows][kVecs];
    __shared__ float rs[2][kTileRows];
    const int v = threadIdx.x % kVecs, lr = threadIdx.x / kVecs;
    const int j4 = blockIdx.x * kVecs + v;
    const bool col = j4 < n4;
    const int group = blockIdx.y;
    const int shift = __ffs(rows_per_group) - 1;
    const int stride = rows_per_group * gridDim.y;
    const bool want_dx = dx != nullptr;
    const float fh = (float)(4 * n4);
    const float inv = __frcp_rn(fh);  // torch's 1.f / fH
    const float4 g = col ? gamma[j4] : make_float4(0.f, 0.f, 0.f, 0.f);
    // The chain's k-th row; rows only grow with k, so a tile's rows in the chain are a prefix of it.
    auto row_of = [&](int k) {
        return group * rows_per_group + (k >> shift) * stride + (k & (rows_per_group - 1));
    };
    auto load = [&](TileLoad& t, int tile) {
#pragma unroll
        for (int h = 0; h < kPerThread; ++h) {
            const int r = row_of(tile * kTileRows + h * kLoadRows + lr);
            if (r < rows) {
                t.mean[h] = mean[r];
                t.rstd[h] = rstd[r];
                if (want_dx) {
                    t.s1[h] = s1[r];
                    t.s2[h] = s2[r];
                }
                if (col) {
                    const size_t at = (size_t)r * n4 + j4;
                    t.x[h] = x[at];
                    t.dy[h] = dy[at];
                }
            }
        }
    };
    float dg = 0.f, db = 0.f;  // the chain of column 32 * blockIdx.x + threadIdx.x (warp 0)
    TileLoad cur, next;
    load(cur, 0);
    for (int tile = 0; row_of(tile * kTileRows) < rows; ++tile) {
        const int buf = tile & 1;
        const bool more = row_of((tile + 1) * kTileRows) < rows;
        if (more) load(next, tile + 1);  // in flight while this tile is written and its chains run
#pragma unroll
        for (int h = 0; h < kPerThread; ++h) {
            const int i = h * kLoadRows + lr;
            const int r = row_of(tile * kTileRows + i);
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
        // Tile buffer `buf` is written again two tiles on; warp 0 reaches the next barrier only after its chains
        // over this one, so one barrier per tile keeps the two apart.
        __syncthreads();
        if (threadIdx.x < kCols) {
            int valid = 0;  // the tile's rows in the chain: lane l asks for rows l, l + 32, ...
#pragma unroll
            for (int h = 0; h < kPerThread; ++h)
                valid += __popc(
                    __ballot_sync(0xffffffffu, row_of(tile * kTileRows + h * kLoadRows + threadIdx.x) < rows));
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
        }
        if (more) cur = next;
    }
    const int c = blockIdx.x * kCols + threadIdx.x;
    if (threadIdx.x < kCols && c < 4 * n4) {
        const size_t at = (size_t)group * 4 * n4 + c;
        if (out_g) out_g[at] = dg;
        if (out_b) out_b[at] = db;
    }
}
