"""The post's own fast-statistics kernel (kernels/post_affine.cu, compiled --fmad=false) on the GPU (marker gpu):
its output is the post's arithmetic bit for bit, each product and sum rounded on its own, checked against numpy's
float32 on the same statistics; both geometries; the post's support bound refused by name."""
import numpy as np
import pytest

from bits import assert_bits_equal

pytestmark = pytest.mark.gpu


def _posts_arithmetic(x, var, mean, w, b, eps):
    """y = w * ((x - mean) * (1 / sqrt(var + eps))) + b in float32, every operation rounded (no contraction)."""
    f = np.float32
    r = (f(1) / np.sqrt(var + f(eps))).astype(np.float32)
    z = ((x - mean[:, None]) * r[:, None]).astype(np.float32)
    return (w[None, :] * z).astype(np.float32) + b[None, :]


@pytest.mark.parametrize("geometry", ["post_interleaved", "post_flat"])
@pytest.mark.parametrize("shape", [(5, 1000), (16, 64 * 64), (3, 64 * 17 * 19)])
def test_the_posts_kernel_is_the_posts_arithmetic(geometry, shape):
    import torch

    from labkit.lab.split_stats import row_var_mean, split_stats_layer_norm

    g = torch.Generator().manual_seed(3)
    x = (torch.randn(shape, generator=g) * 4 + 1000).cuda()  # offsets: where contraction would change bits
    w, b = torch.randn(shape[1:], generator=g).cuda(), torch.randn(shape[1:], generator=g).cuda()
    y = split_stats_layer_norm(x, w, b, 1e-5, geometry=geometry)
    var, mean = row_var_mean(x, shape[0], shape[1])
    want = _posts_arithmetic(x.cpu().numpy(), var.cpu().numpy(), mean.cpu().numpy(), w.cpu().numpy(),
                             b.cpu().numpy(), 1e-5)
    assert_bits_equal(y, want, what=f"y at {shape} vs the post's arithmetic in numpy", path=geometry)


def test_the_posts_support_bound_is_refused_by_name():
    import torch

    from labkit.lab.split_stats import split_stats_layer_norm

    n = 65536 * 256  # one tile past the post's N <= 65535 * 256
    x = torch.zeros(1, n, device="cuda")
    w = torch.ones(n, device="cuda")
    with pytest.raises(ValueError, match="grid.y"):
        split_stats_layer_norm(x, w, w, 1e-5, geometry="post_interleaved")
