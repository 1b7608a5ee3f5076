"""`labkit.warmup` / `labkit warmup`: what a first drop-in call would build, built ahead of time.

A first call on a GPU with cold caches builds the host extension (C++, tens of seconds) and compiles each kernel it
launches with NVRTC (seconds each): 48.5 s on an H200 with both caches empty, in the middle of whatever the user
was running. Warmup does the same work when the user chooses, behind a progress bar, fills the same caches (the
cubin cache, labkit.core.compile.cache_dir; torch's extension root, labkit.ops.dropin.host.build_directory) and
returns a `Warmup` record of what it did.

On a GPU it compiles, for the device's target, the kernels its dispatch table may pick (with `shapes`: those the
rule picks for those rows x N), and the backward's kernels where the table has measured the backward. Without a GPU,
or with `arch`, it compiles every kernel of the drop-in's paths and of the backward for `arch` (default sm_90): the
cubins a GPU of that arch looks up where it shares the cache folder. Each kernel is compiled with the options its
launches pass there (below sm_90, the backward's chain sums with a ring as deep as the arch's shared memory holds).
The host extension is built either way: the build needs only a C++ compiler and is the same with or without a GPU;
only its launches need one. `dtypes`: also the bfloat16/float16 builds (kernels/dtype.cuh) of those kernels that have
one (labkit.ops.dtypes.KERNELS) and the drop-in launches (the backward's for labkit.ops.backward.DROP_IN_DTYPES):
recorded as `kernel[dtype]`.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from labkit.core.compile import arch_number, compile_unless_refused
from labkit.core.device import ARCH_SMEM_OPTIN, Device, current_index, device_info
from labkit.ops import backward, chain, dtypes as element_types, paths
from labkit.ops.dispatch import rule, tables

DEFAULT_ARCH = "sm_90"  # without a GPU: the H100's and H200's target, where the dispatch tables were measured
HOST = "host extension"


@dataclass(frozen=True)
class Warmup:
    target: str                 # what NVRTC compiled for: sm_XY, or compute_XY (PTX) under the arch override
    device: str | None          # the GPU (labkit.core.device.Device.label); None for a compile-only warmup
    compiled: dict[str, float]  # kernel -> seconds NVRTC took, for the kernels compiled now
    cached: tuple[str, ...]     # kernels the cubin cache already held
    refused: dict[str, str]     # kernel -> NVRTC's reason, where the target lacks a feature the kernel uses
    host: str                   # the host extension: "built", "cached", or "unavailable: <why>"
    host_seconds: float
    seconds: float
    trust: str | None = None    # the trust gate's verdict on the GPU (labkit.ops.trust), its check paid here

    def to_json(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        """One sentence for a terminal."""
        kernels = (f"{len(self.compiled)} kernel(s) compiled for {self.target} "
                   f"({sum(self.compiled.values()):.1f} s), {len(self.cached)} already cached")
        if self.refused:
            kernels += f", {len(self.refused)} refused by the target ({', '.join(self.refused)})"
        host = (f"host extension {self.host} ({self.host_seconds:.1f} s)" if not self.host.startswith("unavailable")
                else f"host extension {self.host}")
        line = f"labkit warmup: {kernels}; {host}; {self.seconds:.1f} s in all"
        if self.device is None:
            return line + (" (compile only: nothing was loaded or launched; the caches serve a GPU of this arch that "
                           "shares them)")
        return f"{line}, for {self.device}; trust: {self.trust}"


def warmup(device=None, shapes=None, arch: str | None = None, progress: bool = True,
           dtypes=(element_types.FLOAT32,)) -> Warmup:
    """Build the host extension and compile the kernels a first call would, now. `device`: a CUDA device (index,
    "cuda:1", torch.device), "cpu", or None for the current GPU if torch sees one. `shapes`: (rows, N) pairs the
    model will call with (GPU only), narrowing the kernels to those the rule picks for them. `arch`: compile for this
    target (sm_XY or compute_XY) instead of a device's. `dtypes`: the element types the model's LayerNorms take
    (float32, bfloat16, float16; their builds, where a kernel has one). `progress`: a tqdm bar on stderr."""
    from tqdm import tqdm

    start = time.perf_counter()
    dtypes = _dtypes(dtypes)
    dev = _device(device, arch)
    if dev is None and shapes is not None:
        raise ValueError(f"shapes={shapes!r} needs a GPU: the rule that maps a shape to kernels is the GPU's "
                         "dispatch table; without one, warmup compiles every kernel for arch")
    target = dev.target if dev is not None else (arch or DEFAULT_ARCH)
    kernels = _device_kernels(dev, _shapes(shapes), dtypes) if dev is not None else _arch_kernels(target)
    builds = [(k, d) for d in dtypes for k in kernels if d == element_types.FLOAT32 or
              (k in element_types.KERNELS and (k not in backward.KERNELS or d in backward.DROP_IN_DTYPES))]
    with tqdm(total=1 + len(builds), desc="labkit warmup", unit="step", disable=not progress) as bar:
        bar.set_postfix_str(HOST)
        host, host_seconds = _host()
        bar.update()
        compiled, cached, refused = _compile(builds, target, bar, _options(dev, target))
        trusted = None
        if dev is not None:  # the gate's check, once per key, paid here rather than at the first call
            bar.set_postfix_str("trust")
            trusted = _trust(device)
    return Warmup(target, dev.label if dev is not None else None, compiled, cached, refused, host,
                  round(host_seconds, 2), round(time.perf_counter() - start, 2), trusted)


def _trust(device) -> str:
    """The trust gate's verdict on the warmed GPU (labkit.ops.trust.verdict: its check runs now where it must)."""
    import torch

    from labkit.ops import trust

    index = torch.cuda.current_device() if device is None else current_index(torch.device(device))
    return trust.verdict(index).source


def _device(device, arch: str | None) -> Device | None:
    """The GPU to warm up for, or None for a compile-only warmup (no GPU, "cpu", or an explicit arch)."""
    import torch

    if arch is not None:
        if device is not None:
            raise ValueError(f"pass arch (compile for a target) or device (warm up for a GPU), not both; got "
                             f"arch={arch!r}, device={device!r}")
        arch_number(arch)
        return None
    if device is None:
        return device_info(torch.cuda.current_device()) if torch.cuda.is_available() else None
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        d = None
    if d is not None and d.type == "cpu":
        return None
    if d is None or d.type != "cuda":
        raise ValueError(f"device must be a CUDA device or 'cpu', got {device!r}")
    if not torch.cuda.is_available():
        raise ValueError(f"device={device!r}, but torch {torch.__version__} sees no CUDA device")
    return device_info(current_index(d))


def _dtypes(dtypes) -> tuple[str, ...]:
    """`dtypes` as element-type names (float32 first if given); ValueError naming one that is not taken."""
    names = (dtypes,) if isinstance(dtypes, str) else tuple(dtypes)
    if not names:
        raise ValueError("dtypes must name at least one element type, got none")
    for d in names:
        element_types.options(d)  # ValueError naming it
    return tuple(dict.fromkeys(names))


def _shapes(shapes) -> tuple[tuple[int, int], ...] | None:
    """`shapes` as (rows, N) pairs of positive ints; ValueError naming the first that is not one."""
    if shapes is None:
        return None
    out = []
    for s in shapes:
        pair = tuple(s) if isinstance(s, (tuple, list)) else ()
        if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair):
            raise ValueError(f"each shape must be (rows, N) with positive ints, got {s!r}")
        out.append(pair)
    return tuple(out)


def _arch_kernels(target: str) -> tuple[str, ...]:
    """Every kernel of the drop-in's forward paths and of the backward that is built for `target`'s arch."""
    arch = arch_number(target)
    grad = backward.KERNELS if arch >= backward.MIN_ARCH else ()
    return tuple(dict.fromkeys(paths.candidate_kernels(arch) + grad))


def _device_kernels(dev: Device, shapes: tuple[tuple[int, int], ...] | None,
                    dtypes=(element_types.FLOAT32,)) -> tuple[str, ...]:
    """The kernels the rule may launch on `dev`: for any shape, or for `shapes` in any of `dtypes` (the paths built
    for a dtype differ). The backward's schedules share their column pass, so where the backward is ours for any
    shape all its kernels are compiled."""
    if shapes is None:
        table, _ = tables.for_device(dev.arch, dev.sm_count, dev.name, dev.target)
        grad = backward.KERNELS if getattr(table, "BACKWARD", None) else ()
        return tuple(dict.fromkeys(rule.pickable_kernels(dev.arch, dev.sm_count) + grad))
    from labkit.ops.dropin.plan import current_protocol

    protocol = current_protocol()  # what the calls will be planned by (LABKIT_PROTOCOL, or a dispatch_protocol)
    forward, grad = (), ()
    for (rows, n), dtype in ((shape, d) for d in dtypes for shape in shapes):
        path, _ = rule.choose(rows, n, dev, tuple(paths.candidates(rows, n, dev, dtype)), protocol)
        forward += paths.kernels(path, dev.arch)
        if dtype in backward.DROP_IN_DTYPES:
            schedule, _ = rule.choose_backward(rows, n, dev, tuple(backward.candidates(rows, n, dev, dtype)),
                                               protocol)
            grad = backward.KERNELS if schedule != paths.NATIVE else grad
    return tuple(dict.fromkeys(forward + grad))


def _options(dev: Device | None, target: str) -> dict[str, tuple[str, ...]]:
    """{kernel: compile options} as the launches pass them on `dev` or, compile-only, on a GPU of `target`'s arch
    with that arch's opt-in shared memory (labkit.core.device.ARCH_SMEM_OPTIN); kernels not named take none."""
    if dev is None:
        arch = arch_number(target)
        if arch not in ARCH_SMEM_OPTIN:
            return {}
        dev = Device(target, arch, 1, ARCH_SMEM_OPTIN[arch], 65535)
    return {"grad_chain_sums": backward.chain_options(dev), "chain_stats_tma": chain.stats_options(dev)}


def _host() -> tuple[str, float]:
    from labkit.ops.dropin import host

    start = time.perf_counter()
    why = host.unavailable()
    seconds = time.perf_counter() - start
    if why is not None:
        return f"unavailable: {why}", seconds
    return ("built" if host.built_in() is not None else "cached"), seconds


def _compile(builds, target: str, bar,
             options: dict[str, tuple[str, ...]]) -> tuple[dict[str, float], tuple[str, ...], dict[str, str]]:
    """Compile each (kernel, dtype) build with the kernel's own options, then the dtype's, as the launches pass them
    (the cache keys the options in order); a float32 build is named by its kernel, another as kernel[dtype]."""
    compiled, cached, refused = {}, [], {}
    for k, d in builds:
        name = k if d == element_types.FLOAT32 else f"{k}[{d}]"
        bar.set_postfix_str(name)
        start = time.perf_counter()
        record, why = compile_unless_refused(k, target, options.get(k, ()) + element_types.options(d))
        if record is None:
            refused[name] = why
        elif record.cache_hit:
            cached.append(name)
        else:
            compiled[name] = round(time.perf_counter() - start, 2)
        bar.update()
    return compiled, tuple(cached), refused
