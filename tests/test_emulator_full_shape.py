"""The CPU emulator against torch-on-H200 mean bits at the full L1/40 shape (16 rows of 4,194,304 values).

No full-size fixture is committed (268 MB per input); instead the inputs are regenerated on the CPU from their seed
(labkit.inputs draws on the CPU, so the values are the ones the GPU saw) and torch's mean bits are recovered from the
committed oracle record of the fast-statistics run, which stores, per row, the correctly rounded exact mean and the
signed number of float32 steps from it to torch's mean. About 10 s per input on 2 cores.
"""
import numpy as np
import pytest

from labkit.exact import emulator

from labkit import inputs
from labkit.tasks import L1_40

from labkit.records import run as results
from labkit.exact.oracle import ulp_steps

pytestmark = pytest.mark.slow  # the emulator over 16 rows of 4,194,304 values


def _oracle_cases():
    runs = results.committed_runs("fast_stats_counterexamples")
    if not runs:
        return []
    rec = results.load_run(runs[-1])["records"].get("oracle", {})
    return [c for c in rec.get("cases", []) if tuple(c["shape"]) == L1_40 and "native (GPU)" in c["candidates"]]


@pytest.mark.parametrize("case", _oracle_cases() or [None], ids=lambda c: c["distribution"] if c else "none")
def test_emulator_mean_bits_equal_torch_on_h200_at_full_shape(case):
    if case is None:
        pytest.skip("no committed fast-statistics run with full-shape oracle cases")
    x = inputs.make_input(case["distribution"], L1_40, case["seed"], "cpu").numpy().reshape(L1_40[0], -1)
    mean, _ = emulator.welford_rows(x)
    truth32 = np.asarray(case["truth"]["mean_f32"], np.float32)
    torch_steps = np.asarray(case["candidates"]["native (GPU)"]["mean_ulp"])
    # Same signed distance from the exact mean means the same float32: the emulator reproduces torch's bits.
    np.testing.assert_array_equal(ulp_steps(mean.astype(np.float32), truth32), torch_steps)
