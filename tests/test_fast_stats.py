"""The fast-statistics study (labkit.studies.fast_stats) on the CPU: case enumeration, every method recorded
(including those that cannot run here), the summary block, record line, headline and figure read from a record."""
from labkit.lab.split_stats import scripted_pointwise
from labkit.records import run as results
from labkit.studies import catalog
from labkit.studies.fast_stats import fast_stats_block
from labkit.studies import bit_identity as matrix
from labkit.studies import fast_stats as ce

TINY = (2, 8, 16)


def test_fast_stats_case_enumeration():
    cases = ce.fast_stats_cases([0, 1, 2])
    cats = [c["category"] for c in cases]
    assert cats.count("ordinary") == 18 and cats.count("offset") == 6 and cats.count("constant_control") == 3
    assert {c["distribution"] for c in cases if c["category"] == "ordinary"} == {"uniform", "normal", "normal_x100"}
    assert all(c["shape"] == [3, 64, 17, 19] and c["affine"] == "random_normal"
               for c in cases if c["category"] == "constant_control")


def test_run_fast_stats_on_cpu_records_every_method_including_errors():
    lines = []
    rec = ce.run_fast_stats(TINY, [0], ("eager", "torchscript", "flat"), "cpu", log=lines.append)
    n_cases = len(ce.fast_stats_cases([0]))
    assert len(rec["cases"]) == 3 * n_cases
    flat = [c for c in rec["cases"] if c["method"] == "flat"]
    assert all(c["output"] is None and "CUDA" in c["error"] for c in flat)  # the kernel needs a GPU: kept, not dropped
    eager = [c for c in rec["cases"] if c["method"] == "eager"]
    assert all(c["output"]["official_pass"] is not None for c in eager)
    assert rec["torchscript"]["available"] is scripted_pointwise().available  # as on this machine, not a guess
    ts = [c for c in rec["cases"] if c["method"] == "torchscript"]
    assert all((c["output"] is not None) == scripted_pointwise().available for c in ts)
    assert len(lines) == len(rec["cases"]) and "flat" in lines[2]
    rows = ce.method_summary(rec)
    assert any(r["method"] == "flat" and r["errors"] == r["cases"] for r in rows)


def _synthetic_fast_stats():
    def case(cat, method, ok, dist="uniform"):
        out = None if ok is None else {"official_pass": ok, "bad_finite_candidate_scale": 0 if ok else 5,
                                       "bad_special": 0, "elements": 100, "max_ratio_candidate_scale": 0.5 if ok else 3}
        return {"category": cat, "method": method, "distribution": dist, "seed": 0, "affine": "default",
                "output": out, "error": None if out else "RuntimeError: no"}
    return {"cases": [case("ordinary", "eager", True), case("ordinary", "eager", False), case("ordinary", "flat", True),
                      case("offset", "eager", False, "normal_plus_1000"), case("offset", "flat", True, "normal_plus_1000"),
                      case("constant_control", "eager", False, "constant_1e4"),
                      case("ordinary", "torchscript", None), case("offset", "torchscript", None)]}


def test_fast_stats_block_counts_method_case_combinations():
    blk = fast_stats_block({"fast_stats": _synthetic_fast_stats()})
    assert {k: blk[k] for k in ("ordinary_pass", "ordinary_cases", "offset_fail", "offset_cases")} == \
        {"ordinary_pass": 2, "ordinary_cases": 3, "offset_fail": 1, "offset_cases": 2}
    assert blk["constant_control_fail"] == 1 and blk["errors"] == 2
    assert blk["per_method"]["eager"]["ordinary_pass"] == 1 and blk["per_method"]["torchscript"]["errors"] == 2
    assert fast_stats_block({}) is None


def test_fast_stats_record_line_and_headline_read_the_record():
    rec = {**_synthetic_fast_stats(), "shape": [2, 8, 16], "methods": ["eager", "flat", "torchscript"]}
    line = ce.record_line(rec, "src")
    assert line.startswith("record: 8 (case x method) entries at shape (2, 8, 16)")
    assert "ordinary 4, offset 3, constant_control 1" in line and line.endswith("— src")
    assert ce.headline(rec, "src").startswith("Ordinary cases passing the official check: 2/3; offset (+1000) "
                                              "cases failing it: 1/2; constant-control failing: 1/1")
    assert ce.record_line(None, "none") == "No fast-statistics record: none."


def test_each_run_is_summarized_by_its_own_study(tmp_path):
    """A fast-statistics run gets the fast_stats block (its study's); the same records under the bit_identity run
    name get that study's block instead: the run's name picks the one study that reads it."""
    blocks = {}
    for name in ("fast_stats_counterexamples", "bit_identity"):
        run = results.Run.create(tmp_path, name, device="cpu")
        run.write("fast_stats", _synthetic_fast_stats())
        run.write("bit_identity", matrix.run_matrix(TINY, [0], device="cpu"))
        run.close()
        blocks[name] = catalog.summarize_run(run.path)
    assert blocks["fast_stats_counterexamples"]["fast_stats"]["offset_fail"] == 1
    assert "bit_identity" not in blocks["fast_stats_counterexamples"]
    assert blocks["bit_identity"]["bit_identity"]["identical"] == 10 and "fast_stats" not in blocks["bit_identity"]


def test_figure_from_a_record():
    fig = ce.figure(_synthetic_fast_stats(), "test")
    assert fig is not None and len(fig.axes) == 2
    assert ce.figure(None) is None


def test_the_posts_kernel_compiles_with_the_posts_flags():
    """kernels/post_affine.cu with split_stats.POST_OPTIONS appended: NVRTC takes the last --fmad, so the post's
    prototype rounds each product on its own: compiled with the book's --fmad=true instead, the same source has
    one FFMA more for each of its two geometries' products (gamma * z + beta, (x - mean) * r stays a product) and
    one FMUL less. (The FFMAs both share are the IEEE sqrt and division's own, which --fmad does not touch.)"""
    import pytest

    from labkit.core.compile import compile_kernel
    from labkit.lab.split_stats import POST_OPTIONS
    from labkit.sass import tools

    try:
        post = tools.disassemble(compile_kernel("post_affine", "sm_90", POST_OPTIONS).cubin)
        fused = tools.disassemble(compile_kernel("post_affine", "sm_90").cubin)
    except tools.ToolMissing as exc:
        pytest.skip(f"no disassembler here: {exc}")
    assert fused.count("FFMA") - post.count("FFMA") == 2 and post.count("FMUL") - fused.count("FMUL") == 2
