"""Golden fixtures: small inputs with torch's own GPU bits, so CPU tests and CPU-mode notebooks see real GPU data.

Record on a GPU (once per torch/GPU; commit the files):

    python -c "from labkit.records.fixtures import record_fixtures; record_fixtures('data/fixtures')"

Each fixture is one compressed npz (format read by tests/test_emulator.py):

    x      float32 (rows, N)   the input, drawn on the CPU by labkit.inputs (seeded), then copied to the GPU
    y      float32 (rows, N)   torch.native_layer_norm output on the GPU
    mean   float32 (rows,)     torch's saved mean
    rstd   float32 (rows,)     torch's saved rstd
    gamma, beta float32 (N,)   the affine
    eps    float32 0-d
    shape, seed, distribution, affine, torch_version, gpu, source   0-d strings (provenance)
    fast_mean, fast_var, fast_rstd float32 (rows,)   torch.var_mean on the GPU and rsqrt(var + eps): the
                                                      fast-statistics prototype's statistics, also GPU bits
    fast_y  float32 (rows, N)  the prototype's eager output on the GPU (only where rows*N <= 2**18)
    reference_order_identical bool 0-d   whether labkit's reference-order kernel matched all three bit for bit

`manifest.json` in the same folder lists every file with its sha256 and the recording machine's provenance.
"""
from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np

from labkit.core.compile import REPO_ROOT
from labkit.core.atomic import atomic_write_bytes, atomic_write_json
from labkit.tasks import UNEVEN_SHAPE

FIXTURE_DIR = REPO_ROOT / "data" / "fixtures"
RAGGED_N = 4 * 128 * 3 + 8  # 386 float4 vectors: threads 0 and 1 push 4 vectors, the rest 3
FAST_Y_MAX = 1 << 18
CPU_FORMAT_TEST = "NONE: CPU format test, not GPU bits"

# (shape, distribution, seed, affine); total on disk ~10 MiB (the 2**20 row dominates; its affine is the default
# so gamma/beta compress to nothing).
FIXTURE_SPECS = (
    (UNEVEN_SHAPE, "uniform", 0, "random_normal"),
    (UNEVEN_SHAPE, "normal_plus_1000", 0, "random_normal"),
    (UNEVEN_SHAPE, "constant_1e4", 0, "random_normal"),
    ((4, 4096), "normal", 0, "random_normal"),
    ((2, RAGGED_N), "normal_plus_1000", 0, "random_normal"),
    ((1, 1 << 20), "uniform", 0, "default"),
)


def fixture_name(shape, distribution: str, seed: int, affine: str) -> str:
    return f"{distribution}_{'x'.join(str(d) for d in shape)}_s{seed}_{affine}"


def _npz_bytes(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def fixture_arrays(shape, distribution: str, seed: int, affine: str, device: str = "cuda",
                   eps: float = 1e-5) -> dict:
    """The arrays of one fixture, computed with torch on `device` ('cuda' for real fixtures)."""
    import torch

    from labkit.ops.reference import native_layer_norm
    from labkit.inputs import make_affine, make_input
    from labkit.lab.split_stats import split_pointwise, split_statistics

    shape = tuple(int(d) for d in shape)
    n = int(np.prod(shape[1:]))
    rows = int(np.prod(shape)) // n
    x = make_input(distribution, shape, seed, device)
    w, b = make_affine(affine, shape[1:], seed, device)
    y, mean, rstd = native_layer_norm(x, w, b, eps)
    var, fmean, frstd = split_statistics(x, rows, n, eps)
    arrays = {
        "x": x.reshape(rows, n), "y": y.reshape(rows, n), "mean": mean, "rstd": rstd,
        "gamma": w.reshape(n), "beta": b.reshape(n),
        "fast_mean": fmean, "fast_var": var, "fast_rstd": frstd,
    }
    if rows * n <= FAST_Y_MAX:
        arrays["fast_y"] = split_pointwise(x.reshape(rows, n), var, fmean, w.reshape(n), b.reshape(n), eps)
    out = {k: v.detach().cpu().numpy().astype(np.float32, copy=False) for k, v in arrays.items()}
    if device == "cuda":
        from labkit.records.check import bit_identical
        from labkit.ops.reference_order import reference_order_layer_norm

        ry, rm, rr = reference_order_layer_norm(x, w, b, eps, return_stats=True)
        out["reference_order_identical"] = np.array(
            bit_identical(y, ry) and bit_identical(mean, rm) and bit_identical(rstd, rr))
        gpu = torch.cuda.get_device_name()
        source = "torch.native_layer_norm and torch.var_mean on the GPU"
    else:
        gpu = CPU_FORMAT_TEST
        source = "torch on the CPU: a FORMAT TEST only, never commit as golden bits"
    out.update({
        "eps": np.float32(eps), "shape": np.array(",".join(str(d) for d in shape)), "seed": np.array(str(seed)),
        "distribution": np.array(distribution), "affine": np.array(affine),
        "torch_version": np.array(torch.__version__), "gpu": np.array(gpu), "source": np.array(source),
    })
    return out


def record_fixtures(out_dir=FIXTURE_DIR, device: str = "cuda", specs=FIXTURE_SPECS, eps: float = 1e-5,
                    format_test: bool = False) -> list[Path]:
    """Write one npz per spec plus manifest.json into out_dir; returns the npz paths.

    device must be 'cuda' (torch's GPU bits are the point). device='cpu' needs format_test=True, marks every file
    as a CPU format test, and refuses to write into the repository's data/fixtures.
    """
    import torch

    from labkit.records.run import provenance

    out_dir = Path(out_dir)
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("record_fixtures(device='cuda') needs a CUDA GPU; golden fixtures are GPU bits")
    elif device == "cpu":
        if not format_test:
            raise ValueError("CPU fixtures are not golden bits: pass format_test=True (and a scratch out_dir)")
        if out_dir.resolve() == FIXTURE_DIR.resolve():
            raise ValueError(f"refusing to write CPU format-test fixtures into {FIXTURE_DIR}")
    else:
        raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
    paths = []
    for shape, dist, seed, affine in specs:
        arrays = fixture_arrays(shape, dist, seed, affine, device, eps)
        path = out_dir / f"{fixture_name(shape, dist, seed, affine)}.npz"
        atomic_write_bytes(path, _npz_bytes(arrays))
        paths.append(path)
        if device == "cuda":
            torch.cuda.empty_cache()
    atomic_write_json(out_dir / "manifest.json", {
        "what": "golden LayerNorm fixtures (see labkit/records/fixtures.py for the format)",
        "device": device, "format_test": device != "cuda",
        "files": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths},
        "total_bytes": sum(p.stat().st_size for p in paths),
        "provenance": provenance(device),
    })
    return paths


def load_fixture(path) -> dict:
    """One fixture: arrays as numpy, provenance strings as str, shape as a tuple, plus name and path."""
    path = Path(path)
    with np.load(path) as data:
        out = {k: data[k] for k in data.files}
    for k, v in list(out.items()):
        if v.ndim == 0 and v.dtype.kind == "U":
            out[k] = str(v)
    out["shape"] = tuple(int(d) for d in out["shape"].split(",")) if "shape" in out else tuple(out["x"].shape)
    if "seed" in out:
        out["seed"] = int(out["seed"])
    out["eps"] = float(out["eps"])
    out["name"], out["path"] = path.stem, str(path)
    return out


def load_fixtures(root=FIXTURE_DIR) -> list[dict]:
    """Every fixture under root (none if the folder is missing or empty), sorted by name."""
    root = Path(root)
    return [load_fixture(p) for p in sorted(root.glob("*.npz"))] if root.is_dir() else []


def find_fixture(fixtures: list[dict], shape, distribution: str, seed: int | None = None,
                 affine: str | None = None) -> dict | None:
    for f in fixtures:
        if (tuple(f["shape"]) == tuple(shape) and f.get("distribution") == distribution
                and (seed is None or f.get("seed") == seed) and (affine is None or f.get("affine") == affine)):
            return f
    return None


def is_gpu_fixture(fix: dict) -> bool:
    return fix.get("gpu") not in (None, "", CPU_FORMAT_TEST)


def describe(fixtures: list[dict]) -> list[dict]:
    """One row per fixture: what it is and where its bits come from."""
    return [{"fixture": f["name"], "shape": list(f["shape"]), "distribution": f.get("distribution"),
             "affine": f.get("affine"), "torch": f.get("torch_version"), "gpu": f.get("gpu"),
             "GPU bits": is_gpu_fixture(f),
             "reference-order identical": (bool(f["reference_order_identical"])
                                           if "reference_order_identical" in f else "n/a"),
             "MiB": round(Path(f["path"]).stat().st_size / 2**20, 3)} for f in fixtures]


def emulator_check(fix: dict) -> dict:
    """CPU emulator of torch's reduction order (labkit.exact.emulator) against a fixture's torch bits: mean bits equal,
    rstd within the 2-ulp bound of rsqrtf, output bits equal given torch's mean/rstd."""
    from labkit.exact import emulator

    try:
        stats = emulator.reference_stats(fix["x"], fix["eps"])
        y = emulator.reference_output(fix["x"], fix["mean"], fix["rstd"], fix["gamma"], fix["beta"])
        finite = np.isfinite(fix["rstd"]) & np.isfinite(stats["rstd_cr"])
        ulps = emulator.ulp_distance(fix["rstd"][finite], stats["rstd_cr"][finite])
        return {"fixture": fix["name"], "GPU bits": is_gpu_fixture(fix),
                "mean bits equal (rows)": f"{int((stats['mean'].view(np.int32) == fix['mean'].view(np.int32)).sum())}"
                                          f"/{fix['mean'].size}",
                "rstd max ulp vs correctly rounded": int(ulps.max()) if ulps.size else None,
                "output bits equal": float((y.view(np.int32) == fix["y"].view(np.int32)).mean())}
    except Exception as exc:  # the emulator is another module's contract; report, do not hide the table
        return {"fixture": fix["name"], "GPU bits": is_gpu_fixture(fix), "error": f"{type(exc).__name__}: {exc}"}


# --- backward fixtures: torch's GPU gradients for the CPU emulator (labkit.exact.backward) ------------------------

BACKWARD_DIR = FIXTURE_DIR / "backward"
# (rows, N): one of each GammaBeta template (M < 64, < 128, < 256, >= 256), a ragged thread count, no affine.
BACKWARD_SPECS = (((3, 516), "random_normal"), ((70, 256), "random_normal"), ((130, 128), "random_normal"),
                  ((300, 64), "random_normal"), ((5, 2056), "random_normal"), ((40, 128), "none"))


LOW_PRECISION_BACKWARD_DIR = FIXTURE_DIR / "backward_low_precision"


def record_backward_fixtures(out_dir=None, specs=BACKWARD_SPECS, eps: float = 1e-5, seed: int = 0,
                             dtypes=("float32",)) -> list[Path]:
    """One npz per spec and dtype: x, dy, gamma (absent: not stored), torch's GPU mean and rstd, and
    torch.ops.aten.native_layer_norm_backward's dx, dgamma, dbeta on the GPU; plus manifest.json. Needs a GPU.
    float32 files hold float32 arrays (named backward_{rows}x{N}_{affine}.npz); bfloat16/float16 files
    (backward_{dtype}_...) hold x, dy, gamma, dx, dgamma and dbeta as uint16 bits of that dtype (x and the rest drawn
    in float32, then rounded by torch), mean and rstd float32. `out_dir` None: float32's files in BACKWARD_DIR, the
    others in LOW_PRECISION_BACKWARD_DIR (tests read each folder as one format), each folder with its manifest."""
    import torch

    from labkit.inputs import make_affine, make_input
    from labkit.records.run import provenance

    if not torch.cuda.is_available():
        raise ValueError("backward fixtures are torch's GPU bits: record them on a CUDA GPU")
    folders: dict[Path, list[Path]] = {}
    for ((rows, n), affine), dtype in ((spec, d) for d in dtypes for spec in specs):
        t = getattr(torch, dtype)
        x = make_input("normal_plus_1000", (rows, n), seed, "cuda").to(t)
        g = torch.Generator().manual_seed(seed + rows)
        dy = torch.randn(rows, n, generator=g).cuda().to(t)
        w, b = make_affine("random_normal", (n,), seed, "cuda") if affine != "none" else (None, None)
        w, b = (None, None) if w is None else (w.to(t), b.to(t))
        _, mean, rstd = torch.native_layer_norm(x, (n,), w, b, eps)
        dx, dw, db = torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b,
                                                               [True, w is not None, b is not None])
        arrays = {"x": x, "dy": dy, "dx": dx}
        if w is not None:
            arrays.update({"gamma": w, "dgamma": dw, "dbeta": db})
        if dtype == "float32":
            out = {k: v.detach().cpu().numpy().astype(np.float32, copy=False) for k, v in arrays.items()}
        else:  # the bits: numpy has no bfloat16
            out = {k: v.detach().cpu().view(torch.int16).numpy().view(np.uint16) for k, v in arrays.items()}
            out["dtype"] = np.array(dtype)
        out.update({"mean": mean.reshape(rows).cpu().numpy(), "rstd": rstd.reshape(rows).cpu().numpy()})
        out.update({"sm_count": np.int32(torch.cuda.get_device_properties(0).multi_processor_count),
                    "torch_version": np.array(torch.__version__), "gpu": np.array(torch.cuda.get_device_name())})
        prefix = "backward_" if dtype == "float32" else f"backward_{dtype}_"
        folder = Path(out_dir) if out_dir is not None else (BACKWARD_DIR if dtype == "float32"
                                                            else LOW_PRECISION_BACKWARD_DIR)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{prefix}{rows}x{n}_{affine}.npz"
        atomic_write_bytes(path, _npz_bytes(out))
        folders.setdefault(folder, []).append(path)
    for folder, paths in folders.items():
        atomic_write_json(folder / "manifest.json", {
            "what": "torch's GPU LayerNorm backward on small inputs (labkit/records/fixtures.py "
                    "record_backward_fixtures)",
            "files": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths},
            "provenance": provenance("cuda")})
    return [p for paths in folders.values() for p in paths]
