"""The trust gate: whether this install may serve our kernels as torch's bits.

Our kernels give torch's eager bits on the torch, GPU and compiler they were checked with; a torch release that
reorders its kernel's arithmetic, another GPU's code, another NVRTC or an edited kernel can change that. The trust
key names what decides the bits: torch's version and git version, its CUDA version, the GPU (name, arch, SM count),
NVRTC's version, the digest of the drop-in's kernel sources, and whether aten::native_layer_norm(_backward)'s CUDA
kernels are torch's own on this install (another library may register its own in front of them).

A key serves our kernels where it is in the verified table (labkit.ops.trust_verified, generated from committed
runs that recorded the canary passing, each row the key that run's canary recorded and citing the run), or where the
canary (labkit.ops.dropin.canary: every forward path and backward schedule this GPU can run, against torch's kernels,
bit for bit) passed on this machine; its verdict is kept on disk per key, atomically, so it runs once per key (a
check that raised, out of memory say, is kept for the process only). A failed or impossible check serves torch's
kernels and warns once, naming the first mismatch. The key's `code` digest covers the drop-in's kernel sources, the
NVRTC options and the Python modules that decide launches (paths, schedules, geometry), so an edit to any of them
is a new key. LABKIT_TRUST chooses the policy:

    check (default)  verified keys, else the canary at the first plan of a device (outside graph capture)
    strict           verified keys only
    off              no gate (the measurements of candidate paths against each other use forced plans, which
                     never consult it)

`labkit.explain` names the trust source; `labkit verify` runs the canary ahead of time. The check runs on the
calling thread's stream; a CUDA graph being captured on another thread in torch's global capture mode would see its
allocations and synchronize (run `labkit verify` or `labkit warmup` before capturing on several threads).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import threading
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from labkit.core.atomic import atomic_write_json
from labkit.core.compile import kernel_dir, kernel_sources
from labkit.core.log import first_use

log = logging.getLogger(__name__)

MODES = ("check", "strict", "off")
# torch rewrote its dgamma/dbeta backward in 2.8 (pytorch#150773): before it, our backward's dweight/dbias order is
# not torch's, and the contract (notebook 05) describes 2.8's templates onwards.
BACKWARD_MIN_TORCH = (2, 8)

_lock = threading.Lock()
_verdicts: dict[int, "Verdict"] = {}
_keys: dict[int, "Key"] = {}
_warned: set[str] = set()


def mode() -> str:
    m = os.environ.get("LABKIT_TRUST", "check")
    if m not in MODES:
        raise ValueError(f"LABKIT_TRUST must be one of {MODES}, got {m!r}")
    return m


@dataclass(frozen=True)
class Key:
    torch: str
    torch_git: str | None
    torch_cuda: str | None
    gpu: str | None
    target: str | None         # what NVRTC compiles for: sm_90 (cubins), or compute_80 (PTX, the arch override)
    sms: int | None
    nvrtc: str | None
    code: str                  # code_digest()
    torch_kernels: bool        # aten::native_layer_norm(_backward)'s CUDA kernels are torch's own

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]

    def matches(self, row: dict) -> bool:
        """A verified row matches where every field of the key equals ours."""
        return all(row.get(k) == v for k, v in asdict(self).items())


# The Python modules whose code decides what our kernels compute: which path and schedule, their launch geometry
# and summation groups (labkit.ops.backward.gamma_beta_template, partial groups), the launches' arguments.
# dtypes.py names each build's -D flags; dropin/autocast.py decides what the autocast builds serve and their fallback.
_LAUNCH_MODULES = ("backward.py", "chain.py", "dtypes.py", "eligibility.py", "epilogue.py", "launches.py",
                   "paths.py", "reference_order.py", "rows_cluster.py", "rows_fused.py", "rows_staged.py",
                   "dropin/autocast.py")


def dropin_kernel_files() -> list[str]:
    """The kernel sources (.cu and the headers they include) every forward path and backward schedule launch."""
    from labkit.ops import backward, paths

    names = {k for m in paths.PATHS.values() for k in m.KERNELS} | set(backward.KERNELS)
    files = set()
    for k in names:
        files.add(f"{k}.cu")
        files.update(kernel_sources(k)[1])
    return sorted(files)


def code_digest() -> str:
    """One digest of what decides our kernels' bits besides torch and the GPU: the drop-in's kernel files, the NVRTC
    options every compile uses, and the launch-deciding modules of labkit.ops."""
    from labkit.core.compile import BASE_OPTIONS

    root, ops = kernel_dir(), Path(__file__).resolve().parent
    parts = [f"nvrtc options: {' '.join(BASE_OPTIONS)}"]
    parts += [f"{name}:{hashlib.sha256((root / name).read_bytes()).hexdigest()}" for name in dropin_kernel_files()]
    parts += [f"labkit/ops/{name}:{hashlib.sha256((ops / name).read_bytes()).hexdigest()}"
              for name in _LAUNCH_MODULES]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


_OWN = re.compile(r"/aten/src/ATen/|/build/aten/src/ATen/")


def torch_kernels_are_torchs() -> bool:
    """Whether the CUDA kernels registered for aten::native_layer_norm and its backward come from torch's own
    sources (labkit.enable()'s registration, which calls torch's kernels where ours do not serve, counts as
    torch's: named by its file, host/layer_norm.cpp, wherever the extension was built)."""
    import torch

    for op in ("aten::native_layer_norm", "aten::native_layer_norm_backward"):
        try:
            dump = torch._C._dispatch_dump(op)
        except RuntimeError:
            return False
        line = next((ln for ln in dump.splitlines() if ln.startswith("CUDA:")), None)
        if line is None:
            continue  # a CPU build: no CUDA kernel at all, nothing of ours serves
        where = line.split("registered at ", 1)[-1].split(" :: ")[0].rsplit(":", 1)[0]
        ours = Path(where).name == "layer_norm.cpp" and Path(where).parent.name == "host"
        if not (_OWN.search(where) or ours):
            return False
    return True


def key(index: int) -> Key:
    """This install's trust key on CUDA device `index` (read once per process and device, but for whether aten's
    kernels are torch's own, which labkit.enable() and other libraries change while a process runs)."""
    k = _keys.get(index)
    if k is None:
        import torch

        from labkit.core.compile import nvrtc_version
        from labkit.core.device import device_info

        dev = device_info(index)
        k = _keys[index] = Key(
            torch=torch.__version__, torch_git=getattr(torch.version, "git_version", None),
            torch_cuda=torch.version.cuda, gpu=dev.name, target=dev.target, sms=dev.sm_count,
            nvrtc=".".join(map(str, nvrtc_version())), code=code_digest(), torch_kernels=True)
    return dataclasses.replace(k, torch_kernels=torch_kernels_are_torchs())


def verified(k: Key) -> dict | None:
    """The verified table's row for `k`, or None."""
    from labkit.ops.trust_verified import VERIFIED

    return next((row for row in VERIFIED if k.matches(row)), None)


def cache_dir() -> Path:
    """Where verdicts are kept: $LABKIT_TRUST_DIR, else a `trust` folder in labkit's cache."""
    if os.environ.get("LABKIT_TRUST_DIR"):
        return Path(os.environ["LABKIT_TRUST_DIR"])
    root = os.environ.get("LABKIT_CACHE_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "labkit") / "trust"


def cached(k: Key) -> dict | None:
    try:
        rec = json.loads((cache_dir() / f"{k.digest()}.json").read_text())
    except (OSError, ValueError):
        return None
    return rec if rec.get("key") == asdict(k) else None


def remember(k: Key, result: dict) -> None:
    """Keep a verdict on disk for `k`; a folder that cannot be written keeps it for this process only (said once)."""
    try:
        atomic_write_json(cache_dir() / f"{k.digest()}.json", {"key": asdict(k), **result})
    except OSError as exc:
        if "cache" not in _warned:
            _warned.add("cache")
            log.warning("labkit: the trust verdict could not be kept in %s (%s): it is kept for this process only",
                        cache_dir(), exc)


@dataclass(frozen=True)
class Verdict:
    allowed: bool    # our kernels may serve
    source: str      # why, as labkit.explain says it
    final: bool = True  # False: asked again at the next plan (the check could not run yet)


def backward_refusal() -> str | None:
    """Why our backward may not serve on this torch at all (its templates predate the contract), or None."""
    import torch

    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    if m and (int(m.group(1)), int(m.group(2))) < BACKWARD_MIN_TORCH:
        return (f"torch {torch.__version__} predates the dgamma/dbeta backward our backward follows (torch "
                f"{BACKWARD_MIN_TORCH[0]}.{BACKWARD_MIN_TORCH[1]}, pytorch#150773): its backward serves")
    return None


def verdict(index: int) -> Verdict:
    """Whether our kernels may serve on CUDA device `index` (read once per process and device where final)."""
    v = _verdicts.get(index)
    if v is not None:
        return v
    with _lock:
        v = _verdicts.get(index)
        if v is None:
            v = _decide(index)
            if v.final:
                _verdicts[index] = v
    if not v.allowed and v.final:
        _warn_once(v.source)
    return v


def _decide(index: int) -> Verdict:
    m = mode()
    if m == "off":
        return Verdict(True, "not checked (LABKIT_TRUST=off)")
    k = key(index)
    row = verified(k)
    if row is not None:
        return Verdict(True, f"verified by committed run {row['run']}")
    if m == "strict":
        return Verdict(False, f"not a verified key, and LABKIT_TRUST=strict (key {k.digest()}: torch {k.torch}, "
                              f"{k.gpu}); torch's kernels serve")
    rec = cached(k)
    if rec is not None:
        return _from_canary(rec, f"the canary on this machine ({rec.get('date_utc', 'date unknown')})")
    why_not = _cannot_run_canary(index)
    if why_not is not None:
        if why_not not in _warned:  # said once: torch's kernels serve meanwhile, which the user did not ask for
            _warned.add(why_not)
            first_use(log, "the check of this install (key %s) is postponed: %s; torch's kernels serve until it runs",
                      k.digest(), why_not)
        return Verdict(False, f"unverified key {k.digest()}; {why_not}: torch's kernels serve until it runs", False)
    from labkit.ops.dropin import canary

    first_use(log, "checking our kernels against torch's on this install (key %s: torch %s, %s; once per key)",
              k.digest(), k.torch, k.gpu)
    rec = canary.run(index)
    first_use(log, "the check %s: %d cases in %.1f s", "passed" if rec["identical"] else "FAILED", rec["cases"],
              rec["seconds"])
    if rec.get("error") is None:  # a check that raised (out of memory, say) is this process's answer, not the key's
        remember(k, rec)
    return _from_canary(rec, "the canary at first use")


def _from_canary(rec: dict, where: str) -> Verdict:
    if rec.get("identical"):
        return Verdict(True, f"{where} passed: {rec['cases']} cases identical")
    first = rec.get("first_mismatch") or rec.get("error") or "unknown"
    return Verdict(False, f"{where} failed ({first}); torch's kernels serve")


def _cannot_run_canary(index: int) -> str | None:
    import torch

    from labkit.ops.dropin import aten

    if torch.cuda.is_current_stream_capturing():
        return "the check runs outside CUDA graph capture"
    if aten.is_enabled():
        return "the check compares against torch's own kernels, which labkit.enable() replaces (labkit verify first)"
    return None


def _warn_once(source: str) -> None:
    if source not in _warned:
        _warned.add(source)
        warnings.warn(f"labkit: our kernels do not serve on this install: {source}", RuntimeWarning, stacklevel=3)


def verify(index: int = 0, again: bool = False) -> dict:
    """Run the canary on CUDA device `index` now (unless its verdict is cached and not `again`), keep its verdict
    for this key, and return it with the key and the trust source."""
    from labkit.ops.dropin import canary

    k = key(index)
    rec = None if again else cached(k)
    if rec is None:
        why_not = _cannot_run_canary(index)
        if why_not is not None:
            raise RuntimeError(f"labkit verify cannot run here: {why_not}")
        rec = canary.run(index)
        if rec.get("error") is None:
            remember(k, rec)
    with _lock:
        _verdicts.pop(index, None)
    from labkit.ops.dropin import plan

    plan.clear()  # plans made under the previous verdict
    return {"key": asdict(k), "key_digest": k.digest(), "verified_row": verified(k), **rec}


def forget() -> None:
    """Drop this process's verdicts and keys (tests; a new LABKIT_TRUST)."""
    with _lock:
        _verdicts.clear()
        _keys.clear()
