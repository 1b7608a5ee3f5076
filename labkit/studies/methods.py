"""The LayerNorm methods the timing study checks and times, in one registry.

A method is a builder `(x, weight, bias, eps) -> zero-arg callable returning y`, plus metadata: its name, its
family, and whether it keeps torch's reference arithmetic order (`reference_order`). Every builder normalizes over
`weight.shape` (the trailing dims of x). Building may raise (a missing package, a deprecated or failing compiler)
and so may the first call (a kernel's size limit): the study turns either into a row with the error, never a crash.

Every method is listed here (BUILTIN); `register` adds one from a test or an experiment without editing this file.

No `from __future__ import annotations` here: TorchScript compiles the pointwise helpers below from their source.
"""
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

from labkit.lab.scripted import deprecations, script
from labkit.lab.split_stats import scripted_pointwise

import torch  # module-level: TorchScript resolves `torch` in the pointwise helpers below from this module's globals

FAMILIES = ("native", "reference-order", "split-stats", "library-affine", "compiler", "triton-peer", "chain")


@dataclass(frozen=True)
class Method:
    name: str
    family: str
    reference_order: bool  # keeps torch's statistics order and output expression (bit identity is the goal)
    build: Callable = field(repr=False, compare=False)  # (x, weight, bias, eps) -> () -> y
    description: str = ""
    requires: tuple = ()  # importable modules it needs beyond torch (recorded with their versions)

    def to_json(self) -> dict:
        return {"name": self.name, "family": self.family, "reference_order": self.reference_order,
                "description": self.description, "requires": list(self.requires)}


_REGISTRY: dict = {}


def register(method: Method, replace: bool = False) -> Method:
    """Add `method` to the registry (order of registration is the table order). Registering the same
    metadata and builder again is a no-op; another method under a taken name needs replace=True."""
    if not isinstance(method, Method):
        raise TypeError(f"register needs a labkit.studies.methods.Method, got {type(method).__name__}")
    if method.family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {method.family!r}")
    old = _REGISTRY.get(method.name)
    if old is not None and not replace and (old != method or old.build is not method.build):
        raise ValueError(f"a method named {method.name!r} is registered already (pass replace=True to replace it)")
    _REGISTRY[method.name] = method
    return method


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def registered() -> list:
    """Every registered method, in registration order."""
    return list(_REGISTRY.values())


def get(name: str) -> Method:
    if name not in _REGISTRY:
        raise KeyError(f"no method {name!r}; registered: {list(_REGISTRY)}")
    return _REGISTRY[name]


def package_versions(dists) -> dict:
    """Installed versions of the distributions `dists` (None where missing)."""
    from importlib import metadata

    out = {}
    for dist in dists:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


# --- builders ---------------------------------------------------------------------------------------------------

def _rows_n(x, weight):
    n = weight.numel()
    return x.numel() // n, n


def _native(x, weight, bias, eps):
    shape = tuple(weight.shape)
    return lambda: torch.nn.functional.layer_norm(x, shape, weight, bias, eps)


def _layer_norm_module(x, weight, bias, eps):
    """An nn.LayerNorm holding copies of weight and bias, without autograd state."""
    module = torch.nn.LayerNorm(tuple(weight.shape), eps=eps, elementwise_affine=True, device=x.device)
    with torch.no_grad():
        module.weight.copy_(weight)
        module.bias.copy_(bias)
    return module.requires_grad_(False).eval()


class BuildNotes:
    """Builders may attach notes (e.g. deprecation warnings, compile seconds) to the callable they return."""

    @staticmethod
    def attach(fn, **notes):
        fn.labkit_notes = {**getattr(fn, "labkit_notes", {}), **notes}
        return fn


def _native_torchscript(x, weight, bias, eps):
    module = _layer_norm_module(x, weight, bias, eps)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            scripted, how = torch.jit.script(module), "torch.jit.script"
        except Exception as script_exc:
            try:
                scripted, how = torch.jit.trace(module, (x,)), "torch.jit.trace"
            except Exception as trace_exc:
                raise RuntimeError(f"torch.jit.script failed ({type(script_exc).__name__}: {script_exc}); "
                                   f"torch.jit.trace failed ({type(trace_exc).__name__}: {trace_exc})") from trace_exc
    fn = lambda: scripted(x)  # noqa: E731
    return BuildNotes.attach(fn, compiled_with=how, deprecation=deprecations(caught))


def _frozen_trace(module, x):
    """The post's TorchScript route for `module`: torch.jit.freeze(torch.jit.trace(module, x)), warnings recorded
    as build notes (the installed torch deprecates TorchScript), not printed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frozen = torch.jit.freeze(torch.jit.trace(module.requires_grad_(False).eval(), (x,)))
    fn = lambda: frozen(x)  # noqa: E731
    return BuildNotes.attach(fn, compiled_with="torch.jit.freeze(torch.jit.trace(...))",
                             deprecation=deprecations(caught))


class _AffineModule(torch.nn.Module):
    """A module holding copies of weight and bias as buffers and eps, for the post's traced routes below."""

    def __init__(self, weight, bias, eps):
        super().__init__()
        self.register_buffer("weight", weight.detach().clone())
        self.register_buffer("bias", bias.detach().clone())
        self.eps = float(eps)


class _SplitModule(_AffineModule):
    """torch.var_mean statistics and the split pointwise expression (labkit.lab.split_stats) as a module, for the
    post's traced split route."""

    def forward(self, x):
        from labkit.lab.split_stats import row_var_mean, split_pointwise

        n = self.weight.numel()
        rows = x.numel() // n
        var, mean = row_var_mean(x, rows, n)
        return split_pointwise(x.reshape(rows, n), var, mean, self.weight.reshape(n), self.bias.reshape(n),
                               self.eps).reshape(x.shape)


class _NoAffineModule(_AffineModule):
    """LayerNorm without affine, then y * weight + bias, as a module, for the post's traced no-affine route."""

    def forward(self, x):
        return torch.nn.functional.layer_norm(x, tuple(self.weight.shape), None, None, self.eps) * self.weight + \
            self.bias


def _native_traced(x, weight, bias, eps):
    """The post's TorchScript baseline: a frozen trace of an nn.LayerNorm holding the same weight and bias
    (`native_torchscript` is torch.jit.script's)."""
    return _frozen_trace(_layer_norm_module(x, weight, bias, eps), x)


def _split_traced(x, weight, bias, eps):
    return _frozen_trace(_SplitModule(weight, bias, eps), x)


def _noaffine_traced(x, weight, bias, eps):
    return _frozen_trace(_NoAffineModule(weight, bias, eps), x)


def _reference_order(x, weight, bias, eps):
    from labkit.ops.reference_order import reference_order_layer_norm

    return lambda: reference_order_layer_norm(x, weight, bias, eps)


def _chain(x, weight, bias, eps):
    from labkit.core.device import device_info
    from labkit.ops.chain import MIN_ARCH, chain_layer_norm

    dev = device_info(x.get_device()) if x.is_cuda else None
    if dev is not None and dev.arch < MIN_ARCH:  # its automatic schedule would serve rows_fused under this name
        raise ValueError(f"the chain kernels need sm_{MIN_ARCH} (bulk copies, mbarrier transactions); this GPU is "
                         f"{dev.label}")
    return lambda: chain_layer_norm(x, weight, bias, eps)


def _split(geometry):
    def build(x, weight, bias, eps):
        from labkit.lab.split_stats import split_stats_layer_norm

        return lambda: split_stats_layer_norm(x, weight, bias, eps, geometry=geometry)
    return build


def _split_torchscript(x, weight, bias, eps):
    compiled = scripted_pointwise()
    fn = _split("torchscript")(x, weight, bias, eps)
    return BuildNotes.attach(fn, compiled_with="torch.jit.script", deprecation=list(compiled.warnings))


# TorchScript body of the no-affine baseline's affine step (scripted from this file's source).
def _affine(y, weight, bias):
    return y * weight + bias


def _noaffine_eager(x, weight, bias, eps):
    shape = tuple(weight.shape)
    return lambda: torch.nn.functional.layer_norm(x, shape, None, None, eps) * weight + bias


def _noaffine_torchscript(x, weight, bias, eps):
    shape = tuple(weight.shape)
    compiled = script(_affine)
    if not compiled.available:
        raise RuntimeError(f"TorchScript unavailable on torch {torch.__version__}: {compiled.error}")
    affine, notes = compiled.fn, list(compiled.warnings)
    fn = lambda: affine(torch.nn.functional.layer_norm(x, shape, None, None, eps), weight, bias)  # noqa: E731
    return BuildNotes.attach(fn, compiled_with="torch.jit.script", deprecation=notes)


def _inductor(x, weight, bias, eps):
    """torch.compile (Inductor, mode="default") of an nn.LayerNorm holding the same weight and bias. Shapes are
    static (dynamic=False): each shape gets its own specialized kernels, as a fixed-shape benchmark would. The
    compile happens on the study's first call, which is outside every timed region."""
    from labkit.studies.measure import compile_static

    # a fresh compile per case: no recompile limit reached, no silent fallback to eager
    compiled, = compile_static(_layer_norm_module(x, weight, bias, eps), mode="default")
    return BuildNotes.attach(lambda: compiled(x), compiled_with="torch.compile(mode='default', dynamic=False)")


def _liger(x, weight, bias, eps):
    """Liger-Kernel's Triton LayerNorm forward (liger_kernel.ops.layer_norm: the default Triton implementation,
    no backend dispatch) on the (rows, N) view of x. One program per row holds the whole row in one block, so
    N is limited to 65536 by the library (it raises above that)."""
    from liger_kernel.ops.layer_norm import layer_norm_forward

    rows, n = _rows_n(x, weight)
    x2, w1, b1, shape = x.reshape(rows, n), weight.reshape(n), bias.reshape(n), x.shape
    return lambda: layer_norm_forward(x2, w1, b1, eps)[0].view(shape)


BUILTIN = (
    Method("native", "native", True, _native,
           "torch.nn.functional.layer_norm (torch's CUDA LayerNorm): the reference and the timing baseline"),
    Method("native_torchscript", "native", True, _native_torchscript,
           "torch.jit.script (trace as fallback) of an nn.LayerNorm module with the same weight and bias"),
    Method("native_torchscript_traced", "native", True, _native_traced,
           "the post's TorchScript route: torch.jit.freeze(torch.jit.trace(...)) of the same nn.LayerNorm"),
    Method("reference_order", "reference-order", True, _reference_order,
           "kernels/reference_stats.cu + kernels/affine_rows.cu: torch's order, output over many blocks"),
    Method("split_eager", "split-stats", False, _split("eager"),
           "torch.var_mean statistics + eager pointwise ((x - mean) * rsqrt(var + eps)) * w + b"),
    Method("split_torchscript", "split-stats", False, _split_torchscript,
           "torch.var_mean statistics + the same pointwise expression compiled with torch.jit.script"),
    Method("split_traced", "split-stats", False, _split_traced,
           "the post's compiled split route: the same statistics and expression in a frozen torch.jit.trace"),
    Method("split_flat", "split-stats", False, _split("flat"),
           "torch.var_mean statistics + kernels/split_affine.cu, flat geometry (tiles of one row together)"),
    Method("split_interleaved", "split-stats", False, _split("interleaved"),
           "torch.var_mean statistics + kernels/split_affine.cu, row-interleaved geometry"),
    Method("post_split_interleaved", "split-stats", False, _split("post_interleaved"),
           "the post's own prototype: torch.var_mean + kernels/post_affine.cu (a scalar per thread, 256-element "
           "tiles, compiled --fmad=false as the post compiled it), row-interleaved"),
    Method("noaffine_eager_affine", "library-affine", False, _noaffine_eager,
           "native LayerNorm without affine, then eager y * w + b (the post's strong library-only alternative)"),
    Method("noaffine_torchscript_affine", "library-affine", False, _noaffine_torchscript,
           "native LayerNorm without affine, then y * w + b compiled with torch.jit.script"),
    Method("noaffine_traced_affine", "library-affine", False, _noaffine_traced,
           "the post's route for it: native LayerNorm without affine, then y * w + b, in a frozen torch.jit.trace"),
    Method("inductor", "compiler", False, _inductor,
           "torch.compile (Inductor, mode='default', static shapes) of an nn.LayerNorm with the same weight and bias"),
    Method("liger", "triton-peer", False, _liger,
           "Liger-Kernel 0.8.5 Triton LayerNorm forward (pinned; one program per row)",
           requires=("liger-kernel", "triton")),
    Method("chain", "chain", True, _chain,
           "chain-parallel reference order (schedule chosen from the shape)"),
)

for _m in BUILTIN:
    register(_m)
del _m


def build(method: Method, x, weight, bias, eps: float) -> dict:
    """Build `method` and call it once (this is where compilers compile and size limits raise), synchronized.
    Returns {"fn", "output", "error", "build_s", "notes"}; fn and output are None when it failed."""
    t0 = time.perf_counter()
    fn = out = error = None
    notes = {}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn = method.build(x, weight, bias, eps)
            notes = dict(getattr(fn, "labkit_notes", {}))
            with torch.no_grad():
                out = fn()
            if x.is_cuda:
                torch.cuda.synchronize()
        # The method's own deprecation (TorchScript) is in notes["deprecation"]; anything else raised while
        # building (e.g. by a compiler's internals) is kept apart so it is not mistaken for the method's.
        others = [w for w in deprecations(caught) if w not in notes.get("deprecation", [])]
        if others:
            notes["build_warnings"] = others
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(x.shape):
            raise RuntimeError(f"returned {type(out).__name__}"
                               f"{tuple(out.shape) if isinstance(out, torch.Tensor) else ''}, expected a tensor "
                               f"of shape {tuple(x.shape)}")
    except Exception as exc:
        fn = out = None
        error = f"{type(exc).__name__}: {str(exc).strip()[:600]}"
    notes["versions"] = package_versions(method.requires)
    return {"fn": fn, "output": out, "error": error, "build_s": time.perf_counter() - t0, "notes": notes}
