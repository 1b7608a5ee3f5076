// LayerNorm dX, dgamma and dbeta from the row sums (grad_row_sums.cu / grad_chain_sums.cu), reading x and dy once
// for all three: the schedule of torch's GammaBetaBackwardCUDAKernelTemplate, with torch's dX written from the
// same loads.
//
// Contract kept (torch v2.11.0's LaunchGammaBetaBackwardCUDAKernel for float, grad_ln.cuh's arithmetic):
// - dX is elementwise given a row's mean, rstd and sums, so any schedule keeps its bits (grad_input).
// - dgamma/dbeta: column j's sums run over "groups": group g adds rows base + g*R + i (i < R) for base = 0,
//   R*G_total, 2*R*G_total, ..., in that order (gamma_beta_push; rows past the end add nothing). torch's templates
//   by M: M < 64: one group (R 8); M < 128: 8 groups; M < 256: 16; else 32 (R 8 each); and for M > 64K with
//   N / 32 < SMs / 2, G' partial groups of R = 32 rows, one per grid row, left as partials for torch's own
//   .sum(0) (the caller runs it). In-block groups combine like torch's WARP_SHFL_XOR butterfly, whose lane 0 is
//   the tree v[l] += v[l + d] for d = G/2, ..., 1.
// - Threads take four columns each (float4): a column's order does not depend on which thread runs it.
#include "grad_ln.cuh"

// G: groups in the block (threadIdx.y); a grid with gridDim.y > 1 is the partial form (G must be 1 there).
// dx null: dgamma/dbeta only (grad_rows_fused.cu wrote dX), torch's own GammaBeta pass.
// grid: (ceil(n4 / CX), partial groups or 1); block: (CX, G) with CX = 256 / G float4 columns.
template <int G>
__device__ __forceinline__ void grad_columns(const float4* __restrict__ x, const float4* __restrict__ dy,
                                             const float4* __restrict__ gamma, const float* __restrict__ mean,
                                             const float* __restrict__ rstd, const float* __restrict__ s1,
                                             const float* __restrict__ s2, float4* __restrict__ dx,
                                             float* __restrict__ dgamma, float* __restrict__ dbeta, int rows,
                                             int n4, int rows_per_group) {
    constexpr int CX = 256 / G;
    constexpr int COLS = 4 * CX;  // columns of the block
    __shared__ float sdg[G > 1 ? G : 1][G > 1 ? COLS : 1];
    __shared__ float sdb[G > 1 ? G : 1][G > 1 ? COLS : 1];
    const int j4 = blockIdx.x * CX + threadIdx.x;
    const int group = blockIdx.y * G + threadIdx.y;
    const int stride = rows_per_group * G * gridDim.y;
    const bool active = j4 < n4;
    const float fh = (float)(4 * n4);
    const float inv = __frcp_rn(fh);  // torch's 1.f / fH: the correctly rounded reciprocal
    float4 dg = make_float4(0.f, 0.f, 0.f, 0.f), db = dg;
    if (active) {
        const float4 g = gamma[j4];
        for (int base = group * rows_per_group; base < rows; base += stride) {
            const int end = min(base + rows_per_group, rows);
#pragma unroll 8
            for (int r = base; r < end; ++r) {
                const size_t at = (size_t)r * n4 + j4;
                const float4 vx = x[at], vd = dy[at];
                const float m = mean[r], rs = rstd[r];
                if (dx) dx[at] = grad_input4(vx, vd, g, m, rs, s1[r], s2[r], fh, __fmul_rn(rs, inv));
                gamma_beta_push(dg.x, db.x, vx.x, vd.x, m, rs);
                gamma_beta_push(dg.y, db.y, vx.y, vd.y, m, rs);
                gamma_beta_push(dg.z, db.z, vx.z, vd.z, m, rs);
                gamma_beta_push(dg.w, db.w, vx.w, vd.w, m, rs);
            }
        }
    }
    if (G == 1) {
        if (active) {
            const size_t at = (size_t)blockIdx.y * n4 + j4;  // the partial form's row, else row 0
            if (dgamma) reinterpret_cast<float4*>(dgamma)[at] = dg;
            if (dbeta) reinterpret_cast<float4*>(dbeta)[at] = db;
        }
        return;
    }
    float* mine_g = &sdg[threadIdx.y][4 * threadIdx.x];
    float* mine_b = &sdb[threadIdx.y][4 * threadIdx.x];
    mine_g[0] = dg.x, mine_g[1] = dg.y, mine_g[2] = dg.z, mine_g[3] = dg.w;
    mine_b[0] = db.x, mine_b[1] = db.y, mine_b[2] = db.z, mine_b[3] = db.w;
    __syncthreads();
    // One thread per (array, column) of the block folds the column's G group sums in the butterfly's order.
    const int t = threadIdx.y * CX + threadIdx.x;
    if (t >= 2 * COLS) return;
    const int col = t % COLS;
    const bool is_beta = t >= COLS;
    const int j = 4 * blockIdx.x * CX + col;
    float* out = is_beta ? dbeta : dgamma;
    if (j >= 4 * n4 || out == nullptr) return;
    // In place in shared memory (one thread owns the column now): v[l] += v[l + d] for d = G/2, ..., 1.
    float* v = is_beta ? &sdb[0][col] : &sdg[0][col];
#pragma unroll
    for (int d = G >> 1; d > 0; d >>= 1) {
        for (int l = 0; l < d; ++l) v[l * COLS] = __fadd_rn(v[l * COLS], v[(l + d) * COLS]);
    }
    out[j] = v[0];
}

#define GRAD_COLUMNS(G)                                                                                             \
    extern "C" __global__ void __launch_bounds__(256) grad_columns_g##G(                                           \
        const float4* x, const float4* dy, const float4* gamma, const float* mean, const float* rstd,              \
        const float* s1, const float* s2, float4* dx, float* dgamma, float* dbeta, int rows, int n4,               \
        int rows_per_group) {                                                                                       \
        grad_columns<G>(x, dy, gamma, mean, rstd, s1, s2, dx, dgamma, dbeta, rows, n4, rows_per_group);            \
    }

GRAD_COLUMNS(1)
GRAD_COLUMNS(8)
GRAD_COLUMNS(16)
GRAD_COLUMNS(32)
