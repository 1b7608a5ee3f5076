"""Dev driver for compute-sanitizer: rows_cluster.cu once per case, bits checked against torch.native_layer_norm.
Cases: more rows than clusters (some clusters take two rows, the rest one), a row shorter than the cluster (CTAs 2
and 3 of four hold no chunk and only relay), a row of 10 chunks split 5 and 5. The variant file is copied into
kernels/ for the run and removed after.
Run: timeout 300 compute-sanitizer --tool racecheck python3 data/dev/rows_cluster/sanitize.py
(and --tool synccheck, --tool memcheck)."""
import dataclasses
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import plans, rows_staged  # noqa: E402
from labkit.records.check import bit_identical  # noqa: E402

import probe  # noqa: E402

CASES = [(2, 67, 65536), (4, 35, 131072), (4, 3, 8192), (2, 2, 40960)]  # (cluster size, rows, N)


def main():
    shutil.copyfile(HERE / f"{probe.FILE}.cu", ROOT / "kernels" / f"{probe.FILE}.cu")
    try:
        dev = device_info(0)
        for c, rows, n in CASES:
            g = torch.Generator(device="cuda").manual_seed(rows * 7 + n)
            x = torch.randn(rows, n, device="cuda", generator=g) * 2 + 50
            w, b = torch.randn(n, device="cuda", generator=g), torch.randn(n, device="cuda", generator=g)
            ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
            p = probe.cluster_plan(rows_staged.plan(rows, n, dev), rows, n, c, dev)
            # the sanitizer slows a CTA's waits far more than its polls: no trap on a long legitimate wait
            p = dataclasses.replace(p, kernel=dataclasses.replace(
                p.kernel, options=("-DROWS_CLUSTER_SPIN_LIMIT=(1ll<<50)",)))
            got = plans.execute(p, x, w, b, 1e-5)
            torch.cuda.synchronize()
            same = all(bit_identical(a.view(r.shape), r) for a, r in zip(got, ref))
            print(f"cluster{c} {rows}x{n} grid {p.kernel.grid} identical={same}", flush=True)
    finally:
        (ROOT / "kernels" / f"{probe.FILE}.cu").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
