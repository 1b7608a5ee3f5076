"""The drop-in's forward beside the fastest peers at ordinary transformer shapes (notebook 08, the forward goals):
torch.compile and Liger-Kernel under graph replay (`dropin_peers`), the rows, the worst ratios and the gap line
the verdict reads. Apart because it times other libraries' kernels, built through labkit.studies.methods."""
from __future__ import annotations

import time
from dataclasses import replace

from labkit.studies.bench import us as _us
from labkit.studies.dropin_bits import _bits_equal
from labkit.studies.dropin_sweep import _affine, _medians, _ratio, fastest
from labkit.tasks import shape_key


# Ordinary transformer shapes (the forward goals): the forward beside the fastest non-bit-identical peers, graph replay.
ORDINARY = ((4096, 768), (8192, 1024), (8192, 4096), (16384, 4096), (32768, 2048), (4096, 8192), (2048, 16384),
            (1024, 65536))
QUICK_ORDINARY = ((4096, 768), (2048, 16384))
PEERS = ("inductor", "liger")  # labkit.studies.methods: torch.compile (static shapes) and Liger-Kernel's Triton
PEER_GOAL, PEER_NATIVE_GOAL = 0.95, 1.25  # forward goals: >= 0.95x the faster peer, >= 1.25x torch eager (graph replay)


def peer_shapes(mode: str) -> list[tuple[int, ...]]:
    return list(ORDINARY if mode == "full" else QUICK_ORDINARY)


def peers(shape_list, rounds: int = 15, seed: int = 0, eps: float = 1e-5, device="cuda", log=None) -> dict:
    """The forward at ordinary shapes under graph replay (protocol A), every method of a shape in one timing call:
    torch eager, torch.compile and Liger-Kernel (labkit.studies.methods' builds: compiled or built on a first call
    outside the timing), and the drop-in as a model under CUDA graphs gets it (`dispatch_protocol("graph")`), with
    its output's bits against torch's and the path that served, and a copy of x into an output (`copy`: the bytes
    any schedule reads and writes, the floor of every method there). A peer that cannot take a shape is recorded
    with its error. The `dropin_peers` record."""
    import torch

    from labkit import dispatch_protocol, explain, layer_norm
    from labkit.inputs import make_input
    from labkit.studies import methods as registry
    from labkit.studies.bench import PROTOCOL_A, time_methods

    graph_p = replace(PROTOCOL_A, rounds=rounds)
    out, versions = [], {}
    for shape in shape_list:
        t0 = time.perf_counter()
        x = make_input("uniform", shape, seed, device)
        w, b = _affine(shape, seed, device)
        ns = tuple(w.shape)
        row = {"key": shape_key(shape), "shape": list(shape), "rows": x.numel() // w.numel(), "n": w.numel(),
               "errors": {}}

        def ours():
            with dispatch_protocol("graph"):
                return layer_norm(x, ns, w, b, eps)
        y = torch.empty_like(x)
        with torch.no_grad():
            fns = {"native": lambda: torch.nn.functional.layer_norm(x, ns, w, b, eps), "dropin": ours,
                   "copy": lambda: y.copy_(x)}
            for name in PEERS:
                built = registry.build(registry.get(name), x, w, b, eps)
                versions.update(built["notes"].get("versions", {}))
                if built["fn"] is None:
                    row["errors"][name] = built["error"]
                else:
                    fns[name] = built["fn"]
            with dispatch_protocol("graph"):
                row["path"] = explain(x, ns, w, b, eps)["path"]
            row["identical"] = _bits_equal(ours(), fns["native"]())
            rec = time_methods(fns, graph_p, "native")
        row["graph"], row["graph_stats"] = _medians(rec), rec.stats
        row["seconds"] = time.perf_counter() - t0
        out.append(row)
        x = w = b = y = None  # the shape's tensors freed before the next shape's are made
        if log:
            log(f"{row['key']}: {row['seconds']:.1f} s")
    return {"protocol": graph_p.__dict__, "peers": list(PEERS), "versions": versions, "shapes": out}


def peer_rows(record: dict | None) -> list[dict]:
    """Per ordinary shape: each method's graph-replay median (us), the copy of x beside them where the run timed it,
    the path that served the drop-in, its bits, and the drop-in against the faster peer and against torch eager
    (both graph replay)."""
    rows = []
    for r in (record or {}).get("shapes", []):
        g = r.get("graph") or {}
        best = fastest({k: g.get(k) for k in PEERS})
        best_ms, ours = g.get(best), g.get("dropin")
        rows.append({"shape": r["key"], "torch eager us": _us(g.get("native")), "torch.compile us": _us(g.get("inductor")),
                     "Liger us": _us(g.get("liger")), "drop-in us": _us(ours),
                     **({"copy of x us": _us(g["copy"])} if g.get("copy") else {}), "drop-in path": r.get("path"),
                     "bit-identical": r.get("identical"),
                     "x faster peer": best_ms / ours if best_ms and ours else None,
                     "faster peer": {"inductor": "torch.compile", "liger": "Liger"}.get(best, "none timed"),
                     "x torch eager": _ratio(g, "native", "dropin")})
    return rows


def peers_worst(record: dict | None) -> dict:
    """The worst drop-in ratios of a `dropin_peers` record, each with its shape (the first where shapes tie):
    against the faster peer and against torch eager (graph replay); None where nothing was timed."""
    from labkit.studies.goals import listed

    rows = peer_rows(record)
    out = {}
    for name, column, goal_ratio in (("vs_peer", "x faster peer", PEER_GOAL),
                                     ("vs_native", "x torch eager", PEER_NATIVE_GOAL)):
        judged = [r for r in rows if r[column] is not None]
        worst = min(judged, key=lambda r: r[column]) if judged else None
        out[name], out[f"{name}_shape"] = (worst[column], worst["shape"]) if worst else (None, None)
        out[f"{name}_short"] = listed([(r["shape"], r[column]) for r in judged if r[column] < goal_ratio], empty="",
                                        limit=goal_ratio)
    return out


def peer_gap_line(record: dict | None) -> str | None:
    """At the shape where the drop-in is furthest behind the faster peer: how far each is above the copy of x timed
    in the same call (the bytes any schedule moves), so that the gap reads against what is left above the floor.
    None where the run timed no copy (runs made before commit f9547dd) or no peer."""
    rows = [r for r in (record or {}).get("shapes", []) if (r.get("graph") or {}).get("copy")]
    judged = [(r, fastest({k: r["graph"].get(k) for k in PEERS})) for r in rows if r["graph"].get("dropin")]
    judged = [(r, best) for r, best in judged if best]
    if not judged:
        return None
    r, best = min(judged, key=lambda rb: rb[0]["graph"][rb[1]] / rb[0]["graph"]["dropin"])
    g, name = r["graph"], {"inductor": "torch.compile", "liger": "Liger"}[best]
    line = (f"  at {r['key']}, above the copy of x in the same call ({_us(g['copy']):.2f} us, the floor of every "
            f"method there): the drop-in {_us(g['dropin'] - g['copy']):.2f} us, {name} "
            f"{_us(g[best] - g['copy']):.2f} us")
    # A ratio of medians a hair from its goal says little alone: the quartiles say whether the run tells them apart.
    ours, theirs = ((r.get("graph_stats") or {}).get(k) for k in ("dropin", best))
    if ours and theirs:
        apart = ours["q25_ms"] > theirs["q75_ms"] or theirs["q25_ms"] > ours["q75_ms"]
        line += (f"; interquartile ranges {_us(ours['q25_ms']):.2f}-{_us(ours['q75_ms']):.2f} us and "
                 f"{_us(theirs['q25_ms']):.2f}-{_us(theirs['q75_ms']):.2f} us, which "
                 + ("do not overlap" if apart else "overlap"))
    return line
