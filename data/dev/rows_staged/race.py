"""Dev probe: repeat kernels/rows_staged.cu on shapes where the first probe of the warp-specialized kernel saw
mismatches (probe_v2.log), in its default build and in the STAGED_EARLY_RELEASE=1 build (the v2 probe's: a ring slot
and a statistics entry released right after their reads were issued, before the values were used). Counts, per
tensor, the calls whose int32 view differs from torch.native_layer_norm. `--small` runs one small case only (for
compute-sanitizer). Not a committed run."""
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import plans, rows_staged  # noqa: E402


def run(rows, n, options, reps):
    p = rows_staged.plan(rows, n, device_info(0))
    p = dataclasses.replace(p, kernel=dataclasses.replace(p.kernel, options=options))
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(rows, n, device="cuda", generator=g)
    w, b = torch.randn(n, device="cuda", generator=g), torch.randn(n, device="cuda", generator=g)
    ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
    bad, rows_bad = {"y": 0, "mean": 0, "rstd": 0}, set()
    for _ in range(reps):
        got = plans.execute(p, x, w, b, 1e-5)
        for name, a, c in zip(bad, got, ref):
            ne = (a.reshape(rows, -1).view(torch.int32) != c.reshape(rows, -1).view(torch.int32)).any(1)
            if bool(ne.any()):
                bad[name] += 1
                rows_bad |= set(ne.nonzero().flatten()[:4].tolist())
    print(rows, n, options or "default", reps, "calls; calls with mismatches:", bad, "some rows:",
          sorted(rows_bad)[:12], flush=True)


if __name__ == "__main__":
    if "--small" in sys.argv:
        run(300, 16384, (), 2)
        run(40, 65536, (), 2)
    else:
        for opts in ((), ("-DSTAGED_EARLY_RELEASE=1",)):
            for rows, n in ((2048, 16384), (16384, 4096), (1024, 65536), (2048, 8192), (512, 32768), (4096, 768)):
                run(rows, n, opts, 40)
