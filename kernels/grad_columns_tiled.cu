// LayerNorm dgamma/dbeta (and, where asked, dX) in the order of torch's GammaBetaBackwardCUDAKernelTemplate, with
// the loads spread over eight times the threads that run the chains. grad_columns.cu gives each (column, group)
// chain one thread that also loads its rows; where N is a few thousand or less those threads are too few to keep
// the bytes in flight that HBM needs (8,192 threads at 8192 x 1024: 3% occupancy, 19% of DRAM bandwidth, ncu in
// data/dev/grad_ring/). Here a block of 256 threads holds one group of 32 columns: all its threads load a tile of
// the group's next 32 rows, each rounds its own product dy * (x - mean) and writes it to shared memory, and one
// warp then runs the 32 chains over the tile.
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

constexpr int kVecs = 8;        // float4 columns of a block: 32 floats, 128 bytes of each row
constexpr int kCols = 4 * kVecs;
constexpr int kTileRows = 32;   // rows of the chain per tile: 256 threads, one float4 of x and of dy each
constexpr int kThreads = kVecs * kTileRows;

// One thread's share of a tile: a float4 of x and dy in one row, that row's mean and rstd (and sums for dX).
struct TileLoad {
    float4 x, dy;
    float mean, rstd, s1, s2;
    int row;  // -1: past the end of the chain (or of the row: column past N)
};

// grid: (ceil(n4 / 8), groups or partial groups); block: 256.
extern "C" __global__ void __launch_bounds__(kThreads) grad_columns_tiled(
    const float4* __restrict__ x, const float4* __restrict__ dy, const float4* __restrict__ gamma,
    const float* __restrict__ mean, const float* __restrict__ rstd, const float* __restrict__ s1,
    const float* __restrict__ s2, float4* __restrict__ dx, float* __restrict__ out_g, float* __restrict__ out_b,
    int rows, int n4, int rows_per_group) {
    __shared__ float4 prod[2][kTileRows][kVecs];  // round(dy * round(x - mean)), by tile buffer
    __shared__ float4 dys[2][kTileRows][kVecs];
    __shared__ float rs[2][kTileRows];
    const int v = threadIdx.x % kVecs, tr = threadIdx.x / kVecs;
    const int j4 = blockIdx.x * kVecs + v;
    const int group = blockIdx.y;
    const int stride = rows_per_group * gridDim.y;
    const bool want_dx = dx != nullptr;
    const float fh = (float)(4 * n4);
    const float inv = __frcp_rn(fh);  // torch's 1.f / fH
    const float4 g = j4 < n4 ? gamma[j4] : make_float4(0.f, 0.f, 0.f, 0.f);
    // The chain's k-th row; rows only grow with k, so a tile's valid rows are a prefix of it.
    auto row_of = [&](int k) { return group * rows_per_group + (k / rows_per_group) * stride + k % rows_per_group; };
    auto load = [&](TileLoad& t, int tile) {
        const int r = row_of(tile * kTileRows + tr);
        t.row = r < rows && j4 < n4 ? r : -1;
        if (r < rows) {
            t.mean = mean[r];
            t.rstd = rstd[r];
            if (want_dx) {
                t.s1 = s1[r];
                t.s2 = s2[r];
            }
            if (j4 < n4) {
                const size_t at = (size_t)r * n4 + j4;
                t.x = x[at];
                t.dy = dy[at];
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
        if (cur.row >= 0) {
            const float4 d = cur.dy;
            prod[buf][tr][v] = make_float4(__fmul_rn(d.x, __fsub_rn(cur.x.x, cur.mean)),
                                           __fmul_rn(d.y, __fsub_rn(cur.x.y, cur.mean)),
                                           __fmul_rn(d.z, __fsub_rn(cur.x.z, cur.mean)),
                                           __fmul_rn(d.w, __fsub_rn(cur.x.w, cur.mean)));
            dys[buf][tr][v] = d;
            if (want_dx)
                dx[(size_t)cur.row * n4 + j4] =
                    grad_input4(cur.x, d, g, cur.mean, cur.rstd, cur.s1, cur.s2, fh, __fmul_rn(cur.rstd, inv));
        }
        if (v == 0) rs[buf][tr] = cur.rstd;
        // Tile buffer `buf` is written again two tiles on; warp 0 reaches the next barrier only after its
        // chains over this one, so one barrier per tile keeps the two apart.
        __syncthreads();
        if (threadIdx.x < kCols) {
            const int k0 = tile * kTileRows;
            int valid = 0;  // rows of this tile in the chain
            while (valid < kTileRows && row_of(k0 + valid) < rows) ++valid;
            const float* p = reinterpret_cast<const float*>(&prod[buf][0][0]) + threadIdx.x;
            const float* d = reinterpret_cast<const float*>(&dys[buf][0][0]) + threadIdx.x;
            for (int i = 0; i < valid; ++i) {
                dg = __fmaf_rn(rs[buf][i], p[i * kCols], dg);
                db = __fadd_rn(db, d[i * kCols]);
            }
        }
        if (more) cur = next;
    }
    const int col = blockIdx.x * kCols + threadIdx.x;
    if (threadIdx.x < kCols && col < 4 * n4) {
        const size_t at = (size_t)group * 4 * n4 + col;
        if (out_g) out_g[at] = dg;
        if (out_b) out_b[at] = db;
    }
}
