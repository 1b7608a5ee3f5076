"""How people train (notebook 10): the drop-in under CUDA autocast, on bfloat16/float16 tensors and inside
torch.compile, each beside eager torch and torch.compile, timed in one run (`training_reach`), with the bits of
every output and gradient and the steps of models trained with and without the swap; its rows, figure and the
`reach` summary block. Apart from training_sweep because its methods change the dtype, the autocast state and the
compiler around the same call.

Protocols, named wherever a ratio appears (EAGER and GRAPH below, the book's names for them): eager per call
(labkit.studies.bench.PROTOCOL_B: CUDA events around one ordinary Python call, L2 flushed: host time counts) and graph
replay (PROTOCOL_A: the GPU's time).
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

from labkit.records.text import PROTOCOL_NAMES
from labkit.studies.bench import HostTimer, Protocol, time_methods
from labkit.studies.bench import us as _us
from labkit.studies.training_models import _bits_equal as _bits  # integer views of the element size, None-safe
from labkit.tasks import L1_40, shape_key

EAGER, GRAPH = PROTOCOL_NAMES["B"], PROTOCOL_NAMES["A"]  # each ratio's protocol, named as the book names it

WIDE = (4, 1 << 22)                       # few wide rows: the chain's domain
COMPILED_SHAPES = (L1_40, WIDE, (8192, 4096))
ORDINARY = ((4096, 768), (8192, 1024), (8192, 4096), (16384, 4096), (2048, 16384))
QUICK_ORDINARY = ((4096, 768), (8192, 4096))
BITS_SHAPES = ((1, 4), (5, 516), (64, 1024), (4096, 768), (3, 512 * 33 + 4), (2, 1 << 20), (16, 1 << 18))
HOST_SHAPE, HOST_CALLS = (8, 768), 2000
# a bf16 signature torch serves (N % 4 != 0: torch's own non-vectorized kernel, which no path of ours matches): the
# drop-in's cost there is its host time over calling torch (the goal: within 2 us)
TORCH_SERVED_SHAPE = (8, 766)
LOW = ("bfloat16", "float16")


def _torch():
    import torch

    return torch


def _inputs(shape, dtype: str, param_dtype: str | None, seed: int, device, grad: bool):
    """x ~ uniform as the other studies draw it (labkit.inputs), rounded to `dtype`; weight, bias ~ N(1, 0.2) and
    N(0, 0.2) over shape[1:] in `param_dtype` (default x's); dy ~ N(0, 1) in float32 under autocast's policy, else
    x's dtype."""
    torch = _torch()
    from labkit.inputs import make_affine, make_input

    t = getattr(torch, dtype)
    pt = getattr(torch, param_dtype or dtype)
    x = make_input("uniform", shape, seed, device).to(t)
    w, b = (v.to(pt) for v in make_affine("random_normal", shape[1:], seed, device))
    for v in (x, w, b):
        v.requires_grad_(grad)
    return x, tuple(shape[1:]), w, b


def _fwdbwd(fn, x, ns, w, b, dy, autocast: str | None = None):
    """One training call: y = fn(...), then every gradient by torch.autograd.grad (nothing accumulates)."""
    torch = _torch()
    leaves = (x, w, b)

    def step():
        if autocast:
            with torch.autocast("cuda", dtype=getattr(torch, autocast)):
                y = fn(x, ns, w, b)
        else:
            y = fn(x, ns, w, b)
        return (y, *torch.autograd.grad(y, leaves, dy))
    return step


def _forward(fn, x, ns, w, b):
    torch = _torch()

    def call():
        with torch.no_grad():
            return fn(x, ns, w, b)
    return call


def _fraction_equal(a, b) -> float:
    """The fraction of elements of `a` whose bits equal `b`'s (torch.compile's own LayerNorm keeps few)."""
    torch = _torch()
    view = {4: torch.int32, 2: torch.int16}[a.element_size()]
    return float((a.detach().contiguous().view(view) == b.detach().contiguous().view(view)).double().mean().item())


def _stats(rec) -> dict:
    return {k: {"median_ms": v["median_ms"], "q25_ms": v["q25_ms"], "q75_ms": v["q75_ms"]} for k, v in
            rec.stats.items()}


def _time(fns: dict, protocol, baseline: str) -> dict:
    return _stats(time_methods(fns, protocol, baseline))


def _compiled(fn, **options):
    from labkit.studies.measure import compile_static

    return compile_static(fn, fullgraph=True, **options)[0]


def _try_add(fns: dict, name: str, make, errors: dict, calls: int = 1) -> None:
    """fns[name] = make() after `calls` calls of it (where torch.compile compiles, and reduce-overhead records);
    a failure is recorded in `errors` under `name` and the method left out of the timing: a finding, not a crash."""
    try:
        fn = make()
        for _ in range(calls):
            fn()
        fns[name] = fn
    except Exception as exc:
        errors[name] = f"{type(exc).__name__}: {str(exc)[:300]}"


def _f_layer_norm(x, ns, w, b):
    return _torch().nn.functional.layer_norm(x, ns, w, b, 1e-5)


def _dropin(x, ns, w, b):
    from labkit import layer_norm

    return layer_norm(x, ns, w, b, 1e-5)


# --- the measurements ----------------------------------------------------------------------------------------------

def autocast_l1_40(eager, seed: int, device) -> dict:
    """bf16 autocast, forward + backward at L1/40 (bf16 x as a matmul under autocast leaves it, float32 parameters as
    a module holds them), eager per call: torch, the drop-in, and autocast's own cast of x to float32 alone."""
    torch = _torch()
    x, ns, w, b = _inputs(L1_40, "bfloat16", "float32", seed, device, True)
    dy = torch.randn(L1_40, device=device, generator=torch.Generator(device=device).manual_seed(seed + 1))
    fns = {"native": _fwdbwd(_f_layer_norm, x, ns, w, b, dy, "bfloat16"),
           "dropin": _fwdbwd(_dropin, x, ns, w, b, dy, "bfloat16")}
    want, got = fns["native"](), fns["dropin"]()
    xd = x.detach()
    fns["autocast_cast"] = lambda: xd.to(torch.float32)
    return {"shape": list(L1_40), "eager": _time(fns, eager, "native"),
            "bits": [_bits(a, e) for a, e in zip(got, want)]}


def low_precision(dtype: str, shape, eager, graph, seed: int, device, compiled: bool = True,
                  ceiling: dict | None = None) -> dict:
    """One dtype at one shape: forward under both protocols and forward + backward eager per call, for torch, the
    drop-in, torch.compile (static shapes, fullgraph) and, forward, a copy of x (the bytes' floor) and the float32
    drop-in at the same shape; the drop-in's bits and compile's bit-equal fraction against eager torch; where the
    chain serves, its schedule's floor (`ceiling`: a copy_ceiling_a record measured once for the run, else here)."""
    torch = _torch()
    from labkit import explain

    x, ns, w, b = _inputs(shape, dtype, None, seed, device, True)
    dy = torch.randn(shape, device=device, generator=torch.Generator(device=device).manual_seed(seed + 1)).to(x.dtype)
    xf, wf, bf = (v.detach().float() for v in (x, w, b))
    xd, wd, bd = (v.detach() for v in (x, w, b))
    y = torch.empty_like(xd)
    fwd = {"native": _forward(_f_layer_norm, xd, ns, wd, bd), "dropin": _forward(_dropin, xd, ns, wd, bd),
           "float32_dropin": _forward(_dropin, xf, ns, wf, bf), "copy": lambda: y.copy_(xd)}
    # under graph replay the drop-in is planned as a model under CUDA graphs gets it (the graph protocol's rule)
    graphed = {**fwd, "dropin": _graph_protocol(fwd["dropin"]),
               "float32_dropin": _graph_protocol(fwd["float32_dropin"])}
    train = {"native": _fwdbwd(_f_layer_norm, x, ns, w, b, dy), "dropin": _fwdbwd(_dropin, x, ns, w, b, dy)}
    planned = explain(x, ns, w, b)  # with grad: the backward a training step gets too
    out = {"dtype": dtype, "shape": list(shape), "key": shape_key(shape), "errors": {},
           "path": explain(xd, ns, wd, bd)["path"],
           "graph_path": _graph_protocol(lambda: explain(xd, ns, wd, bd))()["path"],  # the graph rule's pick
           "backward": planned["backward"]}
    want_f, want_t = fwd["native"](), train["native"]()
    out["bits_forward"] = _bits(fwd["dropin"](), want_f)
    out["bits_fwdbwd"] = [_bits(a, e) for a, e in zip(train["dropin"](), want_t)]
    if compiled:
        _try_add(fwd, "compile", lambda: _forward(_compiled(_f_layer_norm), xd, ns, wd, bd), out["errors"])
        _try_add(train, "compile", lambda: _fwdbwd(_compiled(_f_layer_norm), x, ns, w, b, dy), out["errors"])
        if "compile" in fwd:
            graphed["compile"] = fwd["compile"]
            out["compile_equal_fraction"] = _fraction_equal(fwd["compile"](), want_f)
    out["forward_eager"] = _time(fwd, eager, "native")
    out["forward_graph"] = _time(graphed, graph, "native")
    out["fwdbwd_eager"] = _time(train, eager, "native")
    if out["path"] == "chain":
        from labkit.studies.dropin_sweep import chain_floor_for, schedule_floor
        from labkit.studies.measure import copy_ceiling_a

        chain = chain_floor_for(math.prod(ns), eager.rounds, device)
        ceiling = ceiling or copy_ceiling_a(rounds=eager.rounds, device=device)
        out_bytes, floor_ms = schedule_floor(chain, ceiling, xd.numel(), xd.element_size())
        out["floor"] = {"chain_ms": chain["ms"], "output_bytes": out_bytes,
                        "ceiling_gbps": ceiling["read_plus_write_gbps"], "floor_ms": floor_ms}
    return out


def _low_precision_all(eager, graph, seed: int, device) -> list[dict]:
    """low_precision at each (dtype, shape) of the study, with the copy ceiling measured once for all of them."""
    from labkit.studies.measure import copy_ceiling_a

    ceiling = copy_ceiling_a(rounds=eager.rounds, device=device)
    return [low_precision(d, s, eager, graph, seed, device, ceiling=ceiling)
            for d, s in (("bfloat16", L1_40), ("bfloat16", WIDE), ("float16", L1_40))]


def _graph_protocol(fn):
    def call():
        from labkit import dispatch_protocol

        with dispatch_protocol("graph"):
            return fn()
    return call


def ordinary(shapes, eager, graph, seed: int, device) -> list[dict]:
    """bf16 forward at ordinary transformer shapes: graph replay beside torch.compile and Liger-Kernel
    (labkit.studies.methods' builds), eager per call beside torch; the drop-in's bits and path."""
    torch = _torch()
    from labkit import explain
    from labkit.studies import methods as registry

    rows = []
    for shape in shapes:
        x, ns, w, b = _inputs(shape, "bfloat16", None, seed, device, False)
        row = {"key": shape_key(shape), "shape": list(shape), "errors": {}, "path": explain(x, ns, w, b)["path"]}
        with torch.no_grad():
            fns = {"native": _forward(_f_layer_norm, x, ns, w, b),
                   "dropin": _graph_protocol(_forward(_dropin, x, ns, w, b))}
            for name in ("inductor", "liger"):
                built = registry.build(registry.get(name), x, w, b, 1e-5)
                if built["fn"] is None:
                    row["errors"][name] = built["error"]
                else:
                    fns[name] = built["fn"]
            row["identical"] = _bits(fns["dropin"](), fns["native"]())
            row["graph"] = _time(fns, graph, "native")
            row["eager"] = _time({"native": fns["native"], "dropin": _forward(_dropin, x, ns, w, b)}, eager, "native")
        rows.append(row)
    return rows


def compiled_vs_eager(shapes, eager, seed: int, device) -> list[dict]:
    """float32 forward + backward, eager per call: the eager drop-in, torch.compile of a function calling it (its
    registered ops, served from C++), default and reduce-overhead, and torch eager and compiled beside them."""
    torch = _torch()
    rows = []
    for shape in shapes:
        x, ns, w, b = _inputs(shape, "float32", None, seed, device, True)
        dy = torch.randn(shape, device=device, generator=torch.Generator(device=device).manual_seed(seed + 1))
        fns = {"native": _fwdbwd(_f_layer_norm, x, ns, w, b, dy), "dropin": _fwdbwd(_dropin, x, ns, w, b, dy)}
        row = {"key": shape_key(shape), "shape": list(shape), "errors": {}}
        _try_add(fns, "native_compiled", lambda: _fwdbwd(_compiled(_f_layer_norm), x, ns, w, b, dy), row["errors"])
        _try_add(fns, "dropin_compiled", lambda: _fwdbwd(_compiled(_dropin), x, ns, w, b, dy), row["errors"])
        _try_add(fns, "dropin_reduce_overhead",  # recorded after warm-up calls
                 lambda: _fwdbwd(_compiled(_dropin, mode="reduce-overhead"), x, ns, w, b, dy), row["errors"], 3)
        want = fns["dropin"]()
        for name in ("dropin_compiled", "dropin_reduce_overhead"):
            if name in fns:
                row[f"bits_{name.removeprefix('dropin_')}"] = all(_bits(a, e) for a, e in zip(fns[name](), want))
        row["eager"] = _time(fns, eager, "dropin")
        rows.append(row)
    return rows


def host_per_op(device) -> dict:
    """Host microseconds per direct call of the registered ops beside aten's own at a tiny shape (the GPU keeps up):
    forward (labkit::layer_norm against aten::native_layer_norm) and backward; and a compiled forward + backward of
    the drop-in beside torch.compile of F.layer_norm, in float32 and bf16; and a bf16 eager call beside torch's."""
    torch = _torch()
    import labkit  # noqa: F401  (registers labkit::layer_norm)
    from labkit.studies.measure import host_us_per_call

    sync = torch.cuda.synchronize
    out = {"shape": list(HOST_SHAPE), "calls": HOST_CALLS}
    x, ns, w, b = _inputs(HOST_SHAPE, "float32", None, 0, device, False)
    y, mean, rstd = torch.ops.aten.native_layer_norm(x, list(ns), w, b, 1e-5)
    dy = torch.ones_like(x)
    ops = {"labkit_forward": lambda: torch.ops.labkit.layer_norm(x, list(ns), w, b, 1e-5),
           "aten_forward": lambda: torch.ops.aten.native_layer_norm(x, list(ns), w, b, 1e-5),
           "labkit_backward": lambda: torch.ops.labkit.layer_norm_backward(dy, x, list(ns), mean, rstd, w, b,
                                                                             [True, True, True]),
           "aten_backward": lambda: torch.ops.aten.native_layer_norm_backward(dy, x, list(ns), mean, rstd, w, b,
                                                                              [True, True, True])}
    with torch.no_grad():
        for name, fn in ops.items():
            out[f"{name}_us"] = host_us_per_call(fn, HOST_CALLS, sync)
    for dtype in ("float32", "bfloat16"):
        xg, ns, wg, bg = _inputs(HOST_SHAPE, dtype, None, 0, device, True)
        dyg = torch.ones_like(xg)
        for name, fn in (("native_compiled", _f_layer_norm), ("dropin_compiled", _dropin)):
            out[f"{dtype}_{name}_fwdbwd_us"] = host_us_per_call(_fwdbwd(_compiled(fn), xg, ns, wg, bg, dyg), 300, sync,
                                                               warmups=20)
        xd, wd, bd = (v.detach() for v in (xg, wg, bg))
        for name, fn in (("native", _f_layer_norm), ("dropin", _dropin)):
            out[f"{dtype}_{name}_eager_forward_us"] = host_us_per_call(_forward(fn, xd, ns, wd, bd), HOST_CALLS, sync)
    from labkit import explain

    xt, ns, wt, bt = _inputs(TORCH_SERVED_SHAPE, "bfloat16", None, 0, device, False)
    out["torch_served"] = {"shape": list(TORCH_SERVED_SHAPE), "path": explain(xt, ns, wt, bt)["path"]}
    for name, fn in (("native", _f_layer_norm), ("dropin", _dropin)):
        out["torch_served"][f"{name}_us"] = host_us_per_call(_forward(fn, xt, ns, wt, bt), HOST_CALLS, sync)
    return out


def bits_counts(device, seed: int = 0) -> dict:
    """k/n of calls whose every output (y; and dx, dweight, dbias with grad) equals F.layer_norm's as integer
    views: bf16 and fp16 tensors, forward and forward + backward, and bf16/fp16 autocast over float32 parameters,
    at BITS_SHAPES x (weight and bias, weight only, neither)."""
    torch = _torch()
    counts = {}
    for label, dtype, pdtype, autocast in (("bfloat16", "bfloat16", None, None), ("float16", "float16", None, None),
                                           ("autocast_bfloat16", "bfloat16", "float32", "bfloat16"),
                                           ("autocast_float16", "float16", "float32", "float16")):
        fwd = train = n = 0
        for i, shape in enumerate(BITS_SHAPES):
            for affine in ("both", "weight", "none"):
                x, ns, w, b = _inputs(shape, dtype, pdtype, seed + i, device, True)
                w = w if affine != "none" else None
                b = b if affine == "both" else None
                ydt = torch.float32 if autocast else x.dtype
                dy = torch.randn(shape, device=device).to(ydt)
                leaves = tuple(v for v in (x, w, b) if v is not None)

                def step(fn):
                    with torch.autocast("cuda", dtype=getattr(torch, autocast or "bfloat16"), enabled=bool(autocast)):
                        y = fn(x, ns, w, b)
                    return (y, *torch.autograd.grad(y, leaves, dy))
                got, want = step(_dropin), step(_f_layer_norm)
                n += 1
                fwd += _bits(got[0], want[0])
                train += all(_bits(a, e) for a, e in zip(got, want))
        counts[label] = {"forward": f"{fwd}/{n}", "fwdbwd": f"{train}/{n}"}
    return counts


def model_steps(device, seed: int = 0) -> list[dict]:
    """The small transformer of labkit.studies.training_models trained with and without the swap, eager, under
    deterministic algorithms: cast to bf16 (`.to(torch.bfloat16)`), and in float32 under bf16 autocast; losses,
    every gradient of every step and the weights after the last, as integer views; step times of the same two models
    (paired_step_ms: CUDA events around each whole step, the two in interleaved rounds)."""
    import copy

    torch = _torch()
    from labkit import swap_layer_norms
    from labkit.studies.measure import deterministic_algorithms
    from labkit.studies.training_models import MODEL, make_transformer

    rows = []
    for setup in ("bf16 model", "bf16 autocast"):
        with deterministic_algorithms():
            ref = make_transformer(device, seed)
            if setup == "bf16 model":
                ref = ref.to(torch.bfloat16)
            ours = copy.deepcopy(ref)
            swap_layer_norms(ours)
            g = torch.Generator(device="cpu").manual_seed(seed + 1)
            tokens = torch.randint(0, MODEL["vocab"], (MODEL["batch"], MODEL["seq"]), generator=g).to(device)
            targets = torch.randint(0, MODEL["vocab"], (MODEL["batch"], MODEL["seq"]), generator=g).to(device)
            res = {name: _train(model, tokens, targets, setup == "bf16 autocast")
                   for name, model in (("native", ref), ("dropin", ours))}
            res = _timed(res, device)
        compiled = {}
        if setup == "bf16 model":  # compiled step times (Inductor's own LayerNorm has its bits: times only)
            try:
                compiled = paired_step_ms({name: _train(torch.compile(model), tokens, targets, False)[3]
                                           for name, model in (("native", ref), ("dropin", ours))}, device)
            except Exception as exc:
                compiled["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        rows.append({**_model_row(setup, res), "compiled_native_step_ms": compiled.get("native"),
                     "compiled_dropin_step_ms": compiled.get("dropin"), "compiled_error": compiled.get("error")})
    return rows


def _train(model, tokens, targets, autocast: bool, steps: int = 3, logits_of=lambda out: out):
    """`steps` Adam steps, their losses and every gradient kept, then the weights; returns them with a function
    that makes one more step (for timing: `paired_step_ms`). `logits_of` takes the model's output to its logits (an
    HF model returns an object)."""
    torch = _torch()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(keep: bool = False):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(tokens.device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = logits_of(model(tokens))
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                                     targets.reshape(-1))
        loss.backward()
        kept = (loss.detach().clone(), [p.grad.detach().clone() for p in model.parameters()]) if keep else None
        opt.step()
        return kept

    losses, grads = [], []
    for _ in range(steps):
        loss, g = step(keep=True)
        losses.append(loss)
        grads.append(g)
    weights = [p.detach().clone() for p in model.parameters()]
    return losses, grads, weights, step


# Model steps: each whole step between CUDA events (no flush: a step's own traffic dwarfs what L2 keeps), the two
# models in seeded random order every round (labkit.studies.bench.time_methods), so a slow phase of the host falls on
# both.
STEP_PROTOCOL = Protocol(name="model-steps", graph=False, warmups=2, rounds=12, repeats=1)


def paired_step_ms(steps: dict, device, protocol: Protocol = STEP_PROTOCOL) -> dict:
    """Median ms per training step of each of `steps` (name -> one-step function), timed together under `protocol`:
    CUDA events on a GPU, the wall clock elsewhere (a CPU run exercises the code; its times mean little)."""
    cuda = getattr(device, "type", str(device)).startswith("cuda")
    rec = time_methods(steps, protocol, timer=None if cuda else HostTimer())
    return {name: st["median_ms"] for name, st in rec.stats.items()}


GPT2 = {"n_layer": 2, "n_embd": 256, "n_head": 4, "vocab_size": 1024, "n_positions": 128, "batch": 8, "seq": 64}


def gpt2_steps(device, seed: int = 0, **cfg) -> list[dict]:
    """HF transformers' GPT-2 (a small random-initialised config, dropout off, eager attention: the SDPA kernels'
    backward has no deterministic form), trained with and without the swap under deterministic algorithms, in
    float32 under bf16 autocast and cast to bf16: losses, gradients, weights as integer views, and step times; one
    row saying so where transformers is not installed (the GPU image has no copy: scripts/gpu_wheels.sh fetches
    it)."""
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as exc:
        return [{"setup": "GPT-2 (HF transformers)", "error": f"not installed here ({exc})"}]
    import copy

    torch = _torch()
    from labkit import swap_layer_norms
    from labkit.studies.measure import deterministic_algorithms

    c = {**GPT2, **cfg}
    rows = []
    for setup in ("bf16 autocast", "bf16 model"):
        with deterministic_algorithms():
            torch.manual_seed(seed)
            config = GPT2Config(n_layer=c["n_layer"], n_embd=c["n_embd"], n_head=c["n_head"],
                                vocab_size=c["vocab_size"], n_positions=c["n_positions"], resid_pdrop=0.0,
                                embd_pdrop=0.0, attn_pdrop=0.0)
            config._attn_implementation = "eager"
            ref = GPT2LMHeadModel(config).to(device)
            if setup == "bf16 model":
                ref = ref.to(torch.bfloat16)
            ours = copy.deepcopy(ref)
            swapped = swap_layer_norms(ours)
            g = torch.Generator(device="cpu").manual_seed(seed + 1)
            tokens = torch.randint(0, c["vocab_size"], (c["batch"], c["seq"]), generator=g).to(device)
            targets = torch.randint(0, c["vocab_size"], (c["batch"], c["seq"]), generator=g).to(device)
            res = {name: _train(model, tokens, targets, setup == "bf16 autocast", logits_of=lambda o: o.logits)
                   for name, model in (("native", ref), ("dropin", ours))}
            res = _timed(res, device)
        rows.append(_model_row(f"GPT-2 {setup}", res, swapped))
    return rows


def _timed(res: dict, device) -> dict:
    """Each model's kept steps with its step function replaced by its median step time, the two timed together
    (paired_step_ms)."""
    ms = paired_step_ms({name: r[3] for name, r in res.items()}, device)
    return {name: (*r[:3], ms[name]) for name, r in res.items()}


def _model_row(setup: str, res: dict, swapped: int | None = None) -> dict:
    (rl, rg, rw, rt), (ol, og, ow, ot) = res["native"], res["dropin"]
    pairs = [(a, b) for ga, gb in zip(rg, og) for a, b in zip(ga, gb)]
    identical = all(map(_bits, rl, ol)) and all(_bits(a, b) for a, b in pairs) and all(map(_bits, rw, ow))
    return {"setup": setup, "swapped": swapped, "steps": len(rl),
            "losses_identical": f"{sum(map(_bits, rl, ol))}/{len(rl)}",
            "grads_identical": f"{sum(_bits(a, b) for a, b in pairs)}/{len(pairs)}",
            "weights_identical": f"{sum(map(_bits, rw, ow))}/{len(rw)}", "identical": identical,
            "native_step_ms": rt, "dropin_step_ms": ot}


def wide_bf16(device, seed: int = 0) -> dict:
    """The wide model of labkit.studies.training_models (a LayerNorm over (C, H, W) between two 1x1 convolutions)
    cast to bf16, with and without the swap: step times and the first step's gradients as integer views."""
    from labkit.studies.training_models import wide_model

    return {**wide_model(device, seed, dtype="bfloat16"), "dtype": "bfloat16"}


FUZZ_KINDS = ("normal", "offset", "huge", "tiny", "mixed", "constant", "nonfinite")
FUZZ_SETUPS = (("bfloat16", None), ("float16", None), ("bfloat16", "autocast"), ("float16", "autocast"))


def fuzz(n_cases: int = 2000, seed: int = 0, time_budget_s: float = 60.0, max_numel: int = 1 << 22,
         device="cuda") -> dict:
    """Random (rows, N) (N % 4 == 0 mostly, some ragged, which torch's other path serves), value classes, eps,
    affines and setups (bf16 or fp16 tensors; bf16 or fp16 x under autocast with float32 parameters): y and every
    gradient of labkit.layer_norm against F.layer_norm with autograd, integer views. The record's `fuzz` part: per
    case its draw, the path that served and the verdict."""
    import numpy as np

    torch = _torch()
    from labkit import explain

    rng = np.random.default_rng(seed)
    cases, t0 = [], time.perf_counter()
    while len(cases) < n_cases and time.perf_counter() - t0 < time_budget_s:
        n = 4 * int(np.exp(rng.uniform(0, np.log(max_numel // 4))))
        n += 2 * int(rng.random() < 0.05)  # ragged now and then
        rows = max(1, int(np.exp(rng.uniform(0, np.log(max(1, max_numel // n))))))
        kind = FUZZ_KINDS[int(rng.integers(len(FUZZ_KINDS)))]
        eps = float(rng.choice([1e-5, 0.0, 1e-2]))
        affine = str(rng.choice(["both", "weight", "none"]))
        dtype, setup = FUZZ_SETUPS[int(rng.integers(len(FUZZ_SETUPS)))]
        t = getattr(torch, dtype)
        g = torch.Generator(device=device).manual_seed(int(rng.integers(1 << 30)))
        x = torch.randn(rows, n, device=device, generator=g)
        if kind == "offset":
            x += 1000
        elif kind == "huge":
            x *= 1e4 if dtype == "float16" else 1e30
        elif kind == "tiny":
            x *= 1e-4 if dtype == "float16" else 1e-30
        elif kind == "mixed":
            x *= torch.exp((2 if dtype == "float16" else 8) * torch.randn(rows, n, device=device, generator=g))
        elif kind == "constant":
            x[:] = x[:, :1]
        elif kind == "nonfinite":
            x.view(-1)[:: 1 + int(rng.integers(50))] = float("inf")
        pt = torch.float32 if setup else t
        x = x.to(t).requires_grad_()
        w = torch.randn(n, device=device, generator=g).to(pt).requires_grad_() if affine != "none" else None
        b = torch.randn(n, device=device, generator=g).to(pt).requires_grad_() if affine == "both" else None
        dy = torch.randn(rows, n, device=device, generator=g).to(torch.float32 if setup else t)
        leaves = tuple(v for v in (x, w, b) if v is not None)

        def step(fn):
            with torch.autocast("cuda", dtype=t, enabled=bool(setup)):
                y = fn(x, (n,), w, b, eps)
            return (y, *torch.autograd.grad(y, leaves, dy))
        from labkit import layer_norm
        try:
            got, want = step(layer_norm), step(torch.nn.functional.layer_norm)
            ok = all(_bits(a, e) for a, e in zip(got, want))
        except Exception as exc:
            ok = f"{type(exc).__name__}: {str(exc)[:200]}"
        try:  # the tensors our kernels see: autocast's float32 casts of them under autocast
            seen = [None if v is None else (v.detach().float() if setup else v.detach()) for v in (x, w, b)]
            path = explain(seen[0], (n,), seen[1], seen[2], eps)["path"]
        except Exception as exc:
            path = f"explain failed: {type(exc).__name__}: {str(exc)[:200]}"
        cases.append({"shape": [rows, n], "dtype": dtype, "setup": setup or "tensors", "values": kind, "eps": eps,
                      "affine": affine, "path": path, "identical": ok})
        x = w = b = dy = None
    return {"cases": cases, "seconds": time.perf_counter() - t0, "seed": seed}


def fuzz_counts(rec: dict | None) -> dict:
    cases = ((rec or {}).get("fuzz") or {}).get("cases", [])
    ours = [c for c in cases if c["path"] != "native" and not c["path"].startswith("explain failed")]
    return {"cases": len(cases), "served_by_ours": len(ours), "shapes": len({tuple(c["shape"]) for c in cases}),
            "mismatches": sum(c["identical"] is not True for c in cases)}


def reach(mode: str = "quick", rounds: int = 15, seed: int = 0, device="cuda", log=None) -> dict:
    """Every measurement above in one run (one process, one GPU): the `training_reach` record. A part that raises
    is recorded with its error, never as a result."""
    from labkit.ops.dropin.aten import refuse_while_enabled

    refuse_while_enabled("the training reach study")
    torch = _torch()
    from labkit.studies.bench import PROTOCOL_A, PROTOCOL_B
    from labkit.studies.dropin_sweep import _raise_recompile_limit

    eager, graph = replace(PROTOCOL_B, rounds=rounds), replace(PROTOCOL_A, rounds=rounds)
    _raise_recompile_limit()
    out = {"mode": mode, "protocols": {"eager": eager.__dict__, "graph": graph.__dict__},
           "device": torch.cuda.get_device_name(), "errors": {}}
    parts = (
        ("autocast", lambda: autocast_l1_40(eager, seed, device)),
        ("low_precision", lambda: _low_precision_all(eager, graph, seed, device)),
        ("ordinary", lambda: ordinary(ORDINARY if mode == "full" else QUICK_ORDINARY, eager, graph, seed, device)),
        ("compiled", lambda: compiled_vs_eager(COMPILED_SHAPES, eager, seed, device)),
        ("host", lambda: host_per_op(device)),
        ("bits", lambda: bits_counts(device, seed)),
        ("models", lambda: model_steps(device, seed)),
        ("gpt2", lambda: gpt2_steps(device, seed)),
        ("wide_bf16", lambda: wide_bf16(device, seed)),
        ("fuzz", lambda: fuzz(2000 if mode == "full" else 300, seed, 90.0 if mode == "full" else 20.0,
                              device=device)),
    )
    for name, part in parts:
        t0 = time.perf_counter()
        try:
            out[name] = part()
        except Exception as exc:
            out["errors"][name] = f"{type(exc).__name__}: {str(exc)[:400]}"
        torch.cuda.empty_cache()
        if log:
            log(f"{name}: {time.perf_counter() - t0:.1f} s")
    return out


# --- reading the record --------------------------------------------------------------------------------------------

def _med(stats: dict | None, name: str) -> float | None:
    v = (stats or {}).get(name)
    return None if v is None else v["median_ms"]


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _lp(rec: dict | None, dtype: str, shape) -> dict:
    return next((r for r in (rec or {}).get("low_precision") or [] if r["dtype"] == dtype and
                 r["shape"] == list(shape)), {})


def _frac(s: str | None) -> tuple[int, int]:
    if not s:
        return 0, 0
    k, n = s.split("/")
    return int(k), int(n)


def bits_total(rec: dict | None) -> str | None:
    """Every bits count of the record as one k/n: the bits_counts cases (forward and forward + backward, each dtype
    and autocast), the timed cases' own checks, the compiled rows."""
    if not rec or "bits" not in rec:
        return None
    k = n = 0
    for c in rec["bits"].values():
        for key in ("forward", "fwdbwd"):
            a, b = _frac(c[key])
            k, n = k + a, n + b
    for r in rec.get("low_precision") or []:
        k, n = k + r["bits_forward"] + all(r["bits_fwdbwd"]), n + 2
    if "autocast" in rec:
        k, n = k + all(rec["autocast"]["bits"]), n + 1
    for r in rec.get("compiled") or []:
        for key in ("bits_compiled", "bits_reduce_overhead"):
            if key in r:
                k, n = k + r[key], n + 1
    for r in rec.get("ordinary") or []:
        k, n = k + r["identical"], n + 1
    fz = fuzz_counts(rec)
    k, n = k + fz["cases"] - fz["mismatches"], n + fz["cases"]
    return f"{k}/{n}"


def block(rec: dict | None) -> dict | None:
    """The `reach` block of `labkit summary RUN --json`, from the record alone."""
    if not rec:
        return None
    ac = (rec.get("autocast") or {}).get("eager")
    bl = _lp(rec, "bfloat16", L1_40)
    worst_peer, rows = None, rec.get("ordinary") or []
    for r in rows:
        v = _peer_ratio(r)
        if v is None:  # a peer not measured at a shape: the goal cannot be judged
            worst_peer = None
            break
        worst_peer = v if worst_peer is None else min(worst_peer, v)
    worst_compiled = (_worst_compiled(rec) or (None,))[0]
    models = _model_records(rec)
    return {"autocast_l1_40_fwdbwd_ms": _med(ac, "dropin"), "autocast_native_l1_40_fwdbwd_ms": _med(ac, "native"),
            "bf16_l1_40_fwd_ms": _med(bl.get("forward_eager"), "dropin"),
            "bf16_compile_l1_40_fwd_ms": _med(bl.get("forward_eager"), "compile"),
            "bf16_l1_40_fwdbwd_ms": _med(bl.get("fwdbwd_eager"), "dropin"),
            "bf16_ordinary_worst_vs_peer": worst_peer, "compiled_vs_eager_worst": worst_compiled,
            "bits_identical": bits_total(rec),
            "model_steps_identical": f"{sum(m['identical'] for m in models)}/{len(models)}" if models else None}


def _model_records(rec: dict | None) -> list[dict]:
    """Every model trained with and without the swap that ran: the small transformer's setups, then GPT-2's, each
    with its name under "model"."""
    out = [{**m, "model": f"transformer, {m['setup']}"} for m in (rec or {}).get("models") or []]
    out += [{**m, "model": m["setup"]} for m in (rec or {}).get("gpt2") or [] if "error" not in m]
    return out


def _peer_ratio(r: dict) -> float | None:
    """The faster of torch.compile and Liger over the drop-in (graph replay) at one ordinary shape; None unless
    both peers and the drop-in were timed there."""
    g = r.get("graph") or {}
    peers = [_med(g, p) for p in ("inductor", "liger")]
    if None in peers or not _med(g, "dropin"):
        return None
    return min(peers) / _med(g, "dropin")


def _fmt(v, f=".3f"):
    return "—" if v is None else format(v, f)


def table_rows(rec: dict | None) -> list[dict]:
    """One row per setup: the drop-in beside eager torch (for bf16/fp16 and autocast, also what the drop-in gave these
    calls before it served them: it handed them to torch) and torch.compile, milliseconds (median [quartiles]) with
    each ratio's protocol named."""
    if not rec:
        return []
    rows = []

    def add(setup, protocol, stats, ours="dropin", compiled="compile", floor=None):
        o, n, c = _med(stats, ours), _med(stats, "native"), _med(stats, compiled)
        q = (stats or {}).get(ours) or {}
        rows.append({"setup": setup, "protocol": protocol, "drop-in ms": o,
                     "[q25, q75]": [q.get("q25_ms"), q.get("q75_ms")] if q else None,
                     "torch eager ms": n, "x vs torch": _ratio(n, o),
                     "torch.compile ms": c, "x vs compile": _ratio(c, o),
                     "schedule floor ms": floor})
    ac = rec.get("autocast")
    if ac:
        add("bf16 autocast, fwd+bwd, L1/40", EAGER, ac["eager"])
    for r in rec.get("low_precision") or []:
        # runs before graph_path was recorded: both rules pick the chain at the shapes measured (checked against
        # the table)
        add(f"{r['dtype']} forward, {r['key']}", EAGER, r["forward_eager"], floor=_chain_floor(r, r["path"]))
        add(f"{r['dtype']} forward, {r['key']}", GRAPH, r["forward_graph"],
            floor=_chain_floor(r, r.get("graph_path", r["path"])))
        add(f"{r['dtype']} fwd+bwd, {r['key']} ({_backward_words(r)})", EAGER, r["fwdbwd_eager"])
    for r in rec.get("compiled") or []:
        add(f"float32 fwd+bwd compiled, {r['key']}", EAGER, r["eager"], "dropin_compiled",
            "native_compiled")
    return rows


def compiled_rows(rec: dict | None) -> list[dict]:
    """The compiled drop-in beside the eager one (float32 fwd+bwd, eager per call): the goal is <= 1.05x."""
    return [{"shape": r["key"], "eager drop-in ms": _med(r["eager"], "dropin"),
             "compiled ms": _med(r["eager"], "dropin_compiled"),
             "reduce-overhead ms": _med(r["eager"], "dropin_reduce_overhead"),
             "compiled / eager": _ratio(_med(r["eager"], "dropin_compiled"), _med(r["eager"], "dropin")),
             "torch.compile ms": _med(r["eager"], "native_compiled"),
             "bits (compiled = eager)": _bits_text(r.get("bits_compiled")),
             "bits (reduce-overhead = eager)": _bits_text(r.get("bits_reduce_overhead"))}
            for r in (rec or {}).get("compiled") or []]


def _bits_text(v) -> str:
    return "—" if v is None else ("identical" if v else "DIFFER")


HOST_CALL = "call (8 x 768 unless named)"  # host_rows' first column


def host_rows(rec: dict | None) -> list[dict]:
    h = (rec or {}).get("host")
    if not h:
        return []
    return [{HOST_CALL: "forward op, direct", "ours us": h["labkit_forward_us"],
             "torch's us": h["aten_forward_us"],
             "difference us": h["labkit_forward_us"] - h["aten_forward_us"]},
            {HOST_CALL: "backward op, direct", "ours us": h["labkit_backward_us"],
             "torch's us": h["aten_backward_us"],
             "difference us": h["labkit_backward_us"] - h["aten_backward_us"]},
            *({HOST_CALL: f"{d} compiled fwd+bwd", "ours us": h[f"{d}_dropin_compiled_fwdbwd_us"],
               "torch's us": h[f"{d}_native_compiled_fwdbwd_us"],
               "difference us": h[f"{d}_dropin_compiled_fwdbwd_us"] - h[f"{d}_native_compiled_fwdbwd_us"]}
              for d in ("float32", "bfloat16")),
            *({HOST_CALL: f"{d} eager forward", "ours us": h[f"{d}_dropin_eager_forward_us"],
               "torch's us": h[f"{d}_native_eager_forward_us"],
               "difference us": h[f"{d}_dropin_eager_forward_us"] - h[f"{d}_native_eager_forward_us"]}
              for d in ("float32", "bfloat16")),
            *({HOST_CALL: f"bf16 eager forward at {' x '.join(map(str, t['shape']))}, served by {t['path']}",
               "ours us": t["dropin_us"], "torch's us": t["native_us"],
               "difference us": t["dropin_us"] - t["native_us"]}
              for t in ([h["torch_served"]] if h.get("torch_served") else []))]


def ordinary_rows(rec: dict | None) -> list[dict]:
    out = []
    for r in (rec or {}).get("ordinary") or []:
        g, e = r["graph"], r["eager"]
        out.append({"bf16 shape": r["key"], "path": r["path"],
                    "drop-in us (graph)": _us(_med(g, "dropin")),
                    "torch.compile us": _us(_med(g, "inductor")),
                    "Liger us": _us(_med(g, "liger")),
                    "x vs faster peer (protocol A)": _peer_ratio(r),
                    "x vs torch (protocol B)": _ratio(_med(e, "native"), _med(e, "dropin")),
                    "bits": "identical" if r["identical"] else "DIFFER"})
    return out


def bits_rows(rec: dict | None) -> list[dict]:
    rows = [{"inputs": k.replace("_", " "), "forward identical": v["forward"], "fwd+bwd identical": v["fwdbwd"]}
            for k, v in ((rec or {}).get("bits") or {}).items()]
    fz = fuzz_counts(rec)
    if fz["cases"]:
        rows.append({"inputs": f"fuzz: {fz['cases']} random cases ({fz['served_by_ours']} served by our kernels), "
                               f"{fz['shapes']} shapes", "forward identical": "—",
                     "fwd+bwd identical": f"{fz['cases'] - fz['mismatches']}/{fz['cases']}"})
    for r in (rec or {}).get("low_precision") or []:
        if "compile_equal_fraction" in r:
            rows.append({"inputs": f"torch.compile {r['dtype']} {r['key']} (not ours)",
                         "forward identical": f"{r['compile_equal_fraction']:.1%} of elements",
                         "fwd+bwd identical": "—"})
    return rows


def model_rows(rec: dict | None) -> list[dict]:
    models = _model_records(rec)
    out = [{"model": m["model"], "losses": m["losses_identical"], "gradients": m["grads_identical"],
            "weights": m["weights_identical"], "native step ms": m["native_step_ms"],
            "drop-in step ms": m["dropin_step_ms"],
            "x vs native (per step)": _ratio(m["native_step_ms"], m["dropin_step_ms"])} for m in models]
    out += [{"model": m["setup"], "losses": m["error"]} for m in (rec or {}).get("gpt2") or [] if "error" in m]
    for m in models:
        if m.get("compiled_dropin_step_ms"):
            out.append({"model": f"{m['model']}, torch.compile", "losses": "—", "gradients": "—",
                        "weights": "—", "native step ms": m["compiled_native_step_ms"],
                        "drop-in step ms": m["compiled_dropin_step_ms"],
                        "x vs native (per step)": _ratio(m["compiled_native_step_ms"],
                                                              m["compiled_dropin_step_ms"])})
    w = (rec or {}).get("wide_bf16")
    if w:
        out.append({"model": "wide LayerNorm (C, H, W), bf16", "losses": "—",
                    "gradients": w["first_step_grads_identical"], "weights": "—",
                    "native step ms": w["native_step_ms"], "drop-in step ms": w["dropin_step_ms"],
                    "x vs native (per step)": _ratio(w["native_step_ms"], w["dropin_step_ms"])})
    return out


def figure(rec: dict | None, label: str = ""):
    """Speedup over eager torch of the drop-in and of torch.compile per setup (log scale), each bar's protocol in
    its label: where the drop-in stands against the compiler people train with."""
    rows = [r for r in table_rows(rec) if r["x vs torch"] is not None]
    if not rows:
        return None
    import matplotlib.pyplot as plt
    import numpy as np

    names = [f"{r['setup']} ({r['protocol']})" for r in rows]
    ours = [r["x vs torch"] for r in rows]
    comp_x = [np.nan if r["torch.compile ms"] is None else r["torch eager ms"] / r["torch.compile ms"] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(rows) + 1.2))
    y = np.arange(len(rows))
    ax.barh(y - 0.2, ours, 0.4, label="drop-in (torch's bits)")
    ax.barh(y + 0.2, comp_x, 0.4, label="torch.compile (its own bits)")
    ax.set_yticks(y, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("speedup over eager torch (x, log scale)")
    ax.set_title("Speedup over eager torch" + (f"\n{label}" if label else ""), fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def goals(rec: dict | None) -> list[dict]:
    """The goals for training as people train, read from the record: each with its value, its protocol and whether
    it is met ("—" where the record lacks a part of it)."""
    b = block(rec)
    if not b:
        return []
    bl = _lp(rec, "bfloat16", L1_40)
    wide = _lp(rec, "bfloat16", WIDE)
    ac = (rec.get("autocast") or {}).get("eager")
    models = _model_records(rec)
    out = []

    def goal(what, value, limit, at_least, protocol, bound=""):
        met = None if value is None else (value >= limit if at_least else value <= limit)
        out.append({"goal": what, "value": value, "limit": f"{'>=' if at_least else '<='} {limit}",
                    "protocol": protocol, "met": "—" if met is None else ("yes" if met else "no"),
                    "what bounds it": bound})
    goal("bf16 autocast fwd+bwd at L1/40, ms", b["autocast_l1_40_fwdbwd_ms"], 0.90, False, EAGER)
    goal("... x vs torch under autocast", _ratio(_med(ac, "native"), _med(ac, "dropin")), 15, True,
         EAGER)
    floor = _chain_floor(bl, bl.get("path"))
    native_fwd = _med(bl.get("forward_eager"), "native")
    goal("bf16 forward at L1/40, ms", b["bf16_l1_40_fwd_ms"], 0.24, False, EAGER,
         "" if floor is None else f"the chain schedule's floor on this GPU: {floor:.3f} ms")
    goal("... x vs torch", _ratio(native_fwd, b["bf16_l1_40_fwd_ms"]), 30, True, EAGER)
    goal("bf16 fwd+bwd at L1/40, ms", b["bf16_l1_40_fwdbwd_ms"], 0.60, False, EAGER)
    goal("bf16 at 4 x 4194304 / float32 drop-in there (forward)",
         _ratio(_med(wide.get("forward_graph"), "dropin"), _med(wide.get("forward_graph"), "float32_dropin")), 1.1,
         False, GRAPH)
    goal("bf16 ordinary shapes: worst x vs the faster of Liger and torch.compile", b["bf16_ordinary_worst_vs_peer"],
         0.95, True, GRAPH)
    natives = [_ratio(_med(r["eager"], "native"), _med(r["eager"], "dropin")) for r in rec.get("ordinary") or []]
    worst_native = None if None in natives else min(natives, default=None)
    goal("bf16 ordinary shapes: worst x vs torch", worst_native, 1.0, True, EAGER)
    goal("compiled drop-in fwd+bwd / eager drop-in (worst of 3 shapes)", b["compiled_vs_eager_worst"], 1.05, False,
         EAGER, _compiled_bound(rec))
    h = rec.get("host") or {}
    for d in ("forward", "backward"):  # the op called directly, beside aten's op called directly
        if f"labkit_{d}_us" in h:
            goal(f"host cost of the {d} op over aten's own op, us", h[f"labkit_{d}_us"] - h[f"aten_{d}_us"], 15,
                 False, "host wall per call, 8 x 768")
    for d in ("float32", "bfloat16"):  # a compiled fwd+bwd calls two ops: its excess over torch.compile's, per op
        if f"{d}_dropin_compiled_fwdbwd_us" in h:
            goal(f"{d} compiled fwd+bwd host cost over torch.compile's, us per op",
                 (h[f"{d}_dropin_compiled_fwdbwd_us"] - h[f"{d}_native_compiled_fwdbwd_us"]) / 2, 15, False,
                 "host wall per call, 8 x 768")
    t = h.get("torch_served")
    if t:  # the drop-in's cost where it hands a bf16 call to torch
        goal(f"bf16 call torch serves ({' x '.join(map(str, t['shape']))}): host over calling torch, us",
             t["dropin_us"] - t["native_us"], 2, False, "host wall per call")
    for m in models:
        goal(f"{m['model']}: step time x vs native", _ratio(m["native_step_ms"], m["dropin_step_ms"]),
             1.0, True, "CUDA events per step")
        if m.get("compiled_dropin_step_ms"):
            goal(f"{m['model']} compiled: step time x vs compiled native",
                 _ratio(m["compiled_native_step_ms"], m["compiled_dropin_step_ms"]), 1.0, True,
                 "CUDA events per step", "Inductor fuses the ops around its own LayerNorm; the drop-in's op is "
                 "opaque to it (for eager's bits)")
    fz = fuzz_counts(rec)
    if fz["cases"]:
        goal("fuzz cases (bf16, fp16, autocast; forward and gradients)", fz["cases"], 2000, True, "bits")
    return out


def _chain_floor(r: dict, path: str | None) -> float | None:
    """The chain schedule's floor recorded for low-precision record `r` (newer runs), where the chain served it
    (`path`: the path that protocol's rule picked); None elsewhere, since another path's time is not bounded by it."""
    return (r.get("floor") or {}).get("floor_ms") if path == "chain" else None


def _worst_compiled(rec: dict) -> tuple | None:
    """(compiled drop-in / eager drop-in, torch.compile of F.layer_norm / eager drop-in or None, shape key) at the
    compiled shape where the first is largest; None where no shape has it."""
    rows = []
    for r in rec.get("compiled") or []:
        e = r["eager"]
        v = _ratio(_med(e, "dropin_compiled"), _med(e, "dropin"))
        if v is not None:
            rows.append((v, _ratio(_med(e, "native_compiled"), _med(e, "dropin")), r["key"]))
    return max(rows, key=lambda t: t[0], default=None)


def _compiled_bound(rec: dict) -> str:
    """torch.compile's own runtime at the compiled goal's worst shape: torch.compile of F.layer_norm (Inductor's
    kernels, the same wrappers around them) over the eager drop-in. Where that exceeds the goal, the compiled graph's
    host time, not our op, decides it."""
    worst = _worst_compiled(rec)
    if worst is None or worst[1] is None:
        return ""
    return f"torch.compile of F.layer_norm at {worst[2].replace('x', ' x ')}: {worst[1]:.2f}x the eager drop-in"


def headline(rec: dict | None, source: str) -> list[str]:
    """The section's answer in three short lines, from the record: autocast, bf16, compiled; bits; goals."""
    if not rec:
        return [f"How people train: no record ({source})."]
    b = block(rec)
    ac = (rec.get("autocast") or {}).get("eager")
    bl = _lp(rec, "bfloat16", L1_40)
    fe = bl.get("forward_eager")
    lines = []
    if b["autocast_l1_40_fwdbwd_ms"] is not None:
        x = _fmt(_ratio(_med(ac, "native"), _med(ac, "dropin")), ".1f")
        lines.append(f"bf16 autocast, fwd+bwd at L1/40: {b['autocast_l1_40_fwdbwd_ms']:.3f} ms against torch's "
                     f"{b['autocast_native_l1_40_fwdbwd_ms']:.3f} ({x}x, {EAGER}).")
    if b["bf16_l1_40_fwd_ms"] is not None:
        ms = b["bf16_l1_40_fwd_ms"]
        floor = _chain_floor(bl, bl.get("path"))
        floor_words = "" if floor is None else f"; the chain schedule's floor there is {floor:.3f} ms"
        lines.append(f"bf16 forward at L1/40: {ms:.3f} ms, {_fmt(_ratio(_med(fe, 'native'), ms), '.1f')}x torch and "
                     f"{_fmt(_ratio(b['bf16_compile_l1_40_fwd_ms'], ms), '.2f')}x torch.compile ({EAGER}{floor_words});"
                     f" fwd+bwd {b['bf16_l1_40_fwdbwd_ms']:.3f} ms ({_backward_words(bl)}).")
    lines.append(f"Bits identical {_fmt(b['bits_identical'], '')}, model steps {_fmt(b['model_steps_identical'], '')}; "
                 f"{goal_count(rec)} ({rec.get('device')}).")
    return lines


def _backward_words(row: dict) -> str:
    """Whose backward a low-precision row's fwd+bwd ran: records before our kernels for T served it name none."""
    schedule = row.get("backward")
    if schedule in (None, "native"):
        return "torch's backward"
    return f"our backward, {schedule} schedule"


def plain_sentence(rec: dict | None) -> str | None:
    """How people train in one sentence for the page's short verdict: bf16 autocast and bf16 at L1/40, each with its
    protocol and baseline; None without a record or those parts."""
    b = block(rec)
    if not b or b["autocast_l1_40_fwdbwd_ms"] is None or b["bf16_l1_40_fwd_ms"] is None:
        return None
    ac = rec["autocast"]["eager"]
    fe = _lp(rec, "bfloat16", L1_40)["forward_eager"]
    return (f"Under bf16 autocast forward plus backward at L1/40 takes {b['autocast_l1_40_fwdbwd_ms']:.3f} ms, "
            f"{_ratio(_med(ac, 'native'), _med(ac, 'dropin')):.1f}x torch under autocast, and a bf16 forward "
            f"{b['bf16_l1_40_fwd_ms']:.3f} ms, {_ratio(_med(fe, 'native'), b['bf16_l1_40_fwd_ms']):.1f}x torch, "
            f"{EAGER}; bits {_fmt(b['bits_identical'], '')}.")


def verdict_lines(rec: dict | None, source: str) -> list[str]:
    """The section's verdict, generated from the record."""
    if not rec:
        return [f"How people train: no record ({source})."]
    b = block(rec)
    lines = [f"How people train ({source}, {rec.get('device')}): {goal_count(rec)}; bits identical "
             f"{_fmt(b['bits_identical'], '')}; model steps identical {_fmt(b['model_steps_identical'], '')}."]
    missed = [r for r in goals(rec) if r["met"] == "no"]
    if missed:
        lines.append("Not met: " + "; ".join(
            f"{r['goal']} {_fmt(r['value'], '.3g')} ({r['limit']}, {r['protocol']}"
            + (f"; bound: {r['what bounds it']}" if r["what bounds it"] else "") + ")" for r in missed) + ".")
    if rec.get("errors"):
        lines.append("Parts that did not run: " + "; ".join(f"{k}: {v}" for k, v in rec["errors"].items()) + ".")
    lines += row_errors(rec)
    return lines


def goal_count(rec: dict | None) -> str:
    """'k of m goals met' over the goals the record can judge, and how many it could not."""
    g = goals(rec)
    judged = [r for r in g if r["met"] != "—"]
    text = f"{sum(r['met'] == 'yes' for r in judged)} of {len(judged)} goals met"
    return text + (f" ({len(g) - len(judged)} not measured)" if len(judged) < len(g) else "")


def row_errors(rec: dict | None) -> list[str]:
    """Every method a part could not time at one shape (a peer that did not build, a compile that failed)."""
    out = []
    for part in ("low_precision", "ordinary", "compiled"):
        for r in (rec or {}).get(part) or []:
            for name, err in (r.get("errors") or {}).items():
                out.append(f"Not timed: {name} at {r.get('dtype', '')} {r['key']} ({part}): {err}.".replace("  ", " "))
    out += [f"Not trained: {m['setup']}: {m['error']}." for m in (rec or {}).get("gpt2") or [] if "error" in m]
    return out
