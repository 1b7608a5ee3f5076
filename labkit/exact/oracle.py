"""Exact oracle for LayerNorm statistics: which answer is closer to the truth?

Every float32 is an integer times a power of two (m * 2**e with |m| < 2**24 and e >= -149), so the sum and the
sum of squares of a row are exact rationals. They are computed with numpy at full speed and no rounding:

- values are grouped by their exponent field (256 groups) and the signed significands of each group are summed
  with `np.bincount` (float64 accumulators): every partial sum is an integer below 2**24 * 2**24 = 2**48 < 2**53
  in magnitude (N <= 2**24 is the vectorized-path limit), so each addition is exact;
- squares m**2 (48 bits) are split as m = h*2**12 + l, m**2 = h*h*2**24 + 2*h*l*2**12 + l*l, and the three
  24-bit products are summed the same way;
- the 256 group sums are then combined with Python integers.

mean = S/N and var = (N*Q - S**2)/N**2 (population variance, as LayerNorm) are exact `Fraction`s; a constant row
has variance exactly 0. rstd = 1/sqrt(var + eps) is irrational in general: it is evaluated with `decimal` at 50
significant digits, and its correctly rounded float32 is found by exact midpoint tests (m**2 * t < 1), so the
"ulps from truth" below never depend on float64 rounding. eps enters as float32(eps), as torch's kernel uses it.
The true output gamma*(x - mean)*rstd + beta is computed in float64 from the exact mean (split in two float64s)
and the float64 rstd: its error (~1e-16 relative) is far below a float32 ulp (~6e-8).
"""
from __future__ import annotations

import math
import time
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

__all__ = ["exact_row_stats", "exact_stats", "nearest_float32", "rstd_truth", "true_output", "compare_to_truth",
           "ulp_steps"]

_F32 = np.float32
_PREC = 50  # decimal digits for rstd
_SCALE_S = 149  # S * 2**149 is an integer
_SCALE_Q = 298  # Q * 2**298 is an integer


def _as_row(x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise ValueError(f"the oracle takes float32 rows (got {x.dtype})")
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"a row is a non-empty 1-d array (got shape {x.shape})")
    if x.size > 1 << 24:
        raise ValueError(f"row length must be <= 2**24 for exact float64 group sums (got {x.size})")
    return x


def _group_sums(weights: np.ndarray, groups: np.ndarray) -> list[int]:
    sums = np.bincount(groups, weights=weights, minlength=256)
    return [int(s) for s in sums]  # each an exact integer (see module docstring)


def exact_sums(x) -> tuple[int, int, int] | None:
    """(N, S*2**149, Q*2**298) as Python integers, S = sum(x) and Q = sum(x**2) exactly; None if x has NaN/inf."""
    x = _as_row(x)
    bits = x.view(np.uint32)
    field = (bits >> 23) & 0xFF
    if (field == 0xFF).any():
        return None
    frac = (bits & 0x7FFFFF).astype(np.int64)
    mant = frac + ((field > 0).astype(np.int64) << 23)  # value = mant * 2**(max(field,1) - 150)
    groups = field.astype(np.intp)
    signed = np.where(bits >> 31, -mant, mant).astype(np.float64)
    hi, lo = (mant >> 12).astype(np.float64), (mant & 0xFFF).astype(np.float64)
    s_g = _group_sums(signed, groups)
    a_g = _group_sums(hi * hi, groups)
    b_g = _group_sums(hi * lo, groups)
    c_g = _group_sums(lo * lo, groups)
    s_int = q_int = 0
    for f in range(255):
        shift = max(f, 1) - 150 + _SCALE_S  # >= 0
        if s_g[f]:
            s_int += s_g[f] << shift
        if a_g[f] or b_g[f] or c_g[f]:
            q_int += ((a_g[f] << 24) + (b_g[f] << 13) + c_g[f]) << (2 * shift)
    return x.size, s_int, q_int


def exact_row_stats(x_row) -> tuple[Fraction | float, Fraction | float]:
    """Exact (mean, population variance) of one float32 row as Fractions; (nan, nan) if the row has NaN/inf."""
    sums = exact_sums(x_row)
    if sums is None:
        return math.nan, math.nan
    n, s, q = sums
    mean = Fraction(s, n << _SCALE_S)
    var = Fraction(n * q - s * s, (n * n) << _SCALE_Q)
    return mean, var


def exact_stats(x2d) -> list[tuple]:
    """exact_row_stats for each row of a (rows, N) float32 array."""
    x2d = np.asarray(x2d)
    if x2d.ndim != 2:
        raise ValueError(f"exact_stats takes (rows, N), got shape {x2d.shape}")
    return [exact_row_stats(r) for r in x2d]


# ------------------------------------------------------------ float32 rounding of exact values ---


def _next(v: np.float32, toward: float) -> np.float32:
    return np.nextafter(_F32(v), _F32(toward))


def nearest_float32(q: Fraction) -> np.float32:
    """The float32 nearest to the rational q (ties to even), by exact comparison with the neighbours."""
    guess = _F32(float(q))
    if not np.isfinite(guess):
        return guess
    best = None
    for c in (_next(guess, -np.inf), guess, _next(guess, np.inf)):
        if not np.isfinite(c):
            continue
        d = abs(Fraction(float(c)) - q)
        key = (d, int(np.asarray(c).view(np.int32)) & 1)  # ties: even significand
        if best is None or key < best[0]:
            best = (key, c)
    return _F32(best[1])


def rstd_truth(var: Fraction, eps: float) -> tuple[Decimal | float, np.float32]:
    """(1/sqrt(var + float32(eps)) to 50 digits, its correctly rounded float32). inf when var + eps == 0."""
    if not isinstance(var, Fraction):
        return math.nan, _F32(math.nan)
    t = var + Fraction(float(_F32(eps)))
    if t == 0:
        return math.inf, _F32(math.inf)
    with localcontext() as ctx:
        ctx.prec = _PREC
        r = 1 / (Decimal(t.numerator) / Decimal(t.denominator)).sqrt()
    guess = _F32(float(r))
    # y is the correctly rounded 1/sqrt(t) iff lo_mid**2 * t < 1 < hi_mid**2 * t (ties impossible for t > 0
    # unless 1/sqrt(t) is itself a midpoint, which then rounds by the even rule below).
    for y in (_next(guess, 0), guess, _next(guess, np.inf)):
        lo = (Fraction(float(_next(y, 0))) + Fraction(float(y))) / 2
        hi = (Fraction(float(_next(y, np.inf))) + Fraction(float(y))) / 2
        if lo * lo * t <= 1 <= hi * hi * t:
            return r, _F32(y)
    return r, guess  # pragma: no cover - the float64 guess is within an ulp


def _ordered(v: np.ndarray) -> np.ndarray:
    bits = np.asarray(v, dtype=np.float32).view(np.int32).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)


def ulp_steps(candidate, truth) -> np.ndarray:
    """Signed number of float32 steps from `truth` to `candidate` (0: equal, +: candidate above). NaN-free only."""
    return _ordered(np.asarray(candidate, np.float32)) - _ordered(np.asarray(truth, np.float32))


# ------------------------------------------------------------ true output ---


def _mean_split(mean: Fraction) -> tuple[float, float]:
    hi = float(mean)
    return hi, float(mean - Fraction(hi))


def true_output(x_row, weight, bias, mean: Fraction, rstd: Decimal | float) -> np.ndarray:
    """gamma * (x - mean) * rstd + beta in float64 for one row, from the exact mean and high-precision rstd."""
    x64 = np.asarray(x_row, np.float32).astype(np.float64)
    hi, lo = _mean_split(mean) if isinstance(mean, Fraction) else (float(mean), 0.0)
    r = float(rstd)
    with np.errstate(invalid="ignore", over="ignore"):
        centred = (x64 - hi) - lo  # x - hi is exact (Sterbenz) wherever it matters: x close to the mean
        return np.asarray(weight, np.float32).astype(np.float64) * (centred * r) + np.asarray(bias, np.float32)


# ------------------------------------------------------------ comparison ---


def _stat_err(cand: float, truth, exact: bool) -> Fraction | Decimal | float:
    """|cand - truth| exactly (Fraction for the mean, 50-digit Decimal for rstd)."""
    if not math.isfinite(cand) or (isinstance(truth, float) and not math.isfinite(truth)):
        if isinstance(truth, float) and math.isinf(truth) and cand == truth:
            return 0.0
        return math.inf
    if exact:
        return abs(Fraction(cand) - truth)
    with localcontext() as ctx:
        ctx.prec = _PREC
        return abs(Decimal(cand) - truth)


def _closest(errs: dict[str, object]) -> list[str]:
    best = min(errs.values())
    return [n for n, e in errs.items() if e == best]


def _winner(errs: dict[str, object]) -> str:
    names = _closest(errs)
    return names[0] if len(names) == 1 else "tie(" + ",".join(names) + ")"


def _verdict(leads: list[list[str] | None], names: list[str]) -> dict:
    """Rows in which each candidate is closest (`leads`: per row, the candidates sharing the smallest error, None
    where nothing was compared). A row where several candidates share the smallest error counts for each of them
    (two variants of one method that agree both beat a third); only a row where every candidate is equally close
    counts as tied."""
    counts = {n: 0 for n in names}
    ties = 0
    for lead in leads:
        if lead is None:
            continue
        if set(names) <= set(lead):
            ties += 1
            continue
        for n in lead:
            counts[n] += 1
    top = max(counts.values(), default=0)
    leaders = [n for n, c in counts.items() if c == top and c > 0]
    closer = "tie" if not leaders else (leaders[0] if len(leaders) == 1 else "tie(" + ",".join(leaders) + ")")
    by_row = [("n/a" if lead is None else lead[0] if len(lead) == 1 else "tie(" + ",".join(lead) + ")")
              for lead in leads]
    return {"closer": closer, "rows_closer": counts, "rows_tied": ties, "by_row": by_row}


def _to_np(t):
    if t is None:
        return None
    if hasattr(t, "detach"):
        t = t.detach().cpu().numpy()
    return np.asarray(t, dtype=np.float32)


def compare_to_truth(candidates: dict, x, weight, bias, eps: float) -> dict:
    """Measure each candidate's (y, mean, rstd) against the exact truth.

    Args:
        candidates: name -> (y, mean, rstd); y shaped like x (or (rows, N)), mean/rstd of length rows; any of the
            three may be None (e.g. an output-only kernel). torch tensors (any device) or numpy arrays.
        x: the input, (rows, N) after reshaping; weight, bias: the affine, N elements; eps: LayerNorm's eps.
    Returns:
        A JSON-ready dict: the exact truth per row (mean, var, rstd as float64 plus their correctly rounded
        float32), per candidate the signed ulps of mean and rstd from the correctly rounded truth, their exact
        relative errors, the output's max/median absolute and relative errors and max/median |ulps| from
        float32(truth), and a verdict per statistic: which candidate is closer to the truth in how many rows
        (mean, rstd; compared exactly) and which has the smaller max |output error| (with per-element wins).
    """
    t0 = time.perf_counter()
    w = _to_np(weight).reshape(-1)
    b = _to_np(bias).reshape(-1)
    n = w.size
    x2 = _to_np(x).reshape(-1, n)
    rows = x2.shape[0]
    names = list(candidates)
    cand = {k: tuple(_to_np(v) for v in candidates[k]) for k in names}
    for k, (y, m, r) in cand.items():
        if y is not None:
            cand[k] = (y.reshape(rows, n), m, r)
    truth = {"mean": [], "var": [], "rstd": [], "mean_f32": [], "rstd_f32": []}
    per = {k: {"mean_ulp": [], "mean_rel_err": [], "rstd_ulp": [], "rstd_rel_err": []} for k in names}
    wins = {"mean": [], "rstd": []}
    out_err = {k: [] for k in names if cand[k][0] is not None}
    out_rel = {k: [] for k in out_err}
    out_ulp = {k: [] for k in out_err}
    elem_wins = {k: 0 for k in out_err}
    elem_ties = 0
    t_exact = 0.0
    for i in range(rows):
        te = time.perf_counter()
        mean, var = exact_row_stats(x2[i])
        t_exact += time.perf_counter() - te
        r_true, r32 = rstd_truth(var, eps)
        m32 = nearest_float32(mean) if isinstance(mean, Fraction) else _F32(math.nan)
        truth["mean"].append(float(mean))
        truth["var"].append(float(var))
        truth["rstd"].append(float(r_true))
        truth["mean_f32"].append(float(m32))
        truth["rstd_f32"].append(float(r32))
        errs = {"mean": {}, "rstd": {}}
        for k in names:
            _, cm, cr = cand[k]
            for stat, vals, tru, t32, exact in (("mean", cm, mean, m32, True), ("rstd", cr, r_true, r32, False)):
                if vals is None:
                    per[k][f"{stat}_ulp"].append(None)
                    per[k][f"{stat}_rel_err"].append(None)
                    continue
                c = _F32(vals[i])
                ok = np.isfinite(c) and np.isfinite(t32)
                per[k][f"{stat}_ulp"].append(int(ulp_steps(c, t32)) if ok else None)
                err = _stat_err(float(c), tru, exact)
                errs[stat][k] = err
                if ok and float(tru) != 0:
                    per[k][f"{stat}_rel_err"].append(float(err) / abs(float(tru)))
                else:
                    per[k][f"{stat}_rel_err"].append(None if not ok else float(err))
        for stat in ("mean", "rstd"):
            wins[stat].append(_closest(errs[stat]) if errs[stat] else None)
        if out_err and isinstance(mean, Fraction):
            y_true = true_output(x2[i], w, b, mean, r_true)
            y_true32 = y_true.astype(np.float32)
            row_errs = {}
            for k in out_err:
                d = np.abs(cand[k][0][i].astype(np.float64) - y_true)
                row_errs[k] = d
                out_err[k].append(d.astype(np.float32))
                nz = y_true != 0
                out_rel[k].append((d[nz] / np.abs(y_true[nz])).astype(np.float32))
                fin = np.isfinite(cand[k][0][i]) & np.isfinite(y_true32)
                out_ulp[k].append(np.abs(ulp_steps(cand[k][0][i][fin], y_true32[fin])))
            stack = np.stack([row_errs[k] for k in out_err])
            best = stack.min(axis=0)
            is_best = stack == best
            all_best = is_best.all(axis=0)  # every candidate equally close: a tie; otherwise credit each best
            elem_ties += int(all_best.sum())
            for j, k in enumerate(out_err):
                elem_wins[k] += int((is_best[j] & ~all_best).sum())
    outputs = {}
    for k in out_err:
        if out_err[k]:
            e = np.concatenate(out_err[k])
            rel = np.concatenate(out_rel[k])
            u = np.concatenate(out_ulp[k])
            outputs[k] = {"max_abs_err": float(e.max()), "median_abs_err": float(np.median(e)),
                          "max_rel_err": float(rel.max()) if rel.size else None,
                          "median_rel_err": float(np.median(rel)) if rel.size else None,
                          "max_ulp": int(u.max()) if u.size else None,
                          "median_ulp": float(np.median(u)) if u.size else None}
    verdict = {stat: _verdict(wins[stat], [k for k in names if cand[k][1 if stat == "mean" else 2] is not None])
               for stat in ("mean", "rstd")}
    if outputs:
        maxes = {k: outputs[k]["max_abs_err"] for k in outputs}
        verdict["output"] = {"closer": _winner(maxes), "criterion": "smaller max |y - y_true|",
                             "elements_closer": elem_wins, "elements_tied": elem_ties}
    for k in names:
        for stat in ("mean", "rstd"):
            u = [abs(v) for v in per[k][f"{stat}_ulp"] if v is not None]
            per[k][f"max_abs_{stat}_ulp"] = max(u) if u else None
        per[k]["output"] = outputs.get(k)
    return {"rows": rows, "n": n, "eps": float(eps), "eps_float32": float(_F32(eps)),
            "truth": truth, "candidates": per, "verdict": verdict,
            "seconds": time.perf_counter() - t0, "exact_sum_seconds_per_row": t_exact / max(rows, 1)}

