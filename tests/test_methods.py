"""The method registry: names, families, reference-order flags, the registration hook, graceful failure."""
import pytest
import torch

from bits import assert_bits_equal
from labkit.studies import methods as M

BUILTIN = ["native", "native_torchscript", "native_torchscript_traced", "reference_order", "split_eager",
           "split_torchscript", "split_traced", "split_flat", "split_interleaved", "post_split_interleaved",
           "noaffine_eager_affine", "noaffine_torchscript_affine", "noaffine_traced_affine", "inductor", "liger"]


def test_builtin_names_families_and_flags():
    names = [m.name for m in M.registered()]
    assert names[:len(BUILTIN)] == BUILTIN
    fam = {m.name: m.family for m in M.BUILTIN}
    assert fam["native"] == fam["native_torchscript"] == fam["native_torchscript_traced"] == "native"
    assert fam["reference_order"] == "reference-order"
    assert {fam[n] for n in BUILTIN if "split_" in n} == {"split-stats"}
    assert fam["inductor"] == "compiler" and fam["liger"] == "triton-peer"
    assert {m.name for m in M.BUILTIN if m.reference_order} == {"native", "native_torchscript",
                                                                "native_torchscript_traced", "reference_order", "chain"}
    assert all(m.family in M.FAMILIES and m.description for m in M.BUILTIN)
    assert M.get("liger").requires == ("liger-kernel", "triton")
    assert M.get("native").to_json()["reference_order"] is True


def test_register_rules():
    def b(x, w, bias, eps):
        return lambda: x

    m = M.Method("tmp_method", "chain", True, b)
    try:
        M.register(m)
        M.register(m)  # the same method again: no-op
        with pytest.raises(ValueError, match="registered already"):
            M.register(M.Method("tmp_method", "chain", False, b))
        M.register(M.Method("tmp_method", "chain", False, b), replace=True)
        assert M.get("tmp_method").reference_order is False
        with pytest.raises(ValueError, match="family"):
            M.register(M.Method("tmp_bad", "magic", False, b))
        with pytest.raises(TypeError):
            M.register("native")
    finally:
        M.unregister("tmp_method")
    with pytest.raises(KeyError):
        M.get("tmp_method")


def test_chain_is_a_builtin_reference_order_method():
    m = M.get("chain")
    assert m.family == "chain" and m.reference_order


def _xwb(shape=(3, 8, 4)):
    x = torch.rand(shape, generator=torch.Generator().manual_seed(0))
    w = torch.randn(shape[1:], generator=torch.Generator().manual_seed(1))
    b = torch.randn(shape[1:], generator=torch.Generator().manual_seed(2))
    return x, w, b


def test_build_returns_a_row_with_the_error_for_each_way_of_failing():
    x, w, b = _xwb()

    def at_build(x, w, b, eps):
        raise RuntimeError("cannot build here")

    def at_call(x, w, b, eps):
        def call():
            raise RuntimeError("Cannot launch Triton kernel since n = 4194304 exceeds 65536")
        return call

    def wrong_shape(x, w, b, eps):
        return lambda: x.reshape(-1)

    for fn, text in ((at_build, "RuntimeError: cannot build here"), (at_call, "exceeds 65536"),
                     (wrong_shape, "expected a tensor of shape (3, 8, 4)")):
        r = M.build(M.Method("f", "compiler", False, fn), x, w, b, 1e-5)
        assert r["fn"] is None and r["output"] is None and text in r["error"] and r["build_s"] >= 0


def test_cpu_buildable_methods_match_native_closely():
    x, w, b = _xwb()
    ref = torch.nn.functional.layer_norm(x, (8, 4), w, b, 1e-5)
    for name in ("native", "noaffine_eager_affine"):
        r = M.build(M.get(name), x, w, b, 1e-5)
        assert r["error"] is None and torch.allclose(r["output"], ref, atol=1e-5)
    assert_bits_equal(M.build(M.get("native"), x, w, b, 1e-5)["output"], ref, what="native method")


def _scripts_here() -> bool:
    """Whether this torch can torch.jit.script an nn.LayerNorm, decided apart from the method under test."""
    try:
        torch.jit.script(torch.nn.LayerNorm(4))
        return True
    except Exception:
        return False


def test_torchscript_method_works_where_torch_scripts_and_says_why_where_not():
    x, w, b = _xwb()
    r = M.build(M.get("native_torchscript"), x, w, b, 1e-5)
    if _scripts_here():
        assert r["error"] is None, r["error"]
        assert_bits_equal(r["output"], torch.nn.functional.layer_norm(x, (8, 4), w, b, 1e-5), what="torchscript method")
        assert r["notes"]["compiled_with"] == "torch.jit.script"
    else:
        assert r["output"] is None and "torch.jit" in r["error"]


def test_cuda_only_methods_fail_gracefully_on_cpu():
    x, w, b = _xwb()
    for name in ("reference_order", "split_flat", "split_interleaved", "chain"):
        r = M.build(M.get(name), x, w, b, 1e-5)
        assert r["fn"] is None and "CUDA" in r["error"]


def test_missing_peer_package_becomes_an_error_row():
    try:
        import liger_kernel  # noqa: F401
        pytest.skip("liger-kernel is installed here")
    except ImportError:
        pass
    x, w, b = _xwb()
    r = M.build(M.get("liger"), x, w, b, 1e-5)
    assert r["fn"] is None and "liger_kernel" in r["error"]
    assert r["notes"]["versions"]["liger-kernel"] is None
