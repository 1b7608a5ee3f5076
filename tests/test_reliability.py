"""Issue 15 on the CPU: the refused-inputs matrix, sanitizer report parsing, the reliability
summary block, the ring kernels' expected checksum, and property tests of the exact-arithmetic helpers."""
import math
import re
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from labkit.exact.fma import fma32, fma32_scalar
from labkit.lab import refusals
from labkit.records import check
from labkit.studies.reliability import reliability_block
from labkit.studies import reliability as rel

def test_matrix_covers_issue_15_conditions():
    cases = " ".join(c.case for c in refusals._cases()).lower()
    for word in ("float64", "device", "non-contiguous", "alignment", "multiple of 4", "2**24", "2**31", "no affine",
                 "shape", "empty", "eps nan", "negative", "infinite", "out is x", "requires grad"):
        assert word in cases, word


def test_every_cpu_row_names_its_condition():
    rows = refusals.refusal_rows("cpu")
    ran = [r for r in rows if r["names_condition"] is not None]
    assert len(ran) >= 27
    assert all(r["names_condition"] for r in ran), [r for r in ran if not r["names_condition"]]


def test_cpu_tensors_are_refused_by_the_functions_themselves():
    rows = [r for r in refusals.refusal_rows("cpu") if r["case"] == "CPU tensors"]
    assert {r["function"] for r in rows} == set(refusals.PUBLIC_FUNCTIONS)


# ------------------------------------------------------------------------------------------ sanitizer reports

RACE_REPORT = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at chain_stats_tma+0x1b70
=========     and Read access at chain_stats_tma+0x2d40 [14400 hazards]
=========
========= Error: Race reported between Write access at ring_ok+0x300
=========     and Read access at ring_ok+0x500 [64 hazards]
=========
========= Warning: Race reported between Read access at affine_columns+0x10
=========     and Write access at affine_columns+0x20 [2 hazards]
=========
========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warning)
"""

MEMCHECK_REPORT = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at 0x1f0 in affine_rows_interleaved
=========     by thread (3,0,0) in block (0,0,0)
=========     Address 0x7f00 is out of bounds
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: cuLaunchKernel [0x1234]
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call
=========
========= ERROR SUMMARY: 2 errors
"""


def test_racecheck_report_is_counted_per_kernel():
    rep = rel.parse_report(RACE_REPORT)
    assert (rep["finished"], rep["errors"], rep["warnings"]) == (True, 2, 1)
    assert rep["per_kernel"]["chain_stats_tma"] == {"errors": 1, "warnings": 0, "hazards": 14400}
    assert rep["per_kernel"]["ring_ok"]["errors"] == 1
    assert rep["per_kernel"]["affine_columns"] == {"errors": 0, "warnings": 1, "hazards": 2}
    assert rep["unattributed"] == 0


def test_memcheck_report_old_format_and_api_error():
    rep = rel.parse_report(MEMCHECK_REPORT)
    assert rep["errors"] == 2 and rep["per_kernel"]["affine_rows_interleaved"]["errors"] == 1
    assert rep["unattributed"] == 1  # the API error names no kernel


def test_demangled_cxx_kernels_are_attributed_by_name():
    text = ("========= COMPUTE-SANITIZER\n"
            "========= Error: Race reported between Write access at void at::native::reduce_kernel<(int)512, (int)1, "
            "at::native::ReduceOp<float, at::native::WelfordOps<float, float, int, cuda::std::__4::pair<float, float>>, "
            "unsigned int, float, (int)2, (int)2>>(T3)+0xcc00\n"
            "=========     and Read access at void at::native::reduce_kernel<(int)512>(T3)+0xc930 [8192 hazards]\n"
            "========= \n"
            "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    rep = rel.parse_report(text)
    assert rep["per_kernel"] == {"at::native::reduce_kernel": {"errors": 1, "warnings": 0, "hazards": 8192}}
    assert rep["unattributed"] == 0


def test_unattributed_errors_are_shown_not_counted_as_ours():
    from labkit.studies.reliability import reliability_block

    inv = {"label": "product:small", "tool": "racecheck", "finished": True, "errors": 2, "kernel_filter": False,
           "per_kernel": {"?": {"errors": 2, "warnings": 0, "hazards": 9}}, "unattributed": 2}
    block = reliability_block({"sanitizer": {"invocations": [inv], "product_kernels": rel.PRODUCT_KERNELS}})
    assert block["sanitizer"]["racecheck"] == 0 and block["sanitizer_unattributed"]["racecheck"] == 2


def test_a_report_without_summary_did_not_finish():
    rep = rel.parse_report("========= COMPUTE-SANITIZER\n")
    assert rep["finished"] is False and rep["errors"] is None


def test_sanitizer_argv_filters_our_kernels():
    argv = rel.sanitizer_argv("racecheck", ["python", "t.py"])
    assert argv[:2] == ["compute-sanitizer", "--tool=racecheck"] and argv[-2:] == ["python", "t.py"]
    pattern = argv[argv.index("--kernel-name") + 1].removeprefix("kre=")
    for ours in ("chain_stats_tma", "rows_fused_reg8", "rows_fused_warp1", "rows_fused_reg32", "reference_order_stats",
                 "affine_columns", "ring_ok", "split_affine_interleaved", "nchw_rms_s1_v4", "rows_mean_abs",
                 "grad_row_sums", "grad_chain_sums_s4", "grad_chain_sums_split8", "grad_chain_sums_ring_split8",
                 "grad_chain_sums_ring_s1", "chain_stats_ring",
                 "grad_rows_fused_reg4", "grad_columns_streamed", "grad_columns_prefetched", "grad_columns_tiled",
                 "grad_columns_fold"):
        assert re.fullmatch(pattern, ours)
    for theirs in ("vectorized_layer_norm_kernel", "distribution_elementwise_grid_stride_kernel", "rows_other",
                   "layer_norm_grad_input_kernel_vectorized", "GammaBetaBackwardCUDAKernelTemplate"):
        assert not re.fullmatch(pattern, theirs)
    with pytest.raises(ValueError, match="tool"):
        rel.sanitizer_argv("leakcheck", [])


def _inv(label, tool, per_kernel, errors=None, finished=True, kernel_filter=True):
    errors = sum(c["errors"] for c in per_kernel.values()) if errors is None else errors
    return {"label": label, "tool": tool, "finished": finished, "errors": errors if finished else None,
            "per_kernel": per_kernel, "kernel_filter": kernel_filter, "seconds": 1.0}


def _k(errors, hazards=0):
    return {"errors": errors, "warnings": 0, "hazards": hazards}


def _records(ring_ok_errors, ring_ok_exact=True, all_arrive_errors=0):
    invs = [_inv("product:small", "racecheck", {"chain_stats_tma": _k(8, 120000)}),
            _inv("product:small", "memcheck", {}),
            _inv("product:l1_40", "initcheck", {}, finished=False),
            _inv("evidence:rings", "racecheck", {"ring_ok": _k(ring_ok_errors), "ring_race_side": _k(3),
                                                  "ring_all_arrive": _k(all_arrive_errors), "chain_stats_tma": _k(0)})]
    plain = [{"target": "ring_ok", "exact": ring_ok_exact}, {"target": "ring_race_side", "exact": False}]
    evidence = rel.racecheck_evidence([i for i in invs if i["tool"] == "racecheck"], plain)
    fuzz = {"cases": [{"shape": [2, 8], "methods": {"a": {"output": True, "mean": True, "rstd": True},
                                                    "b": {"output": True, "mean": False, "rstd": True}}},
                      {"shape": [2, 8], "methods": {"a": {"error": "ValueError: x"}}},
                      {"shape": [3, 8], "skipped": "OutOfMemoryError"}]}
    return {"sanitizer": {"product_kernels": rel.PRODUCT_KERNELS, "invocations": invs}, "racecheck_evidence": evidence,
            "fuzz": fuzz, "soak": {"calls": 10000, "growth_bytes": 0}}


def test_reliability_block_has_the_issue_keys_and_counts():
    block = reliability_block(_records(ring_ok_errors=2))
    assert list(block) == ["sanitizer", "racecheck_unexplained", "sanitizer_unattributed", "fuzz_cases", "fuzz_shapes",
                           "fuzz_mismatches", "soak_calls", "soak_mem_growth_bytes"]
    assert block["sanitizer"] == {"memcheck": 0, "racecheck": 8, "initcheck": None, "synccheck": None}
    # ring_ok (the old protocol) is reported, but chain_stats_tma now uses ring_all_arrive's, which is not: its
    # reports are not explained by the tool's blind spot
    assert block["racecheck_unexplained"] == 8
    assert reliability_block(_records(ring_ok_errors=2, all_arrive_errors=1))["racecheck_unexplained"] == 0
    assert (block["fuzz_cases"], block["fuzz_shapes"], block["fuzz_mismatches"]) == (2, 1, 2)
    assert (block["soak_calls"], block["soak_mem_growth_bytes"]) == (10000, 0)
    assert "soak_training_calls" not in block  # a soak without training calls claims nothing about them
    records = _records(ring_ok_errors=2)
    records["soak"].update({"method_calls": {"chain_auto": 9000, rel.TRAINING: 1000}, "sampled": 104,
                            "sampled_mismatches": 1, "errors": 0})
    trained = reliability_block(records)
    assert (trained["soak_training_calls"], trained["soak_sampled_mismatches"]) == (1000, 1)
    assert "1000 of them training calls; 1 of 104 sampled calls not bit-identical" in rel.reliability_line(trained)


@pytest.mark.parametrize("ring_ok_errors,exact", [(0, True), (2, False)])
def test_chain_reports_stay_unexplained_without_the_minimal_kernel_evidence(ring_ok_errors, exact):
    records = _records(ring_ok_errors, exact)
    assert records["racecheck_evidence"]["explained"] is False
    assert reliability_block(records)["racecheck_unexplained"] == 8


def test_unfiltered_invocations_count_only_our_kernels():
    inv = _inv("product:small", "memcheck", {"vectorized_layer_norm_kernel": _k(5), "rows_fused_reg2": _k(1)},
               kernel_filter=False)
    block = reliability_block({"sanitizer": {"product_kernels": rel.PRODUCT_KERNELS, "invocations": [inv]}})
    assert block["sanitizer"]["memcheck"] == 1


# ------------------------------------------------------------------------------------------ ring checksums

def test_ring_expected_matches_a_step_by_step_sum():
    rows, n = 2, 512 * 3
    x = torch.randn(rows, n)
    want = rel.ring_expected(x, rows, n)
    bits = x.view(torch.int32).numpy().astype(np.int64).reshape(rows, n)
    for row in range(rows):
        for w in range(4):
            for lane in (0, 17, 31):
                acc = 0
                for step in range(n // 512):
                    base = step * 512 + w * 128 + lane * 4
                    acc += int(bits[row, base:base + 4].sum()) + sum(4 * step + k + 1 for k in range(4))
                assert want[row, w, lane].item() == acc % (1 << 32)


def test_random_shapes_stay_in_bounds_and_targets_follow_n():
    rng = np.random.default_rng(0)
    for _ in range(300):
        shape = rel.random_shape(rng, 1 << 27)
        rows, n = shape[0], math.prod(shape[1:])
        assert 1 <= rows <= 70000 and 4 <= n <= 1 << 24 and n % 4 == 0 and rows * n <= 1 << 27
    from labkit.core.device import Device

    h200 = Device("NVIDIA H200", 90, 132, 232448, 65535)
    targets = lambda shape: rel.targets_for(shape, device=h200)  # noqa: E731
    assert "chain_tma" in targets((2, 64, 64, 64)) and "chain_tma" not in targets((5, 1000))
    assert {"channel_nchw", "channel_rows"} <= set(targets((3, 64, 17, 19)))
    assert not {"channel_nchw", "channel_rows"} & set(targets((5, 1000)))
    assert "chain_w4" not in targets((70000, 512)) and "rows_fused" in targets((70000, 512))  # grid.y holds 65535
    # the backward's schedules where their plans take the shape: chain needs N % 512 and rows in grid.y
    assert {"grad_chain", "grad_rows", "grad_split"} <= set(targets((2, 64, 64, 64)))
    assert "grad_chain" not in targets((5, 1000)) and "grad_rows" in targets((5, 1000))
    assert max(math.prod(s) for s in rel.EDGE_SHAPES) < 1 << 31


# ------------------------------------------------------------------------------------------ exact arithmetic

f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=400, deadline=None)
@given(f32, f32, f32)
def test_fma32_rounds_the_exact_value_once(a, b, c):
    got = fma32(np.float32(a), np.float32(b), np.float32(c))
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    want = fma32_scalar(np.float32(a), np.float32(b), np.float32(c))
    assert np.float32(got).view(np.int32) == np.float32(want).view(np.int32) or (got == 0 and want == 0)
    if np.isfinite(got) and got != 0:
        # correct rounding: no float32 lies strictly closer to the exact value
        for other in (np.nextafter(np.float32(got), np.float32(np.inf)), np.nextafter(np.float32(got), np.float32(-np.inf))):
            if np.isfinite(other):
                assert abs(Fraction(float(got)) - exact) <= abs(Fraction(float(other)) - exact)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-1000, 1000), min_size=4, max_size=64).filter(lambda v: len(v) % 4 == 0))
def test_emulator_mean_and_variance_against_exact_fractions(values):
    from labkit.exact.emulator import reference_stats

    x = np.array([values], dtype=np.float32)
    stats = reference_stats(x, 1e-5)
    exact_mean = Fraction(sum(values), len(values))
    exact_var = sum((Fraction(v) - exact_mean) ** 2 for v in values) / len(values)
    scale = max(1, max(abs(v) for v in values))
    # float32 Welford over at most 64 values of magnitude <= 1000: a few hundred ulps of the scale at most
    assert abs(Fraction(float(stats["mean"][0])) - exact_mean) <= Fraction(scale * 64, 1 << 23)
    assert abs(Fraction(float(stats["var"][0])) - exact_var) <= Fraction(scale * scale * 64, 1 << 21)
    if len(set(values)) == 1:
        assert stats["mean"][0] == values[0] and stats["var"][0] == 0


@settings(max_examples=200, deadline=None)
@given(st.floats(-1e3, 1e3, width=32), st.floats(-1e3, 1e3, width=32))
def test_official_predicate_agrees_with_exact_arithmetic_away_from_the_boundary(ref, cand):
    diff = abs(Fraction(ref) - Fraction(cand))
    limit = Fraction(check.ATOL) + Fraction(check.RTOL) * abs(Fraction(cand))  # as float64 constants, exactly
    verdict = check.official_allclose(torch.tensor([ref]), torch.tensor([cand]))
    if diff <= limit * Fraction(9, 10):
        assert verdict
    elif diff >= limit * Fraction(11, 10):
        assert not verdict


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=True), min_size=1, max_size=20), st.data())
def test_bits_equal_count_counts_identical_patterns(values, data):
    a = np.array(values, dtype=np.float32)
    flips = data.draw(st.lists(st.booleans(), min_size=len(a), max_size=len(a)))
    b = a.copy()
    b[np.array(flips)] = np.nextafter(b[np.array(flips)], np.float32(np.inf))
    want = int((a.view(np.int32) == b.view(np.int32)).sum())
    assert check.bits_equal_count(torch.from_numpy(a), torch.from_numpy(b)) == want


def test_the_sanitizer_shapes_reach_every_rows_entry_point():
    """Every entry point labkit.ops.rows_fused.function_for and backward.fused_function can pick (over every row
    length a multiple of 4 up to 2^17, and 2^24) runs under the sanitizer at one of its small shapes."""
    import math

    from labkit.ops import backward, rows_fused

    lengths = [*range(4, (1 << 17) + 1, 4), 1 << 24]
    n_of = [math.prod(s[1:]) for s in rel.SANITIZER_SMALL_SHAPES]
    for pick in (rows_fused.function_for, backward.fused_function):
        assert {pick(n) for n in lengths} == {pick(n) for n in n_of}, pick.__name__


def test_the_sanitizer_shapes_reach_every_chain_sums_entry_point():
    """The backward's chain schedule at every split but the one-warp S = 1 (the sanitizer's shapes have few rows)
    runs under the sanitizer: grad_chain_sums_split2, 4 and 8, for the H200's 132 SMs."""
    import math

    from labkit.core.device import Device
    from labkit.ops import backward

    h200 = Device("NVIDIA H200", 90, 132, 232448, 65535)
    picked = {backward.chain_function(backward.chain_split(s[0], math.prod(s[1:]), h200), h200)
              for s in rel.SANITIZER_SMALL_SHAPES if math.prod(s[1:]) % 512 == 0}
    assert {backward.chain_function(k, h200) for k in backward.CHAIN_SPLITS if k > 1} <= picked


def test_the_sanitizer_shapes_reach_the_column_fold():
    """A small shape whose backward spreads the GammaBeta template's groups over blocks (grad_columns_fold runs),
    and one whose column blocks hold every group, for the H200's 132 SMs."""
    import math

    from labkit.ops import backward

    lays = [backward.column_layout(s[0], math.prod(s[1:]), 132) for s in rel.SANITIZER_SMALL_SHAPES]
    assert {lay.fold for lay in lays} == {True, False}
    assert {lay.function for lay in lays} == {"grad_columns_streamed", "grad_columns_prefetched", "grad_columns_tiled"}


def test_every_path_is_sanitized_fuzzed_and_soaked_through_its_own_entry():
    from labkit.ops import paths

    for path in paths.PATHS:
        named = (path,) if path != "chain" else ("chain_tma", "chain_w4")
        for targets in (rel.LAYER_NORM_TARGETS, rel.FUZZ_METHODS, rel.SOAK_METHODS):
            assert set(named) <= set(targets), (path, targets)
    own = rel.own_path_targets()
    assert own == tuple(p for p in rel.LAYER_NORM_TARGETS
                        if p in paths.PATHS and p not in ("chain", "rows_fused"))
    for path in own:
        assert paths.public_function(path).__name__ == f"{path}_layer_norm"
    assert paths.public_function("chain") is None and paths.public_function("rows_fused") is None
    with pytest.raises(ValueError, match="path must be one of"):
        paths.public_function("rows")
