"""The reference-order contract on CPU: header parsing of the installed torch, torch_path's conditions, the
wrapper's refusals, and the two notebooks (05, 06) executed in CPU mode."""
import json
import types

import pytest
import torch

from labkit.studies import source_reading as contract
from labkit.ops.eligibility import ROWWISE, UNSUPPORTED, VECTORIZED, torch_path
from labkit.studies.source_reading import TORCH_VECTORIZED_LN as C
from labkit.ops.reference_order import reference_order_layer_norm


def test_installed_header_gives_the_contract_block():
    tc = contract.read_thread_constants()
    if tc["num_threads"] is None:
        pytest.skip(f"installed torch ships no usable thread_constants.h: {tc['reason']}")
    assert tc["num_threads"] == C.threads == C.warp_size * C.warps
    assert tuple(tc["block"]) == C.block
    assert "num_threads()" in tc["raw"] and tc["expression"]


def _fake_torch(tmp_path, header: str | None, macros: str | None):
    inc = tmp_path / "torch" / "include"
    if header is not None:
        (inc / "ATen/native/cuda").mkdir(parents=True)
        (inc / "ATen/native/cuda/thread_constants.h").write_text(header)
    if macros is not None:
        (inc / "c10/macros").mkdir(parents=True, exist_ok=True)
        (inc / "c10/macros/Macros.h").write_text(macros)
    inc.mkdir(parents=True, exist_ok=True)
    return types.SimpleNamespace(__file__=str(tmp_path / "torch" / "__init__.py"), __version__="9.9.9")


HEADER = """#pragma once
#if defined(USE_ROCM)
constexpr int num_threads() {
  return 256;
}
#else
constexpr uint32_t num_threads() {
  return C10_WARP_SIZE * 4;
}
#endif
"""
MACROS = """#ifdef USE_ROCM
#define C10_WARP_SIZE warpSize
#else
// #define C10_WARP_SIZE 16  (a comment must not count)
#define C10_WARP_SIZE 32
#endif
"""


def test_header_parser_takes_the_cuda_branch(tmp_path):
    tc = contract.read_thread_constants(_fake_torch(tmp_path, HEADER, MACROS))
    assert tc["num_threads"] == 128 and tc["warp_size"] == 32 and tc["line"] == 7
    assert tc["warp_size_source"].endswith("#define C10_WARP_SIZE 32")


def test_header_parser_other_expressions(tmp_path):
    tc = contract.read_thread_constants(_fake_torch(tmp_path, HEADER.replace("C10_WARP_SIZE * 4", "(C10_WARP_SIZE << 3)"),
                                                    MACROS))
    assert tc["num_threads"] == 256


@pytest.mark.parametrize("header,macros,why", [(None, MACROS, "absent"), (HEADER, None, "C10_WARP_SIZE")])
def test_header_parser_skips_cleanly(tmp_path, header, macros, why):
    tc = contract.read_thread_constants(_fake_torch(tmp_path, header, macros))
    assert tc["num_threads"] is None and why in tc["reason"]


def test_torch_path_conditions():
    w, b = torch.ones(64), torch.zeros(64)
    x = torch.rand(2, 64)
    assert torch_path(x, w, b)[0] == VECTORIZED
    flat = torch.rand(2 * 64 + 4)
    assert torch_path(flat[4:].view(2, 64), w, b)[0] == VECTORIZED  # 16 bytes off: still aligned
    for off in (1, 2, 3):
        path, why = torch_path(flat[off:off + 128].view(2, 64), w, b)
        assert path == ROWWISE and why.startswith("X must be 16-byte aligned") and f"got {4 * off} bytes past" in why
    g = torch.ones(65)[1:]
    assert torch_path(x, g, b) == (ROWWISE, "gamma must be 16-byte aligned: torch's can_vectorize fails and it "
                                            "takes its other path (got 4 bytes past a 16-byte boundary)")
    assert torch_path(x, w, torch.zeros(65)[1:])[1].startswith("beta must be 16-byte aligned")
    assert torch_path(x, w, b, y=torch.empty(129)[1:].view(2, 64))[1].startswith("Y must be 16-byte aligned")
    assert torch_path(x, None, None, normalized_shape=(64,))[0] == VECTORIZED  # absent gamma/beta are fine
    assert torch_path(torch.rand(2, 6), torch.ones(6), torch.zeros(6))[0] == ROWWISE
    big = (1 << 24) + 4
    meta = [torch.empty(1, big, device="meta"), torch.empty(big, device="meta"), torch.empty(big, device="meta")]
    assert torch_path(*meta)[0] == ROWWISE and "2**24" in torch_path(*meta)[1]
    edge = [torch.empty(1, 1 << 24, device="meta"), torch.empty(1 << 24, device="meta"),
            torch.empty(1 << 24, device="meta")]
    assert torch_path(*edge)[0] == VECTORIZED  # N == 2**24 is still the vectorized path
    assert torch_path(x.double(), w.double(), b.double())[0] == ROWWISE
    h = torch.rand(2 * 64 + 4).half()
    assert torch_path(h[4:].view(2, 64), w.half(), b.half())[0] == VECTORIZED  # 8 bytes: half needs 8
    assert torch_path(h[2:130].view(2, 64), w.half(), b.half())[0] == ROWWISE
    assert torch_path(torch.rand(64, 2).t(), w, b)[0] == VECTORIZED  # torch copies non-contiguous input
    assert torch_path(torch.ones(2, 64, dtype=torch.int32), w, b)[0] == UNSUPPORTED
    with pytest.raises(ValueError, match="normalized_shape"):
        torch_path(x, None, None)


@pytest.mark.parametrize("label,args,reason", [
    ("misaligned x", lambda: (torch.rand(129)[1:].view(2, 64), torch.ones(64), torch.zeros(64)), "x must be 16-byte"),
    ("misaligned gamma", lambda: (torch.rand(2, 64), torch.ones(65)[1:], torch.zeros(64)), "weight must be 16-byte"),
    ("misaligned beta", lambda: (torch.rand(2, 64), torch.ones(64), torch.zeros(65)[1:]), "bias must be 16-byte"),
    ("N % 4", lambda: (torch.rand(2, 6), torch.ones(6), torch.zeros(6)), "must be a multiple of 4"),
])
def test_refusal_says_where_torch_takes_its_other_path(label, args, reason):
    """The predicate the wrappers run names torch's own condition, with the value torch_path reports."""
    from labkit.ops.eligibility import refusal

    why = refusal(*args(), 1e-5, require_cuda=False)
    assert why.torch_path and "torch" in why.condition and reason in str(why), label
    assert f"(got {why.actual})" in torch_path(*args())[1]


def test_refusal_of_n_over_2_24_names_torchs_limit():
    from labkit.ops.eligibility import refusal

    big = (1 << 24) + 4
    why = refusal(torch.empty(1, big, device="meta"), torch.empty(big, device="meta"),
                  torch.empty(big, device="meta"), 1e-5, require_cuda=False)
    assert why.torch_path and "2**24" in why.condition and "other path" in why.condition


def test_wrapper_refuses_on_the_first_condition():
    x = torch.rand(2, 64)
    with pytest.raises(ValueError, match="x must be a CUDA tensor"):
        reference_order_layer_norm(x, torch.ones(64), torch.zeros(64), 1e-5)
    with pytest.raises(ValueError, match="x must be float32"):  # torch vectorizes half; our kernel does not
        reference_order_layer_norm(x.half(), torch.ones(64).half(), torch.zeros(64).half(), 1e-5)
    with pytest.raises(ValueError, match="x must be float32"):
        reference_order_layer_norm(x.double(), torch.ones(64).double(), torch.zeros(64).double(), 1e-5)


def test_contract_shape_and_evidence():
    assert C.threads == 128 and C.block == (32, 4) and C.warps * C.warp_size == C.threads
    assert C.block_tree_shape == (2, 1) and C.vector_width == 4
    assert C.conditions.max_n == 1 << 24 and C.conditions.n_multiple == 4
    assert C.conditions.aligned_buffers == ("X", "Y", "gamma", "beta")
    assert "B = the thread's own state" in C.merge_argument_order
    versions = dict(C.verified_on)
    assert versions["2.5.1"].startswith("post: RTX 3090")
    from labkit.records.run import committed_runs

    evidence = contract.verified_on()
    for run in committed_runs("environment"):
        assert any(f"data/runs/{run.name}" in ev for _, ev in evidence), run.name
    json.dumps(C.to_json())
    assert any(r["aspect"] == "condition: max_n" for r in C.rows())


def test_examples_cover_both_paths():
    rows = {r["case"]: r["torch path"] for r in contract.examples()}
    assert rows["aligned (2, 64) float32"] == VECTORIZED
    assert rows["view 4 bytes off alignment (flat[1:])"] == ROWWISE
    assert rows["N = 6 (N % 4 != 0)"] == ROWWISE


def test_reduction_tree_figure():
    import matplotlib

    matplotlib.use("Agg")
    fig = contract.reduction_tree_figure()
    assert len(fig.axes) == 2
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_source_rows_cover_the_kernel_file_and_the_wheel_headers():
    rows = contract.source_rows()
    assert {r["file"] for r in rows} == {C.source["file"], *C.source["headers_from_wheel_2.11.0"]}
    assert len(rows) == len(C.source["lines"]) + len(C.source["headers_from_wheel_2.11.0"])


def test_header_verdict_says_match_mismatch_or_skip():
    good = {"torch": "x", "num_threads": 128, "block": (32, 4), "expression": "C10_WARP_SIZE * 4"}
    assert contract.header_verdict(good).endswith("matches the contract")
    assert contract.header_verdict({**good, "num_threads": 256, "block": (32, 8)}).startswith("MISMATCH")
    assert contract.header_verdict({"num_threads": None, "reason": "no headers"}) == "SKIPPED: no headers"


def test_contract_rows_carry_the_evidence_read_now():
    evidence = [r["value"] for r in contract.contract_rows() if r["aspect"].startswith("verified on torch")]
    assert evidence == [e for _, e in contract.verified_on()]
    assert [r["aspect"] for r in contract.other_path_rows()] == list(C.other_path)


def test_machine_code_and_verdict_from_records(tmp_path):
    assert contract.machine_code_record(root=tmp_path) is None and contract.machine_code_rows(None) == []
    rec = contract.machine_code_record("sm_90")
    assert rec is not None and rec["file"].endswith("-sm_90.json") and rec["note"] is None
    assert len(contract.machine_code_rows(rec)) == len(rec["verdict"]["checks"])
    tc = {"num_threads": None, "reason": "no headers"}
    refusals = [{"names_condition": True}, {"names_condition": False}]
    lines = contract.verdict_lines(tc, refusals, rec)
    assert "SKIPPED: no headers" in lines[0] and "1/2 raise" in lines[3]
    assert lines[4].endswith(f"same FMA contractions: {'yes' if rec['verdict']['same_contractions'] else 'no'}.")
    assert "no committed SASS comparison" in contract.verdict_lines(tc, refusals, None)[4]


def test_machine_code_record_is_the_devices_arch():
    # not the last file by name (sm_90 sorts after sm_120): an A100's record is sm_80's
    rec = contract.machine_code_record("sm_80")
    assert rec["file"].endswith("-sm_80.json") and rec["torch"]["device_arch"] == "sm_80" and rec["note"] is None
    # an arch without a record (sm_103 runs torch's sm_100 code, ours compiled for sm_103: not recorded) reads
    # sm_90's and says so, in the record and in the verdict
    other = contract.machine_code_record("sm_103")
    assert other["file"].endswith("-sm_90.json") and "no committed SASS comparison for sm_103" in other["note"]
    lines = contract.verdict_lines({"num_threads": None, "reason": "no headers"}, [], other)
    assert lines[-1] == f"Machine code: {other['note']}."


def _fake_run(root, name, torch_version, gpu="NVIDIA H200", **records):
    d = root / f"20260101T000000Z-{name}"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"name": name, "provenance": {"torch": torch_version, "gpu": gpu}}))
    for k, v in records.items():
        (d / f"{k}.json").write_text(json.dumps(v))
    (d / "manifest.json").write_text(json.dumps({"status": "complete", "files": {}}))
    return d


def test_the_page_names_the_installed_headers_torch_beside_the_gpu_runs_when_no_run_records_it(tmp_path):
    _fake_run(tmp_path, "timing", "2.11.0+cu130")
    tc = contract.page_thread_constants(_fake_torch(tmp_path / "torch", HEADER, MACROS), root=tmp_path)
    assert tc["source"] == "installed" and tc["gpu_runs_torch"] == ["2.11.0+cu130"]
    line = contract.header_source_line(tc)
    assert "installed" in line and "no committed run records this header" in line and "2.11.0+cu130" in line
    rows = contract.header_rows(tc)
    assert rows["torch of the GPU runs"] == "2.11.0+cu130" and rows["read from"].startswith("the torch installed")


def test_the_page_prefers_the_header_a_committed_run_recorded(tmp_path):
    rec = {"torch": "2.11.0+cu130", "num_threads": 128, "expression": "C10_WARP_SIZE * 4", "block": [32, 4]}
    _fake_run(tmp_path, "environment", "2.11.0+cu130", thread_constants=rec)
    tc = contract.page_thread_constants(root=tmp_path)
    assert tc["source"] == "recorded" and tc["run"].endswith("environment") and tc["torch"] == "2.11.0+cu130"
    assert "recorded with run" in contract.header_source_line(tc)
    assert contract.header_verdict(tc).startswith("torch 2.11.0+cu130 (recorded with run")
    assert contract.verdict_lines(tc, [], None)[0].startswith("Recorded header:")
