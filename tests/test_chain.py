"""CPU-side behaviour of the chain-parallel wrapper: its launches from the shape and the device's limits, schedule
choice, validation before launch, compile."""
import pytest
import torch

from labkit.core.compile import compile_kernel
from labkit.core.device import Device
from labkit.ops import chain, rows_fused

H200 = Device("NVIDIA H200", 90, 132, 232448, 65535)   # limits as cudaGetDeviceProperties reports them there
SMALL_SMEM = Device("sm_90 with 99 KiB per block", 90, 132, 101376, 65535)
A100 = Device("NVIDIA A100", 80, 108, 166912, 65535)
RTX3090 = Device("NVIDIA GeForce RTX 3090", 86, 82, 101376, 65535)


def test_schedule_without_a_table_is_the_waves_rule():
    """On a device without a measured table, the chain while a row's 4 blocks fit about two per SM."""
    other = Device("sm_90, 64 SMs, no table of its arch", 91, 64, 232448, 65535)
    from labkit.ops.dispatch import rule

    assert rule.schedule(32, 1 << 20, other, ("chain", "rows_fused")) == "chain"
    assert rule.schedule(33, 1 << 20, other, ("chain", "rows_fused")) == "rows_fused"
    assert rule.schedule(4096, 1024, other, ("rows_fused",)) == "rows_fused"


def test_schedule_with_the_h200_table_follows_its_scores():
    from labkit.ops.dispatch import rule

    assert chain.schedule_launches(16, 64 * 256 * 256, H200).path == "chain"     # L1/40
    assert chain.schedule_launches(4096, 1024, H200).path == "rows_fused"
    assert rule.schedule(16, 1 << 22, H200, ("rows_fused",)) == "rows_fused"  # only what is offered


def test_blocking_choice():
    assert chain.choose_blocking(64 * 256 * 256, H200) == "tma"
    assert chain.choose_blocking(64 * 17 * 19, H200) == "w4"  # ragged chains
    assert chain.choose_blocking(64 * 256 * 256, Device("no tensor maps", 89, 128, 101376, 65535)) == "ring"
    assert chain.choose_blocking(64 * 17 * 19, A100) == "w4"  # which launches() then refuses below sm_90


@pytest.mark.parametrize("device,stages", [(A100, 8), (RTX3090, 5), (Device("sm_89, 99 KiB", 89, 128, 101376, 65535), 5)])
def test_ring_below_sm90_fits_the_devices_shared_memory(device, stages):
    """Below sm_90 the chain statistics take the cp.async ring: the tma kernel's consumer and layout, fed by
    pointer, with as many 32-step stages as the device's opt-in shared memory holds beside the static barriers."""
    p = chain.launches(16, 64 * 256 * 256, device)
    assert (p.blocking, p.stats.kernel, p.stats.function, p.stats.grid) == ("ring", "chain_stats_tma",
                                                                          "chain_stats_ring", (4, 16))
    assert p.tensor_map is None and not p.reciprocals
    assert p.stats.options == chain.TmaConfig(chain.RING_STEPS, stages, 8).options
    assert p.stats.shared_mem + chain.STATIC_SMEM <= device.smem_optin_bytes
    assert [type(a).__name__ for a in p.program(0).steps[1].args[:2]] == ["Ptr", "Ptr"]  # x, then the scratch
    assert chain.schedule_launches(16, 64 * 256 * 256, device).path in ("chain", "rows_fused")


def test_plan_is_the_launch_description():
    p = chain.launches(16, 64 * 256 * 256, H200)
    assert (p.blocking, p.stats.grid, p.stats.block, p.stats.function) == ("tma", (4, 16), (64,), "chain_stats_tma")
    assert p.stats.shared_mem == chain.TmaConfig().smem_bytes <= H200.smem_optin_bytes
    assert p.tensor_map.dims == (128, 4, 64 * 256 * 256 // 512, 16) and p.tensor_map.box == (128, 1, 64, 1)
    assert p.scratch.nbytes == 52 * 16 and (p.scratch.zeroed_at, p.scratch.zeroed_bytes) == (48 * 16, 4 * 16)
    assert p.output.grid == (64 * 256 * 256 // 4 // chain.AFFINE_THREADS,) and not p.reciprocals
    w4 = chain.launches(3, 64 * 17 * 19, H200)
    assert (w4.blocking, w4.stats.grid, w4.stats.block, w4.reciprocals) == ("w4", (1, 3), (160,), True)


def test_plan_refuses_what_the_device_cannot_run():
    with pytest.raises(ValueError, match="grid.y, which holds at most 65535"):
        chain.launches(65536, 1024, H200)
    with pytest.raises(ValueError, match="need sm_80"):
        chain.launches(1, 1 << 20, Device("sm_75", 75, 40, 65536, 65535))
    with pytest.raises(ValueError, match="w4 blocking needs sm_90"):
        chain.launches(1, 64 * 17 * 19, A100)  # ragged chains: whole-row blocks, bulk copies
    with pytest.raises(ValueError, match="ring blocking is built below sm_90"):
        chain.launches(1, 1 << 20, H200, chain.ChainSettings("chain", "ring"))
    with pytest.raises(ValueError, match="two stages"):
        chain.launches(1, 1 << 20, Device("sm_80, 32 KiB", 80, 108, 32768, 65535))
    with pytest.raises(ValueError, match="the device allows 101376"):
        chain.launches(1, 1 << 20, SMALL_SMEM)  # the tma ring needs 198 KiB
    with pytest.raises(ValueError, match="shared memory"):
        chain.launches(1, 1 << 20, H200, chain.ChainSettings("chain", "tma", chain.TmaConfig(64, 24, 4)))
    with pytest.raises(ValueError, match="N % 512 == 0"):
        chain.launches(1, 64 * 17 * 19, H200, chain.ChainSettings("chain", "tma"))
    assert chain.schedule_launches(65536, 1024, H200).path == "rows_fused"  # auto: the chain cannot, rows_fused can


@pytest.mark.parametrize("kwargs,pattern", [({"schedule": "diagonal"}, "schedule"), ({"blocking": "w3"}, "blocking")])
def test_bad_settings_raise_before_launch(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        chain.ChainSettings(**kwargs)


def test_cpu_tensors_refused():
    x, w, b = torch.rand(2, 8), torch.ones(8), torch.zeros(8)
    with pytest.raises(ValueError, match="x must be a CUDA tensor"):
        chain.chain_layer_norm(x, w, b)


@pytest.mark.parametrize("variant", ["0", "1", "2"])
@pytest.mark.parametrize("arch", ["sm_90", "sm_80", "sm_86", "sm_89"])
@pytest.mark.slow
def test_tma_kernel_and_stage_variants_compile(arch, variant, cache_dir):
    """sm_90 builds the tensor-map kernel, sm_80-89 the cp.async ring (one entry point per target)."""
    from labkit.sass.elf import resource_usage

    cubin = compile_kernel("chain_stats_tma", arch, (f"-DCHAIN_VARIANT={variant}",)).cubin
    assert {u.function for u in resource_usage(cubin)} == {"chain_stats_tma" if arch == "sm_90" else "chain_stats_ring"}


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


@pytest.mark.parametrize("args", [(16, 24, 3), (512, 2, 4), (16, 1, 4)])
def test_tma_config_refuses_impossible_rings(args):
    with pytest.raises(ValueError, match="TmaConfig"):
        chain.TmaConfig(*args)


@pytest.mark.parametrize("options", [(), ("-DTMA_STEPS=32", "-DTMA_STAGES=12"), ("-DTMA_AHEAD=8",)])
@pytest.mark.slow
def test_tma_ring_shapes_compile_for_sm90(options, cache_dir):
    assert compile_kernel("chain_stats_tma", "sm_90", options).cubin.startswith(b"\x7fELF")


def test_affine_columns_compiles_for_sm90(cache_dir):
    assert compile_kernel("affine_columns", "sm_90").cubin.startswith(b"\x7fELF")


def test_rows_fused_entry_point_by_row_length(cache_dir):
    assert rows_fused.function_for(256) == "rows_fused_warp1"      # 64 vectors: a warp, 2 per lane
    assert rows_fused.function_for(512) == "rows_fused_warp1"      # 128 vectors: one per torch thread, 4 per lane
    assert rows_fused.function_for(516) == "rows_fused_warp2"      # two vectors per torch thread, 8 per lane
    assert rows_fused.function_for(1024) == "rows_fused_warp2"
    assert rows_fused.function_for(1028) == "rows_fused_reg4"      # a block per row once a warp's lanes hold more
    assert rows_fused.function_for(2048) == "rows_fused_reg4"
    assert rows_fused.function_for(2052) == "rows_fused_reg8"
    assert rows_fused.function_for(8192) == "rows_fused_reg16"
    assert rows_fused.function_for(16384) == "rows_fused_reg32"
    assert rows_fused.function_for(1 << 20) == "rows_fused_reg32"  # longer rows re-read the rest
    for n in range(4, 20000, 4):  # only the largest block entry point is built for rows it cannot hold
        f = rows_fused.function_for(n)
        k = int(f.removeprefix("rows_fused_warp").removeprefix("rows_fused_reg"))
        assert n // 4 <= 128 * k or f == f"rows_fused_reg{rows_fused.VECTORS[-1]}", n
    from labkit.sass import elf

    sections = {k.removeprefix(".text.") for k in elf.text_sections(compile_kernel("rows_fused", "sm_90").cubin)}
    assert {f"rows_fused_reg{k}" for k in rows_fused.VECTORS} <= sections
    assert {f"rows_fused_warp{k}" for k in rows_fused.WARP_VECTORS} <= sections


def test_rows_fused_grid_by_layout():
    """A warp per row: four rows per (32, 4) block, the row count passed so the last block's spare warps leave."""
    for rows in (1, 3, 4, 5, 4097):
        p = rows_fused.launches(rows, 512, H200)
        assert p.kernel.grid == (-(-rows // 4),) and p.kernel.block == (32, 4)
        assert [a.value for a in p.program(0).steps[0].args if hasattr(a, "value")][:2] == [rows, 512]
        q = rows_fused.launches(rows, 4096, H200)
        assert q.kernel.grid == (rows,) and q.kernel.function == "rows_fused_reg8"


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
    from labkit.studies import measure

    assert measure.FLOOR_PUSHES == 32768 and measure.L1_40 is tasks.L1_40
