"""The fused-consumer study's run functions on the GPU in quick mode (labkit.studies.fused): the records notebook 11
writes, each method timed under both protocols beside the copy ceiling, every bits case identical, and KernelBench's
correctness trials passed with equal bits, before the notebook's own run."""
import pytest

from labkit.studies import fused

pytestmark = pytest.mark.gpu


def test_quick_timing_record():
    rec = fused.timing(fused.QUICK_SHAPE, rounds=3, device="cuda", b_trials=5)
    for protocol in ("A", "B"):
        assert set(rec["timing"][protocol]["stats"]) == set(fused.METHODS)
        assert rec["copy_ceiling"][protocol]["median_gbps"] > 0
    assert rec["traffic"]["fused_path"] != "native"
    assert len(fused.timing_rows(rec)) == 2 * (len(fused.METHODS) + 1)
    assert all(g["ratio"] is not None for g in fused.goals(rec))


def test_quick_bits_are_all_identical():
    rec = fused.bits("quick", "cuda")
    bad = [c for c in rec["cases"] if not (c["forward"] and c["backward"])]
    assert bad == []
    assert all(c["path"] != "native" for c in rec["cases"])


def test_quick_kernelbench_tasks_pass_with_equal_bits():
    rec = fused.kernelbench("quick", num_trials=3, device="cuda")
    for t in rec["tasks"]:
        assert "error" not in t, t
        assert t["correct"] == t["bits_identical"] == f"{fused.KB_CORRECT_TRIALS}/{fused.KB_CORRECT_TRIALS}", t
        assert set(t["times_ms"]) == {"reference", "torch.compile", "ModelNew (labkit)"}
