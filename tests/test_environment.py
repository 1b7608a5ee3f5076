"""The environment study (notebook 00) on the CPU: provenance and kernel-hash tables, compile rows, the smoke run
and its verdict, read from records."""
import pytest

from labkit import tasks
from labkit.records import run as results
from labkit.studies import environment


def _compile(kernel, source, cubin, headers=()):
    return {"kernel": kernel, "source_sha256": source * 64, "headers": list(headers), "arch": "sm_90",
            "options": ["--fmad=true"], "nvrtc_version": [13, 0], "cubin_sha256": cubin * 64, "cache_hit": True}


def test_provenance_rows_are_a_readable_table_without_the_kernel_hashes():
    recorded = {"torch": "2.11.0+cu130", "gpu": "NVIDIA H200", "gpu_l2_bytes": 62914560, "nvrtc": [13, 0],
                "kernel_sources_sha256": {"a.cu": "0" * 64}}
    rows = {r["field"]: r for r in environment.provenance_rows(recorded, {"torch": "2.13.0+cpu", "gpu": None})}
    assert "kernel_sources_sha256" not in rows
    assert rows["torch"]["recorded run"] == "2.11.0+cu130" and rows["torch"]["this execution"] == "2.13.0+cpu"
    assert rows["gpu"]["this execution"] == "—" and rows["nvrtc"]["recorded run"] == "13.0"
    assert rows["gpu_l2_bytes"]["recorded run"] == "60 MiB (62,914,560 bytes)" and rows["torch"]["what"]
    assert "this execution" not in environment.provenance_rows(recorded)[0]


def test_the_platform_row_shows_the_os_family_not_the_vm_kernel_build():
    rows = environment.provenance_rows({"platform": "Linux-6.18.44-fc-v1147-gpu-x86_64-with-glibc2.39"},
                                       {"platform": "Linux-6.8.0-45-generic-aarch64-with-glibc2.35"})
    assert rows[0]["recorded run"] == "Linux, x86_64, glibc 2.39"
    assert rows[0]["this execution"] == "Linux, aarch64, glibc 2.35"
    assert environment.os_family("macOS-14.1-arm64-arm-64bit") == "macOS 14.1, arm64"


def test_kernel_hash_rows_set_the_two_hashes_side_by_side():
    prov = {"kernel_sources_sha256": {"k.cu": "a" * 64, "h.cuh": "b" * 64, "old.cu": "c" * 64}}
    rows = {r["file"]: r for r in environment.kernel_hash_rows(
        prov, [_compile("k", "d", "e", ["h.cuh"])], {"k.cu": "a" * 64, "h.cuh": "f" * 64, "new.cu": "0" * 64})}
    assert rows["k.cu"][environment.FILE_HASH] == "a" * 16 and rows["k.cu"][environment.SOURCE_HASH] == "d" * 16
    assert rows["k.cu"]["source_sha256 covers"] == "k.cu + h.cuh"
    assert rows["h.cuh"]["source_sha256 covers"] == "header: inside the source_sha256 of k.cu"
    assert rows["h.cuh"][environment.SOURCE_HASH] == "—"
    assert rows["k.cu"]["this checkout's file"] == "same bytes"
    assert rows["h.cuh"]["this checkout's file"] == "CHANGED since the run"
    assert rows["old.cu"]["this checkout's file"] == "absent" and rows["new.cu"]["this checkout's file"] == "no recorded hash"


def test_kernel_hashes_of_this_checkout_match_a_provenance_of_this_checkout():
    rows = environment.kernel_hash_rows(results.provenance("cpu"), None, results.kernel_source_hashes())
    assert rows and all(r["this checkout's file"] == "same bytes" for r in rows)


def test_compile_rows_compare_cubins_with_the_recorded_run():
    now = [_compile("a", "1", "2"), _compile("b", "3", "4"), _compile("c", "5", "6")]
    recorded = [_compile("a", "1", "2"), _compile("b", "3", "9")]
    rows = {r["kernel"]: r for r in environment.compile_rows(now, recorded)}
    assert [rows[k]["same cubin as the recorded run"] for k in "abc"] == ["yes", "NO", "not in the run"]
    assert rows["a"]["nvrtc"] == "13.0" and rows["a"]["cubin_sha256"] == "2" * 16
    assert "same cubin as the recorded run" not in environment.compile_rows(now)[0]


def test_compile_target():
    assert environment.compile_target("cpu", "sm_90") == "sm_90"


def test_smoke_run_uses_the_mode_shapes_and_the_verdict_reads_the_record():
    rec = environment.run_smoke("quick", "cpu")  # on a CPU, torch is its own candidate: the record's format only
    shapes = list(dict.fromkeys(tuple(c["shape"]) for c in rec["cases"]))
    assert shapes == [tuple(s) for s in tasks.config("quick").smoke_shapes]
    assert len(rec["cases"]) == 2 * len(shapes) and all(c["identical"] for c in rec["cases"])
    rows = environment.smoke_rows(rec)
    assert rows[0]["shape"] == tasks.shape_key(shapes[0]) and rows[0]["identical"] == "yes"
    line = environment.verdict(rec, {"gpu": "G", "torch": "T"}, "LIVE run R")
    assert line.startswith(f"{len(rows)}/{len(rows)} smoke cases bit-identical") and "on G with torch T — LIVE run R" in line
    rec["cases"][1]["identical"] = False
    bad = environment.verdict(rec, {}, "src")
    assert bad.startswith(f"{len(rows) - 1}/{len(rows)}") and f"NOT identical: {rows[1]['shape']} normal_plus_1000" in bad
    assert environment.verdict(None, {}, "no committed GPU run yet") == "No smoke-test verdict: no committed GPU run yet."
    assert environment.smoke_rows(None) == []


def test_smoke_run_refuses_an_unknown_mode():
    with pytest.raises(ValueError, match="mode"):
        environment.run_smoke("huge", "cpu")
