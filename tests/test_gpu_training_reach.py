"""Notebook 10's "how people train" measurements run on the GPU (labkit.studies.training_reach), each part small: a
2-byte forward where the chain serves carries the schedule's floor and both protocols' picks, and the host part
measures a bf16 call torch serves beside calling torch. The values are timings (judged in the notebook, not here);
these tests check that the parts run and record what the page reads."""
from dataclasses import replace

import pytest

pytestmark = pytest.mark.gpu


def test_low_precision_records_the_chains_floor_and_both_picks():
    from labkit.studies import training_reach as reach
    from labkit.studies.bench import PROTOCOL_A, PROTOCOL_B

    eager, graph = replace(PROTOCOL_B, rounds=3), replace(PROTOCOL_A, rounds=3)
    r = reach.low_precision("bfloat16", (4, 1 << 20), eager, graph, 0, "cuda", compiled=False)
    assert r["bits_forward"] and all(r["bits_fwdbwd"])
    assert r["graph_path"] in ("chain", "rows_fused", "native")
    if r["path"] == "chain":
        f = r["floor"]
        assert 0 < f["chain_ms"] < f["floor_ms"] and f["output_bytes"] == 2 * 4 * (1 << 20) * 2
    else:
        assert "floor" not in r


def test_host_per_op_measures_a_bf16_call_torch_serves():
    from labkit.studies import training_reach as reach

    h = reach.host_per_op("cuda")
    t = h["torch_served"]
    assert t["shape"] == list(reach.TORCH_SERVED_SHAPE) and t["path"] == "native"
    assert t["dropin_us"] > 0 and t["native_us"] > 0
