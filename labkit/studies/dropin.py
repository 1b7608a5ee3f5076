"""The drop-in LayerNorm as a user meets it (notebook 08): swapped into a model, bits against nn.LayerNorm,
speed under the eager per-call protocol, graph replay and torch.compile, the dispatch table, and inputs near the
float32 limit. Run functions return JSON-able records; table/verdict functions read them."""
from __future__ import annotations


import time
from dataclasses import replace

from labkit.ops.paths import PATHS
from labkit.studies.bench import us as _us
from labkit.studies.measure import host_us_per_call
from labkit.tasks import L1_40, config, shape_key

# (rows, N) from (1, 2**24) to (65536, 256): 64 MiB of float32 each, the row count doubling.
SWEEP = tuple((1 << k, 1 << (24 - k)) for k in range(17))
QUICK_SWEEP = ((1, 1 << 20), (4, 1 << 18), (64, 1 << 14), (4096, 256))
EAGER_METHODS = ("native", "dropin", *PATHS)  # torch, the drop-in as dispatched, each of our paths forced
HOST_SHAPE = (8, 256)   # "a tiny shape": the kernel is shorter than the host's part of a call
HOST_CALLS = 10_000
NEAR_MAX_SHAPE = (4, 768)
# The swapped block's sizes: the first of these whose LayerNorm input the GPU's dispatch sends to our kernels (a
# demo of torch's kernel serving would show nothing), the first where none does (a CPU, an unmeasured GPU).
BLOCKS = ({"d_model": 256, "heads": 4, "seq": 64, "batch": 4}, {"d_model": 1024, "heads": 16, "seq": 1024, "batch": 8},
          {"d_model": 4096, "heads": 32, "seq": 1024, "batch": 8})
BLOCK = BLOCKS[0]


def shapes(mode: str) -> list[tuple[int, ...]]:
    """The sweep (full) or its corners (quick), then the timing study's shapes of the mode."""
    sweep = SWEEP if mode == "full" else QUICK_SWEEP
    return [*sweep, *config(mode).timing_shapes]


def _affine(shape, seed, device):
    from labkit.inputs import make_affine

    return make_affine("random_normal", shape[1:], seed, device)


def _methods(x, w, b, eps):
    import torch

    from labkit import layer_norm
    from labkit.ops.dropin import layer_norm_with

    ns = tuple(w.shape)
    m = {"native": lambda: torch.nn.functional.layer_norm(x, ns, w, b, eps),
         "dropin": lambda: layer_norm(x, ns, w, b, eps)}
    for path in EAGER_METHODS[2:]:
        m[path] = (lambda p: lambda: layer_norm_with(p, x, ns, w, b, eps))(path)
    return m


def _compiled(x, w, b, eps):
    """nn.LayerNorm's functional and the drop-in's, compiled for this shape (measure.compile_static), as a user
    compiles a model."""
    import torch

    from labkit import layer_norm
    from labkit.studies.measure import compile_static

    ns = tuple(w.shape)
    native, ours = compile_static(lambda x, w, b: torch.nn.functional.layer_norm(x, ns, w, b, eps),
                                  lambda x, w, b: layer_norm(x, ns, w, b, eps), fullgraph=True)
    return {"native_compiled": lambda: native(x, w, b), "dropin_compiled": lambda: ours(x, w, b)}


def _raise_recompile_limit() -> None:
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(256, getattr(torch._dynamo.config, name)))


def _medians(rec) -> dict:
    return {k: v["median_ms"] for k, v in rec.stats.items()}


def sweep(shape_list, rounds: int = 15, seed: int = 0, eps: float = 1e-5, device="cuda", log=None,
          compiled: bool = True) -> dict:
    """Every candidate path at every shape: eager per call (CUDA events around one call, L2 flushed: KernelBench's
    protocol, host time counts), graph replay (protocol A) and compiled (eager protocol on torch.compile'd
    callables; `compiled=False` leaves that out). A path that cannot take a shape is recorded with its reason. The
    `dropin_sweep` record."""
    import torch

    from labkit.core.device import current_index, device_info
    from labkit.inputs import make_input
    from labkit.ops import paths
    from labkit.ops.dispatch import rule
    from labkit.studies.bench import PROTOCOL_A, PROTOCOL_B, time_methods

    eager_p, graph_p = replace(PROTOCOL_B, rounds=rounds), replace(PROTOCOL_A, rounds=rounds)
    dev = device_info(current_index(torch.device(device)))
    _raise_recompile_limit()
    rows_out = []
    for shape in shape_list:
        t0 = time.perf_counter()
        x = make_input("uniform", shape, seed, device)
        w, b = _affine(shape, seed, device)
        rows, n = x.numel() // w.numel(), w.numel()
        row = {"key": shape_key(shape), "shape": list(shape), "rows": rows, "n": n, "l1_40": tuple(shape) == L1_40,
               "rule": rule.choose(rows, n, dev, tuple(paths.candidates(rows, n, dev)))[0], "errors": {}}
        with torch.no_grad():
            ok = {}
            for name, fn in _methods(x, w, b, eps).items():
                try:
                    fn()
                    ok[name] = fn
                except ValueError as exc:
                    row["errors"][name] = str(exc)
            e, g = time_methods(ok, eager_p, "native"), time_methods(ok, graph_p, "native")
            row["eager"], row["graph"] = _medians(e), _medians(g)
            row["eager_stats"], row["graph_stats"] = e.stats, g.stats
            try:
                if not compiled:
                    raise LookupError("not timed compiled (compiled=False)")
                c = time_methods(_compiled(x, w, b, eps), eager_p, "native_compiled")
                row["compiled"], row["compiled_stats"] = _medians(c), c.stats
            except LookupError as exc:
                row["compiled"], row["errors"]["compiled"] = {}, str(exc)
            except Exception as exc:  # a compile failure is a finding, not a crash of the sweep
                row["compiled"], row["errors"]["compiled"] = {}, f"{type(exc).__name__}: {exc}"
        row["seconds"] = time.perf_counter() - t0
        rows_out.append(row)
        x = None  # freed before the next shape is made
        if log:
            log(f"{row['key']}: {row['seconds']:.1f} s")
    return {"device": {"arch": dev.arch, "sm_count": dev.sm_count, "name": torch.cuda.get_device_name()},
            "rule_source": rule.table_source(dev),
            "protocols": {"eager": eager_p.__dict__, "graph": graph_p.__dict__}, "shapes": rows_out}


def host_cost(shape=HOST_SHAPE, calls: int = HOST_CALLS, device="cuda") -> dict:
    """Host time per call over `calls` back-to-back calls at a tiny shape (the GPU keeps up, so the loop's wall
    time is the host's): torch's F.layer_norm, the drop-in as dispatched, our kernel path forced, and the op
    through the dispatcher (what autograd/compile pay). The `dropin_host` record."""
    import torch

    from labkit import layer_norm
    from labkit.ops.dropin import explain, layer_norm_with
    from labkit.ops.dropin.op import layer_norm_op

    x = torch.rand(shape, device=device)
    w, b = _affine(shape, 0, device)
    ns = tuple(w.shape)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    with torch.no_grad():
        out = {"shape": list(shape), "calls": calls,
               "torch_us": host_us_per_call(lambda: torch.nn.functional.layer_norm(x, ns, w, b), calls, sync),
               "dropin_us": host_us_per_call(lambda: layer_norm(x, ns, w, b), calls, sync),
               "dropin_path": explain(x, ns, w, b)["path"],
               "op_us": host_us_per_call(lambda: layer_norm_op(x, list(ns), w, b, 1e-5), calls, sync)}
        for path in ("chain", "rows_fused"):
            try:
                out[f"{path}_us"] = host_us_per_call(lambda: layer_norm_with(path, x, ns, w, b), calls, sync)
            except ValueError as exc:
                out[f"{path}_us"], out[f"{path}_error"] = None, str(exc)
    return out


def _bits_equal(a, b) -> bool:
    import torch

    if a is None or b is None:
        return a is None and b is None
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    view = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
            torch.float64: torch.int64}[a.dtype]
    return torch.equal(a.contiguous().view(view), b.contiguous().view(view))


def identity_cases(device: str) -> list[dict]:
    """Inputs for the bit checks: our kernels' shapes and every kind torch sends down another path."""
    import torch

    def dense(shape, dtype=torch.float32, affine="both"):
        def make():
            g = torch.Generator().manual_seed(sum(shape))
            x = (torch.randn(shape, generator=g) * 3 + 100).to(dtype).to(device)
            n = shape[1:]
            w = torch.randn(n, generator=g).to(dtype).to(device) if affine in ("both", "weight") else None
            b = torch.randn(n, generator=g).to(dtype).to(device) if affine in ("both", "bias") else None
            return x, n, w, b
        return make

    def misaligned():
        x, n, w, b = dense((4, 1024))()
        flat = torch.empty(x.numel() + 1, device=device)
        flat[1:].copy_(x.reshape(-1))
        return flat[1:].view(4, 1024), n, w, b

    def strided():
        x, n, w, b = dense((8, 2048))()
        return x.t().contiguous().t(), n, w, b  # a transposed (non-contiguous) view

    big = 1 << 20
    cases = {f"chain {r}x{big // r}": dense((r, big // r)) for r in (1, 2, 16)}
    cases.update({
        "chain ragged 3x(512*33+4)": dense((3, 512 * 33 + 4)),
        "L1/40 row length 2x4194304": dense((2, 64 * 256 * 256)),
        "many rows 4096x1024": dense((4096, 1024)),
        "3-d input 2x64x1024": dense((2, 64, 1024)),
        "N % 4 != 0 (5x1001)": dense((5, 1001)),
        "N > 2**24 (1x(2**24+4))": dense((1, (1 << 24) + 4)),
        "misaligned view": misaligned,
        "non-contiguous view": strided,
        "weight only (bias=False)": dense((2, 1 << 18), affine="weight"),
        "no affine": dense((2, 1 << 18), affine="none"),
        "bias only": dense((2, 1 << 18), affine="bias"),
        "float16": dense((4, 4096), torch.float16),
        "bfloat16": dense((4, 4096), torch.bfloat16),
        "float64": dense((4, 4096), torch.float64),
        "empty rows": dense((0, 1024)),
    })
    return [{"case": k, "make": v} for k, v in cases.items()]


def _grads(fn, x, ns, w, b, eps):
    import torch

    xs = [t.detach().clone().requires_grad_() if t is not None else None for t in (x, w, b)]
    y = fn(xs[0], ns, xs[1], xs[2], eps)
    g = torch.Generator().manual_seed(7)
    gy = torch.randn(y.shape, generator=g).to(y.dtype).to(y.device)
    if y.numel():
        y.backward(gy)
    return y.detach(), [t.grad if t is not None else None for t in xs]


# Cases also compared under torch.compile(fullgraph=True) (one compile each: the notebook's GPU budget).
COMPILED_CASES = ("chain 1x1048576", "chain ragged 3x(512*33+4)", "many rows 4096x1024", "weight only (bias=False)",
                  "N % 4 != 0 (5x1001)", "misaligned view")


def identity(device="cuda", eps: float = 1e-5, compiled: bool = True) -> dict:
    """Forward bits and backward bits (grad x, weight, bias) of labkit.layer_norm against F.layer_norm with
    autograd, case by case, and the same under torch.compile(fullgraph=True). The `dropin_identity` record."""
    import torch

    from labkit import layer_norm
    from labkit.ops.dropin import explain

    cases, comp = [], []
    _raise_recompile_limit()
    dropin_compiled = torch.compile(layer_norm, fullgraph=True)
    for case in identity_cases(device):
        x, ns, w, b = case["make"]()
        row = {"case": case["case"], "shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", ""),
               "path": explain(x, ns, w, b, eps)["path"]}
        try:
            with torch.no_grad():
                row["forward"] = _bits_equal(layer_norm(x, ns, w, b, eps),
                                             torch.nn.functional.layer_norm(x, ns, w, b, eps))
            y0, g0 = _grads(torch.nn.functional.layer_norm, x, ns, w, b, eps)
            y1, g1 = _grads(layer_norm, x, ns, w, b, eps)
            row["backward"] = _bits_equal(y0, y1) and all(_bits_equal(a, c) for a, c in zip(g0, g1))
        except Exception as exc:  # recorded as a failure of the drop-in, never skipped
            row["forward"] = row.get("forward", False)
            row["backward"], row["error"] = False, f"{type(exc).__name__}: {exc}"
        cases.append(row)
        if compiled and case["case"] in COMPILED_CASES:
            c = {"case": case["case"]}
            try:
                y_e, g_e = _grads(torch.nn.functional.layer_norm, x, ns, w, b, eps)
                y_c, g_c = _grads(dropin_compiled, x, ns, w, b, eps)
                c["forward"] = _bits_equal(y_e, y_c)
                c["backward"] = all(_bits_equal(a, d) for a, d in zip(g_e, g_c))
            except Exception as exc:
                c["forward"] = c["backward"] = False
                c["error"] = f"{type(exc).__name__}: {exc}"
            c["identical"] = bool(c["forward"] and c["backward"])
            comp.append(c)
    return {"cases": cases, "compiled": comp}


def block_config(device) -> dict:
    """The first of BLOCKS whose LayerNorm input (batch * seq rows of d_model) our kernels serve on `device`."""
    import torch

    from labkit.ops.dropin import explain

    for cfg in BLOCKS:
        x = torch.empty(cfg["batch"] * cfg["seq"], cfg["d_model"], device=device)
        w = torch.empty(cfg["d_model"], device=device)
        if explain(x, (cfg["d_model"],), w, w)["path"] != "native":
            return dict(cfg)
    return dict(BLOCKS[0])


def make_block(d_model: int = BLOCK["d_model"], heads: int = BLOCK["heads"], device="cpu", seed: int = 0):
    """A small pre-norm transformer block (attention + MLP, two nn.LayerNorms)."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = torch.nn.LayerNorm(d_model)
            self.attn = torch.nn.MultiheadAttention(d_model, heads, batch_first=True)
            self.ln2 = torch.nn.LayerNorm(d_model)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(d_model, 4 * d_model), torch.nn.GELU(),
                                           torch.nn.Linear(4 * d_model, d_model))

        def forward(self, x):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    torch.manual_seed(seed)
    block = Block().to(device)
    with torch.no_grad():  # non-trivial affines, so a swapped-in LayerNorm that ignored them would show
        for ln in (block.ln1, block.ln2):
            ln.weight.normal_()
            ln.bias.normal_()
    return block


def block_swap(device="cuda", compiled: bool = True) -> dict:
    """Swap the block's LayerNorms (sizes: block_config); forward output and every gradient (input and parameters)
    against the original block, as int32 views; the swapped block under torch.compile(fullgraph=True). The
    `dropin_block` record."""
    import copy

    import torch

    from labkit import swap_layer_norms
    from labkit.ops.dropin import explain

    cfg = block_config(device)
    ref = make_block(cfg["d_model"], cfg["heads"], device=device)
    ours = copy.deepcopy(ref)
    swapped = swap_layer_norms(ours)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(cfg["batch"], cfg["seq"], cfg["d_model"], generator=g).to(device)
    out = {"swapped": swapped, "state_dict_keys_equal": list(ref.state_dict()) == list(ours.state_dict()),
           "ln_path": explain(x, (cfg["d_model"],), ours.ln1.weight, ours.ln1.bias), **cfg}
    def run(model):
        xi = x.clone().requires_grad_()
        y = model(xi)
        y.backward(torch.ones_like(y))
        grads = [xi.grad] + [p.grad for p in model.parameters()]
        model.zero_grad()
        return y.detach(), grads

    # Under deterministic algorithms: attention's backward (flash / memory-efficient SDPA) and some matmul
    # reductions are otherwise nondeterministic, and the original block would differ from itself. The control,
    # the original run twice, says whether the comparison can be trusted.
    from labkit.studies.measure import deterministic_algorithms

    with deterministic_algorithms():
        (y_ref, g_ref), (_, g_again), (y_ours, g_ours) = run(ref), run(ref), run(ours)
    out["forward_identical"] = _bits_equal(y_ref, y_ours)
    pairs = list(zip(g_ref, g_ours))
    out["grads_identical"] = f"{sum(_bits_equal(a, b) for a, b in pairs)}/{len(pairs)}"
    out["control_original_twice"] = f"{sum(_bits_equal(a, b) for a, b in zip(g_ref, g_again))}/{len(g_ref)}"
    if compiled:
        import warnings

        try:
            with warnings.catch_warnings(record=True) as caught:  # kept in the record, not printed on the page
                warnings.simplefilter("always")
                c = torch.compile(ours, fullgraph=True)
                y = c(x.clone().requires_grad_())
                y.sum().backward()
            out["compiled_fullgraph"] = True
            out["compile_warnings"] = sorted({f"{w.category.__name__}: {str(w.message)[:200]}" for w in caught})
        except Exception as exc:
            out["compiled_fullgraph"], out["compile_error"] = False, f"{type(exc).__name__}: {exc}"
    return out


def near_max(device="cuda", shape=NEAR_MAX_SHAPE, seed: int = 0) -> dict:
    """Values in [1.5e38, 3e38): eager's Welford mean stays finite, a sum over the row overflows. nn.LayerNorm
    compiled vs the drop-in compiled vs eager: NaN counts and bits. The `dropin_near_max` record."""
    import torch

    from labkit import LayerNorm

    g = torch.Generator().manual_seed(seed)
    x = ((torch.rand(shape, generator=g) * 0.5 + 0.5) * 3e38).to(device)
    ln = torch.nn.LayerNorm(shape[-1]).to(device)
    ours = LayerNorm.from_layer_norm(ln)
    with torch.no_grad():
        eager = ln(x)
        comp_native = torch.compile(ln, fullgraph=True)(x)
        comp_ours = torch.compile(ours, fullgraph=True)(x)
    nan = lambda t: int(torch.isnan(t).sum())  # noqa: E731
    return {"shape": list(shape), "elements": x.numel(), "eager_nan": nan(eager), "eager_finite": bool(torch.isfinite(eager).all()),
            "compiled_native_nan": nan(comp_native), "compiled_dropin_nan": nan(comp_ours),
            "compiled_dropin_identical": _bits_equal(comp_ours, eager),
            "compiled_native_identical": _bits_equal(comp_native, eager)}


# --- readers: records -> rows / verdicts -----------------------------------------------------------------------

# Issue 16's floor check: 1, 2 and 4 rows of 4M and 8M elements, where the chain path serves one row with 128
# dependent chains of N / 128 pushes each and nothing else can hide that chain.
FLOOR_ROWS = (1, 2, 4)
FLOOR_NS = (1 << 22, 1 << 23)
FLOOR_SLACK = 0.15  # the goal: within 15% of the floor


def floor_check(rounds: int = 15, seed: int = 0, eps: float = 1e-5, device="cuda") -> dict:
    """The contract's floor at each (rows, N) of FLOOR_ROWS x FLOOR_NS, measured in this run: the dependent push
    chain of N / 128 pushes (kernels/chain_floor.cu, protocol A) plus the output pass's bytes (x read, y written)
    at the device copy ceiling (labkit.studies.measure.copy_ceiling_a); beside it the drop-in's eager
    (protocol B) and graph-replay (protocol A) medians. The `dropin_floor` record."""
    import torch

    from labkit import layer_norm
    from labkit.inputs import make_input
    from labkit.studies.bench import PROTOCOL_A, PROTOCOL_B, time_methods
    from labkit.studies.measure import chain_floor, copy_ceiling_a

    ceiling = copy_ceiling_a(rounds=rounds, device=device)
    chains = {n: chain_floor(pushes=n // 128, rounds=rounds, device=device) for n in FLOOR_NS}
    rows_out = []
    for n in FLOOR_NS:
        for rows in FLOOR_ROWS:
            x = make_input("uniform", (rows, n), seed, device)
            w, b = _affine((rows, n), seed, device)
            out_bytes = 2 * x.numel() * 4
            floor_ms = chains[n]["ms"] + out_bytes / (ceiling["read_plus_write_gbps"] * 1e6)
            with torch.no_grad():
                fn = {"dropin": lambda: layer_norm(x, (n,), w, b, eps)}
                e = time_methods(fn, replace(PROTOCOL_B, rounds=rounds)).stats["dropin"]
                g = time_methods(fn, replace(PROTOCOL_A, rounds=rounds)).stats["dropin"]
            rows_out.append({"key": shape_key((rows, n)), "rows": rows, "n": n, "chain_ms": chains[n]["ms"],
                             "output_bytes": out_bytes, "floor_ms": floor_ms, "eager": e, "graph": g})
            x = None  # freed before the next shape is made
    return {"ceiling": ceiling, "chain_floors": {str(n): c for n, c in chains.items()}, "slack": FLOOR_SLACK,
            "shapes": rows_out}


def floor_rows(floor: dict | None) -> list[dict]:
    """Per shape: the floor's two parts, the drop-in's eager and graph medians, and drop-in / floor."""
    rows = []
    for r in (floor or {}).get("shapes", []):
        e, g = r["eager"]["median_ms"], r["graph"]["median_ms"]
        rows.append({"shape": r["key"], "push chain us": 1e3 * r["chain_ms"],
                     "output at ceiling us": 1e3 * (r["floor_ms"] - r["chain_ms"]), "floor us": 1e3 * r["floor_ms"],
                     "drop-in eager us": 1e3 * e, "eager / floor": e / r["floor_ms"],
                     "drop-in graph us": 1e3 * g, "graph / floor": g / r["floor_ms"]})
    return rows


def _ratio(d: dict, base: str, name: str):
    if d and d.get(base) and d.get(name):
        return d[base] / d[name]
    return None


def figure(sweep_record: dict | None):
    """The sweep's forward time against row shape (labkit.studies.plots.time_vs_shape); None without a sweep."""
    from labkit.studies.plots import time_vs_shape

    return time_vs_shape([("forward", sweep_record, "compiled")])


def speed_rows(sweep_record: dict | None) -> list[dict]:
    """Per shape: native and drop-in medians (us) and native/drop-in ratios under each protocol."""
    rows = []
    for r in (sweep_record or {}).get("shapes", []):
        e, g, c = r.get("eager", {}), r.get("graph", {}), r.get("compiled", {})
        rows.append({"shape": r["key"], "rule": r["rule"],
                     "native eager us": 1e3 * e["native"] if e.get("native") else None,
                     "drop-in eager us": 1e3 * e["dropin"] if e.get("dropin") else None,
                     "eager x": _ratio(e, "native", "dropin"), "graph x": _ratio(g, "native", "dropin"),
                     "compiled x (vs compiled nn.LayerNorm)": _ratio(c, "native_compiled", "dropin_compiled")})
    return rows


# Ordinary transformer shapes (issue 24): the forward beside the fastest non-bit-identical peers, graph replay.
ORDINARY = ((4096, 768), (8192, 1024), (8192, 4096), (16384, 4096), (32768, 2048), (4096, 8192), (2048, 16384),
            (1024, 65536))
QUICK_ORDINARY = ((4096, 768), (2048, 16384))
PEERS = ("inductor", "liger")  # labkit.studies.methods: torch.compile (static shapes) and Liger-Kernel's Triton
PEER_GOAL, PEER_NATIVE_GOAL = 0.95, 1.25  # issue 24: >= 0.95x the faster peer, >= 1.25x torch eager (graph replay)


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


def fastest(times: dict) -> str | None:
    live = {k: v for k, v in times.items() if v}
    return min(live, key=live.get) if live else None


# The rule agrees with a measurement at a shape when its path is within this much of the fastest path.
AGREE_RELATIVE, AGREE_ABSOLUTE_MS = 0.05, 0.002


def dispatch_rows(sweep_record: dict | None) -> list[dict]:
    """The dispatch table: per shape, each path's eager median (us), the fastest, the rule's pick and agreement."""
    rows = []
    for r in (sweep_record or {}).get("shapes", []):
        e = {k: r["eager"].get(k) for k in EAGER_METHODS if k != "dropin"}
        best = fastest(e)
        pick = e.get(r["rule"])
        agree = bool(best and pick and pick <= e[best] * (1 + AGREE_RELATIVE) + AGREE_ABSOLUTE_MS)
        rows.append({"shape": r["key"], **{f"{k} us": (1e3 * v if v else None) for k, v in e.items()},
                     "fastest": best, "rule": r["rule"], "agrees": agree})
    return rows


def protocol_picks(sweep_record: dict | None) -> list[dict]:
    """Per shape of a sweep: the rule's pick under each protocol (labkit.ops.dispatch.rule.PROTOCOLS: "eager" is
    what the run recorded, "graph" is the rule on the table's graph-replay scores) and what each pick measured in
    the same run, as torch's time / the pick's (x native) under that protocol — and the eager pick under graph
    replay, what a graph-captured model got before the rule knew the protocol."""
    from labkit.ops.dispatch import rule, tables

    if not sweep_record:
        return []
    d = sweep_record["device"]
    # the committed table of the run's GPU, never a table this machine's user tuned (README "GPUs")
    table, _ = tables.committed(d["arch"], d["sm_count"])
    if table is None:
        return []
    graph, _ = rule.protocol_scores(table, "graph")
    out = []
    for r in sweep_record["shapes"]:
        e, g = r.get("eager") or {}, r.get("graph") or {}
        offered = tuple(p for p in PATHS if e.get(p) and g.get(p))
        sc = {p: v for p, v in rule.scores_in(graph, r["rows"], r["n"], d["sm_count"]).items()
              if p == "native" or p in offered}
        gpick = rule.pick(sc)
        ratio = lambda t, p: t["native"] / t[p] if t.get("native") and t.get(p) else None  # noqa: E731
        out.append({"shape": r["key"], "eager pick": r["rule"], "x native, eager": ratio(e, r["rule"]),
                    "graph pick": gpick, "x native, graph replay": ratio(g, gpick),
                    "eager pick under graph replay, x native": ratio(g, r["rule"])})
    return out


def protocol_line(picks: list[dict], source: str) -> str:
    """The worst x native of the rule's pick under each protocol, from protocol_picks."""
    def worst(key):
        have = [(r[key], r["shape"]) for r in picks if r[key] is not None]
        return min(have) if have else (None, None)
    (we, se), (wg, sg), (wx, sx) = (worst("x native, eager"), worst("x native, graph replay"),
                                    worst("eager pick under graph replay, x native"))
    if we is None:
        return f"per protocol: {source}"
    differ = sum(r["eager pick"] != r["graph pick"] for r in picks)
    return (f"the rule per protocol over {len(picks)} shapes ({source}): the picks differ at {differ}; worst x native "
            f"under eager per call {we:.3g}x at {se}; under graph replay with the graph pick {wg:.3g}x at {sg} "
            f"(the eager pick there: {wx:.3g}x at {sx})")


def rule_grid_rows() -> list[dict]:
    """Every committed dispatch table (labkit/ops/dispatch/tables/) as a grid: the path the rule takes at each
    measured point, on the GPU it was measured on."""
    from labkit.ops.dispatch import tables
    from labkit.studies.dispatch import table_rows

    return [{"table": t.DEVICE["name"], **row} for t in tables.tables()
            for row in table_rows(t.SCORES, t.DEVICE["sm_count"], graph=getattr(t, "GRAPH", None))]


def host_rows(host: dict | None) -> list[dict]:
    if not host:
        return []
    names = {"torch_us": "torch F.layer_norm", "dropin_us": f"labkit.layer_norm (path: {host.get('dropin_path')})",
             "op_us": "torch.ops.labkit.layer_norm (the dispatcher)", "chain_us": "our chain path, forced",
             "rows_fused_us": "our rows_fused path, forced"}
    return [{"call": label, "host us per call": host.get(k), "shape": shape_key(host["shape"]), "calls": host["calls"]}
            for k, label in names.items()]


def identity_rows(ident: dict | None) -> list[dict]:
    comp = {c["case"]: c for c in (ident or {}).get("compiled", [])}
    return [{**{k: c.get(k) for k in ("case", "shape", "dtype", "path", "forward", "backward")},
             "compiled": comp.get(c["case"], {}).get("identical"), "error": c.get("error", "")}
            for c in (ident or {}).get("cases", [])]


def _host_ok(s: dict) -> bool:
    h, t = s.get("host_us_per_call"), s.get("torch_host_us_per_call")
    return h is not None and t is not None and h <= 10 and h <= t + 5


def goals(records: dict) -> list[dict]:
    """Issue 16's goals judged on a `dropin` run (labkit.studies.goals): the eager per-call ratios, the host cost
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
                "<= 10 us and <= torch + 5 us", None if host is None or torch_host is None else _host_ok(s), HOST,
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


def near_max_rows(near: dict | None) -> list[dict]:
    """Inputs near float32's largest value: how many NaNs each path gives and whether it keeps eager's bits."""
    if not near:
        return []
    return [{"shape": "x".join(map(str, near["shape"])), "elements": near["elements"],
             "eager NaNs": near["eager_nan"], "eager all finite": near["eager_finite"],
             "compiled nn.LayerNorm NaNs": near["compiled_native_nan"],
             "compiled drop-in NaNs": near["compiled_dropin_nan"],
             "compiled drop-in = eager": near["compiled_dropin_identical"],
             "compiled nn.LayerNorm = eager": near["compiled_native_identical"]}]


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


_BLOCK_LABELS = {"swapped": "LayerNorms swapped", "state_dict_keys_equal": "state_dict keys unchanged",
                 "d_model": "d_model", "heads": "heads", "seq": "sequence length", "batch": "batch",
                 "forward_identical": "forward bit-identical", "grads_identical": "gradients bit-identical",
                 "control_original_twice": "control: the original run twice", "compiled_fullgraph":
                 "torch.compile(fullgraph=True) runs"}


def block_rows(blk: dict | None) -> list[dict]:
    """The swapped block's record as label | value rows (one record: read down, not across), the LayerNorms'
    path and why last."""
    if not blk:
        return []
    rows = [{"what": _BLOCK_LABELS.get(k, k.replace("_", " ")), "value": v} for k, v in blk.items()
            if k not in ("ln_path", "compile_warnings")]
    if blk.get("compile_warnings"):
        rows.append({"what": "compile warnings (their text is in the record)", "value": len(blk["compile_warnings"])})
    rows.append({"what": "the LayerNorms' path", "value": blk["ln_path"]["path"]})
    rows.append({"what": "why", "value": blk["ln_path"]["reason"]})
    return rows


# --- the run's summary and headline (labkit.studies.catalog dispatches here) -------------------------------------

RUN_NAME = "dropin"
NOTEBOOK = "08_using_it"


L1_40_EAGER_RATIO_GOAL = 24  # issue 16: the drop-in's forward at L1/40, eager per call, x torch eager
DROPIN_NATIVE_FLOOR_MS = 0.020  # issue 16: shapes whose native eager call takes >= 20 us must be >= 1.0x


def _count(cases: list, key: str) -> str:
    judged = [c[key] for c in cases if c.get(key) is not None]
    return f"{sum(bool(v) for v in judged)}/{len(judged)}"


def floor_worst(floor: dict | None, protocol: str = "eager") -> tuple[float | None, str | None]:
    """(worst drop-in / floor ratio, its shape) under `protocol` ("eager" or "graph") in a `dropin_floor` record
    (labkit.studies.dropin.floor_check); (None, None) without one."""
    worst = None, None
    for r in (floor or {}).get("shapes", []):
        ratio = r[protocol]["median_ms"] / r["floor_ms"]
        if worst[0] is None or ratio > worst[0]:
            worst = ratio, r["key"]
    return worst


def dropin_block(records: dict) -> dict | None:
    """Issue 16's headline keys from a `dropin` run (notebook 08): eager per-call ratios native/drop-in (worst over
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
    """Issue 24's `forward` keys this run measures: the drop-in as dispatched against torch's kernel, worst over the
    sweep's shapes, under the eager per-call protocol and under graph replay (native / drop-in), and at the
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
