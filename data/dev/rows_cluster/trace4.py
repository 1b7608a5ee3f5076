"""Dev probe: the event trace (ahead.py `events`) of clusters of 4 (30 resident, waves.json) at 1024 x 65536 and
4096 x 16384, to see which stage holds a row there (c4_g30: 222 us at 1024 x 65536, 6.5 us a row per cluster).
Run: timeout 120 python3 data/dev/rows_cluster/trace4.py (writes trace4.json into $OUT)."""
import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import rows_staged  # noqa: E402

import ahead  # noqa: E402
import probe  # noqa: E402


def main():
    shutil.copyfile(HERE / f"{probe.FILE}.cu", ROOT / "kernels" / f"{probe.FILE}.cu")
    try:
        dev, out = device_info(0), {}
        for rows, n in ((1024, 65536), (4096, 16384)):
            torch.manual_seed(rows + n)
            x = torch.randn(rows, n, device="cuda") * 2 + 50
            w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            p = probe.cluster_plan(rows_staged.plan(rows, n, dev), rows, n, 4, dev, 30)
            out[f"{rows}x{n}_c4_g30"] = ahead.events(p, x, w, b)
        Path(os.environ.get("OUT", "."), "trace4.json").write_text(json.dumps(
            {"meta": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "commit": os.environ.get("LABKIT_GIT_COMMIT")}, "events": out}))
    finally:
        (ROOT / "kernels" / f"{probe.FILE}.cu").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
