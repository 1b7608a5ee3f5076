"""Figures more than one study draws: time against row shape at a fixed element count."""
from __future__ import annotations


def _line(ax, xs, ys, style, label):
    """Points joined by a line only where the record has every shape (a line across a missing shape would draw a
    time nobody measured); markers alone otherwise."""
    pts = [(x, y * 1e3) for x, y in zip(xs, ys) if y]
    if pts:
        ax.plot(*zip(*pts), style if len(pts) == len(ys) else style.rstrip("-:."), label=label, markersize=4)


def time_vs_shape(panels: list[tuple[str, dict | None, str]]):
    """One panel per (title, sweep record, where its torch.compile times are: "compiled" or "eager"): median time
    against elements per row N over the record's shapes of 2**24 elements, log axes, for torch eager (eager per
    call), the drop-in eager per call and under graph replay, and torch.compile (eager per call, where timed).
    None when no panel has such shapes."""
    import matplotlib.pyplot as plt

    kept = []
    for title, record, compiled_key in panels:
        rows = [r for r in (record or {}).get("shapes", [])
                if r.get("rows", 0) * r.get("n", 0) == 1 << 24 and r.get("eager")]
        if rows:
            kept.append((title, sorted(rows, key=lambda r: r["n"]), compiled_key))
    if not kept:
        return None
    fig, axes = plt.subplots(1, len(kept), figsize=(5.2 * len(kept), 2.75), sharey=True, squeeze=False)
    for ax, (title, rows, compiled_key) in zip(axes[0], kept):
        n = [r["n"] for r in rows]
        get = lambda proto, m: [((r.get(proto) or {}).get(m)) for r in rows]  # noqa: E731
        _line(ax, n, get("eager", "native"), "o-", "torch eager, eager per call (protocol B)")
        _line(ax, n, get("eager", "dropin"), "s-", "drop-in, eager per call (protocol B)")
        _line(ax, n, get("graph", "dropin"), "s--", "drop-in, graph replay (protocol A)")
        _line(ax, n, get(compiled_key, "native_compiled"), "^-.", "torch.compile, eager per call (protocol B)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{title}, 2^24 float32 values", fontsize=10)
        ax.set_xlabel("elements per row N (rows = 2^24 / N)", fontsize=9)
        ax.grid(True, which="both", alpha=0.25)
    axes[0][0].set_ylabel("median time, us")
    axes[0][-1].legend(fontsize=7.5, loc="upper left")
    fig.tight_layout()
    return fig
