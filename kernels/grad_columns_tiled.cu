// LayerNorm dgamma/dbeta (and, where asked, dX) in the order of torch's GammaBetaBackwardCUDAKernelTemplate, for
// templates whose (column, group) chains are long and few. grad_columns.cu gives each chain one thread that also
// loads its rows; where N is a few thousand or less those threads are too few to keep the bytes in flight that HBM
// needs (grad_columns_streamed at 8192 x 1024: 8,192 threads, 3% achieved occupancy, 19% of DRAM bandwidth; ncu in
// data/dev/grad_ring/). Here a block of 256 threads takes one item, a group's 32 columns: all its threads copy
// the group's next 64 rows (x, dy and the rows' statistics) into a ring of kStages shared-memory tiles with
// cp.async (sm_80 and later), kStages - 1 tiles in flight while one is used; warp 0 runs the 32 chains straight
// from the tile, and every thread writes dX for its rows of it where asked.
// Measured on the H200 (torch 2.11; data/dev/grad_tiled, the whole backward under graph replay, bits equal at all
// 14 shapes, both schedules, four affine/mask cases): against the same tiles loaded into registers, one tile in
// flight per thread (this file before), 8192 x 1024 60.5 -> 53.4 us, 16384 x 1024 108.8 -> 94.8, 65536 x 256
// 126.3 -> 108.0, 4096 x 768 23.6 -> 22.4 (split schedule). Three stages (four blocks a SM) beat four stages
// (three a SM) at most shapes; blocks looping over items (persistent) gained nothing over one item a block.
//
// Contract kept (grad_ln.cuh's gamma_beta_push):
// - column j's chain of group g adds rows base + g*R + i (i < R) for base = 0, R*G, 2*R*G, ... in that order:
//   dg = fma(rstd, round(dy * round(x - mean)), dg), db = db + dy, one thread per chain: the same roundings in
//   the same order, so the same bits, whichever thread copied the rows.
// - dX is elementwise given a row's mean, rstd and sums (grad_input): any thread may write it.
// - The groups' values go to out_g/out_b[group][N]: dgamma/dbeta themselves with one group, else the template's
//   values for grad_columns_fold's tree (or, in the partial form, torch's partials for its .sum(0)).
#include "grad_ln.cuh"

namespace {
constexpr int kCols = 32;              // columns of a block: 128 bytes of each row
constexpr int kVecs = kCols / 4;
constexpr int kTileRows = 64;          // rows of a chain per tile
constexpr int kThreads = 256;
constexpr int kLoadRows = kThreads / kVecs;  // rows one pass of the block loads: 32
constexpr int kPerThread = kTileRows / kLoadRows;

struct Tile {
    float x[kTileRows][kCols];
    float dy[kTileRows][kCols];
    float mean[kTileRows], rstd[kTileRows], s1[kTileRows], s2[kTileRows];
};

// cp.async of 16 bytes (through L2 only: x and dy are read once here) and of 4 (a row's statistic).
__device__ __forceinline__ void copy16(void* dst, const void* src) {
    const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(at), "l"(src) : "memory");
}

__device__ __forceinline__ void copy4(void* dst, const void* src) {
    const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(at), "l"(src) : "memory");
}

__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void wait_groups() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
}  // namespace

// The pass at kStages ring stages (the entry point's 3: measured above).
template <int kStages>
__device__ __forceinline__ void grad_columns_staged(
    const float4* __restrict__ x, const float4* __restrict__ dy, const float4* __restrict__ gamma,
    const float* __restrict__ mean, const float* __restrict__ rstd, const float* __restrict__ s1,
    const float* __restrict__ s2, float4* __restrict__ dx, float* __restrict__ out_g, float* __restrict__ out_b,
    int rows, int n4, int rows_per_group, int groups) {
    extern __shared__ __align__(16) unsigned char smem[];
    Tile* ring = reinterpret_cast<Tile*>(smem);
    const int v = threadIdx.x % kVecs, lr = threadIdx.x / kVecs;
    const int gx = (n4 + kVecs - 1) / kVecs;
    const int items = gx * groups;
    const int shift = __ffs(rows_per_group) - 1;
    const int stride = rows_per_group * groups;
    const bool want_dx = dx != nullptr;
    const int n = 4 * n4;
    const float fh = (float)n;
    const float inv = __frcp_rn(fh);
    const int full = rows / stride, rem = rows - full * stride;
    // A group's chain: its k-th row, its length and its tiles.
    auto row_of = [&](int group, int k) {
        return group * rows_per_group + (k >> shift) * stride + (k & (rows_per_group - 1));
    };
    auto chain_len = [&](int group) {
        return full * rows_per_group + min(max(rem - group * rows_per_group, 0), rows_per_group);
    };
    auto issue = [&](int item, int tile, Tile& t) {
        const int group = item / gx, j4 = (item % gx) * kVecs + v;
        const int len = chain_len(group);
#pragma unroll
        for (int h = 0; h < kPerThread; ++h) {
            const int i = h * kLoadRows + lr, k = tile * kTileRows + i;
            if (k >= len) continue;
            const int r = row_of(group, k);
            if (j4 < n4) {
                const size_t at = (size_t)r * n4 + j4;
                copy16(&t.x[i][4 * v], x + at);
                copy16(&t.dy[i][4 * v], dy + at);
            }
            if (v == 0) {
                copy4(&t.mean[i], mean + r);
                copy4(&t.rstd[i], rstd + r);
                if (want_dx) {
                    copy4(&t.s1[i], s1 + r);
                    copy4(&t.s2[i], s2 + r);
                }
            }
        }
    };
    // (item, tile) cursors: `c` consumed next, `f` fetched next (kStages - 1 ahead).
    auto advance = [&](int& item, int& tile) {
        if ((tile + 1) * kTileRows < chain_len(item / gx)) {
            ++tile;
        } else {
            item += gridDim.x;
            tile = 0;
        }
    };
    int fi = blockIdx.x, ft = 0;
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (fi < items) {
            issue(fi, ft, ring[s]);
            advance(fi, ft);
        }
        commit();
    }
    float dg = 0.f, db = 0.f;
    int ci = blockIdx.x, ct = 0, k = 0;
    int g_item = -1;
    float4 g = make_float4(0.f, 0.f, 0.f, 0.f);
    while (ci < items) {
        wait_groups<kStages - 2>();
        __syncthreads();  // tile k landed for every thread; every thread is done with tile k - 1's slot
        if (fi < items) {
            issue(fi, ft, ring[(k + kStages - 1) % kStages]);
            advance(fi, ft);
        }
        commit();
        const Tile& t = ring[k % kStages];
        const int group = ci / gx, xb = ci % gx;
        const int len = chain_len(group);
        const int valid = min(kTileRows, len - ct * kTileRows);
        if (want_dx) {
            const int j4 = xb * kVecs + v;
            if (g_item != ci) {
                g = j4 < n4 ? gamma[j4] : make_float4(0.f, 0.f, 0.f, 0.f);
                g_item = ci;
            }
#pragma unroll
            for (int h = 0; h < kPerThread; ++h) {
                const int i = h * kLoadRows + lr;
                if (i >= valid || j4 >= n4) continue;
                const float4 xv = *reinterpret_cast<const float4*>(&t.x[i][4 * v]);
                const float4 d = *reinterpret_cast<const float4*>(&t.dy[i][4 * v]);
                const float r = t.rstd[i];
                dx[(size_t)row_of(group, ct * kTileRows + i) * n4 + j4] =
                    grad_input4(xv, d, g, t.mean[i], r, t.s1[i], t.s2[i], fh, __fmul_rn(r, inv));
            }
        }
        if (threadIdx.x < kCols) {
            const int c = threadIdx.x;
            if (valid == kTileRows) {
#pragma unroll 16
                for (int i = 0; i < kTileRows; ++i)
                    gamma_beta_push(dg, db, t.x[i][c], t.dy[i][c], t.mean[i], t.rstd[i]);
            } else {
                for (int i = 0; i < valid; ++i)
                    gamma_beta_push(dg, db, t.x[i][c], t.dy[i][c], t.mean[i], t.rstd[i]);
            }
            if ((ct + 1) * kTileRows >= len) {  // the item's chains are done
                const int col = xb * kCols + c;
                if (col < n) {
                    const size_t at = (size_t)group * n + col;
                    if (out_g) out_g[at] = dg;
                    if (out_b) out_b[at] = db;
                }
                dg = db = 0.f;
            }
        }
        advance(ci, ct);
        ++k;
    }
}

// grid: (ceil(n4 / 8) * groups): item b is column block b % ceil(n4 / 8) of group b / ceil(n4 / 8) (a grid smaller
// than that loops over the items, the ring flowing on); block: 256 threads, four a SM. Dynamic shared memory:
// kStages * sizeof(Tile), 52,224 bytes. rows_per_group: a power of two (8 or 32); groups: the template's groups
// (or partial groups).
extern "C" __global__ void __launch_bounds__(kThreads, 4) grad_columns_tiled(
    const float4* __restrict__ x, const float4* __restrict__ dy, const float4* __restrict__ gamma,
    const float* __restrict__ mean, const float* __restrict__ rstd, const float* __restrict__ s1,
    const float* __restrict__ s2, float4* __restrict__ dx, float* __restrict__ out_g, float* __restrict__ out_b,
    int rows, int n4, int rows_per_group, int groups) {
    grad_columns_staged<3>(x, dy, gamma, mean, rstd, s1, s2, dx, out_g, out_b, rows, n4, rows_per_group, groups);
}
