"""The arch override (LABKIT_ARCH=compute_XY, issue 25 item 4) on the CPU: it only goes down to an arch whose limits
are known, it takes tensor maps away and caps shared memory at that arch's, kernels compile to PTX for it (cached
apart from cubins), and the paths' launches then offer exactly the portable paths (the backward's chain schedule
among them: its cp.async ring). Its run on the H200 is the GPU part."""
import pytest

from labkit.core import compile as kc
from labkit.core.device import ARCH_SMEM_OPTIN, Device, overridden
from labkit.ops import backward, chain, paths
from labkit.ops.rows_fused import rows_counted, rows_counted_block

H200 = Device("NVIDIA H200", 90, 132, 227 * 1024, 65535)


def test_no_override_leaves_the_device_alone():
    assert overridden(H200, "") is H200
    assert H200.target == "sm_90" and H200.tensor_maps and H200.label == "NVIDIA H200 (sm_90)"


def test_the_override_is_an_older_arch_with_its_limits():
    d = overridden(H200, "compute_80")
    assert (d.arch, d.target, d.ptx, d.native_arch) == (80, "compute_80", True, 90)
    assert not d.tensor_maps and d.smem_optin_bytes == ARCH_SMEM_OPTIN[80] < H200.smem_optin_bytes
    assert d.sm_count == H200.sm_count and "running as compute_80" in d.label
    assert overridden(H200, "compute_86").smem_optin_bytes == 99 * 1024


@pytest.mark.parametrize("value,match", [("sm_80", "must look like 'compute_80'"), ("80", "must look like"),
                                         ("compute_95", "no known limits for sm_95"),
                                         ("compute_100", "above the GPU's own sm_90")])
def test_an_override_that_cannot_apply_names_the_value(value, match):
    with pytest.raises(ValueError, match=match):
        overridden(H200, value)


@pytest.mark.slow
def test_kernels_compile_to_ptx_for_the_override_and_are_cached_apart(cache_dir):
    ptx = kc.compile_kernel("rows_fused", "compute_80")
    cubin = kc.compile_kernel("rows_fused", "sm_80")
    assert ptx.cubin.startswith(b"//") and ptx.cubin.endswith(b"\0") and b".target sm_80" in ptx.cubin
    assert cubin.cubin.startswith(b"\x7fELF")
    assert kc.cache_path(ptx.record) != kc.cache_path(cubin.record)
    again = kc.compile_kernel("rows_fused", "compute_80")
    assert again.record.cache_hit and again.cubin == ptx.cubin
    # a cubin where PTX is expected (or the reverse) is not taken from the cache
    kc.cache_path(ptx.record).write_bytes(kc.cache_path(cubin.record).read_bytes())
    assert not kc.compile_kernel("rows_fused", "compute_80").record.cache_hit
    with pytest.raises(ValueError, match="compute_80"):
        kc.compile_kernel("rows_fused", "compute80")


def test_under_the_override_the_plans_offer_the_portable_paths_only():
    """Below sm_90: the portable paths, and the chain (its cp.async ring) where its chains are equal (N % 512 == 0)."""
    d = overridden(H200, "compute_80")
    for rows, n in ((16, 1 << 22), (4096, 768), (1, 1 << 24), (3, 1000)):
        portable = ({"reference_order", "rows_fused"} | ({"rows_counted"} if n <= rows_counted.MAX_N else set())
                    | ({"rows_counted_block"} if n <= rows_counted_block.MAX_N else set())
                    | ({"chain"} if n % 512 == 0 else set()))
        assert set(paths.candidates(rows, n, d)) == portable
        # the backward's chain sums on their cp.async ring where N % 512 == 0
        assert set(backward.candidates(rows, n, d)) == {"rows", "split"} | ({"chain"} if n % 512 == 0 else set())
    assert chain.launches(16, 1 << 22, d).stats.function == "chain_stats_ring"
    assert "chain" in paths.candidates(16, 1 << 22, H200) and "chain" in backward.candidates(16, 1 << 22, H200)


def test_a_notebook_the_gpu_cannot_measure_replays_the_committed_run_and_says_why(monkeypatch, tmp_path):
    from labkit.records import session
    from labkit.studies import parallel_stats
    from labkit.ops import chain

    assert parallel_stats.NEEDS_ARCH == chain.BULK_ARCH
    monkeypatch.setattr(session, "lacking", lambda arch, why, path=None: f"this GPU, X (sm_90) running as "
                                                                         f"compute_80, lacks what it measures: {why}")
    s = session.RunSession.open("parallel_stats", "cuda", tmp_path, {}, None, needs_arch=90, why="bulk copies")
    assert not s.live and s.replay is not None and not (tmp_path / "runs").exists()
    assert s.banner().startswith("GPU present, not measured live: this GPU") and "bulk copies" in s.banner()
    assert f"REPLAYED from committed GPU run {s.run_id}" in s.banner()
    assert s.describe()["lacks"] and s.describe()["live"] is False
    assert s.record("timing", lambda: 1 / 0) is not None  # the committed record, nothing computed


def test_an_sm120_gpu_past_sm90_but_unable_to_plan_the_chain_is_told_so(monkeypatch):
    """sm_120 has the chain's instructions but 99 KiB per block, under its rings: notebook 07 replays there too."""
    import torch

    from labkit.core import device
    from labkit.records import session

    rtx = Device("NVIDIA GeForce RTX 5090", 120, 170, 99 * 1024, 65535)
    monkeypatch.setattr(device, "device_info", lambda i: rtx)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    why = session.lacking(90, "bulk copies", "chain")
    assert why is not None and "cannot launch the chain path at L1/40" in why and "99 KiB" in why
    assert session.lacking(90, "bulk copies", None) is None  # by arch alone it would have run live


def test_the_chain_below_sm90_is_read_from_the_override_run():
    """Notebook 07's section: the lines and table come from the newest committed override run's records; the 1.3x
    goal is judged from the two medians it prints, and the estimates are labelled as such."""
    from labkit.records.session import RunSession
    from labkit.studies import arch_override

    s = RunSession.replaying("arch_override")
    if s.replay is None or not s.record("chain_timing"):
        pytest.skip("no committed override run with the chain's records")
    rows = {r["method"]: r for r in arch_override.chain_rows(s)}
    ratio = float(rows["the chain"]["compute_80 / own"].rstrip("x"))
    lines = arch_override.chain_lines(s, {"cycles_per_push": 9.0}, "an sm_90 GPU")
    bits = s.record("chain_bits")["cases"]
    assert f"{sum(c['identical'] for c in bits)}/{len(bits)} cases identical" in lines[1]
    assert any(f"goal <= 1.3x: {'met' if ratio <= 1.3 else 'missed'}" in line for line in lines)
    assert "not measured" in lines[-1] and "RTX 3090" in lines[-1]
    assert arch_override.chain_lines(RunSession.replaying("no_such_study"), None)[0].startswith("the chain below")
