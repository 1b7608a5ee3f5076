import pytest
import torch

from labkit.core import validate
from labkit.ops.reference_order import reference_order_layer_norm
from labkit.ops.split_stats import split_stats_layer_norm


def _good(shape=(2, 8, 4)):
    return torch.rand(shape), torch.ones(shape[1:]), torch.zeros(shape[1:])


def test_valid_input_gives_rows_and_n():
    x, w, b = _good()
    assert validate.layer_norm_layout(x, w, b, 1e-5, require_cuda=False) == validate.RowLayout(2, 32)


def test_leading_dims_fold_into_rows():
    x, w, b = torch.rand(3, 5, 4), torch.ones(4), torch.zeros(4)
    assert validate.layer_norm_layout(x, w, b, 1e-5, require_cuda=False) == validate.RowLayout(15, 4)


def test_every_refusal_names_its_condition():
    from labkit.ops.refusals import refusal_rows

    rows = refusal_rows("cpu")
    assert len({r["case"] for r in rows}) >= 13
    bad = [r for r in rows if not r["names_condition"]]
    assert not bad, bad


def test_refusal_table_catches_an_accepting_function(monkeypatch):
    """The table is not a tautology: a validation that lets a case through shows up as a BUG row."""
    from labkit.core import validate as v
    from labkit.ops import refusals

    monkeypatch.setattr(v, "layer_norm_layout", lambda *a, **k: v.RowLayout(1, 4))
    monkeypatch.setattr(v, "check_output", lambda *a, **k: None)
    rows = [r for r in refusals.refusal_rows("cpu") if r["function"].startswith("layer_norm_layout")]
    assert rows and all(r["raises"].startswith("nothing (BUG") and not r["names_condition"] for r in rows)


@pytest.mark.parametrize("bad,pattern", [
    (lambda x, w, b: (x, w.double(), b), "weight must be float32"),
    (lambda x, w, b: (x, None, b), "weight is required"),
    (lambda x, w, b: (x, w, b[:2]), "bias.shape"),
    (lambda x, w, b: (x, w, torch.zeros(8, 4, device="meta")), "one device"),
    (lambda x, w, b: (x[:0], w, b), "at least one row"),
    (lambda x, w, b: (x.numpy(), w, b), "torch.Tensor"),
])
def test_other_violations(bad, pattern):
    x, w, b = _good()
    with pytest.raises(ValueError, match=pattern):
        validate.layer_norm_layout(*bad(x, w, b), 1e-5, require_cuda=False)


@pytest.mark.parametrize("eps", [float("nan"), -1.0, float("inf")])
def test_bad_eps(eps):
    x, w, b = _good()
    with pytest.raises(ValueError, match="eps"):
        validate.layer_norm_layout(x, w, b, eps, require_cuda=False)


@pytest.mark.parametrize("fn", [reference_order_layer_norm,
                                lambda x, w, b, e: split_stats_layer_norm(x, w, b, e, geometry="flat")])
def test_public_wrappers_refuse_cpu_tensors_before_any_launch(fn):
    # Reaching a launch without a GPU would raise a CUDA error instead: the ValueError proves validation ran first.
    x, w, b = _good()
    with pytest.raises(ValueError, match="CUDA tensor"):
        fn(x, w, b, 1e-5)


def test_split_geometry_is_validated():
    x, w, b = _good()
    with pytest.raises(ValueError, match="geometry"):
        split_stats_layer_norm(x, w, b, 1e-5, geometry="diagonal")


def test_kernel_pointer_refuses_cpu_and_strided_tensors():
    from labkit.core.views import device_pointer

    with pytest.raises(ValueError, match="CUDA"):
        device_pointer(torch.zeros(4), 0)

    class FakeCuda:  # a CUDA-looking tensor without a GPU: only the checks before data_ptr() run
        is_cuda = True
        device = torch.device("cuda", 1)

        def is_contiguous(self):
            return False

    with pytest.raises(ValueError, match="launch on cuda:0"):
        device_pointer(FakeCuda(), 0)
    FakeCuda.device = torch.device("cuda", 0)
    with pytest.raises(ValueError, match="contiguous"):
        device_pointer(FakeCuda(), 0)
