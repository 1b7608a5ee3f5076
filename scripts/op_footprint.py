"""How much code a maintainer reads to follow the drop-in: files and lines, measured, not estimated.

    python scripts/op_footprint.py            # static: everything a labkit.layer_norm call can reach
    python scripts/op_footprint.py --trace    # GPU: the files one eager call (forward, with grad) runs through

Static: the labkit modules that `import labkit.ops.dropin` loads, the host extension's sources and every kernel
file (with its local headers) of every forward path and backward schedule. Trace: the labkit Python files whose
functions run during one first eager call with grad (plan made, launched) and during the next call of the
same signature (planned), plus the host sources where the C++
runner served and the kernel files compiled or loaded for it. Prints JSON.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8", errors="replace").splitlines())


def _with_headers(names) -> set[Path]:
    """Kernel files and, transitively, the local headers they #include."""
    out, todo = set(), [ROOT / "kernels" / (n if n.endswith(".cu") else n + ".cu") for n in names]
    while todo:
        p = todo.pop()
        if p in out or not p.is_file():
            continue
        out.add(p)
        for inc in re.findall(r'#include\s+"([^"]+)"', p.read_text(encoding="utf-8")):
            todo.append(p.parent / inc)
    return out


def _modules_loaded() -> list[str]:
    code = ("import sys, labkit.ops.dropin, labkit\n"
            "print('\\n'.join(sorted(m.__file__ for m in list(sys.modules.values())\n"
            "      if getattr(m, '__file__', None) and '/labkit/' in m.__file__)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if line]


def _rel(p) -> str:
    try:
        return str(Path(p).resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def static() -> dict:
    py = [Path(p) for p in _modules_loaded()]
    # the committed dispatch tables are imported at a GPU's first plan, not at import
    py += [p for p in sorted((ROOT / "labkit/ops/dispatch/tables").glob("*.py")) if p not in py]
    host = sorted((ROOT / "host").glob("*.[ch]*"))
    from labkit.core.compile import kernel_dir
    from labkit.ops import trust

    # every forward path's and backward schedule's kernel files with their headers (the trust key hashes the same)
    kernels = [kernel_dir() / name for name in trust.dropin_kernel_files()]
    groups = {"python": py, "host": host, "kernels": kernels}
    return {k: {"files": len(v), "lines": sum(_lines(p) for p in v), "list": [_rel(p) for p in v]}
            for k, v in groups.items()}


def trace(shape=(16, 64, 256, 256)) -> dict:
    import torch

    import labkit
    from labkit.core import compile as nvrtc

    if not torch.cuda.is_available():
        raise SystemExit("--trace needs a CUDA GPU")
    x = torch.randn(shape, device="cuda", requires_grad=True)
    ns = shape[1:]
    w = torch.randn(ns, device="cuda", requires_grad=True)
    b = torch.randn(ns, device="cuda", requires_grad=True)
    labkit.layer_norm  # resolve the lazy attribute outside the trace
    compiled_before = set(getattr(nvrtc, "_loaded_names", lambda: set())())

    def traced_call() -> list[str]:
        seen: set[str] = set()

        def prof(frame, event, arg):
            if event == "call":
                f = frame.f_code.co_filename
                if "/labkit/" in f:
                    seen.add(_rel(f))

        sys.setprofile(prof)
        try:
            labkit.layer_norm(x, ns, w, b)
        finally:
            sys.setprofile(None)
        return sorted(seen)

    # the first call plans (the rule weighs every path, kernels compile); the next call of the same signature
    # is what a training step pays from then on
    first = traced_call()
    planned = traced_call()
    torch.cuda.synchronize()
    expl = labkit.explain(x, ns, w, b)
    host = [_rel(p) for p in sorted((ROOT / "host").glob("*.[ch]*"))] if expl["launches"].startswith("C++") else []
    from labkit.ops import paths

    kern = sorted(_rel(p) for p in _with_headers(paths.kernels(expl["path"])))
    del compiled_before
    return {"shape": list(shape), "path": expl["path"], "backward": expl["backward"], "launches": expl["launches"],
            "python": first, "host": host, "kernels": kern, "files_opened": len(first) + len(host),
            "python_planned": planned, "files_opened_planned": len(planned) + len(host)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", action="store_true", help="trace one eager call on the GPU")
    args = ap.parse_args()
    print(json.dumps(trace() if args.trace else static(), indent=1))


if __name__ == "__main__":
    main()
