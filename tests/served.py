"""`skip_unless_ours_serve(rows, n)`: skip a GPU test whose point is our kernels serving rows x N where this GPU's
dispatch table gives that shape to torch's kernel (a GPU with no measured table, e.g. the H200 or H100 under
LABKIT_ARCH before `labkit tune`). Import it as `from served import skip_unless_ours_serve`."""
import pytest


def skip_unless_ours_serve(rows: int, n: int) -> None:
    import torch

    from labkit.core.device import device_info
    from labkit.ops import paths
    from labkit.ops.dispatch import rule

    dev = device_info(torch.cuda.current_device())
    path, why = rule.choose(rows, n, dev, tuple(paths.candidates(rows, n, dev)))
    if path == paths.NATIVE:
        pytest.skip(f"this GPU's table gives {rows} x {n} to torch's kernel ({why})")
