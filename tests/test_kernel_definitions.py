"""Notebook 06's study (labkit.studies.kernel_definitions) on the CPU: sources, compile and ptxas rows, and the
FMA-contraction evidence against torch's committed SASS summary."""
import pytest

from labkit.core import compile as kc
from labkit.core.sources import kernel_dir
from labkit.studies import kernel_definitions as kd


def test_sources_show_each_file_once_kernels_first():
    records = [kc.compile_kernel(k, "sm_90").record for k in ("affine_rows", "reference_stats", "chain_floor")]
    files = kd.sources(records)
    names = [name for name, _ in files]
    assert len(names) == len(set(names))  # welford_ln.cuh is included by two of them, shown once
    assert names[:3] == ["affine_rows.cu", "reference_stats.cu", "chain_floor.cu"]
    assert set(names[3:]) == {h for r in records for h in r.headers} and "welford_ln.cuh" in names
    assert dict(files)["chain_floor.cu"] == (kernel_dir() / "chain_floor.cu").read_text()


def test_compile_and_resource_rows_for_one_kernel():
    records = [kc.compile_kernel("chain_floor", "sm_90").record]
    [row] = kd.compile_rows(records)
    assert row["kernel"] == "chain_floor" and "--fmad=true" in row["options"] and row["arch"] == "sm_90"
    [res] = kd.resource_rows(records)
    assert res["function"] == "chain_floor" and res["registers"] > 0 and res["code identical"] is True


def test_replayed_evidence_from_the_committed_summary():
    ev = kd.contraction_evidence("sm_90", live=False)
    assert ev["source"].startswith("ours REPLAYED from ") and ev["same_code"] is None
    assert ev["verdict"]["same_contractions"] is True
    assert all(r["holds"] for r in kd.check_rows(ev))
    merge = kd.first_merge_rows(ev)
    assert merge[0] == {"#": 0, "torch": "SHFL.DOWN", "ours": "SHFL.DOWN"}
    assert not any(r["torch"].startswith("SHFL") for r in merge[3:])  # stops before the second merge
    assert {r["region"] for r in kd.region_rows(ev)} == set(ev["vec"]["regions"])
    assert kd.comparison_rows(ev) == ev["comparison"]
    assert any(r["key"] == "wheel sha256" for r in kd.provenance_rows(ev))
    assert kd.TORCH_VECTORIZED in {r["torch function"] for r in kd.torch_function_rows(ev)}
    resources = [{"kernel": "k", "function": "f", "spill stores (B)": 8, "spill loads (B)": 0,
                  "code identical": True}]
    lines = kd.verdict_lines(ev, resources)
    assert lines[0].startswith("SAME FMA CONTRACTIONS") and lines[0].endswith(": yes") and "REPLAYED" in lines[1]
    assert lines[-1].endswith("spills: k/f") and "identical to the cached cubins: yes;" in lines[-1]  # a word, not True


def test_evidence_reads_the_compile_targets_record():
    # the notebook passes its compile target ("sm_80" on an A100): the sm_80 record, not the last file by name
    ev = kd.contraction_evidence("sm_80", live=False)
    assert ev["file"].endswith("-sm_80.json") and ev["note"] is None
    assert ev["torch"]["device_arch"] == "sm_80" and ev["torch"]["arch"] == "sm_80"
    assert {f["compile_record"]["arch"] for f in ev["ours"].values()} == {"sm_80"}
    # sm_89: torch's sm_86 cubin (it ships no sm_89 LayerNorm), ours compiled for sm_89
    ev89 = kd.contraction_evidence("sm_89", live=False)
    assert ev89["file"].endswith("-sm_89.json") and ev89["torch"]["arch"] == "sm_86"


def test_an_arch_without_a_record_falls_back_to_sm_90_and_says_so():
    ev = kd.contraction_evidence("sm_103", live=False)
    assert ev["file"].endswith("-sm_90.json") and "no committed SASS comparison for sm_103" in ev["note"]
    lines = kd.verdict_lines(ev, [])
    assert lines[2] == ev["note"]


def test_no_committed_summary_is_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="no committed SASS comparison"):
        kd.contraction_evidence("sm_90", live=False, root=tmp_path)


@pytest.mark.slow
def test_live_evidence_when_a_disassembler_exists():
    if not kd.can_disassemble():
        pytest.skip("no cuobjdump/nvdisasm here")
    ev = kd.contraction_evidence("sm_90")
    assert ev["source"] == "ours disassembled now" and set(ev["same_code"]) <= set(ev["ours"])
    assert ev["verdict"]["same_contractions"] is True
    # a record of another arch holds that arch's cubins: no byte comparison with ours for sm_103
    assert kd.contraction_evidence("sm_103")["same_code"] is None
