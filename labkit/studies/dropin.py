"""The drop-in LayerNorm as a user meets it (notebook 08): swapped into a model, bits against nn.LayerNorm,
speed under the eager per-call protocol, graph replay and torch.compile, the dispatch table, and inputs near the
float32 limit. Run functions return JSON-able records; table/verdict functions read them.

This module is the study as labkit.studies.catalog sees it: the usage cell, the CPU-side tables, the run's
records, its `dropin` and `forward` summary blocks, the drop-in's goals and the verdict. The measurements and their
rows live in dropin_sweep (speed, host cost, floor, dispatch), dropin_bits (identity, the swapped block, near
float32's max) and dropin_peers (torch.compile and Liger at ordinary shapes)."""
from __future__ import annotations

from labkit.studies.dropin_peers import PEER_GOAL, PEER_NATIVE_GOAL, peer_gap_line, peers_worst
from labkit.studies.dropin_sweep import FLOOR_SLACK, dispatch_rows
from labkit.tasks import L1_40, shape_key


# --- readers: records -> rows / verdicts -----------------------------------------------------------------------


HOST_US_GOAL, HOST_US_OVER_TORCH = 10, 5  # the drop-in's host time per eager call: at most 10 us and torch's + 5 us


def _host_ok(s: dict) -> bool:
    h, t = s.get("host_us_per_call"), s.get("torch_host_us_per_call")
    return h is not None and t is not None and h <= HOST_US_GOAL and h <= t + HOST_US_OVER_TORCH


def goals(records: dict) -> list[dict]:
    """The drop-in's goals judged on a `dropin` run (labkit.studies.goals): the eager per-call ratios, the host cost
    per call, the floors at 1-4 rows of 4M-8M under each protocol. [] without a `dropin_sweep` record."""
    from labkit.studies.bench import PROTOCOL_NAMES
    from labkit.studies.goals import HOST, beside, goal

    s = dropin_block(records)
    if not s:
        return []
    eager, graph = PROTOCOL_NAMES["B"], PROTOCOL_NAMES["A"]
    worst, gap, l1 = s["eager_worst_ratio"], s["small_shape_gap_us"], s["l1_40_eager_ratio"]
    host, torch_host = s["host_us_per_call"], s["torch_host_us_per_call"]
    out = [goal(f"eager worst ratio over shapes with native >= {DROPIN_NATIVE_FLOOR_MS * 1e3:.0f} us",
                f"{beside(worst, 1.0)} at {s['eager_worst_shape']}", ">= 1.0x", None if worst is None else worst >= 1,
                eager, f"worst x torch eager where torch takes >= {DROPIN_NATIVE_FLOOR_MS * 1e3:.0f} us"),
           goal(f"below {DROPIN_NATIVE_FLOOR_MS * 1e3:.0f} us, largest gap",
                "no shape below it in this sweep" if gap is None else f"{gap:.3g} us", "<= 5 us",
                None if gap is None else gap <= 5, eager, "largest gap to torch where torch takes < 20 us"),
           goal("L1/40 eager ratio", beside(l1, L1_40_EAGER_RATIO_GOAL), f">= {L1_40_EAGER_RATIO_GOAL}x",
                None if l1 is None else l1 >= L1_40_EAGER_RATIO_GOAL, eager, "L1/40 x torch eager"),
           goal("host per call", f"{beside(host, 10, 'us')} vs torch {beside(torch_host, 10, 'us')}",
                f"<= {HOST_US_GOAL} us and <= torch + {HOST_US_OVER_TORCH} us", None if host is None or torch_host is None else _host_ok(s), HOST,
                "the drop-in's call")]
    pw = peers_worst(records.get("dropin_peers"))
    if records.get("dropin_peers"):
        short = {k: f"; short of the goal: {pw[k + '_short']}" if pw[k + "_short"] else ""
                 for k in ("vs_peer", "vs_native")}
        out.append(goal("ordinary shapes vs the faster of torch.compile and Liger",
                        f"worst {beside(pw['vs_peer'], PEER_GOAL)} at {pw['vs_peer_shape']}{short['vs_peer']}",
                        f">= {PEER_GOAL}x",
                        None if pw["vs_peer"] is None else pw["vs_peer"] >= PEER_GOAL, graph,
                        "ordinary shapes, worst x the faster peer", f"worst {beside(pw['vs_peer'], PEER_GOAL)}"))
        out.append(goal("ordinary shapes vs torch eager", f"worst {beside(pw['vs_native'], PEER_NATIVE_GOAL)} at "
                        f"{pw['vs_native_shape']}{short['vs_native']}", f">= {PEER_NATIVE_GOAL}x",
                        None if pw["vs_native"] is None else pw["vs_native"] >= PEER_NATIVE_GOAL, graph,
                        "ordinary shapes, worst x torch eager", f"worst {beside(pw['vs_native'], PEER_NATIVE_GOAL)}"))
    for protocol in ("eager", "graph"):
        ratio, at = floor_worst(records.get("dropin_floor"), protocol)
        if ratio is not None:
            out.append(goal("1-4 rows of 4M-8M", f"worst {beside(ratio, 1 + FLOOR_SLACK)} the floor at {at}",
                            f"<= {1 + FLOOR_SLACK:.2f}x", ratio <= 1 + FLOOR_SLACK,
                            eager if protocol == "eager" else graph, "time / floor at 1-4 rows of 4M-8M",
                            f"worst {beside(ratio, 1 + FLOOR_SLACK)} at {at}"))
    return out


def verdict_lines(records: dict, source: str) -> list[str]:
    from labkit.studies.goals import goal_line

    s = dropin_block(records)
    if not s:
        return [f"drop-in: no GPU measurement to judge ({source}); the CPU checks above are all this run shows."]
    gap = peer_gap_line(records.get("dropin_peers"))
    lines = [f"drop-in ({source}):", *map(goal_line, goals(records)), *([gap] if gap else []),
             f"  bits: forward {s['forward_identical']}, backward {s['backward_identical']}, "
             f"compiled {s['compiled_identical']}"]
    rows = dispatch_rows(records.get("dropin_sweep"))
    disagree = [r["shape"] for r in rows if not r["agrees"]]
    lines.append("  dispatch rule vs this run's fastest path: " + (
        "no shapes measured" if not rows else f"agrees at all {len(rows)} shapes" if not disagree
        else "disagrees at " + ", ".join(disagree)))
    return lines


def plain_verdict(records: dict) -> list[str]:
    """The page's short verdict: a few plain sentences, every number from the records, each ratio with its protocol
    and its baseline; the goals missed said one by one."""
    from labkit.records.text import ratio
    from labkit.studies.bench import PROTOCOL_NAMES
    from labkit.studies.goals import tally

    s = dropin_block(records)
    if not s:
        return ["No GPU measurement of the drop-in, so this page makes no speed claim."]
    eager, graph = PROTOCOL_NAMES["B"], PROTOCOL_NAMES["A"]
    judged = goals(records)
    count = tally(judged)
    bits = f"forward {s['forward_identical']}, backward {s['backward_identical']}, under torch.compile " \
           f"{s['compiled_identical']}"
    same = all(a == b for a, b in (v.split("/") for v in (s["forward_identical"], s["backward_identical"],
                                                          s["compiled_identical"])))
    out = [(f"The drop-in gives torch's eager bits at every input checked ({bits})" if same
            else f"The drop-in's outputs match torch's bits in {bits} of the inputs checked")
           + f", and it meets {count['met']} of its {count['judged']} goals in this run."]
    speed = lambda r, base: f"{ratio(r)} faster than {base}" if r >= 1 else f"at {ratio(r)} {base}'s speed"  # noqa
    if s["l1_40_eager_ratio"] is not None and s["eager_worst_ratio"] is not None:
        out.append(f"Its forward at L1/40 runs {speed(s['l1_40_eager_ratio'], 'torch eager')} under {eager}; "
                   f"over the shapes where torch eager takes {DROPIN_NATIVE_FLOOR_MS * 1e3:.0f} us or more, its "
                   f"slowest is {speed(s['eager_worst_ratio'], 'torch eager')} (at {s['eager_worst_shape']}, same "
                   "protocol).")
    pw = peers_worst(records.get("dropin_peers"))
    for g in (g for g in judged if g["met"] is False):
        if g["goal"].startswith("ordinary shapes vs the faster"):
            out.append(f"At {pw['vs_peer_shape']} it runs at {pw['vs_peer']:.3g}x the speed of the faster of "
                       f"torch.compile and Liger under {graph}, against a goal of {PEER_GOAL}x.")
        elif g["goal"].startswith("ordinary shapes vs torch eager"):
            out.append(f"At {pw['vs_native_shape']} it runs {speed(pw['vs_native'], 'torch eager')} under {graph}, "
                       f"against a goal of {PEER_NATIVE_GOAL}x.")
        elif g["goal"] == "host per call":
            out.append(f"Its host time per call, {s['host_us_per_call']:.1f} us against torch's "
                       f"{s['torch_host_us_per_call']:.1f} us, misses the goal of at most {HOST_US_GOAL} us.")
        elif g["goal"].startswith("1-4 rows"):
            protocol = "eager" if g["protocol"] == eager else "graph"
            r, at = floor_worst(records.get("dropin_floor"), protocol)
            out.append(f"At {at} it takes {ratio(r)} the time its bytes need (its floor) under {g['protocol']}, "
                       f"over the goal of {1 + FLOOR_SLACK:.2f}x.")
        else:
            out.append(f"{g['goal'][:1].upper()}{g['goal'][1:]}, {g['protocol']}: {g['short']} (goal {g['target']}).")
    return out[:5]


# --- what the notebook shows on any machine ----------------------------------------------------------------------

RECORDS = ("dropin_block", "dropin_identity", "dropin_host", "dropin_sweep", "dropin_peers", "dropin_floor",
           "dropin_near_max", "kernelbench_timing")


# What a reader copies: the page shows this text and, beside it, what it printed when the GPU run executed it.
USAGE = """\
import torch
import labkit

model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.LayerNorm(4096)).to(device)
print("swapped:", labkit.swap_layer_norms(model))  # in place: the same Parameters, the same state_dict
x = torch.randn(8192, 4096, device=device)
h = model[0](x)
print("path:", labkit.explain(h, (4096,), model[1].weight, model[1].bias)["path"])
model(x).square().mean().backward()  # gradients with torch's eager bits
print("grad of the LayerNorm's weight:", tuple(model[1].weight.grad.shape))
"""


def run_usage(device: str) -> dict:
    """Execute USAGE as a reader would (with `device` bound) and keep what it printed. The `dropin_usage` record."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(USAGE, "<labkit usage>", "exec"), {"device": device})  # noqa: S102 - the shown code, run
    return {"code": USAGE, "device": device, "printed": buf.getvalue().splitlines()}


def usage_shown(use: dict | None) -> tuple[str, list[str] | None]:
    """(code, what it printed) from a `dropin_usage` record: the code the run executed, said so when it is no
    longer this checkout's USAGE; USAGE itself, not run, without a record."""
    if not use:
        return f'device = "cuda"\n{USAGE}', None
    bound = f"device = {use.get('device', 'cuda')!r}  # bound by the run (run_usage); set it to your GPU\n"
    if use["code"] == USAGE:
        return bound + use["code"], use["printed"]
    return (f"# the code the run executed (this checkout's labkit.studies.dropin.USAGE has changed since)\n"
            f"{bound}{use['code']}", use["printed"])


def training_rows() -> tuple[str, list[dict]]:
    """(which run, rows): forward + backward per shape from the newest committed training run (notebook 10)."""
    from labkit.records.session import newest_complete_run
    from labkit.studies import training, training_sweep

    run = newest_complete_run(training.RUN_NAME)
    if run is None:
        return "no committed training run", []
    rid = run["records"]["run"]["run_id"]
    return f"committed training run {rid}", training_sweep.speed_rows(run["records"].get("training_sweep"))


def explain_rows(device: str) -> list[dict]:
    """Which path serves a few inputs on `device`, and why (labkit.explain). The `dropin_explain` record: on a
    CPU the page shows the GPU run's."""
    import torch

    from labkit import explain

    rows = []
    for label, shape in (("L1/40", L1_40), ("one long row", (1, 1 << 22)), ("transformer activations", (512, 768)),
                         ("wide transformer activations", (8192, 4096)), ("N % 4 != 0", (8, 1001))):
        # the path depends on the shape, strides, dtype, device and alignment, never the values: empty tensors
        x, w, b = (torch.empty(s, device=device) for s in (shape, shape[1:], shape[1:]))
        e = explain(x, shape[1:], w, b)
        rows.append({"input": label, "shape": shape_key(shape), "path": e["path"], "why": e["reason"]})
    return rows


def opcheck_rows(device: str) -> list[dict]:
    """torch.library.opcheck of both ops (schema, autograd registration, fake tensors, AOT dispatch)."""
    import torch

    from labkit.ops.dropin.op import layer_norm_backward_op, layer_norm_op

    x = torch.randn(4, 64, device=device, requires_grad=True)
    w = torch.randn(64, device=device, requires_grad=True)
    b = torch.randn(64, device=device, requires_grad=True)
    _, mean, rstd = torch.native_layer_norm(x.detach(), [64], w.detach(), b.detach(), 1e-5)
    checks = {"labkit::layer_norm (affine)": (layer_norm_op, (x, [64], w, b, 1e-5)),
              "labkit::layer_norm (no affine)": (layer_norm_op, (x, [64], None, None, 1e-5)),
              "labkit::layer_norm_backward": (layer_norm_backward_op, (torch.randn(4, 64, device=device), x.detach(),
                                              [64], mean, rstd, w.detach(), b.detach(), [True, True, True]))}
    rows = []
    for name, (op, args) in checks.items():
        result = torch.library.opcheck(op, args)
        rows.append({"op": name, "device": device, **result})
    return rows


def collect(session) -> dict:
    """The records this notebook wrote or replays, for the verdict and the summary block."""
    return {name: session.record(name) for name in RECORDS}


# --- the run's summary and headline (labkit.studies.catalog dispatches here) -------------------------------------

RUN_NAME = "dropin"
NOTEBOOK = "08_using_it"


L1_40_EAGER_RATIO_GOAL = 24  # the drop-in's goal: its forward at L1/40, eager per call, x torch eager
DROPIN_NATIVE_FLOOR_MS = 0.020  # the drop-in's goal: shapes whose native eager call takes >= 20 us must be >= 1.0x


def _count(cases: list, key: str) -> str:
    judged = [c[key] for c in cases if c.get(key) is not None]
    return f"{sum(bool(v) for v in judged)}/{len(judged)}"


def floor_worst(floor: dict | None, protocol: str = "eager") -> tuple[float | None, str | None]:
    """(worst drop-in / floor ratio, its shape) under `protocol` ("eager" or "graph") in a `dropin_floor` record
    (labkit.studies.dropin_sweep.floor_check); (None, None) without one."""
    worst = None, None
    for r in (floor or {}).get("shapes", []):
        ratio = r[protocol]["median_ms"] / r["floor_ms"]
        if worst[0] is None or ratio > worst[0]:
            worst = ratio, r["key"]
    return worst


def dropin_block(records: dict) -> dict | None:
    """The drop-in's headline keys from a `dropin` run (notebook 08): eager per-call ratios native/drop-in (worst over
    shapes whose native call takes >= 20 us; the largest gap in us below that), L1/40's ratio, host time per call
    beside torch's, bit-identity counts, and the worst drop-in / floor ratio at 1-4 rows of 4M-8M elements
    (`dropin_floor`; eager and graph replay). None without a `dropin_sweep` record."""
    sweep = records.get("dropin_sweep")
    if not sweep:
        return None
    worst, worst_shape, gap, l1 = None, None, None, None
    for row in sweep.get("shapes", []):
        eager = row.get("eager") or {}
        native, ours = eager.get("native"), eager.get("dropin")
        if native is None or ours is None:
            continue
        ratio = native / ours
        if native >= DROPIN_NATIVE_FLOOR_MS:
            if worst is None or ratio < worst:
                worst, worst_shape = ratio, row["key"]
        else:
            g = (ours - native) * 1e3
            gap = g if gap is None else max(gap, g)
        if row.get("l1_40"):
            l1 = ratio
    host = records.get("dropin_host") or {}
    ident = records.get("dropin_identity") or {}
    cases, compiled = ident.get("cases", []), ident.get("compiled", [])
    return {"eager_worst_ratio": worst, "eager_worst_shape": worst_shape, "small_shape_gap_us": gap,
            "l1_40_eager_ratio": l1, "host_us_per_call": host.get("dropin_us"),
            "torch_host_us_per_call": host.get("torch_us"), "forward_identical": _count(cases, "forward"),
            "backward_identical": _count(cases, "backward"),
            "compiled_identical": _count(compiled, "identical"),
            "floor_eager_worst_ratio": floor_worst(records.get("dropin_floor"), "eager")[0],
            "floor_graph_worst_ratio": floor_worst(records.get("dropin_floor"), "graph")[0]}


def dropin_line(d: dict) -> str:
    fmt = lambda v, f: "n/a" if v is None else format(v, f)  # noqa: E731
    return (f"drop-in: eager worst {fmt(d['eager_worst_ratio'], '.2f')}x native at {d['eager_worst_shape']}, L1/40 "
            f"{fmt(d['l1_40_eager_ratio'], '.1f')}x; host {fmt(d['host_us_per_call'], '.1f')} us/call vs torch "
            f"{fmt(d['torch_host_us_per_call'], '.1f')}; bits forward {d['forward_identical']}, backward "
            f"{d['backward_identical']}, compiled {d['compiled_identical']}")


def forward_block(records: dict) -> dict | None:
    """The `forward` summary block's keys this run measures: the drop-in as dispatched against torch's kernel, worst
    over the sweep's shapes, under the eager per-call protocol and under graph replay (native / drop-in), and at the
    ordinary shapes the worst drop-in against the faster of torch.compile and Liger (graph replay, `dropin_peers`);
    L1/40 under graph replay and KernelBench's timing from the run's own `kernelbench_timing` record (None in runs
    that predate it: scripts/kernelbench_timing.py's run holds those)."""
    from labkit.studies import kernelbench_timing as kb

    sweep = records.get("dropin_sweep")
    if not sweep:
        return None
    out = kb.forward_block(records.get("kernelbench_timing")) or dict.fromkeys(kb.FORWARD_KEYS)
    for key, protocol in (("dispatch_worst_vs_native_eager", "eager"), ("dispatch_worst_vs_native_graph", "graph")):
        ratios = [row[protocol]["native"] / row[protocol]["dropin"] for row in sweep.get("shapes", [])
                  if (row.get(protocol) or {}).get("native") and (row.get(protocol) or {}).get("dropin")]
        out[key] = min(ratios) if ratios else None
    pw = peers_worst(records.get("dropin_peers"))
    out["ordinary_worst_vs_peer"], out["ordinary_worst_shape"] = pw["vs_peer"], pw["vs_peer_shape"]
    return out


def summary(records: dict, prov: dict) -> dict:
    block = dropin_block(records)
    if not block:
        return {}
    return {"dropin": block, "forward": forward_block(records)}


def summary_lines(s: dict) -> list[str]:
    from labkit.studies import kernelbench_timing as kb

    return ([dropin_line(s["dropin"])] if s.get("dropin") else []) + kb.summary_lines(s)


def page_headline(records: dict, summary: dict) -> str:
    from labkit.records.text import on_gpu, ratio
    from labkit.studies.goals import tally_text

    d = summary.get("dropin")
    if not d or d.get("eager_worst_ratio") is None:
        return f"drop-in: no sweep in the record {on_gpu(summary)}"
    from labkit.studies.bench import PROTOCOL_NAMES

    return (f"drop-in under {PROTOCOL_NAMES['B']}: worst {ratio(d['eager_worst_ratio'])} native at "
            f"{d['eager_worst_shape']}, "
            f"host {d['host_us_per_call'] or float('nan'):.1f} us/call vs torch "
            f"{d['torch_host_us_per_call'] or float('nan'):.1f}; bits fwd "
            f"{d['forward_identical']}, bwd {d['backward_identical']}, compiled {d['compiled_identical']}"
            f"{tally_text(goals(records))} {on_gpu(summary)}")
