"""The environment study (notebook 00): which machine, which toolchain, which kernels, and a smoke test.

Run functions: `compile_records` (every kernel compiled with NVRTC now, the run's `compile` record) and `run_smoke`
(a few bit-identity cases of the reference-order kernel, the run's `bit_identity` record). Everything else turns a
run's provenance and records into rows or the verdict line.
"""
from __future__ import annotations

from labkit import tasks
from labkit.records.check import identical_count
from labkit.studies import bit_identity, identity

# What each provenance field is, for the reader of the table (fields not listed are shown without a note).
FIELD_NOTES = {
    "date_utc": "when the run started",
    "git_commit": "commit of this repository",
    "git_dirty": "uncommitted changes at run time",
    "git_source": "where the commit was read (git, or the LABKIT_GIT_COMMIT variable)",
    "python": "Python version",
    "platform": "OS family, architecture and C library (the kernel's build string is left out)",
    "numpy": "NumPy version",
    "torch": "torch version (its CUDA LayerNorm is the reference)",
    "torch_cuda": "CUDA version torch was built with",
    "cuda_available": "torch sees a CUDA device",
    "cupy": "CuPy version (launches the kernels)",
    "cupy_error": "why CuPy or NVRTC could not be loaded",
    "nvrtc": "NVRTC version that compiles the kernels",
    "gpu": "GPU name (none: CPU mode)",
    "gpu_capability": "compute capability",
    "gpu_sms": "streaming multiprocessors",
    "gpu_memory_bytes": "device memory",
    "gpu_l2_bytes": "L2 cache",
    "gpu_smem_optin_bytes": "shared memory one block may opt in to (the paths' launches check it)",
    "gpu_max_grid_y": "grid.y limit (the chain schedule puts rows there)",
    "driver": "NVIDIA driver",
    "cuda_runtime": "CUDA runtime version (CuPy)",
    "cuda_driver_api": "CUDA driver API version (CuPy)",
}
HASH_FIELD = "kernel_sources_sha256"  # shown in kernel_hash_rows, not in the provenance table
FILE_HASH = "sha256 of this file alone (run.json kernel_sources_sha256)"
SOURCE_HASH = "compile record source_sha256 (the .cu and every header it includes)"
SMOKE_CANDIDATE = "reference_order_layer_norm"


_MACHINES = ("x86_64", "aarch64", "arm64", "AMD64", "ppc64le", "s390x", "i686")


def os_family(platform_string: str) -> str:
    """platform.platform()'s line without the kernel release, which on a cloud VM is a build string of the host
    ("Linux-6.18.44-fc-v1147-gpu-x86_64-with-glibc2.39" -> "Linux, x86_64, glibc 2.39"). macOS and Windows keep
    their OS version (it is the OS's, not a kernel build's)."""
    head, _, libc = platform_string.partition("-with-")
    parts = head.split("-")
    system = parts[0]
    machine = next((p for p in parts[1:] if p in _MACHINES), None)
    if system in ("macOS", "Darwin", "Windows") and len(parts) > 1 and parts[1] not in _MACHINES:
        system = f"{system} {parts[1]}"
    out = [system] + ([machine] if machine else [])
    if libc:
        name = libc.rstrip("0123456789.")
        out.append(f"{name} {libc[len(name):]}".strip())
    return ", ".join(out)


def _value(key: str, v):
    if v is None:
        return "—"
    if key == "platform" and isinstance(v, str):
        return os_family(v)
    if isinstance(v, bool):
        return v  # the table shows it as a check mark
    if key.endswith("_bytes") and isinstance(v, int):
        return f"{v / 2**30:.1f} GiB ({v:,} bytes)" if v >= 2**30 else f"{v / 2**20:.0f} MiB ({v:,} bytes)"
    if key == "nvrtc" and isinstance(v, (list, tuple)):
        return ".".join(map(str, v))
    return str(v)


def provenance_rows(recorded: dict | None, here: dict | None = None) -> list[dict]:
    """One row per provenance field: what it is, its value in the run the records come from, and (when `here`
    is given) its value in this execution. Kernel source hashes are left to kernel_hash_rows."""
    recorded, here = recorded or {}, here
    keys = [k for k in dict.fromkeys([*recorded, *(here or {})]) if k != HASH_FIELD]
    rows = []
    for k in keys:
        row = {"field": k, "what": FIELD_NOTES.get(k, ""), "recorded run": _value(k, recorded.get(k))}
        if here is not None:
            row["this execution"] = _value(k, here.get(k))
        rows.append(row)
    return rows


def compile_target(device: str, arch: str) -> str:
    """The GPU's own architecture on CUDA; `arch` (e.g. sm_90, the H200's) when compiling without a GPU."""
    from labkit.core.compile import device_arch

    return device_arch() if device == "cuda" else arch


def compile_records(device: str, arch: str = "sm_90") -> list[dict]:
    """Compile every kernel in kernels/ that NVRTC builds for compile_target(device, arch) (below sm_90 the chain
    kernels do not, and no path offers them there: notebook 06 lists them); the `compile` record."""
    from labkit.core.compile import compile_buildable

    return [r.to_json() for r in compile_buildable(compile_target(device, arch))[0]]


def compile_rows(records: list[dict] | None, recorded: list[dict] | None = None) -> list[dict]:
    """One row per kernel: arch, NVRTC, options, short hashes; with `recorded` (the run's compile record),
    whether the cubin compiled now is byte-identical to the one the run used."""
    theirs = {r["kernel"]: r for r in (recorded or [])}
    rows = []
    for r in records or []:
        row = {"kernel": r["kernel"], "arch": r["arch"], "nvrtc": _value("nvrtc", r["nvrtc_version"]),
               "options": " ".join(r["options"]), "source_sha256": r["source_sha256"][:16],
               "cubin_sha256": r["cubin_sha256"][:16]}
        if recorded is not None:
            other = theirs.get(r["kernel"])
            row["same cubin as the recorded run"] = ("not in the run" if other is None
                                                     else "yes" if other["cubin_sha256"] == r["cubin_sha256"]
                                                     else "NO")
        rows.append(row)
    return rows


def kernel_hash_rows(provenance: dict | None, compile_record: list[dict] | None,
                     checkout: dict | None = None) -> list[dict]:
    """The two source hashes of every kernel file, side by side, with what each covers.

    run.json's kernel_sources_sha256 hashes each file in kernels/ alone; a compile record's source_sha256 covers
    a .cu and every header it includes (length-prefixed, in include order: the source part of the cubin cache
    key), so a header edit changes the source_sha256 of every kernel including it. `checkout`
    (labkit.records.run.kernel_source_hashes()) adds whether this checkout's file still has the recorded bytes."""
    files = dict((provenance or {}).get(HASH_FIELD) or {})
    compiled = {f"{r['kernel']}.cu": r for r in (compile_record or [])}
    included_by: dict[str, list[str]] = {}
    for name, r in compiled.items():
        for h in r.get("headers", []):
            included_by.setdefault(h, []).append(name)
    names = sorted(set(files) | set(compiled) | set(checkout or {}))
    rows = []
    for name in names:
        r = compiled.get(name)
        if r is not None:
            covers = " + ".join([name, *r.get("headers", [])])
        elif name in included_by:
            covers = f"header: inside the source_sha256 of {', '.join(included_by[name])}"
        else:
            covers = "no compile record"
        recorded = files.get(name)
        row = {"file": name, FILE_HASH: recorded[:16] if recorded else "—",
               SOURCE_HASH: r["source_sha256"][:16] if r else "—", "source_sha256 covers": covers}
        if checkout is not None:
            now = checkout.get(name)
            row["this checkout's file"] = ("absent" if now is None else "no recorded hash" if recorded is None
                                           else "same bytes" if now == recorded else "CHANGED since the run")
        rows.append(row)
    return rows


def run_smoke(mode: str, device: str, seed: int = 0, eps: float = 1e-5, candidate=None) -> dict:
    """The `bit_identity` record of the environment run: identity.smoke_cases at tasks.config(mode).smoke_shapes.
    On CUDA the candidate is the reference-order kernel; on a CPU (tests) torch itself, a format check only."""
    candidate = candidate or bit_identity.default_candidate(device)
    name = SMOKE_CANDIDATE if candidate is bit_identity.reference_candidate else getattr(
        candidate, "__name__", str(candidate))
    cases = identity.smoke_cases(candidate, tasks.config(mode).smoke_shapes, device, seed=seed, eps=eps)
    return {"cases": cases, "candidate": name}


def smoke_rows(record: dict | None) -> list[dict]:
    """One row per smoke case: bit-equal fractions of output, mean and rstd, and the verdict."""
    return [{"shape": tasks.shape_key(c["shape"]), "distribution": c["distribution"], "affine": c["affine"],
             "seed": c["seed"], "output bits equal": c["output"]["bit_equal_fraction"],
             "mean": c["mean"]["bit_equal_fraction"], "rstd": c["rstd"]["bit_equal_fraction"],
             "identical": "yes" if c["identical"] else "NO"} for c in (record or {}).get("cases", [])]


def verdict(record: dict | None, provenance: dict | None, source: str) -> str:
    """Identical smoke cases k/n, on which GPU with which torch, from which run (live or replayed)."""
    if not record or not record.get("cases"):
        return f"No smoke-test verdict: {source}."
    cases = record["cases"]
    ok, n = identical_count(cases)
    bad = [f"{tasks.shape_key(c['shape'])} {c['distribution']}" for c in cases if not c["identical"]]
    shapes = ", ".join(dict.fromkeys(tasks.shape_key(c["shape"]) for c in cases))
    prov = provenance or {}
    return (f"{ok}/{n} smoke cases bit-identical (output, mean, rstd as int32 views) for "
            f"{record.get('candidate')} at {shapes}, on {prov.get('gpu')} with torch {prov.get('torch')} — {source}."
            + (f" NOT identical: {'; '.join(bad)}." if bad else "")
            + " A pipeline check of a few shapes and two distributions, not the bit-identity matrix (notebook 01).")


# --- the run's summary and headline (labkit.studies.catalog dispatches here) -------------------------------------

RUN_NAME = "environment"
NOTEBOOK = "00_environment"


def summary(records: dict, prov: dict) -> dict:
    block = bit_identity.identity_block(records, prov)
    return {"bit_identity": block} if block else {}


def summary_lines(s: dict) -> list[str]:
    return bit_identity.summary_lines(s)


def page_headline(records: dict, s: dict) -> str:
    from labkit.records.text import on_gpu

    b = s["bit_identity"]
    return f"{b['identical']}/{b['cases']} smoke cases bit-identical {on_gpu(s)}"
