"""Models trained with nn.LayerNorm and with the drop-in swapped in (notebook 10): a small transformer's steps
bit for bit (`training_model`) and a model with a LayerNorm over (C, H, W) timed per step (`training_wide`), and
their rows. Apart because they exercise whole models, not one call."""
from __future__ import annotations


# --- a model trained with and without the swap --------------------------------------------------------------------

MODEL = {"vocab": 512, "d_model": 256, "heads": 4, "layers": 2, "batch": 8, "seq": 64, "steps": 3}


def _bits_equal(a, b) -> bool:
    import torch

    if a is None or b is None:
        return a is None and b is None
    view = {4: torch.int32, 2: torch.int16}[a.element_size()]
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.detach().contiguous().view(view),
                                                                     b.detach().contiguous().view(view))


def make_transformer(device="cuda", seed: int = 0, **cfg):
    """A small encoder-only transformer from torch's own modules (fp32, no dropout): embedding, TransformerEncoder
    layers (each with two nn.LayerNorms), a final nn.LayerNorm and a linear head."""
    import torch

    c = {**MODEL, **cfg}
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(c["d_model"], c["heads"], 4 * c["d_model"], dropout=0.0,
                                             batch_first=True)
    model = torch.nn.Sequential(torch.nn.Embedding(c["vocab"], c["d_model"]),
                                torch.nn.TransformerEncoder(layer, c["layers"], enable_nested_tensor=False),
                                torch.nn.LayerNorm(c["d_model"]), torch.nn.Linear(c["d_model"], c["vocab"]))
    with torch.no_grad():  # non-trivial affines, so a swap that ignored them would show
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.normal_(1.0, 0.2)
                m.bias.normal_(0.0, 0.2)
    return model.to(device)


def _train(model, tokens, targets, steps: int, lr: float = 1e-3):
    import torch

    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses, grads = [], []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        losses.append(loss.detach().clone())
        grads.append([p.grad.detach().clone() for p in model.parameters()])
        opt.step()
    return losses, grads, [p.detach().clone() for p in model.parameters()]


def model_steps(device="cuda", seed: int = 0, **cfg) -> dict:
    """MODEL['steps'] Adam steps of the transformer with nn.LayerNorm and with the drop-in swapped in (the same
    initial parameters and batch), under torch.use_deterministic_algorithms (without it torch's own model differs
    from itself: matmul and embedding backward reduce in a nondeterministic order): losses, every gradient of every
    step and the weights after the last, as int32 views. The `training_model` record."""
    import copy
    import torch

    from labkit import swap_layer_norms
    from labkit.ops.dropin import explain
    from labkit.studies.measure import deterministic_algorithms

    c = {**MODEL, **cfg}
    with deterministic_algorithms():
        ref = make_transformer(device, seed, **c)
        ours = copy.deepcopy(ref)
        swapped = swap_layer_norms(ours)
        g = torch.Generator(device="cpu").manual_seed(seed + 1)
        tokens = torch.randint(0, c["vocab"], (c["batch"], c["seq"]), generator=g).to(device)
        targets = torch.randint(0, c["vocab"], (c["batch"], c["seq"]), generator=g).to(device)
        r_loss, r_grads, r_w = _train(ref, tokens, targets, c["steps"])
        o_loss, o_grads, o_w = _train(ours, tokens, targets, c["steps"])
    ln = next(m for m in ours.modules() if type(m).__name__ == "LayerNorm")
    path = explain(torch.empty(c["batch"] * c["seq"], c["d_model"], device=device), (c["d_model"],), ln.weight,
                   ln.bias)
    grad_pairs = [(a, b) for ga, gb in zip(r_grads, o_grads) for a, b in zip(ga, gb)]
    return {**c, "swapped": swapped, "parameters": len(r_w), "ln_path": path["path"], "ln_reason": path["reason"],
            "losses": [float(v) for v in r_loss], "losses_identical": f"{sum(map(_bits_equal, r_loss, o_loss))}/"
                                                                      f"{len(r_loss)}",
            "grads_identical": f"{sum(_bits_equal(a, b) for a, b in grad_pairs)}/{len(grad_pairs)}",
            "weights_identical": f"{sum(map(_bits_equal, r_w, o_w))}/{len(r_w)}"}


WIDE_MODEL = {"channels": 64, "height": 256, "width": 256, "batch": 16, "steps": 5}


def wide_model(device="cuda", seed: int = 0, rounds: int = 10, dtype: str = "float32", **cfg) -> dict:
    """A model with a LayerNorm over (C, H, W), as at L1/40: a 1x1 convolution, LayerNorm((C, H, W)), GELU and a
    second 1x1 convolution, trained with SGD with nn.LayerNorm and with the drop-in: step times (CUDA events around
    each whole step, median of `rounds`) and the gradients of the first step as int32 views. The `training_wide`
    record. `dtype`: the model and its input cast to it (a bf16 model)."""
    import copy

    import torch

    from labkit import swap_layer_norms

    c = {**WIDE_MODEL, **cfg}
    torch.manual_seed(seed)
    shape = (c["channels"], c["height"], c["width"])
    ref = torch.nn.Sequential(torch.nn.Conv2d(c["channels"], c["channels"], 1), torch.nn.LayerNorm(shape),
                              torch.nn.GELU(), torch.nn.Conv2d(c["channels"], c["channels"], 1)).to(device)
    ref = ref.to(getattr(torch, dtype))
    ours = copy.deepcopy(ref)
    swap_layer_norms(ours)
    x = torch.randn(c["batch"], *shape, device=device,
                    generator=torch.Generator(device=device).manual_seed(seed)).to(getattr(torch, dtype))
    out = {**c}
    first = []
    for name, model in (("native", ref), ("dropin", ours)):
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        times = []
        for i in range(rounds + 2):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            opt.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            if i == 0:
                first.append([p.grad.detach().clone() for p in model.parameters()])
            opt.step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        out[f"{name}_step_ms"] = sorted(times[2:])[len(times[2:]) // 2]
    out["first_step_grads_identical"] = f"{sum(map(_bits_equal, *first))}/{len(first[0])}"
    return out


def model_rows(model: dict | None) -> list[dict]:
    """The small transformer's record as a reader reads it: the model, the path its LayerNorms took, and the bits
    (losses, gradients, weights after the last step) of the swapped model against the original."""
    if not model:
        return []
    return [{"model": f"{model['layers']} layers, d_model {model['d_model']}, {model['heads']} heads, vocab "
                      f"{model['vocab']}", "batch x seq": f"{model['batch']} x {model['seq']}", "steps": model["steps"],
             "LayerNorms swapped": model["swapped"], "their path": model["ln_path"],
             "losses identical": model["losses_identical"], "gradients identical": model["grads_identical"],
             "weights identical": model["weights_identical"]}]


def wide_rows(wide: dict | None) -> list[dict]:
    """The wide-LayerNorm model's record: its shape, step times (ms) and first-step gradient bits."""
    if not wide:
        return []
    return [{"LayerNorm over": f"({wide['channels']}, {wide['height']}, {wide['width']})", "batch": wide["batch"],
             "steps": wide["steps"], "torch step ms": wide["native_step_ms"],
             "drop-in step ms": wide["dropin_step_ms"],
             "x torch": wide["native_step_ms"] / wide["dropin_step_ms"] if wide.get("dropin_step_ms") else None,
             "first-step gradients identical": wide["first_step_grads_identical"]}]
