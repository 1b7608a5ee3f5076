"""`labkit tune`'s table on the CPU (issue 25 item 2): what it writes is what the rule reads for that GPU and no
other, ahead of the committed tables; a table measured with other kernel sources, or one that cannot be read, is
ignored and the reason says so; the short grid is a subset of the committed one. The measuring itself runs on the
GPU (tests/test_gpu_tune.py)."""
import json

import pytest

from labkit.core.device import Device
from labkit.ops.dispatch import rule, tables
from labkit.studies import dispatch, tune

A100 = Device("NVIDIA A100-SXM4-80GB", 80, 108, 163 * 1024, 65535)
# a made-up measurement (a fixture of this test, not data): rows_fused 20% faster than torch everywhere, the
# reference order 10% slower
SCORES = {0.0: {8: {"native": 1.0, "rows_fused": 0.8, "reference_order": 1.1},
                24: {"native": 1.0, "rows_fused": 0.8, "reference_order": 1.1}},
          4.0: {8: {"native": 1.0, "rows_fused": 0.8, "reference_order": 1.1},
                24: {"native": 1.0, "rows_fused": 0.8, "reference_order": 1.1}}}
BACKWARD = {0.0: {8: {"native": 1.0, "rows": 0.7, "split": 0.9}, 24: {"native": 1.0, "rows": 0.7, "split": 0.9}}}


def _write(device=A100, scores=SCORES, backward=BACKWARD, backward_graph=None):
    return tables.write_tuned({"name": device.name, "arch": device.arch, "sm_count": device.sm_count,
                               "target": device.target}, scores, backward,
                              {"created": "2026-12-01T15:00:00Z", "torch": "test", "grid": "short", "rounds": 3},
                              None, backward_graph)


@pytest.fixture
def table_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(tables.TABLE_DIR_ENV, str(tmp_path))
    return tmp_path


def test_without_a_tuned_table_nothing_serves_an_unmeasured_arch(table_dir):
    assert rule.choose(64, 4096, A100, ("rows_fused", "reference_order")) [0] == "native"
    assert rule.table_source(A100) == "no dispatch table measured on sm_80"


def test_a_tuned_table_serves_its_gpu_and_the_rule_reads_it(table_dir):
    path = _write()
    assert path.parent == table_dir and path.suffix == ".json"
    assert json.loads(path.read_text())["device"]["name"] == A100.name
    path_, why = rule.choose(64, 4096, A100, ("rows_fused", "reference_order"))
    assert path_ == "rows_fused" and "tuned on this GPU" in why and str(path) in why
    assert rule.choose_backward(64, 4096, A100, ("rows", "split"))[0] == "rows"
    assert "labkit tune" in rule.table_source(A100)
    # another GPU of the same arch and SM count does not get it: it was not measured there
    other = Device("NVIDIA A800 80GB", 80, 108, 163 * 1024, 65535)
    assert rule.table_source(other) == "no dispatch table measured on sm_80"


def test_a_tuned_table_wins_over_the_committed_one_of_its_gpu(table_dir):
    h200 = Device("NVIDIA H200", 90, 132, 227 * 1024, 65535)
    committed = rule.table_source(h200)
    assert "measured on NVIDIA H200" in committed
    _write(h200, {0.0: {8: {"native": 1.0, "reference_order": 0.5}, 24: {"native": 1.0, "reference_order": 0.5}}})
    assert rule.choose(4, 1 << 20, h200, ("chain", "reference_order"))[0] == "reference_order"
    assert "labkit tune" in rule.table_source(h200)


def test_a_stale_or_unreadable_table_is_ignored_and_said_so(table_dir, monkeypatch):
    path = _write()
    monkeypatch.setattr(tables, "_tuned", {})
    monkeypatch.setattr(tables, "_sources_digest", lambda: "0" * 64)  # the kernels changed since it was measured
    assert rule.choose(64, 4096, A100, ("rows_fused",))[0] == "native"
    assert "stale (measured with other kernels_sha256)" in rule.table_source(A100)
    monkeypatch.undo()
    monkeypatch.setenv(tables.TABLE_DIR_ENV, str(table_dir))
    import torch

    monkeypatch.setattr(tables, "_tuned", {})  # a process reads a file's verdict once; this test changes the world
    monkeypatch.setattr(torch, "__version__", "0.0.0")  # another torch: its kernel is every score's denominator
    assert "stale (measured with other torch)" in rule.table_source(A100)
    monkeypatch.undo()
    monkeypatch.setenv(tables.TABLE_DIR_ENV, str(table_dir))
    path.write_text("{ not json")
    assert "unreadable" in rule.table_source(A100)
    assert rule.choose(64, 4096, A100, ("rows_fused",))[0] == "native"


def test_the_short_grid_is_a_spread_subset_of_the_committed_grid():
    short, full = tune.grid(), tune.grid(full=True)
    assert set(short) < set(full) == set(dispatch.grid_shapes())
    assert {n.bit_length() - 1 for _, n in short} == set(tune.SHORT_LOG2_N)
    assert {r for r, _ in short} == set(tune.SHORT_ROWS)
    assert len(short) < len(full) / 2


def test_tune_refuses_to_run_without_a_gpu_or_with_too_few_rounds():
    import torch

    with pytest.raises(ValueError, match="rounds must be at least 3, .*got 2|got 2"):
        tune.tune(rounds=2)
    if torch.cuda.is_available():
        pytest.skip("the refusal without a GPU is checked on the CPU")
    with pytest.raises(ValueError, match="no CUDA device"):
        tune.tune()


def test_the_picks_table_reads_forward_and_backward_scores():
    fwd = dispatch.table_rows(SCORES, A100.sm_count)
    back = dispatch.table_rows(BACKWARD, A100.sm_count, backward=True)
    assert {v for r in fwd for k, v in r.items() if k.startswith("2^")} == {"rows"}
    assert {v for r in back for k, v in r.items() if k.startswith("2^")} == {"rows"}


def test_a_tuned_table_serves_each_protocol(table_dir):
    tables.write_tuned({"name": A100.name, "arch": 80, "sm_count": 108, "target": "sm_80"}, SCORES, None,
                       {"created": "2026-12-01T15:00:00Z"},
                       graph={0.0: {8: {"native": 1.0, "rows_fused": 1.2, "reference_order": 0.7},
                                    24: {"native": 1.0, "rows_fused": 1.2, "reference_order": 0.7}}})
    offered = ("rows_fused", "reference_order")
    assert rule.choose(16, 4096, A100, offered, "eager")[0] == "rows_fused"
    path, why = rule.choose(16, 4096, A100, offered, "graph")
    assert path == "reference_order" and "graph replay scores" in why


def test_a_table_tuned_for_another_compile_target_is_not_used(table_dir):
    from labkit.core.device import overridden

    h200 = Device("NVIDIA H200", 90, 132, 227 * 1024, 65535)
    _write(overridden(h200, "compute_90"))  # LABKIT_ARCH=compute_90 labkit tune: JIT-compiled PTX timings
    assert "measured for compute_90, this process compiles for sm_90" in rule.table_source(h200)
    assert "measured on NVIDIA H200" in rule.table_source(h200)  # the committed table serves instead


@pytest.mark.parametrize("body", ["[1, 2]", '{"format": 1, "scores": {}}',
                                  '{"format": 1, "scores": {"0.0": {"8": {"native": 0.0}}}, "device": {}}'])
def test_a_malformed_tuned_table_is_ignored_never_raised(table_dir, body):
    (table_dir / "nvidia_a100_sxm4_80gb_sm80_108.json").write_text(body)
    assert "unreadable" in rule.table_source(A100)
    assert rule.choose(64, 4096, A100, ("rows_fused",))[0] == "native"


def test_an_empty_tune_writes_nothing(table_dir):
    with pytest.raises(ValueError, match="the scores is empty"):
        _write(scores={})


def test_the_backward_rule_reads_the_protocols_own_scores(table_dir):
    """Eager picks by BACKWARD (graph replay breaking near ties), graph replay by BACKWARD_GRAPH where the table has
    it: a made-up table where host time makes our schedules lose eager (rows 1.2) and win under graph replay (0.6);
    split within 10% of rows eagerly is told apart by graph replay."""
    eager = {0.0: {8: {"native": 1.0, "rows": 1.2, "split": 1.25}, 24: {"native": 1.0, "rows": 1.2, "split": 1.25}}}
    graph = {0.0: {8: {"native": 1.0, "rows": 0.6, "split": 0.8}, 24: {"native": 1.0, "rows": 0.6, "split": 0.8}}}
    _write(backward=eager, backward_graph=graph)
    assert rule.choose_backward(64, 4096, A100, ("rows", "split"))[0] == "native"
    path, why = rule.choose_backward(64, 4096, A100, ("rows", "split"), "graph")
    assert path == "rows" and "graph replay" in why
    assert rule.choose_backward(64, 4096, A100, ("split",), "graph")[0] == "split"
    with pytest.raises(ValueError, match="protocol must be one of"):
        rule.choose_backward(64, 4096, A100, ("rows",), "replay")
    # eager near ties: split 0.9 and rows 0.85 eagerly (within TIE), graph replay has split faster
    eager = {0.0: {8: {"native": 1.0, "rows": 0.85, "split": 0.9}, 24: {"native": 1.0, "rows": 0.85, "split": 0.9}}}
    graph = {0.0: {8: {"native": 1.0, "rows": 0.8, "split": 0.6}, 24: {"native": 1.0, "rows": 0.8, "split": 0.6}}}
    _write(backward=eager, backward_graph=graph)
    assert rule.choose_backward(64, 4096, A100, ("rows", "split"))[0] == "split"
