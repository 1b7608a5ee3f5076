"""The one eligibility predicate (labkit.ops.eligibility): what the kernel functions raise, what the drop-in routes to
torch's kernel, what torch_path derives, and that each public function runs it before any launch."""
import pytest
import torch

from labkit.ops import eligibility
from labkit.ops.reference_order import reference_order_layer_norm
from labkit.lab.split_stats import split_stats_layer_norm


def _good(shape=(2, 8, 4)):
    return torch.rand(shape), torch.ones(shape[1:]), torch.zeros(shape[1:])


def test_valid_input_gives_rows_and_n():
    x, w, b = _good()
    assert eligibility.check(x, w, b, 1e-5, require_cuda=False) == eligibility.RowLayout(2, 32)


def test_leading_dims_fold_into_rows():
    x, w, b = torch.rand(3, 5, 4), torch.ones(4), torch.zeros(4)
    assert eligibility.check(x, w, b, 1e-5, require_cuda=False) == eligibility.RowLayout(15, 4)


def test_every_refusal_names_its_condition():
    from labkit.lab.refusals import refusal_rows

    rows = refusal_rows("cpu")
    assert len({r["case"] for r in rows}) >= 13
    bad = [r for r in rows if not r["names_condition"]]
    assert not bad, bad


def test_refusal_table_catches_an_accepting_function(monkeypatch):
    """The table is not a tautology: a predicate that lets a case through shows up as a BUG row."""
    from labkit.lab import refusals

    monkeypatch.setattr(eligibility, "refusal", lambda *a, **k: None)
    rows = [r for r in refusals.refusal_rows("cpu") if r["function"] == refusals.SHARED]
    assert rows and all(r["raises"].startswith("nothing (BUG") and not r["names_condition"] for r in rows)


@pytest.mark.parametrize("bad,condition", [
    (lambda x, w, b: (x, w.double(), b), "weight must be float32"),
    (lambda x, w, b: (x, None, b), "weight is required"),
    (lambda x, w, b: (x, w, b[:2]), "bias.shape must equal normalized_shape"),
    (lambda x, w, b: (x, w, torch.zeros(8, 4, device="meta")), "x, weight and bias must be on one device"),
    (lambda x, w, b: (x[:0], w, b), "x must hold at least one row"),
    (lambda x, w, b: (x.numpy(), w, b), "x must be a torch.Tensor"),
    (lambda x, w, b: (torch._neg_view(x), w, b), "x must not be a lazily negated view"),
    (lambda x, w, b: (x, torch._neg_view(w), b), "weight must not be a lazily negated view"),
    (lambda x, w, b: (torch._efficientzerotensor(x.shape), w, b), "x must not be a ZeroTensor"),
])
def test_other_violations(bad, condition):
    x, w, b = _good()
    with pytest.raises(ValueError) as exc:
        eligibility.check(*bad(x, w, b), 1e-5, require_cuda=False)
    assert str(exc.value).startswith(condition)


@pytest.mark.parametrize("eps", [float("nan"), -1.0, float("inf"), True])
def test_bad_eps(eps):
    x, w, b = _good()
    with pytest.raises(ValueError, match="eps must be a finite float"):
        eligibility.check(x, w, b, eps, require_cuda=False)


def test_torch_path_conditions_are_marked_as_torchs():
    """N % 4, N > 2**24 and misaligned X/gamma/beta send torch itself down its other path: the Reason says so, and
    torch_path gives the same text."""
    x, w, b = _good()
    flat = torch.rand(65)
    mis = flat[1:].view(2, 8, 4)
    why = eligibility.refusal(mis, w, b, 1e-5, require_cuda=False)
    assert why.torch_path and why.condition.startswith("x must be 16-byte aligned")
    path, reason = eligibility.torch_path(mis, w, b)
    assert path == eligibility.ROWWISE and reason.startswith("X must be 16-byte aligned") and "(got 4 bytes past" in reason
    odd = eligibility.refusal(torch.rand(2, 6), torch.ones(6), torch.zeros(6), 1e-5, require_cuda=False)
    assert odd.torch_path and str(odd) in eligibility.torch_path(torch.rand(2, 6), torch.ones(6), torch.zeros(6))[1]
    assert not eligibility.refusal(x, w.double(), b, 1e-5, require_cuda=False).torch_path


def test_drop_in_policy_allows_absent_affine_and_autograd_but_not_bias_alone():
    x, w, b = _good()
    drop_in = dict(policy=eligibility.DROP_IN, require_cuda=False)
    assert eligibility.refusal(x, None, None, 1e-5, (8, 4), **drop_in) is None
    assert eligibility.refusal(x.requires_grad_(), w, b, 1e-5, **drop_in) is None
    assert eligibility.refusal(x, None, b, 1e-5, **drop_in).condition.startswith("bias without weight")
    mis = torch.rand(65)[1:].view(2, 8, 4)
    assert eligibility.refusal(mis, w, b, 1e-5, **drop_in) is None  # addresses are checked per call there
    assert eligibility.refusal(x.detach(), w, b, 1e-5, require_cuda=False) is None


def test_out_overlap_is_refused_but_a_separate_out_is_not():
    x, w, b = _good()
    buf = torch.rand(3, 8, 4)
    why = eligibility.refusal(buf[:2], w, b, 1e-5, out=buf[1:], require_cuda=False)
    assert why.condition == "out must not overlap x"
    assert eligibility.refusal(buf[:2], w, b, 1e-5, out=torch.empty(2, 8, 4), require_cuda=False) is None


@pytest.mark.parametrize("fn", [reference_order_layer_norm,
                                lambda x, w, b, e: split_stats_layer_norm(x, w, b, e, geometry="flat")])
def test_public_wrappers_refuse_cpu_tensors_before_any_launch(fn):
    # Reaching a launch without a GPU would raise a CUDA error instead: the ValueError proves validation ran first.
    x, w, b = _good()
    with pytest.raises(ValueError, match="x must be a CUDA tensor"):
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
