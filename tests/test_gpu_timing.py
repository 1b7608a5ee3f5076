"""The timing study on a GPU, quick mode on small shapes: every registered method becomes a row, native and the
reference-order kernel are timed under both protocols, and the Triton peer either runs or says why.
Skipped without a CUDA device; run on the H200 with `python -m pytest -m gpu`."""
import json

import pytest

from labkit.studies import timing

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def quick_record():
    protocols = timing.protocols_for("quick", ["A", "B"], rounds=3, repeats=2, rounds_b=4)
    # (2, 131072): N = 2**17 is above Liger's 65536 limit, so its row must carry the error, not crash the study.
    cases = timing.cases_for([(3, 64, 17, 19), (2, 131072)])
    return timing.run_study(cases, protocols, device="cuda", ceiling_bytes=64 << 20,
                            log=lambda *a: None)


def test_quick_study_rows_and_protocols(quick_record):
    json.dumps(quick_record)
    names = [m["name"] for m in quick_record["methods"]]
    for case in quick_record["cases"]:
        assert list(case["methods"]) == names  # every method is a row, timed or not
        for key in ("A", "B"):
            t = case["timing"][key]
            assert {"native", "reference_order"} <= set(t["samples_ms"]), case["methods"]["reference_order"]
            assert t["ratio_vs_baseline"]["native"]["median"] == 1.0
        assert case["methods"]["reference_order"]["check"]["bit_equal_fraction"] == 1.0
        assert case["methods"]["native_torchscript"]["status"] in ("timed", "unavailable")
        for name, row in case["methods"].items():
            assert row["status"] in ("timed", "unavailable", "failed_check", "check_error")
            if row["status"] != "timed":
                assert timing.failure_text(row)
    assert quick_record["copy_ceiling"]["A"]["median_gbps"] > 100


def test_liger_runs_or_carries_its_error(quick_record):
    small, wide = quick_record["cases"]
    if small["methods"]["liger"]["error"] and "liger_kernel" in small["methods"]["liger"]["error"]:
        pytest.skip("liger-kernel is not installed here")
    assert small["methods"]["liger"]["status"] in ("timed", "failed_check")
    assert wide["methods"]["liger"]["status"] == "unavailable" and "65536" in wide["methods"]["liger"]["error"]
