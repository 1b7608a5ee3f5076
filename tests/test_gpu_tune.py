"""`labkit tune` on the GPU (issue 25 item 2), on a few shapes so that it stays a test: it writes this GPU's table to
the (private, per test) table cache, the rule reads it from the next call on (labkit.explain's rule_source names
it), and what the drop-in then serves keeps torch's bits forward and backward."""
import pytest

from bits import assert_bits_equal

pytestmark = pytest.mark.gpu


@pytest.fixture
def fresh_plans():
    from labkit.ops.dropin import plan

    plan.clear()
    yield
    plan.clear()  # plans made by the tuned table must not serve the tests after this one


def test_tune_writes_a_table_the_rule_then_reads(tmp_path, monkeypatch, fresh_plans):
    import torch

    import labkit
    from labkit.ops.dispatch import tables
    from labkit.studies import tune

    monkeypatch.setenv(tables.TABLE_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(tune, "grid", lambda full=False: [(16, 1 << 12), (1024, 1 << 12), (4, 1 << 18), (1, 1 << 20)])
    done = labkit.tune(rounds=3, progress=False, warmup_s=0.2)
    assert done["path"].startswith(str(tmp_path)) and done["shapes"] == 4
    assert "labkit tune" in done["rule_source"]
    for shape in ((8, 1 << 12), (2, 1 << 19)):
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(shape, device="cuda", generator=g).requires_grad_()
        w = torch.randn(shape[1:], device="cuda", generator=g).requires_grad_()
        b = torch.randn(shape[1:], device="cuda", generator=g).requires_grad_()
        dy = torch.randn(shape, device="cuda", generator=g)
        assert "labkit tune" in labkit.explain(x, shape[1:], w, b)["rule_source"]
        got = [labkit.layer_norm(x, shape[1:], w, b)]
        got += torch.autograd.grad(got[0], (x, w, b), dy)
        ref = [torch.nn.functional.layer_norm(x, shape[1:], w, b)]
        ref += torch.autograd.grad(ref[0], (x, w, b), dy)
        for name, a, c in zip(("y", "dx", "dweight", "dbias"), got, ref):
            assert_bits_equal(a, c, what=f"{name} at {shape}, tuned table")
