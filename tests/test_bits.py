"""The tests' bit comparison (tests/bits.py) itself: what it accepts, what it refuses, what its failure says."""
import re

import numpy as np
import pytest
import torch

from bits import assert_bits_equal, int_view_dtype


def _flip_one_bit(t: torch.Tensor, flat: int, bit: int = 0) -> torch.Tensor:
    out = t.clone()
    ints = out.view({torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
                     torch.float64: torch.int64}[t.dtype]).reshape(-1)
    ints[flat] ^= 1 << bit
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_equal_tensors_pass(dtype):
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0)).to(dtype)
    assert_bits_equal(x, x.clone(), what="output")
    assert_bits_equal(x.t(), x.clone().t())  # strided views compare by element, not by storage
    assert_bits_equal(torch.empty(0, 4, dtype=dtype), torch.empty(0, 4, dtype=dtype))
    assert_bits_equal(torch.tensor(1.5, dtype=dtype), torch.tensor(1.5, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_one_flipped_bit_fails_naming_count_index_and_values(dtype):
    x = torch.randn(4, 6, 2, generator=torch.Generator().manual_seed(1)).to(dtype)
    y = _flip_one_bit(x, flat=6 * 2 * 2 + 2 * 3 + 1)  # index (2, 3, 1)
    with pytest.raises(AssertionError) as err:
        assert_bits_equal(y, x, what="rstd", path="chain")
    msg = str(err.value)
    assert msg.startswith("rstd [path chain]: 1 of 48 elements differ in bits; first at index (2, 3, 1): ")
    digits = {torch.float32: 8, torch.float16: 4, torch.bfloat16: 4, torch.float64: 16}[dtype]
    hexes = re.findall(r"\(0x([0-9a-f]+)\)", msg)
    assert len(hexes) == 2 and all(len(h) == digits for h in hexes)
    assert int(hexes[0], 16) ^ int(hexes[1], 16) == 1


def test_the_message_shows_float32_values_and_hex_bits():
    x = torch.tensor([[1.0, 0.5], [2.0, -3.0]])
    y = x.clone()
    y[1, 0] = torch.nextafter(torch.tensor(2.0), torch.tensor(3.0))
    y[1, 1] = 7.0
    with pytest.raises(AssertionError, match=re.escape(
            "output: 2 of 4 elements differ in bits; first at index (1, 0): actual 2.0000002 (0x40000001), "
            "expected 2.0 (0x40000000)")):
        assert_bits_equal(y, x, what="output")
    with pytest.raises(AssertionError, match=r"^tensor: 2 of 4 "):  # no what, no path
        assert_bits_equal(y, x)


def test_nan_payloads_compare_as_bits():
    quiet = torch.tensor([0x7FC00000], dtype=torch.int32).view(torch.float32)
    other = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    assert_bits_equal(quiet, quiet.clone())  # NaN equals itself bit for bit (torch.equal would say no)
    with pytest.raises(AssertionError, match=r"1 of 1 elements differ in bits; first at index \(0,\): "
                                             r"actual nan \(0x7fc00001\), expected nan \(0x7fc00000\)"):
        assert_bits_equal(other, quiet)
    with pytest.raises(AssertionError, match="1 of 1"):
        assert_bits_equal(-quiet, quiet)  # the sign of a NaN is a bit too


def test_negative_zero_differs_from_zero():
    with pytest.raises(AssertionError, match=r"actual -0\.0 \(0x80000000\), expected 0\.0 \(0x00000000\)"):
        assert_bits_equal(torch.tensor([-0.0]), torch.tensor([0.0]), what="mean")
    with pytest.raises(AssertionError, match=r"0x8000\)"):
        assert_bits_equal(torch.tensor([-0.0], dtype=torch.bfloat16), torch.tensor([0.0], dtype=torch.bfloat16))


def test_shape_mismatch_fails():
    with pytest.raises(AssertionError, match=re.escape("mean [path rows_fused]: shape differs: actual (4, 1), "
                                                       "expected (4,)")):
        assert_bits_equal(torch.zeros(4, 1), torch.zeros(4), what="mean", path="rows_fused")
    with pytest.raises(AssertionError, match="shape differs"):
        assert_bits_equal(torch.zeros(2, 3), torch.zeros(3, 2))  # same element count, other shape


def test_dtype_mismatch_fails_and_unviewable_dtypes_raise():
    with pytest.raises(AssertionError, match="dtype differs: actual float32, expected float64"):
        assert_bits_equal(torch.zeros(2), torch.zeros(2, dtype=torch.float64))
    for dtype in (torch.int32, torch.int64, torch.bool, torch.complex64):
        with pytest.raises(ValueError, match="cannot view"):
            assert_bits_equal(torch.zeros(2, dtype=dtype), torch.zeros(2, dtype=dtype))
    with pytest.raises(ValueError, match="cannot view int32"):
        assert_bits_equal(np.zeros(2, np.int32), np.zeros(2, np.int32))
    with pytest.raises(ValueError):
        int_view_dtype(torch.uint8)
    assert [int_view_dtype(d) for d in (torch.float32, np.float16, "bfloat16", np.dtype("float64"))] == \
        ["int32", "int16", "int16", "int64"]
    with pytest.raises(TypeError):
        assert_bits_equal(None, torch.zeros(1))


def test_lazy_views_and_other_devices_compare_by_their_values():
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(2))
    assert_bits_equal(torch._neg_view(x), -x)  # the negative bit resolved, not the storage's bits
    assert_bits_equal(x.requires_grad_(), x.detach().clone())
    with pytest.raises(AssertionError, match="1 of 32 elements"):
        assert_bits_equal(torch._neg_view(_flip_one_bit(x.detach(), 9)), -x.detach())


@pytest.mark.gpu
def test_cuda_tensors_compare_on_their_device():
    y = torch.randn(4, 8, generator=torch.Generator().manual_seed(3)).cuda()
    assert_bits_equal(y, y.clone(), what="output", path="chain")
    with pytest.raises(AssertionError, match=re.escape("output [path chain]: 1 of 32 elements differ in bits; "
                                                       "first at index (1, 1): ")):
        assert_bits_equal(_flip_one_bit(y, 9), y, what="output", path="chain")
    with pytest.raises(AssertionError, match="1 of 32"):
        assert_bits_equal(_flip_one_bit(y, 9).cpu().numpy(), y)  # numpy against CUDA: compared on the host
    assert_bits_equal(y, y.cpu(), what="a CUDA tensor against its copy on the host")
    with pytest.raises(AssertionError, match=re.escape("1 of 32 elements differ in bits; first at index (1, 1)")):
        assert_bits_equal(_flip_one_bit(y, 9), y.cpu())


def test_numpy_arrays_scalars_and_mixed_inputs():
    a = np.array([[1.0, 2.0], [3.0, np.nan]], dtype=np.float32)
    assert_bits_equal(a, a.copy(), what="m2")
    assert_bits_equal(np.float32(0.1), np.float32(0.1))
    assert_bits_equal(torch.from_numpy(a), a)  # a torch tensor against a numpy array: compared on the host
    b = a.copy()
    b.view(np.int32)[0, 1] += 1
    with pytest.raises(AssertionError, match=re.escape("m2: 1 of 4 elements differ in bits; first at index (0, 1): "
                                                       "actual 2.0000002 (0x40000001), expected 2.0 (0x40000000)")):
        assert_bits_equal(b, a, what="m2")
    with pytest.raises(AssertionError, match=r"index \(\): actual -0\.0"):
        assert_bits_equal(np.float32(-0.0), np.float32(0.0))
    with pytest.raises(AssertionError, match="dtype differs"):
        assert_bits_equal(np.zeros(2, np.float32), np.zeros(2, np.float64))
