// Small-channel normalization on channels-last rows: x is (rows, C) contiguous, one warp per row.
//
// Why a warp per row: with C = 32..128 a row is 128..512 contiguous bytes, so a warp's loads of one row are fully
// coalesced, and the row's sum needs only shuffles (no shared memory, no block barrier). The second pass re-reads
// the row from L1. The lanes' order (lane l sums c = l, l+32, ...; then an xor butterfly) is NOT eager torch's
// channel tree, so outputs may differ from eager in the last bits; the study counts by how much.
#define FAMILY_RMS 0
#define FAMILY_MEAN_ABS 1
#define FAMILY_L2 2

template <int FAMILY>
__device__ __forceinline__ float term(float v) {
    return FAMILY == FAMILY_MEAN_ABS ? fabsf(v) : v * v;
}

template <int FAMILY>
__device__ __forceinline__ void row_norm(const float* __restrict__ x, float* __restrict__ y, long long rows,
                                         int c_count, float factor, float eps) {
    const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;  // whole warps leave together: rows are warp-uniform
    const float* xr = x + (size_t)row * c_count;
    float* yr = y + (size_t)row * c_count;
    float acc = 0.f;
#pragma unroll 4
    for (int c = lane; c < c_count; c += 32) acc += term<FAMILY>(__ldg(xr + c));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    float scale;
    if (FAMILY == FAMILY_RMS) scale = __fsqrt_rn(__fadd_rn(__fmul_rn(acc, factor), eps));
    else if (FAMILY == FAMILY_MEAN_ABS) scale = __fmul_rn(acc, factor);
    else scale = __fsqrt_rn(acc);
#pragma unroll 4
    for (int c = lane; c < c_count; c += 32) yr[c] = __fdiv_rn(__ldg(xr + c), scale);
}

#define ROWS_KERNEL(NAME, FAMILY)                                                                                \
    extern "C" __global__ void __launch_bounds__(256) NAME(const float* __restrict__ x, float* __restrict__ y,   \
                                                           long long rows, int c_count, float factor,            \
                                                           float eps) {                                          \
        row_norm<FAMILY>(x, y, rows, c_count, factor, eps);                                                      \
    }

ROWS_KERNEL(rows_rms, FAMILY_RMS)
ROWS_KERNEL(rows_mean_abs, FAMILY_MEAN_ABS)
ROWS_KERNEL(rows_l2, FAMILY_L2)
