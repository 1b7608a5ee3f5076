"""The drop-in's bits against nn.LayerNorm (notebook 08): the identity cases eager and compiled
(`dropin_identity`), a transformer block with its LayerNorms swapped (`dropin_block`), inputs near float32's
largest value (`dropin_near_max`), and their rows. Apart because they check bits, not speed."""
from __future__ import annotations

from labkit.studies.dropin_sweep import _raise_recompile_limit


NEAR_MAX_SHAPE = (4, 768)
# The swapped block's sizes: the first of these whose LayerNorm input the GPU's dispatch sends to our kernels (a
# demo of torch's kernel serving would show nothing), the first where none does (a CPU, an unmeasured GPU).
BLOCKS = ({"d_model": 256, "heads": 4, "seq": 64, "batch": 4}, {"d_model": 1024, "heads": 16, "seq": 1024, "batch": 8},
          {"d_model": 4096, "heads": 32, "seq": 1024, "batch": 8})
BLOCK = BLOCKS[0]


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


def identity_rows(ident: dict | None) -> list[dict]:
    comp = {c["case"]: c for c in (ident or {}).get("compiled", [])}
    return [{**{k: c.get(k) for k in ("case", "shape", "dtype", "path", "forward", "backward")},
             "compiled": comp.get(c["case"], {}).get("identical"), "error": c.get("error", "")}
            for c in (ident or {}).get("cases", [])]


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


def trust_canary(device: str) -> dict | None:
    """The trust gate's check run now on this GPU (labkit.ops.trust.verify, again even where a verdict is kept):
    the key it checked and its verdict. A run that records it passing verifies that key for everyone
    (scripts/trust_table.py). None without a GPU."""
    import torch

    from labkit.ops import trust

    if device != "cuda":
        return None
    return trust.verify(torch.cuda.current_device(), again=True)


def trust_session(session, runs_root=None):
    """Where notebook 08's trust records come from: this session when it measures live, else the newer of its run
    (if it recorded them) and the newest committed "trust_gate" run (scripts/gpu/trust_gate.sh records the check
    and the gate's behaviour without the notebook's other measurements, at the commit whose key it verifies)."""
    from labkit.records.session import RunSession

    if session.live:
        return session
    own = session if session.replay and "trust_canary" in session.replay.get("records", {}) else None
    step = RunSession.replaying("trust_gate", runs_root=runs_root)
    step = step if step.replay else None
    return max((s for s in (own, step) if s), key=lambda s: s.run_id, default=session)


def trust_gate(device: str) -> dict | None:
    """The gate's behaviour on this GPU, each case from a clean slate (no verdict in the process, an empty verdict
    cache) at the chain shape (16 x 2^20): a verified key (this key listed in the table: no check runs), an
    unverified key (the canary runs at the first call: its cases and seconds), a failing check (torch's reference
    made one ulp off in y, as a release that moved its bits would be: torch's kernel serves and one warning names
    the mismatch), and a first call under CUDA graph capture (the check is postponed: torch's kernel is captured;
    after capture the check runs and ours serve). Keys other than this install's are made by suffixing its torch
    version, so nothing here is kept in the user's cache. None without a GPU."""
    if device != "cuda":
        return None
    import dataclasses
    import tempfile
    import time
    import warnings
    from unittest import mock

    import torch

    import labkit
    from labkit.core.environ import scoped_environ
    from labkit.ops import trust, trust_verified
    from labkit.ops.dropin import plan

    index = torch.cuda.current_device()
    x = torch.randn(16, 1 << 20, device="cuda")
    ns = (1 << 20,)
    real_key, real_ln = trust.key(index), torch.native_layer_norm

    def case(suffix: str, verified_rows=(), reference=real_ln, capture: bool = False) -> dict:
        k = dataclasses.replace(real_key, torch=real_key.torch + suffix)
        with tempfile.TemporaryDirectory() as tmp, scoped_environ(LABKIT_TRUST_DIR=tmp), \
                mock.patch.object(trust, "key", lambda i: k), \
                mock.patch.object(trust_verified, "VERIFIED", tuple(verified_rows)), \
                mock.patch.object(torch, "native_layer_norm", reference), warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            trust.forget()
            trust._warned.clear()
            plan.clear()
            start = time.perf_counter()
            if capture:
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
                    labkit.layer_norm(x, ns)
                graph.replay()
                torch.cuda.synchronize()
                under = {"checked_under_capture": trust.cached(k) is not None,
                         "captured": "torch's kernel" if trust.cached(k) is None else "ours"}
            else:
                under = {}
            explained = labkit.explain(x, ns)
            seconds = time.perf_counter() - start
            kept = trust.cached(k)
        trust.forget()
        plan.clear()
        return {"key_digest": k.digest(), **under, "path": explained["path"], "trust": explained["trust"],
                "seconds_to_first_plan": round(seconds, 3), "canary_cases": (kept or {}).get("cases"),
                "canary_seconds": (kept or {}).get("seconds"),
                "warnings": [str(w.message) for w in said if issubclass(w.category, RuntimeWarning)]}

    def planted(x, normalized_shape, weight, bias, eps):  # torch's y one ulp away, as a moved release would give it
        y, mean, rstd = real_ln(x, normalized_shape, weight, bias, eps)
        return y.view(torch.int32).add(1).view(torch.float32), mean, rstd

    listed = dataclasses.replace(real_key, torch=real_key.torch + "+listed")
    row = {**dataclasses.asdict(listed), "run": "this run (listed for the demonstration)"}
    return {"verified": case("+listed", verified_rows=(row,)), "unverified": case("+unverified"),
            "planted": case("+planted", reference=planted), "capture": case("+capture", capture=True)}


def trust_gate_rows(rec: dict | None) -> list[dict]:
    """One row per situation: what served at the chain shape, the trust source as explain says it, the check's
    cost, and what the user was told."""
    if not rec:
        return []
    what = {"verified": "a verified key", "unverified": "an unverified key (first call)",
            "planted": "a failing check (planted one-ulp change)", "capture": "first call under graph capture"}
    return [{"situation": what[name], "served": "ours (" + r["path"] + ")" if r["path"] != "native" else
             "torch's kernel", "under capture": r.get("captured", "—"), "trust source": r["trust"],
             "check": f"{r['canary_cases']} cases in {r['canary_seconds']:.2f} s" if r["canary_cases"] else "none",
             "first plan, s": r["seconds_to_first_plan"],
             "warned": "; ".join(w.removeprefix("labkit: our kernels do not serve on this install: ")[:120]
                                 for w in r["warnings"]) or "no"}
            for name, r in rec.items()]


def canary_rows(rec: dict | None, source: str = "") -> list[dict]:
    """The check as a table: the key (what decides our kernels' bits besides the input), the verdict and, given
    `source`, the run that recorded it."""
    if not rec:
        return []
    k = rec["key"]
    return [{**({"recorded in": source} if source else {}), "key": rec["key_digest"], "torch": k["torch"], "GPU": k["gpu"], "compiled for": k["target"],
             "NVRTC": k["nvrtc"], "aten's kernels are torch's": k["torch_kernels"], "cases": rec["cases"],
             "all bit-identical": rec["identical"], "first mismatch": rec["first_mismatch"] or rec["error"] or "none",
             "seconds": rec["seconds"]}]
