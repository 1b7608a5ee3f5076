"""The trust gate's check on this machine (labkit.ops.trust): every forward path and backward schedule this GPU can
pick, forced, against torch's own kernels, bit for bit (integer views of y, mean, rstd, dx, dweight, dbias).

The cases cover each path at a few widths (both sides of torch's host-side branches where they exist: its
backward picks a different gamma/beta kernel below 128 rows than above), in every dtype the drop-in serves through
it (float32; bfloat16 and float16 where the path is built for them and the drop-in serves them: every forward path
built for them, the backward's labkit.ops.backward.DROP_IN_DTYPES), with weight and bias, weight alone and
neither, inputs at an offset (views 4 elements into their storage), the forward with and without statistics, and the
backward with every gradient and with x's alone or the parameters' alone; and the autocast builds (x of T, the rest
float32: labkit.ops.dropin.autocast) against torch's float32 kernels on x.to(float32), dX cast back. Forced forward
plans and explicitly launched backward schedules never consult the gate (nor set a process-wide context another
thread could see), so the canary measures our kernels themselves. Run outside graph capture and with labkit.enable()
off (torch's kernels are the reference).
"""
from __future__ import annotations

import time
from datetime import datetime, timezone

# (rows, N): few wide rows (the chain), ragged, many short rows on both sides of 128 rows, a 1024-wide row
SHAPES = ((2, 1 << 18), (3, 512 * 33 + 4), (1, 1 << 20), (64, 1024), (127, 1024), (129, 1024), (1000, 256),
          (33, 768), (8, 4096))
EPS = 1e-5


def _bits(a, b) -> bool:
    """Equal as integer views of their element size (int32 for float32, int16 for bfloat16/float16)."""
    import torch

    view = {4: torch.int32, 2: torch.int16}[a.element_size()]
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.contiguous().view(view),
                                                                     b.contiguous().view(view))


AFFINE = ("both", "weight", "none")  # bias without weight is refused by our kernels (torch contracts differently)


def _inputs(rows: int, n: int, affine: str, offset: bool, index: int, seed: int, dtype: str = "float32"):
    """x, weight, bias and dy (of `dtype`, drawn in float32 and rounded to it); `offset`: views 4 elements into their
    storage (16 bytes for float32, 8 for 2-byte dtypes: still aligned as torch's vectorized path needs)."""
    import torch

    dev = f"cuda:{index}"
    g = torch.Generator(device=dev).manual_seed(seed)
    f32 = {"device": dev, "dtype": torch.float32}  # whatever the caller's default dtype
    t = getattr(torch, dtype)
    pad = 4 if offset else 0
    x = (torch.empty(rows * n + pad, **f32).normal_(generator=g) * 3 + 50).to(t)[pad:].view(rows, n)
    dy = torch.empty(rows * n + pad, **f32).normal_(generator=g).to(t)[pad:].view(rows, n)
    w = torch.randn(n + pad, generator=g, **f32).to(t)[pad:] if affine != "none" else None
    b = torch.randn(n + pad, generator=g, **f32).to(t)[pad:] if affine == "both" else None
    return x, w, b, dy


def _forward_cases(index: int):
    from labkit.core.device import device_info
    from labkit.ops import dtypes, paths

    dev = device_info(index)
    for dtype in (dtypes.FLOAT32,) + dtypes.LOW_PRECISION:  # the drop-in serves each through the paths built for it
        for rows, n in SHAPES:
            for path in paths.candidates(rows, n, dev, dtype):
                yield path, rows, n, dtype


def _backward_cases(index: int):
    from labkit.core.device import device_info
    from labkit.ops import backward

    dev = device_info(index)
    for dtype in backward.DROP_IN_DTYPES:  # the dtypes the drop-in serves with our backward
        for rows, n in SHAPES:
            for schedule in backward.candidates(rows, n, dev, dtype):
                yield schedule, rows, n, dtype


def _autocast_cases(index: int):
    from labkit.core.device import device_info
    from labkit.ops import backward, chain, dtypes

    dev = device_info(index)
    for build in dtypes.AUTOCAST:
        for rows, n in SHAPES:
            try:
                yield (rows, n, build, chain.launches(rows, n, dev, dtype=build),
                       backward.launches(rows, n, dev, "chain", dtype=build))
            except ValueError:
                continue


def _check_autocast(index: int, first: str | None) -> tuple[int, str | None]:
    """The autocast builds' forward and backward (every mask) against torch's float32 kernels on x.to(float32),
    dX cast back to x's dtype: (cases, first mismatch)."""
    import torch

    from labkit.ops import dtypes
    from labkit.ops.dropin.autocast import AutocastPlan

    count = 0
    for seed, (rows, n, build, fwd, bwd) in enumerate(_autocast_cases(index)):
        for affine in AFFINE:
            x = _inputs(rows, n, affine, False, index, 2000 + seed, dtypes.x_dtype(build))[0]
            _, w, b, dy = _inputs(rows, n, affine, False, index, 3000 + seed)
            p = AutocastPlan(build, x, (n,), w, b, EPS, fwd, bwd, "canary")
            xf = x.to(torch.float32)
            want = torch.native_layer_norm(xf, (n,), w, b, EPS)
            got = p.forward(x, w, b)
            count += 1
            bad = _mismatch(got, (want[0], want[1].reshape(-1), want[2].reshape(-1)), ("y", "mean", "rstd"))
            if bad and first is None:
                first = f"autocast forward {build} at {rows}x{n} (affine {affine}): {bad}"
            for mask in ((True, w is not None, b is not None), (True, False, False),
                         (False, w is not None, b is not None)):
                gx, gw, gb = torch.ops.aten.native_layer_norm_backward.default(dy, xf, [n], want[1], want[2], w, b,
                                                                               list(mask))
                got = p.backward(dy, x, want[1].reshape(-1), want[2].reshape(-1), w, b, mask)
                count += 1
                bad = _mismatch(got, (gx.to(x.dtype) if gx is not None else None, gw, gb),
                                ("dx", "dweight", "dbias"))
                if bad and first is None:
                    first = f"autocast backward {build} at {rows}x{n} (affine {affine}, mask {mask}): {bad}"
    return count, first


def _mismatch(got, want, names) -> str | None:
    for name, a, e in zip(names, got, want):
        if e is not None and (a is None or not _bits(a, e)):
            return name
    return None


def run(index: int = 0) -> dict:
    """{"identical": bool, "cases": int, "first_mismatch": str | None, "error": str | None, "seconds", "date_utc"};
    an exception while checking (out of memory, say) is reported as "error", never as a pass."""
    import torch

    from labkit.core.device import device_info
    from labkit.ops import backward as grad
    from labkit.ops.dropin import plan as plans
    from labkit.ops.launches import bound

    start = time.perf_counter()
    count, first = 0, None
    dev = device_info(index)
    # the first plan may be made inside a caller's torch.autocast: its policy would cast the reference's 2-byte x
    # to float32 (torch.native_layer_norm is on its float32 list), so the check runs with autocast off
    no_autocast = torch.autocast("cuda", enabled=False)
    no_autocast.__enter__()
    try:
        for seed, (path, rows, n, dtype) in enumerate(_forward_cases(index)):
            for affine in AFFINE:
                for offset in (False, True):
                    x, w, b, _ = _inputs(rows, n, affine, offset, index, seed, dtype)
                    with torch.no_grad():
                        p = plans.get_plan(x, (n,), w, b, EPS, False, force=path)
                    ptrs = [t.data_ptr() for t in (x, w if w is not None else p.ones,
                                                   b if b is not None else p.neg_zeros)]
                    if p.misaligned(*ptrs):
                        continue  # torch would serve the call (a 2-byte x 8 bytes off a tensor map's 16): not ours
                    want = torch.native_layer_norm(x, (n,), w, b, EPS)
                    with torch.no_grad():
                        got = p.forward(x, w, b, True)
                        y_only = p.forward(x, w, b, False)
                    count += 1
                    bad = _mismatch((*got, y_only), (*want, want[0]), ("y", "mean", "rstd", "y without statistics"))
                    if bad and first is None:
                        first = f"forward path {path} at {rows}x{n} {dtype} (affine {affine}, offset {offset}): {bad}"
        for seed, (schedule, rows, n, dtype) in enumerate(_backward_cases(index)):
            gp = grad.launches(rows, n, dev, schedule, dtype=dtype)
            launcher = bound(gp, index)
            for affine in AFFINE:
                x, w, b, dy = _inputs(rows, n, affine, seed % 2 == 1, index, 1000 + seed, dtype)
                if gp.misaligned(x, dy, w):
                    continue  # torch would serve the call (a 2-byte x 8 bytes off a tensor map's 16): not ours
                _, mean, rstd = torch.native_layer_norm(x, (n,), w, b, EPS)
                ones = torch.ones(n, device=x.device, dtype=x.dtype) if w is None else None
                for mask in ((True, w is not None, b is not None), (True, False, False),
                             (False, w is not None, b is not None)):
                    want = torch.ops.aten.native_layer_norm_backward.default(dy, x, [n], mean, rstd, w, b, list(mask))
                    got = grad.run(gp, dy, x, (n,), mean.reshape(-1), rstd.reshape(-1), w, b, mask, index, ones,
                                   launcher)
                    count += 1
                    bad = _mismatch(got, want, ("dx", "dweight", "dbias"))
                    if bad and first is None:
                        first = (f"backward schedule {schedule} at {rows}x{n} {dtype} (affine {affine}, mask "
                                 f"{mask}): {bad}")
        autocast_cases, first = _check_autocast(index, first)
        count += autocast_cases
        torch.cuda.synchronize(index)
        error = None
    except Exception as exc:  # a check that could not complete is not a pass
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    finally:
        no_autocast.__exit__(None, None, None)
    return {"identical": first is None and error is None and count > 0, "cases": count, "first_mismatch": first,
            "error": error, "seconds": round(time.perf_counter() - start, 3),
            "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds")}
