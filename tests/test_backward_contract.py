"""The backward's contract on the CPU: every claim re-derived by dataflow from torch's own committed sm_90 SASS, and
planted changes to it failing the claim they break; BlockReduceSum read from the installed header, the emulator
bit-exact against torch's GPU gradients (golden fixtures), and the backward kernels compiling for every arch their
launches allow. Every other arch's record: tests/test_sass_arches.py."""
import copy
import json
from pathlib import Path

import numpy as np
import pytest

from bits import assert_bits_equal
from labkit.exact import backward as emulator
from labkit.records.fixtures import BACKWARD_DIR, LOW_PRECISION_BACKWARD_DIR
from labkit.studies import backward_contract as bc

FIXTURES = sorted(Path(BACKWARD_DIR).glob("*.npz"))
LOW_FIXTURES = sorted(Path(LOW_PRECISION_BACKWARD_DIR).glob("*.npz"))


def test_every_claim_holds_in_torchs_own_sass():
    record = json.loads(bc.RECORD.read_text())
    assert record["wheel"].startswith("torch-2.11.0") and set(record["functions"]) == set(bc.TORCH_FUNCTIONS)
    failed = [c["claim"] for c in bc.checks(record) if not c["holds"]]
    assert not failed, failed


DX = "layer_norm_grad_input_kernel_vectorized<float, float, false>"
GAMMA_BETA = "GammaBetaBackwardCUDAKernelTemplate<float, float, 32, 1, 8, true, true, false>"


def _planted(function: str, old: str, new: str) -> dict:
    """The sm_90 record's claims with the first instruction `old` of `function` replaced by `new`."""
    record = copy.deepcopy(json.loads(bc.RECORD.read_text()))
    ops = record["functions"][function]["fp_ops"]
    ops[ops.index(old)] = new
    return {c["claim"]: c["holds"] for c in bc.checks(record)}


def test_a_contraction_torch_does_not_make_fails_its_claim():
    """Planted: stats_x1 fused (FFMA) instead of FADD-ing the rounded product — the check must say no."""
    holds = _planted(DX, "FADD R26, R27, R26", "FFMA R26, R4, R12, R26")
    assert not holds["no other FFMA in the loop body (the product is not fused into stats_x1)"]
    assert not holds["stats_x1 adds the rounded dy*gamma: four FADDs of FMUL results per float4"]


# Each planted change breaks one arithmetic fact the claim states; the rest of the record is torch's own.
PLANTED = [
    # the accumulator as a multiplicand and the product as the addend: fma(rstd, stats_x2, p)
    (DX, "FFMA R16, R19, R28, R16", "FFMA R16, R19, R16, R28",
     "stats_x2 = fma(rstd, p, stats_x2): four FFMAs per float4, one multiplier, one accumulator"),
    # stats_x2's chain starts from a value the float4 computed (stats_x1's first sum), not the carried accumulator
    (DX, "FFMA R16, R19, R28, R16", "FFMA R16, R19, R28, R26",
     "stats_x2 = fma(rstd, p, stats_x2): four FFMAs per float4, one multiplier, one accumulator"),
    # the second stats_x1 link adds to a register that is not the first link's value: two chains, not one
    (DX, "FADD R26, R26, R27", "FADD R26, R21, R27",
     "stats_x1 adds the rounded dy*gamma: four FADDs of FMUL results per float4"),
    # stats_x1 added to the fma's result instead of subtracted from it
    (DX, "FADD R29, -R16, R29", "FADD R29, R16, R29",
     "dx = term1 * (fma(dy, fH*gamma, -t) - stats_x1): FFMA with a negated register addend, FADD subtracting a "
     "register from its result, FMUL of that"),
    # the Newton step left out: MUFU.RCP's approximation times the error term, not refined
    (DX, "FFMA R0, R0, R5, R0", "FMUL R0, R0, R5",
     "1/fH by MUFU.RCP refined to the correctly rounded reciprocal (then FFMA steps)"),
    # db adds the product dy*(x-mean) instead of dy
    (GAMMA_BETA, "FADD R8, R15, R8", "FADD R8, R14, R8",
     f"{GAMMA_BETA}: dg = fma(rstd, dy*(x-mean), dg); db = db + dy"),
]


@pytest.mark.parametrize("function,old,new,claim", PLANTED, ids=[c.split(":")[0][:40] for *_, c in PLANTED])
def test_a_planted_change_fails_the_claim_it_breaks(function, old, new, claim):
    holds = _planted(function, old, new)
    assert not holds[claim]


def test_an_accumulator_in_another_register_is_the_same_chain():
    """The last stats_x1 link written to a fresh register (what torch's sm_86 allocator does): same arithmetic,
    claims hold, although no link's destination names its accumulator any more."""
    holds = _planted(DX, "FADD R26, R26, R15", "FADD R40, R26, R15")
    assert all(holds.values()), holds


def test_dataflow_resolves_each_source_to_its_writer():
    flow = bc.dataflow(["FMUL R1, R2, R3",
                        "FADD R1, R1, R4",      # reads the FMUL's R1, then overwrites it
                        "@P0 FADD R4, R1, -R1",  # predicated: a later R4 is the new or the old value
                        "FFMA R5, R1, R4, -1",
                        "SHFL.DOWN PT, R6, R5, 0x1, 0x1f"])
    assert flow[1].srcs == (0, "in:R4") and flow[2].neg == (False, True)
    assert flow[3].srcs == (1, "sel:2", "imm:1") and flow[3].neg == (False, False, True)
    assert flow[4].dst == "R6" and flow[4].srcs[0] == 3
    wide = bc.dataflow(["LDG.E.128 R8, desc[UR4][R2.64]", "FADD R0, R9, R11"])
    assert wide[1].srcs == ("part:0", "part:0")  # a load's later registers are its value too, not an input of ours


def test_a_uniform_register_is_a_value_not_a_constant():
    """UR12 (a uniform register: one value per warp, e.g. rstd of the block's row, or a kernel parameter) is read
    like R12: an input where the list does not write it, else the instruction that did (ULDC, UMOV, ...). URZ,
    like RZ, reads zero. Before the fix every UR operand was "imm:UR12", so no claim could take it as a loaded value."""
    flow = bc.dataflow(["FMUL R1, R2, UR12", "FADD R3, R1, -URZ"])
    assert flow[0].srcs == ("in:R2", "in:UR12") and bc._input(flow, flow[0].srcs[1])
    assert flow[1].srcs == (0, "imm:URZ") and flow[1].neg == (False, True)
    full = bc.dataflow(["ULDC.64 UR12, c[0x0][0x210]", "FMUL R1, R2, UR13", "UMOV UR4, UR12",
                        "@P0 UMOV UR5, UR4", "FFMA R6, R1, UR4, UR5"])
    assert full[0].dst == "UR12" and full[1].srcs == ("in:R2", "part:0") and full[2].srcs == (0,)
    assert full[4].srcs == (1, 2, "sel:3")  # UR4 written by the UMOV, UR5 by a predicated one: new or old
    assert bc._input(full, full[4].srcs[1]) and not bc._input(full, full[4].srcs[2])


def test_rstd_in_a_uniform_register_is_still_the_one_multiplier():
    """The sm_90 record with the first float4's stats_x2 FFMAs reading rstd from UR12 (one row per block, so the
    compiler may keep it in a uniform register, as torch 2.14.1's SASS does) instead of R19: the same arithmetic, so
    every claim holds. It failed before the fix: an operand UR12 was a constant, not an input of the loop."""
    record = copy.deepcopy(json.loads(bc.RECORD.read_text()))
    ops = record["functions"][DX]["fp_ops"]
    firsts = [i for i, o in enumerate(ops) if o.startswith("FFMA R16, R19, ")][:4]
    for i in firsts:
        _, _, p, acc = ops[i].split(" ", 1)[1].split(", ")
        ops[i] = f"FFMA R16, {p}, UR12, {acc}"
    holds = {c["claim"]: c["holds"] for c in bc.checks(record)}
    assert all(holds.values()), holds


def test_the_recorder_refuses_a_workdir_in_the_repository():
    with pytest.raises(SystemExit, match="outside the repository"):
        bc.main(["--wheel", "w.whl", "--workdir", str(bc.RECORD.parent), "--arch", "sm_90"])


def test_block_reduce_sum_in_the_installed_header():
    text = bc.installed_header()
    assert text is not None, "the installed torch ships no ATen/native/cuda/block_reduce.cuh"
    assert all(c["holds"] for c in bc.header_checks(text))
    assert not all(c["holds"] for c in bc.header_checks(text.replace("val += WARP_SHFL_DOWN", "val = WARP_SHFL_DOWN")))


@pytest.mark.skipif(not FIXTURES, reason="no backward fixtures committed (record on a GPU: "
                    "labkit.records.fixtures.record_backward_fixtures)")
@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_emulator_is_bit_exact_against_torchs_gpu_gradients(path):
    f = np.load(path)
    gamma = f["gamma"] if "gamma" in f.files else None
    dx, dg, db, parts = emulator.layer_norm_backward(f["x"], f["dy"], gamma, f["mean"], f["rstd"], int(f["sm_count"]))
    assert parts == 1
    assert_bits_equal(dx, f["dx"], what=f"dx of {path.name} (emulator vs torch)")
    if gamma is not None:
        assert_bits_equal(dg, f["dgamma"], what=f"dgamma of {path.name} (emulator vs torch)")
        assert_bits_equal(db, f["dbeta"], what=f"dbeta of {path.name} (emulator vs torch)")


@pytest.mark.skipif(not LOW_FIXTURES, reason="no bfloat16/float16 backward fixtures committed (record on a GPU: "
                    "labkit.records.fixtures.record_backward_fixtures with dtypes)")
@pytest.mark.parametrize("path", LOW_FIXTURES, ids=[p.stem for p in LOW_FIXTURES])
def test_low_precision_emulator_is_bit_exact_against_torchs_gpu_gradients(path):
    """torch's backward for T (bfloat16/float16 bits) is the float32 emulation on the converted values, each result
    rounded to T once."""
    import torch

    from labkit.exact import low_precision

    f = np.load(path)
    gamma = f["gamma"] if "gamma" in f.files else None
    dtype = str(f["dtype"])
    dx, dg, db, parts = low_precision.layer_norm_backward(f["x"], f["dy"], gamma, f["mean"], f["rstd"], dtype,
                                                          int(f["sm_count"]))
    assert parts == 1

    def as_t(bits):  # numpy has no bfloat16: the fixtures and the emulator hold T's bits as uint16
        return torch.from_numpy(bits.view(np.int16).copy()).view(getattr(torch, dtype))

    assert_bits_equal(as_t(dx), as_t(f["dx"]), what=f"dx of {path.name} (emulator vs torch)")
    if gamma is not None:
        assert_bits_equal(as_t(dg), as_t(f["dgamma"]), what=f"dgamma of {path.name} (emulator vs torch)")
        assert_bits_equal(as_t(db), as_t(f["dbeta"]), what=f"dbeta of {path.name} (emulator vs torch)")


def test_templates_follow_torchs_host_code():
    from labkit.ops.backward import gamma_beta_template as t

    assert (t(16, 1 << 22, 132).groups, t(64, 256, 132).groups, t(128, 256, 132).groups, t(256, 256, 132).groups) \
        == (1, 8, 16, 32)
    assert t(70000, 64, 132).partial_groups == min(32768 // 2, -(-70000 // 32)) and t(70000, 64, 132).rows_per_group == 32
    assert t(70000, 2112, 132).partial_groups == 1  # N/32 = 66 is not < 132/2


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89", "sm_90"])
@pytest.mark.slow
def test_backward_kernels_compile_where_their_plans_allow(arch, cache_dir):
    from labkit.core.compile import compile_kernel

    for k in ("grad_row_sums", "grad_rows_fused", "grad_columns", "grad_columns_tiled"):
        assert compile_kernel(k, arch).record.arch == arch


@pytest.mark.parametrize("arch", [80, 86, 89, 90])
@pytest.mark.slow
def test_the_chain_sums_compile_with_the_entry_points_and_ring_the_launches_name(arch, cache_dir):
    """grad_chain_sums for every arch the backward is built for, with the options its launches pass there (the
    ring's depth below sm_90): the four entry points the launches name (tensor-map ones on sm_90, the cp.async
    ring's below), whose static shared memory fits beside the ring (below sm_90 within CHAIN_STATIC_SMEM, which
    `chain_stages` counts on)."""
    from labkit.core.compile import compile_kernel
    from labkit.core.device import ARCH_SMEM_OPTIN, Device
    from labkit.ops import backward
    from labkit.sass.elf import resource_usage

    dev = Device(f"sm_{arch}", arch, 132, ARCH_SMEM_OPTIN[arch], 65535)
    sums = backward.launches(2, 1 << 20, dev, "chain").sums
    usage = {u.function: u for u in resource_usage(compile_kernel("grad_chain_sums", f"sm_{arch}", sums.options).cubin)}
    assert set(usage) == {backward.chain_function(s, dev) for s in backward.CHAIN_SPLITS}
    assert all(u.shared_bytes + sums.shared_mem <= dev.smem_optin_bytes for u in usage.values())
    assert arch >= 90 or all(u.shared_bytes <= backward.CHAIN_STATIC_SMEM for u in usage.values())


def test_the_chain_split_fills_one_wave_and_its_maps_fit_a_box():
    """grad_chain_sums' entry point for S: the largest split with 4 * S * rows blocks on the SMs (1 at least; S = 4
    and 8 with CHAIN_MIN_STAGES stages per block), and a tensor-map geometry that tiles the row exactly (128 / S
    floats x 4 S segments per 512-float step) in boxes TMA takes."""
    from labkit.core.device import Device
    from labkit.ops import backward

    h200 = Device("NVIDIA H200", 90, 132, 232448, 65535)
    n = 1 << 22  # 8,192 steps: every split's stage count passes
    assert [backward.chain_split(r, n, h200) for r in (1, 2, 3, 4, 5, 8, 9, 16, 17, 33, 60)] == \
        [8, 8, 8, 8, 4, 4, 2, 2, 1, 1, 1]
    # S = 4 and 8 need CHAIN_MIN_STAGES stages of 32 S steps per block: 1,023 steps take S = 4, 511 steps S = 2
    assert [backward.chain_split(1, 512 * k, h200) for k in (1024, 1023, 512, 511, 37)] == \
        [8, 4, 4, 2, 2]
    for rows in (1, 2, 4, 5, 8, 16, 33):
        p = backward.launches(rows, 1 << 22, h200, "chain")
        split = backward.chain_split(rows, 1 << 22, h200)
        g = p.tensor_map
        assert p.sums.function == backward.chain_function(split, h200) and p.sums.grid == (4 * split, rows)
        assert p.sums.block == ((64,) if split == 1 else (96,))  # S > 1: a warp per sum and the producer
        assert g.dims[0] * g.dims[1] == 512 and g.strides_bytes[0] == 4 * g.dims[0] and g.dims[2] == (1 << 22) // 512
        assert all(b <= 256 for b in g.box) and g.box[2] == backward.chain_steps(split)
        assert p.sums.shared_mem == backward.CHAIN_SMEM and p.scratch.zeroed_at == 8 * rows + 1024 * rows
        assert p.sums.options == () and p.sums.function == f"grad_chain_sums_{'s1' if split == 1 else f'split{split}'}"


@pytest.mark.parametrize("arch, stages", [(80, 3), (86, 2), (89, 2), ("compute_80", 3), ("compute_86", 2)])
def test_below_sm90_the_chain_sums_take_the_cp_async_ring(arch, stages):
    """Below sm_90 (no tensor maps: sm_80, 86, 89, and an H200 under the arch override) the chain schedule is
    chosen and planned as on sm_90 but on grad_chain_sums' ring entry points, whose ring is as deep as the device's
    shared memory per block allows (3 stages of 48 KiB in sm_80's 163 KiB, 2 in sm_86/89's 99 KiB), compiled in by
    -DGRAD_STAGES; its program passes x, dy and weight by pointer, with the same scratch and memset as the tensor-map
    program's."""
    from labkit.core.device import ARCH_SMEM_OPTIN, Device, overridden
    from labkit.core.program import Launch, Memset, Ptr
    from labkit.ops import backward

    h200 = Device("NVIDIA H200", 90, 132, 232448, 65535)
    dev = overridden(h200, arch) if isinstance(arch, str) else Device(f"sm_{arch}", arch, 132, ARCH_SMEM_OPTIN[arch],
                                                                      65535)
    assert not dev.tensor_maps and backward.chain_stages(dev) == stages
    for rows, n in ((16, 1 << 22), (4, 64 * 256 * 256), (2, 1 << 20), (3, 512 * 33), (1, 512 * 1027), (60, 512 * 37)):
        assert backward.choose_schedule(rows, n, dev) == "chain"
        p, want = backward.launches(rows, n, dev), backward.launches(rows, n, h200)
        split = backward.chain_split(rows, n, dev)
        assert split == backward.chain_split(rows, n, h200) and p.sums.grid == want.sums.grid == (4 * split, rows)
        assert p.sums.function == "grad_chain_sums_ring_" + want.sums.function.removeprefix("grad_chain_sums_")
        assert p.sums.block == want.sums.block and p.sums.options == (f"-DGRAD_STAGES={stages}",)
        assert p.sums.shared_mem == stages * backward.CHAIN_STAGE_BYTES
        assert p.sums.shared_mem + backward.CHAIN_STATIC_SMEM <= dev.smem_optin_bytes < backward.CHAIN_SMEM
        assert p.tensor_map is None and p.scratch == want.scratch
        got, ref = p.program(0).steps, want.program(0).steps
        assert [type(s) for s in got] == [type(s) for s in ref] and isinstance(got[0], Memset) and got[0] == ref[0]
        assert isinstance(got[1], Launch) and got[1].args[:3] == (Ptr("x"), Ptr("dy"), Ptr("weight"))
        assert got[1].args[3:] == ref[1].args[3:] and got[2:] == ref[2:]


def test_the_chain_schedule_needs_room_for_its_ring():
    """With tensor maps the ring is the measured 4 stages or none (sm_120's 99 KiB: the rows or split schedule);
    below sm_90 two stages at least."""
    from labkit.core.device import Device
    from labkit.ops import backward

    sm120 = Device("sm_120", 120, 132, 101376, 65535)
    assert backward.chain_stages(sm120) == 0 and backward.choose_schedule(2, 1 << 20, sm120) != "chain"
    with pytest.raises(ValueError, match="shared memory"):
        backward.launches(2, 1 << 20, sm120, "chain")
    small = Device("small", 80, 132, 2 * backward.CHAIN_STAGE_BYTES, 65535)  # 96 KiB: no room beside the static
    assert backward.chain_stages(small) == 0 and "chain" not in backward.candidates(2, 1 << 20, small)
    assert backward.chain_stages(Device("sm_100", 100, 148, 232448, 65535)) == backward.CHAIN_STAGES


def _butterfly(v):
    """torch's group tree on the first axis: v[l] += v[l + d] for d = G/2, ..., 1; lane 0's value."""
    v = v.copy()
    d = len(v) // 2
    while d:
        v[:d] = v[:d] + v[d:2 * d]
        d //= 2
    return v[0]


@pytest.mark.parametrize("rows", [64, 100, 128, 200, 256, 4096, 32768, 70000])
@pytest.mark.parametrize("n", [4, 256, 768, 2048, 4096, 16384, 1 << 20])
def test_the_column_layout_folds_the_groups_in_torchs_tree(rows, n):
    """kernels/grad_columns.cu's layout as the launches pick it for the H200: blocks of at most 256 threads, at
    least 8 float4 columns (a cache line per row), groups b, b + B, ... in block b; folding each block's groups
    in the tree, then the B blocks' values in the tree (grad_columns_fold), gives torch's tree over all groups,
    bit for bit, on random group sums. (The arithmetic of the layout; that the kernel maps groups this way is
    what tests/test_gpu_backward.py checks against torch's bits.) With one block of groups there is nothing to fold; the partial form keeps
    torch's partial groups one per block."""
    from labkit.ops import backward

    t = backward.gamma_beta_template(rows, n, 132)
    lay = backward.column_layout(rows, n, 132, t)
    assert lay.cx * lay.per_block <= backward.COLUMN_THREADS and lay.cx >= backward.COLUMN_MIN_CX
    if t.partial_groups > 1:
        assert (lay.per_block, lay.blocks_y, lay.fold) == (1, t.partial_groups, False)
        return
    assert lay.per_block * lay.blocks_y == t.groups and lay.fold == (lay.blocks_y > 1)
    g = np.random.default_rng(rows * 7 + n).standard_normal((t.groups, 64)).astype(np.float32) * \
        np.float32(1e3) ** np.random.default_rng(n).integers(-3, 3, (t.groups, 1)).astype(np.float32)
    blocks = np.stack([_butterfly(g[b::lay.blocks_y]) for b in range(lay.blocks_y)])
    assert_bits_equal(_butterfly(blocks), _butterfly(g), what=f"column fold of {rows}x{n}")
    if lay.blocks_y > 1 and lay.per_block > 1:  # contiguous groups per block would give other bits: the test can tell
        contiguous = np.stack([_butterfly(g[b * lay.per_block:(b + 1) * lay.per_block]) for b in range(lay.blocks_y)])
        assert not np.array_equal(_butterfly(contiguous).view(np.int32), _butterfly(g).view(np.int32))


def test_the_column_pass_spreads_over_the_gpu_where_torchs_layout_would_not():
    """At N = 768 torch's GammaBeta grid is 24 blocks; the launches' column pass has 192 (the fold after it), and
    the launches' scratch holds both arrays' block values after the row sums."""
    from labkit.core.device import Device
    from labkit.ops import backward

    h200 = Device("NVIDIA H200", 90, 132, 232448, 65535)
    p = backward.launches(4096, 768, h200, "split")
    assert p.columns.grid[0] >= h200.sm_count and p.fold is not None and p.parts == 32
    assert p.scratch.nbytes == p.parts_at + 2 * 4 * p.parts * 768
    q = backward.launches(4096, 768, h200, "rows")
    assert q.parts_at >= 8 * 4096 and q.parts_at % 16 == 0
    steps = q.program(0).steps
    assert [s.kernel.function for s in steps] == ["grad_row_sums", "grad_columns_tiled", "grad_columns_fold"]
    assert q.columns.block == (backward.TILED_THREADS,) and q.columns.grid == (768 // 4 // backward.TILED_VECS * 32,)
    assert q.columns.shared_mem == backward.TILED_SMEM > 48 * 1024  # the ring opts in past the default 48 KiB
    columns = steps[1].args
    assert [a.value for a in columns[-4:]] == [4096, 192, 8, 32]  # rows, N / 4, rows per group, groups
    assert steps[2].kernel.block == (backward.FOLD_THREADS,) and steps[2].kernel.grid == (768 // backward.FOLD_THREADS,)
    small = Device("small", 80, 132, backward.TILED_SMEM - 1, 65535)  # the tiled pass's ring does not fit
    assert backward.launches(4096, 768, small, "rows").columns.function == "grad_columns_prefetched"
    with pytest.raises(ValueError, match="tiled column pass needs"):
        backward.launches(4096, 768, small, "rows", loads="tiled")
    few = backward.launches(64, 4096, h200, "rows")  # chains of 8 rows: shorter than one tile
    assert few.columns.function == "grad_columns_prefetched"
    assert backward.launches(4096, 2048, h200, "rows").columns.function == "grad_columns_tiled"  # 16,384 threads
    assert backward.launches(4096, 4096, h200, "rows").columns.function == "grad_columns_prefetched"  # 32,768
    wide = backward.launches(2048, 16384, h200, "split")  # 512 blocks of all 32 groups already: torch's layout
    assert wide.fold is None and wide.columns.function == "grad_columns_streamed"
    assert backward.launches(100000, 256, h200, "split").columns.function == "grad_columns_prefetched"  # partials
