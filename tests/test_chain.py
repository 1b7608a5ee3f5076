"""CPU-side behaviour of the chain-parallel wrapper: schedule choice, validation before launch, compile."""
import pytest
import torch

from labkit.ops import chain
from labkit.core.compile import compile_kernel


def test_schedule_choice():
    assert chain.choose_schedule(16, 132) == "chain"    # L1/40
    assert chain.choose_schedule(66, 132) == "chain"
    assert chain.choose_schedule(67, 132) == "rows_fused"
    assert chain.choose_schedule(4096, 132) == "rows_fused"


def test_blocking_choice():
    assert chain.choose_blocking(64 * 256 * 256) == "tma"
    assert chain.choose_blocking(64 * 17 * 19) == "w4"  # ragged chains
    assert chain.tma_smem_bytes() <= chain.MAX_DYNAMIC_SMEM


@pytest.mark.parametrize("kwargs,pattern", [({"schedule": "diagonal"}, "schedule"), ({"blocking": "w3"}, "blocking")])
def test_bad_settings_raise_before_launch(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        chain.ChainSettings(**kwargs)


def test_cpu_tensors_refused():
    x, w, b = torch.rand(2, 8), torch.ones(8), torch.zeros(8)
    with pytest.raises(ValueError, match="CUDA tensor"):
        chain.chain_layer_norm(x, w, b)


@pytest.mark.parametrize("variant", ["0", "1", "2"])
def test_tma_kernel_and_stage_variants_compile_for_sm90(variant, cache_dir):
    assert compile_kernel("chain_stats_tma", "sm_90", (f"-DCHAIN_VARIANT={variant}",)).cubin.startswith(b"\x7fELF")


def test_tma_config_defaults_are_the_kernels():
    """TmaConfig() must describe the kernel compiled without -D flags (its box and shared memory depend on it)."""
    import re

    from labkit.core.compile import REPO_ROOT

    src = (REPO_ROOT / "kernels" / "chain_stats_tma.cu").read_text()
    found = {k: int(re.search(rf"#define TMA_{k} (\d+)", src).group(1)) for k in ("STEPS", "STAGES", "AHEAD")}
    c = chain.TmaConfig()
    assert found == {"STEPS": c.steps, "STAGES": c.stages, "AHEAD": c.ahead}
    assert c.options == ()
    assert chain.TmaConfig(32, 12, 4).options == ("-DTMA_STEPS=32", "-DTMA_STAGES=12", "-DTMA_AHEAD=4")


@pytest.mark.parametrize("args", [(16, 24, 3), (512, 2, 4), (16, 1, 4), (64, 24, 4)])
def test_tma_config_refuses_impossible_rings(args):
    with pytest.raises(ValueError, match="TmaConfig"):
        chain.TmaConfig(*args)


@pytest.mark.parametrize("options", [(), ("-DTMA_STEPS=32", "-DTMA_STAGES=12"), ("-DTMA_AHEAD=8",)])
def test_tma_ring_shapes_compile_for_sm90(options, cache_dir):
    assert compile_kernel("chain_stats_tma", "sm_90", options).cubin.startswith(b"\x7fELF")


def test_affine_columns_compiles_for_sm90(cache_dir):
    assert compile_kernel("affine_columns", "sm_90").cubin.startswith(b"\x7fELF")


def test_rows_fused_entry_point_by_row_length(cache_dir):
    assert chain.rows_fused_function(1024) == "rows_fused_reg2"      # 256 vectors: 2 per thread
    assert chain.rows_fused_function(1028) == "rows_fused_reg4"
    assert chain.rows_fused_function(4096) == "rows_fused_reg8"
    assert chain.rows_fused_function(1 << 20) == "rows_fused_reg8"   # longer rows re-read the rest
    from labkit.sass import elf

    sections = elf.text_sections(compile_kernel("rows_fused", "sm_90").cubin)
    assert {f"rows_fused_reg{k}" for k in chain.ROWS_FUSED_VECTORS} <= {k.removeprefix(".text.") for k in sections}


def test_repeat_rows_read_every_committed_run_that_timed_the_chain():
    from labkit.studies import parallel_stats as chain_study
    from labkit.records import run as results

    rows = chain_study.repeat_rows()
    timed = {r["run"] for r in rows}
    assert len(timed) >= 2, "expected repeat measurements of the chain kernel at L1/40 among the committed runs"
    for r in rows:
        assert r["case"].startswith("16x64x256x256/")
        assert r["chain q25"] <= r["chain ms (median)"] <= r["chain q75"]
    names = {results.load_run(results.DATA_RUNS / run)["records"]["run"]["name"] for run in timed}
    assert names <= {"timing", "parallel_stats"}


def test_parallel_stats_tables_and_verdict_from_the_committed_run():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from labkit.records.session import newest_complete_run
    from labkit.studies import parallel_stats as chain_study

    rec = newest_complete_run("parallel_stats")["records"]
    lines = chain_study.verdict_lines(rec["timing"], rec["stage_breakdown"], rec["run"]["provenance"], "replay",
                                      rec["bit_identity"])
    n = len(rec["bit_identity"]["cases"])
    n_ok = sum(c["identical"] for c in rec["bit_identity"]["cases"])
    assert lines[0].startswith("replay: ") and f"bit identity: {n_ok}/{n} cases identical" in "\n".join(lines)
    assert len(chain_study.timing_rows(rec["timing"])) > 0
    fig = chain_study.speedup_figure(rec["timing"], "x")
    assert len(fig.axes) == 1 and fig.axes[0].get_yscale() == "log"
    plt.close(fig)
    # no records (CPU without a committed run): empty tables, a figure that says so, the source as the verdict
    assert chain_study.floors(None, None, None) == chain_study.breakdown_rows(None) == []
    assert chain_study.goal_rows(None) == chain_study.timing_rows(None) == []
    assert chain_study.verdict_lines(None, None, {}, "no committed GPU run yet") == ["no committed GPU run yet"]
    fig = chain_study.speedup_figure(None)
    assert "no protocol A timing" in fig.axes[0].texts[0].get_text()
    plt.close(fig)


def test_floor_pushes_follow_the_task_shape():
    from labkit import tasks
    from labkit.studies import parallel_stats as chain_study

    assert chain_study.FLOOR_PUSHES == 32768 and chain_study.L1_40 is tasks.L1_40
