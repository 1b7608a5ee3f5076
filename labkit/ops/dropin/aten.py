"""labkit.enable(): our kernels as torch's own CUDA LayerNorm, for every F.layer_norm and nn.LayerNorm in the
process, with no model change.

The host extension registers two kernels for aten::native_layer_norm and aten::native_layer_norm_backward at the
CUDA dispatch key, in front of torch's (host/layer_norm.cpp, "labkit.enable()"). Everything above that key stays
torch's: F.layer_norm's argument checks, autocast's float32 cast, torch's autograd node and its double backward,
forward-mode AD, vmap's batching rule. Each of our kernels serves a signature the drop-in's plans give to our
kernels (the same plans, programs and bits as labkit.layer_norm) and calls torch's own kernel for everything else.
torch.compile does not see them: Inductor decomposes native_layer_norm into its own code before any kernel runs
(labkit.layer_norm's registered op is the compiled path). `disable()` gives torch's kernels back.

The planners (labkit.ops.dropin.plan.host_forward_plan, host_backward_plan) run in C++'s miss path, with the GIL
taken there; what they return is kept per signature where
it was planned in the default context and not under graph capture. Calls it serves are planned by LABKIT_PROTOCOL
(default eager): the measurement contexts (`dispatch_protocol`, `forced_backward`, `host.off`) do not reach a
signature it has kept, and its backward plans in autograd's thread, where no dispatch_protocol is set. A first
call under CUDA graph capture is torch's (programs are prepared outside capture), as for labkit.layer_norm.
Measurements of torch's kernel (labkit tune) refuse to run while it is on.
"""
from __future__ import annotations

import contextlib
import warnings

from labkit.ops.dropin import host
from labkit.ops.dropin import plan as plans

_KEYS = ("CUDA", "CPU")  # CPU: the mechanism tested without a GPU, where torch's kernel serves every plan


def enable(key: str = "CUDA") -> None:
    """Serve torch's own aten::native_layer_norm(_backward) on `key`'s tensors with the drop-in's plans.
    RuntimeError where the host extension does not serve (it says why) or this is on already."""
    if key not in _KEYS:
        raise ValueError(f"key must be one of {_KEYS}, got {key!r}")
    m = host.module()
    if m is None:
        raise RuntimeError(f"labkit.enable() needs the host extension, which {host.unavailable()}")
    if m.aten_enabled():
        raise RuntimeError("labkit.enable() is on already (labkit.disable() turns it off)")
    if key == "CUDA":
        _settle_trust()
    with warnings.catch_warnings():
        # the dispatcher warns that a registered kernel is overridden: that is what enable asks for
        warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
        m.enable_aten(plans.host_forward_plan, plans.host_backward_plan, key)


def _settle_trust() -> None:
    """The trust gate's verdict for every visible GPU, decided before our kernels stand in front of torch's: its
    check compares against torch's own kernels, which it could not reach once they are replaced (it would be
    postponed, and torch's kernels would serve every call until then)."""
    import torch

    from labkit.ops import trust

    if torch.cuda.is_available() and not torch.cuda.is_current_stream_capturing():
        for index in range(torch.cuda.device_count()):
            trust.verdict(index)


def disable() -> None:
    """Give torch's own kernels back (a no-op where labkit.enable() is off)."""
    m = host.loaded()
    if m is not None:
        m.disable_aten()


def is_enabled() -> bool:
    """Whether labkit.enable() is on (never builds the host extension to answer)."""
    m = host.loaded()
    return m is not None and m.aten_enabled()


def refuse_while_enabled(what: str) -> None:
    """RuntimeError where labkit.enable() is on: `what` would time our kernels as torch's."""
    if is_enabled():
        raise RuntimeError(f"{what} times torch's own kernel, which labkit.enable() replaces: labkit.disable() first")


@contextlib.contextmanager
def enabled(key: str = "CUDA"):
    """`with labkit.enabled():` enable() for the block, and disable() after it."""
    enable(key)
    try:
        yield
    finally:
        disable()
