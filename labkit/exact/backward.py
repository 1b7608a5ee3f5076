"""Bit-exact CPU emulator of torch's CUDA LayerNorm backward (float32, the vectorized dX path), as
kernels/grad_ln.cuh writes it out and labkit.studies.backward_contract describes it:

- row sums: thread t of 128 pushes the components of float4 vectors t, t+128, ... : gp = dy * gamma (rounded),
  s1 += gp, s2 = fma(rstd, gp * (x - mean), s2); WarpReduceSum (shuffle-down 16..1) in each of the four warps,
  then warp 0's WarpReduceSum over (w0, w1, w2, w3, 0, ...);
- dX: term1 = rstd * (1/N); dx = term1 * (fma(dy, N * gamma, -(s2 * (rstd * (x - mean)))) - s1);
- dgamma/dbeta: torch's GammaBeta template for (M, N) (labkit.ops.backward.gamma_beta_template): per column, each
  group's rows in order, dg = fma(rstd, dy * (x - mean), dg), db = db + dy, then the groups folded by the
  butterfly tree; in the partial form (M > 64K, small N) the partials, which torch sums with its own .sum(0).

float32 numpy arithmetic rounds each plain operation as the GPU does; labkit.exact.fma.fma32 is the exact FMA.
Arrays are vectorized over rows and threads (or columns); the loops are over a thread's vectors and a column's rows.
"""
from __future__ import annotations

import numpy as np

from labkit.exact.fma import fma32

F32 = np.float32
THREADS = 128


def _rows2d(name: str, a) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype != np.float32 or a.ndim != 2:
        raise ValueError(f"{name} must be a float32 (rows, N) array, got {a.dtype} with shape {a.shape}")
    return a


def _warp_sum(v: np.ndarray) -> np.ndarray:
    """torch's WarpReduceSum on the last axis (32 lanes): lane 0's value."""
    v = v.copy()
    for off in (16, 8, 4, 2, 1):
        v[..., :32 - off] = v[..., :32 - off] + v[..., off:]
    return v[..., 0]


def _block_sum(per_thread: np.ndarray) -> np.ndarray:
    """torch's BlockReduceSum over (rows, 128) thread values: each warp's sum, then warp 0's over (w0..w3, 0...)."""
    rows = per_thread.shape[0]
    warps = _warp_sum(per_thread.reshape(rows, 4, 32))
    lanes = np.zeros((rows, 32), dtype=F32)
    lanes[:, :4] = warps
    return _warp_sum(lanes)


def row_sums(x2d, dy2d, gamma, mean, rstd) -> tuple[np.ndarray, np.ndarray]:
    """(s1, s2) per row: torch's stats_x1 and stats_x2 after BlockReduceSum. N must be a multiple of 4; gamma
    None means torch's absent weight (a multiplication by 1.0)."""
    x2d, dy2d = _rows2d("x", x2d), _rows2d("dy", dy2d)
    rows, n = x2d.shape
    if n % 4:
        raise ValueError(f"N must be a multiple of 4 (the vectorized dX path), got {n}")
    g = np.ones(n, dtype=F32) if gamma is None else np.asarray(gamma, dtype=F32).reshape(n)
    m = np.asarray(mean, dtype=F32).reshape(rows, 1)
    r = np.asarray(rstd, dtype=F32).reshape(rows, 1)
    n4 = n // 4
    steps = -(-n4 // THREADS)
    pad = steps * THREADS - n4

    def vecs(a):  # (rows, steps, 128 threads, 4) with zero padding, and which vectors exist
        a = a.reshape(a.shape[0], n4, 4)
        return np.pad(a, ((0, 0), (0, pad), (0, 0))).reshape(a.shape[0], steps, THREADS, 4)

    xv, dv, gv = vecs(x2d), vecs(dy2d), vecs(g.reshape(1, n))[0]
    live = (np.arange(steps * THREADS).reshape(steps, THREADS) < n4)
    s1 = np.zeros((rows, THREADS), dtype=F32)
    s2 = np.zeros((rows, THREADS), dtype=F32)
    for k in range(steps):
        on = live[k]
        for c in range(4):
            gp = dv[:, k, :, c] * gv[k, :, c]
            new1 = s1 + gp
            new2 = fma32(np.broadcast_to(r, gp.shape), gp * (xv[:, k, :, c] - m), s2)
            s1 = np.where(on, new1, s1)
            s2 = np.where(on, new2, s2)
    return _block_sum(s1), _block_sum(s2)


def grad_input(x2d, dy2d, gamma, mean, rstd, s1, s2) -> np.ndarray:
    """torch's dX from the row sums."""
    x2d, dy2d = _rows2d("x", x2d), _rows2d("dy", dy2d)
    rows, n = x2d.shape
    g = np.ones(n, dtype=F32) if gamma is None else np.asarray(gamma, dtype=F32).reshape(n)
    m = np.asarray(mean, dtype=F32).reshape(rows, 1)
    r = np.asarray(rstd, dtype=F32).reshape(rows, 1)
    fh = F32(n)
    term1 = r * (F32(1) / fh)
    t = np.asarray(s2, dtype=F32).reshape(rows, 1) * (r * (x2d - m))
    f = fma32(dy2d, np.broadcast_to(fh * g, dy2d.shape), -t)
    return term1 * (f - np.asarray(s1, dtype=F32).reshape(rows, 1))


def gamma_beta(x2d, dy2d, mean, rstd, sm_count: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(dgamma, dbeta, partial_groups): torch's GammaBeta template for (rows, N) on `sm_count` SMs. With
    partial_groups > 1 the first two are the [partial_groups, N] partials torch then sums with .sum(0)."""
    from labkit.ops.backward import gamma_beta_template

    x2d, dy2d = _rows2d("x", x2d), _rows2d("dy", dy2d)
    rows, n = x2d.shape
    t = gamma_beta_template(rows, n, sm_count)
    m = np.asarray(mean, dtype=F32).reshape(rows)
    r = np.asarray(rstd, dtype=F32).reshape(rows)
    groups = t.groups * t.partial_groups
    stride = t.rows_per_group * groups
    dg = np.zeros((groups, n), dtype=F32)
    db = np.zeros((groups, n), dtype=F32)
    for grp in range(groups):
        for base in range(grp * t.rows_per_group, rows, stride):
            for row in range(base, min(base + t.rows_per_group, rows)):
                dy = dy2d[row]
                dg[grp] = fma32(np.full(n, r[row], dtype=F32), dy * (x2d[row] - m[row]), dg[grp])
                db[grp] = db[grp] + dy
    if t.partial_groups > 1:
        return dg, db, t.partial_groups
    d = t.groups // 2
    while d >= 1:
        dg[:d] = dg[:d] + dg[d:2 * d]
        db[:d] = db[:d] + db[d:2 * d]
        d //= 2
    return dg[0], db[0], 1


def layer_norm_backward(x2d, dy2d, gamma, mean, rstd, sm_count: int):
    """(dx, dgamma, dbeta, partial_groups) of torch's backward, all float32; see gamma_beta for the partial form."""
    s1, s2 = row_sums(x2d, dy2d, gamma, mean, rstd)
    dx = grad_input(x2d, dy2d, gamma, mean, rstd, s1, s2)
    dg, db, parts = gamma_beta(x2d, dy2d, mean, rstd, sm_count)
    return dx, dg, db, parts
