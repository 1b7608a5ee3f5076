"""The trust gate's check on this machine (labkit.ops.trust): every forward path and backward schedule this GPU can
pick, forced, against torch's own kernels, bit for bit (int32 views of y, mean, rstd, dx, dweight, dbias).

The cases cover each path at a few widths (both sides of torch's host-side branches where they exist: its
backward picks a different gamma/beta kernel below 128 rows than above), with and without affine, and inputs at an
offset (a view 16 bytes into its storage). Forced plans never consult the gate, so the canary measures our kernels
themselves. Run outside graph capture and with labkit.enable() off (torch's kernels are the reference).
"""
from __future__ import annotations

import time
from datetime import datetime, timezone

# (rows, N): few wide rows (the chain), ragged, many short rows on both sides of 128 rows, a 1024-wide row
SHAPES = ((2, 1 << 18), (3, 512 * 33 + 4), (1, 1 << 20), (64, 1024), (127, 1024), (129, 1024), (1000, 256),
          (33, 768), (8, 4096))
EPS = 1e-5


def _bits(a, b) -> bool:
    import torch

    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.contiguous().view(torch.int32),
                                                                     b.contiguous().view(torch.int32))


def _inputs(rows: int, n: int, affine: bool, offset: bool, index: int, seed: int):
    import torch

    g = torch.Generator(device=f"cuda:{index}").manual_seed(seed)
    dev = f"cuda:{index}"
    pad = 4 if offset else 0  # 16 bytes in: still aligned as torch's vectorized path needs, another address
    x = (torch.empty(rows * n + pad, device=dev).normal_(generator=g) * 3 + 50)[pad:].view(rows, n)
    dy = torch.empty(rows * n + pad, device=dev).normal_(generator=g)[pad:].view(rows, n)
    w = torch.randn(n, device=dev, generator=g) if affine else None
    b = torch.randn(n, device=dev, generator=g) if affine else None
    return x, w, b, dy


def _forward_cases(index: int):
    from labkit.core.device import device_info
    from labkit.ops import paths

    dev = device_info(index)
    for rows, n in SHAPES:
        for path in paths.candidates(rows, n, dev):
            yield path, rows, n


def _backward_cases(index: int):
    from labkit.core.device import device_info
    from labkit.ops import backward

    dev = device_info(index)
    for rows, n in SHAPES:
        for schedule in backward.candidates(rows, n, dev):
            yield schedule, rows, n


def run(index: int = 0) -> dict:
    """{"identical": bool, "cases": int, "first_mismatch": str | None, "seconds", "date_utc"}; an exception while
    checking is a failed check ("error"), never a pass."""
    import torch

    from labkit.ops.dropin import plan as plans

    start = time.perf_counter()
    count, first = 0, None
    try:
        for seed, (path, rows, n) in enumerate(_forward_cases(index)):
            for affine in (True, False):
                for offset in (False, True):
                    x, w, b, _ = _inputs(rows, n, affine, offset, index, seed)
                    want = torch.native_layer_norm(x, (n,), w, b, EPS)
                    with torch.no_grad():
                        got = plans.get_plan(x, (n,), w, b, EPS, False, force=path).forward(x, w, b, True)
                    count += 1
                    for name, a, e in zip(("y", "mean", "rstd"), got, want):
                        if first is None and not _bits(a, e):
                            first = f"forward path {path} at {rows}x{n} (affine={affine}, offset={offset}): {name}"
        for seed, (schedule, rows, n) in enumerate(_backward_cases(index)):
            for affine in (True, False):
                x, w, b, dy = _inputs(rows, n, affine, False, index, 1000 + seed)
                _, mean, rstd = torch.native_layer_norm(x, (n,), w, b, EPS)
                mask = (True, affine, affine)
                want = torch.ops.aten.native_layer_norm_backward.default(dy, x, [n], mean, rstd, w, b, list(mask))
                with plans.forced_backward(schedule):
                    got = plans.backward(dy, x, (n,), mean, rstd, w, b, mask)
                count += 1
                for name, a, e in zip(("dx", "dweight", "dbias"), got, want):
                    if e is not None and first is None and (a is None or not _bits(a, e)):
                        first = f"backward schedule {schedule} at {rows}x{n} (affine={affine}): {name}"
        torch.cuda.synchronize(index)
        error = None
    except Exception as exc:  # a check that could not complete is not a pass
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return {"identical": first is None and error is None and count > 0, "cases": count, "first_mismatch": first,
            "error": error, "seconds": round(time.perf_counter() - start, 3),
            "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds")}
