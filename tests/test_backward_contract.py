"""The backward's contract on the CPU: every claim re-derived from torch's own committed sm_90 SASS, BlockReduceSum
read from the installed header, the emulator bit-exact against torch's GPU gradients (golden fixtures), and the
backward kernels compiling for every arch their plans allow."""
import copy
import json
from pathlib import Path

import numpy as np
import pytest

from labkit.exact import backward as emulator
from labkit.records.fixtures import BACKWARD_DIR
from labkit.studies import backward_contract as bc

FIXTURES = sorted(Path(BACKWARD_DIR).glob("*.npz"))


def test_every_claim_holds_in_torchs_own_sass():
    record = json.loads(bc.RECORD.read_text())
    assert record["wheel"].startswith("torch-2.11.0") and set(record["functions"]) == set(bc.TORCH_FUNCTIONS)
    failed = [c["claim"] for c in bc.checks(record) if not c["holds"]]
    assert not failed, failed


def test_a_contraction_torch_does_not_make_fails_its_claim():
    """Planted: stats_x1 fused (FFMA) instead of FADD-ing the rounded product — the check must say no."""
    record = copy.deepcopy(json.loads(bc.RECORD.read_text()))
    ops = record["functions"]["layer_norm_grad_input_kernel_vectorized<float, float, false>"]["fp_ops"]
    i = next(i for i, o in enumerate(ops) if o.startswith("FADD R26, R27, R26"))
    ops[i] = "FFMA R26, R4, R12, R26"
    holds = {c["claim"]: c["holds"] for c in bc.checks(record)}
    assert not holds["no other FFMA in the loop body (the product is not fused into stats_x1)"]


def test_block_reduce_sum_in_the_installed_header():
    text = bc.installed_header()
    assert text is not None, "the installed torch ships no ATen/native/cuda/block_reduce.cuh"
    assert all(c["holds"] for c in bc.header_checks(text))
    assert not all(c["holds"] for c in bc.header_checks(text.replace("val += WARP_SHFL_DOWN", "val = WARP_SHFL_DOWN")))


@pytest.mark.skipif(not FIXTURES, reason="no backward fixtures committed (record on a GPU: "
                    "labkit.records.fixtures.record_backward_fixtures)")
@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_emulator_is_bit_exact_against_torchs_gpu_gradients(path):
    f = np.load(path)
    gamma = f["gamma"] if "gamma" in f.files else None
    dx, dg, db, parts = emulator.layer_norm_backward(f["x"], f["dy"], gamma, f["mean"], f["rstd"], int(f["sm_count"]))
    assert parts == 1
    assert np.array_equal(dx.view(np.int32), f["dx"].view(np.int32))
    if gamma is not None:
        assert np.array_equal(dg.view(np.int32), f["dgamma"].view(np.int32))
        assert np.array_equal(db.view(np.int32), f["dbeta"].view(np.int32))


def test_templates_follow_torchs_host_code():
    from labkit.ops.backward import gamma_beta_template as t

    assert (t(16, 1 << 22, 132).groups, t(64, 256, 132).groups, t(128, 256, 132).groups, t(256, 256, 132).groups) \
        == (1, 8, 16, 32)
    assert t(70000, 64, 132).partial_groups == min(32768 // 2, -(-70000 // 32)) and t(70000, 64, 132).rows_per_group == 32
    assert t(70000, 2112, 132).partial_groups == 1  # N/32 = 66 is not < 132/2


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89", "sm_90"])
def test_backward_kernels_compile_where_their_plans_allow(arch, cache_dir):
    from labkit.core.compile import compile_kernel

    for k in ("grad_row_sums", "grad_rows_fused", "grad_columns"):
        assert compile_kernel(k, arch).record.arch == arch
    if arch == "sm_90":
        compile_kernel("grad_chain_sums", arch)
    else:
        with pytest.raises(Exception, match="NVRTC"):  # why the chain schedule's plan needs tensor maps (sm_90)
            compile_kernel("grad_chain_sums", arch)
