"""Check an installed labkit (a wheel, `pip install git+URL`) from outside the checkout: CI's install test (.ci/run).

    cd /tmp && /path/to/venv/bin/python /path/to/checkout/scripts/check_installed.py [--expect-digests JSON]

Each check prints one line; the first failure prints FAILED and exits 1.
  1. labkit comes from the installed package, and reads its kernel and host sources from inside it; with
     --expect-digests (what `--print-digests` printed in the checkout) their digests equal the checkout's.
  2. NVRTC compiles every kernel the package ships, through labkit.core.compile.compile_kernel, for sm_90, into an
     empty cubin cache (so every compile is real; the caches of this run are a temporary folder, removed at exit).
  3. The CPU emulator (labkit.exact.emulator) gives torch's H200 bits for a golden fixture. The fixtures live in
     data/, which no wheel ships; this one's input is drawn again by labkit.inputs (seeded, on the CPU, as when it
     was recorded) and checked against its digest, and the GPU's answer is held here as digests and four floats'
     bits (tests/test_check_installed.py holds them equal to data/fixtures/).
  4. labkit.layer_norm on CPU tensors equals torch.nn.functional.layer_norm bit for bit (on a CPU the drop-in hands
     the call to torch).
  5. labkit.warmup builds the host extension from the shipped host/ sources (into an empty extension folder) and
     finds every drop-in kernel in the cubin cache check 2 filled.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# data/fixtures/normal_plus_1000_2x1544_s0_random_normal.npz, recorded by torch 2.11.0+cu130 on an NVIDIA H200:
# 2 rows of 1,544 floats (uneven push chains), normal + 1000 (statistics far from zero), random affine.
GOLDEN = {
    "distribution": "normal_plus_1000", "shape": (2, 1544), "seed": 0, "affine": "random_normal", "eps": 1e-5,
    "x_sha256": "b04f684fba8407812f3a27ded1dcc23d112184733ad0973b7cb57fa5a694df3b",
    "gamma_sha256": "82f4ac4f7a91228fc0a53a17f02748019dbfdaf284201da5eaab5a7b2596cc4e",
    "beta_sha256": "73b2862e221c40c82232402a2f22fb7d2dd3849b3c78d717bae5f6b2d99283e4",
    "y_sha256": "4497f0da882d8fd9c42909158fdcb9c5f56fbe321c8a503748729ec718a7a921",
    "mean_bits": (1148846747, 1148845254),
    "rstd_bits": (1064897645, 1065572768),
}
RSQRT_ULPS = 2  # rsqrtf is MUFU.RSQ, an approximation: the CUDA programming guide bounds it at 2 ulp


class CheckFailed(Exception):
    pass


def require(ok: bool, what: str) -> None:
    if not ok:
        raise CheckFailed(what)


def bits_sha256(a) -> str:
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float32).view(np.int32).tobytes()).hexdigest()


def source_digests() -> dict:
    """Every digest labkit takes of its sources: they must not depend on where the sources were read from."""
    from labkit.core.compile import digest, sources_digest
    from labkit.ops.dropin import host
    from labkit.records.run import kernel_source_hashes

    return {"sources_digest": sources_digest(), "kernel_source_hashes": digest(json.dumps(kernel_source_hashes())),
            "host_source_hash": host.source_hash()}


def check_installed(expected: dict | None) -> str:
    import labkit
    from labkit.core import sources

    package = Path(labkit.__file__).resolve().parent
    require(sources.source_root() == sources.PACKAGED,
            f"labkit reads its sources from {sources.source_root()}, not from the installed package {package}")
    require(not (package.parent / "kernels").is_dir() and not (package.parent / ".git").exists(),
            f"labkit was imported from a checkout ({package}), not from an installed package")
    got = source_digests()
    require(expected is None or got == expected, f"source digests {got} differ from the checkout's {expected}")
    compared = "equal to the checkout's" if expected else "not compared (no --expect-digests)"
    return f"labkit {labkit.__version__} from {package}; sources from {sources.source_root()}; digests {compared}"


def check_compiles() -> str:
    from labkit.core.compile import compile_kernel
    from labkit.core.sources import kernel_dir

    root = kernel_dir()
    kernels = sorted(p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.cu"))
    require(len(kernels) > 0, f"no kernel sources under {root}")
    start = time.perf_counter()
    records = [compile_kernel(k, "sm_90").record for k in kernels]
    require(not any(r.cache_hit for r in records), "a compile hit the cache that was just made empty")
    return f"NVRTC compiled all {len(records)} kernels for sm_90 in {time.perf_counter() - start:.1f} s: " + \
        ", ".join(kernels)


def check_emulator() -> str:
    import numpy as np

    from labkit.exact.emulator import reference_output, reference_stats, ulp_distance
    from labkit.inputs import make_affine, make_input

    g = GOLDEN
    x = make_input(g["distribution"], g["shape"], g["seed"]).numpy()
    gamma, beta = (t.numpy() for t in make_affine(g["affine"], g["shape"][1:], g["seed"]))
    require(bits_sha256(x) == g["x_sha256"], "labkit.inputs no longer draws the fixture's input")
    require(bits_sha256(gamma) == g["gamma_sha256"] and bits_sha256(beta) == g["beta_sha256"],
            "labkit.inputs no longer draws the fixture's affine")
    stats = reference_stats(x, float(np.float32(g["eps"])))
    mean_bits = tuple(int(v) for v in np.asarray(stats["mean"], dtype=np.float32).view(np.int32))
    require(mean_bits == g["mean_bits"], f"emulated mean bits {mean_bits} differ from the H200's {g['mean_bits']}")
    rstd = np.array(g["rstd_bits"], dtype=np.int32).view(np.float32)
    require(int(ulp_distance(rstd, stats["rstd_cr"]).max()) <= RSQRT_ULPS,
            "the H200's rstd is more than 2 ulp from the correctly rounded one")
    y = reference_output(x, stats["mean"], rstd, gamma, beta)
    require(bits_sha256(y) == g["y_sha256"], "emulated output bits differ from the H200's")
    return (f"emulator: mean and output bits of {g['distribution']} {g['shape'][0]}x{g['shape'][1]} equal torch's "
            f"on the H200 (golden digests)")


def check_dropin() -> str:
    import torch
    import torch.nn.functional as F

    import labkit

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, 256, generator=gen) * 5 + 100
    w, b = torch.randn(256, generator=gen), torch.randn(256, generator=gen)
    got, want = labkit.layer_norm(x, (256,), w, b, 1e-5), F.layer_norm(x, (256,), w, b, 1e-5)
    require(got.shape == want.shape and torch.equal(got.view(torch.int32), want.view(torch.int32)),
            "labkit.layer_norm on CPU tensors differs from torch.nn.functional.layer_norm")
    return "drop-in: labkit.layer_norm on CPU tensors (8x3x256) equals torch.nn.functional.layer_norm bit for bit"


def check_warmup() -> str:
    import labkit

    done = labkit.warmup(arch="sm_90", progress=False)
    require(done.host == "built", f"the host extension was not built from the shipped sources: {done.host}")
    require(not done.compiled and not done.refused and done.cached,
            f"warmup after compiling every kernel should find them all cached: {done.to_json()}")
    return (f"warmup: host extension built from the shipped host/ in {done.host_seconds:.1f} s; "
            f"{len(done.cached)} drop-in kernels found in the cubin cache")


def run_checks(expected: dict | None) -> int:
    for check in (lambda: check_installed(expected), check_compiles, check_emulator, check_dropin, check_warmup):
        try:
            print(f"ok: {check()}", flush=True)
        except CheckFailed as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            return 1
    print("installed labkit: all checks passed")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print-digests", action="store_true", help="print the source digests as JSON and stop")
    parser.add_argument("--expect-digests", default=None, help="JSON that --print-digests printed in the checkout")
    args = parser.parse_args(argv)
    if args.print_digests:
        print(json.dumps(source_digests()))
        return 0
    expected = json.loads(args.expect_digests) if args.expect_digests else None
    with tempfile.TemporaryDirectory(prefix="labkit-check-") as caches:
        # empty caches, so that every compile and the extension's build are real, not what an earlier run left
        os.environ["LABKIT_CACHE_DIR"] = str(Path(caches) / "cubin")
        os.environ["TORCH_EXTENSIONS_DIR"] = str(Path(caches) / "torch_extensions")
        return run_checks(expected)


if __name__ == "__main__":
    sys.exit(main())
