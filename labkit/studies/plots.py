"""Figures more than one study draws: time against row shape at a fixed element count."""
from __future__ import annotations


def _line(ax, xs, ys, style, label):
    """Points joined by a line only where the record has every shape (a line across a missing shape would draw a
    time nobody measured); markers alone otherwise."""
    pts = [(x, y * 1e3) for x, y in zip(xs, ys) if y]
    if pts:
        ax.plot(*zip(*pts), style if len(pts) == len(ys) else style.rstrip("-:."), label=label, markersize=4)


HOST_BOUND = 1.3  # eager per call / graph replay of the drop-in at which the figure shades a shape host-bound


def time_vs_shape(panels: list[tuple[str, dict | None, str]]):
    """One panel per (title, sweep record, where its torch.compile times are: "compiled" or "eager"): median time
    against elements per row N over the record's shapes of 2**24 elements, log axes, for torch eager (eager per
    call), the drop-in eager per call and under graph replay, and torch.compile (eager per call, where timed).
    None when no panel has such shapes."""
    import matplotlib.pyplot as plt

    kept, l1 = [], {}
    for title, record, compiled_key in panels:
        l1[title] = next((r for r in (record or {}).get("shapes", []) if r.get("l1_40")), None)
        rows = [r for r in (record or {}).get("shapes", [])
                if r.get("rows", 0) * r.get("n", 0) == 1 << 24 and r.get("eager")]
        if rows:
            kept.append((title, sorted(rows, key=lambda r: r["n"]), compiled_key))
    if not kept:
        return None
    fig, axes = plt.subplots(1, len(kept), figsize=(6.2 * len(kept), 4.4), sharey=True, squeeze=False)
    for ax, (title, rows, compiled_key) in zip(axes[0], kept):
        n = [r["n"] for r in rows]
        get = lambda proto, m: [((r.get(proto) or {}).get(m)) for r in rows]  # noqa: E731
        _line(ax, n, get("eager", "native"), "o-", "torch eager, eager per call (protocol B)")
        _line(ax, n, get("eager", "dropin"), "s-", "drop-in, eager per call (protocol B)")
        _line(ax, n, get("graph", "dropin"), "s--", "drop-in, graph replay (protocol A)")
        _line(ax, n, get(compiled_key, "native_compiled"), "^-.", "torch.compile, eager per call (protocol B)")
        # host-bound: where a call timed eager (per-call launch, L2 flushed) takes >= HOST_BOUND x its graph replay
        eg = [((r.get("eager") or {}).get("dropin"), (r.get("graph") or {}).get("dropin")) for r in rows]
        host = []  # the contiguous run of shapes from the smallest N up
        for x, (e, g) in zip(n, eg):
            if not (e and g and e / g >= HOST_BOUND):
                break
            host.append(x)
        if host:
            ax.axvspan(min(host) / 1.4, max(host) * 1.4, color="#fde0c5", alpha=0.6, zorder=0)
            ax.text(min(host), 0.97, f"host-bound: eager per call\n>= {HOST_BOUND}x graph replay",
                    transform=ax.get_xaxis_transform(), va="top", fontsize=9.5)
        if (r := l1.get(title)) and (r.get("eager") or {}).get("dropin"):
            ax.axvline(r["n"], color="0.4", ls=":", lw=1)
            for proto, marker, lab in (("eager", "*", "eager per call"), ("graph", "P", "graph replay")):
                for m, c in (("native", "C0"), ("dropin", "C1")):
                    v = (r.get(proto) or {}).get(m)
                    if v:
                        ax.plot([r["n"]], [v * 1e3], marker, color=c, markersize=11, markeredgecolor="k",
                                label=f"L1/40 (2^26 values): {'torch eager' if m == 'native' else 'drop-in'}, {lab}")
            ax.text(r["n"], 0.03, " L1/40's N", transform=ax.get_xaxis_transform(), fontsize=9.5)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{title}: lines at 2^24 float32 values (rows = 2^24 / N); stars: L1/40", fontsize=10.5)
        ax.set_xlabel("elements per row N", fontsize=10)
        ax.tick_params(labelsize=10)
        ax.grid(True, which="both", alpha=0.25)
    axes[0][0].set_ylabel("median time, us", fontsize=10)
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:
        for hd, lb in zip(*ax.get_legend_handles_labels()):
            if lb not in labels:
                handles.append(hd)
                labels.append(lb)
    fig.legend(handles, labels, fontsize=9.5, loc="lower center", ncol=3, frameon=False)
    fig.tight_layout(rect=(0, 0.2, 1, 1))
    return fig
