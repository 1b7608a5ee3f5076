"""labkit.warmup on the CPU: it compiles the drop-in's kernels for an arch into the cubin cache and says so once per
cold compile (a warm run compiles and logs nothing); bad input is a ValueError naming it; labkit's first-use lines
reach stderr while the application has configured no logging, and reach its handlers once when it has."""
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import labkit
from labkit.cli import main
from labkit.core.compile import compile_kernel
from labkit.core.device import Device
from labkit.ops import backward, chain
from labkit.ops import warmup as wu
from labkit.ops.dispatch import rule
from labkit.ops.dispatch.tables import TABLE_DIR_ENV
from labkit.ops.dropin import host

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def no_host(monkeypatch):
    """The extension's C++ build takes minutes here (tests/test_host.py builds it): warmup skips it."""
    monkeypatch.setenv("LABKIT_HOST", "0")
    monkeypatch.setattr(host, "_state", {})


def _compiled_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("labkit") and r.levelno >= logging.INFO]


def test_warmup_compiles_cold_then_finds_the_cache(tmp_path, monkeypatch, caplog, no_host):
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    caplog.set_level(logging.INFO, logger="labkit")
    cold = labkit.warmup(arch="sm_80", progress=False)
    assert set(cold.compiled) == set(wu._arch_kernels("sm_80")) and not cold.cached
    assert not cold.refused  # the backward's chain sums too (a cp.async ring below sm_90)
    # ... with the ring depth sm_80's launches pass (3 stages in its 163 KiB), not the default's
    sums = backward.launches(2, 1 << 20, Device("sm_80", 80, 108, 163 * 1024, 65535), "chain").sums
    assert sums.options == ("-DGRAD_STAGES=3",)
    assert compile_kernel("grad_chain_sums", "sm_80", sums.options).record.cache_hit
    # ... and the forward's cp.async ring with the shape sm_80's launches pass
    stats = chain.launches(2, 1 << 20, Device("sm_80", 80, 108, 163 * 1024, 65535)).stats
    assert stats.options and compile_kernel("chain_stats_tma", "sm_80", stats.options).record.cache_hit
    assert sorted(line.split(" in ")[0] for line in _compiled_lines(caplog)) == \
        sorted(f"NVRTC compiled {k} for sm_80" for k in cold.compiled)
    assert cold.host == "unavailable: turned off (LABKIT_HOST=0)" and cold.device is None
    caplog.clear()
    warm = labkit.warmup(arch="sm_80", progress=False)
    assert not warm.compiled and set(warm.cached) == set(cold.compiled) and warm.refused == cold.refused
    assert _compiled_lines(caplog) == []  # a cache hit is silent at INFO
    assert "0 kernel(s) compiled for sm_80" in warm.line() and "compile only" in warm.line()


@pytest.mark.slow
def test_warmup_compiles_the_2_byte_builds_a_model_of_that_dtype_launches(tmp_path, monkeypatch, no_host):
    """dtypes=(..., "bfloat16"): every kernel built for bfloat16 is compiled with its option after the
    kernel's own, so a bf16 model's launches (rows_fused, the chain, the backward's schedules) find the cache."""
    from labkit.ops import dtypes, rows_fused

    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    done = labkit.warmup(arch="sm_80", progress=False, dtypes=("float32", "bfloat16"))
    built = {k for k in wu._arch_kernels("sm_80") if k in dtypes.KERNELS}
    assert built & set(backward.KERNELS)  # the backward's files are among them (backward.DROP_IN_DTYPES)
    assert {k for k in done.compiled if k.endswith("[bfloat16]")} == {f"{k}[bfloat16]" for k in built}
    assert not done.refused
    dev = Device("sm_80", 80, 108, 163 * 1024, 65535)
    for kernel in (rows_fused.launches(4096, 768, dev, "bfloat16").kernel,
                   chain.launches(2, 1 << 20, dev, dtype="bfloat16").stats,
                   backward.launches(16, 1 << 22, dev, "chain", dtype="bfloat16").sums):
        assert compile_kernel(kernel.kernel, "sm_80", kernel.options).record.cache_hit, kernel
    with pytest.raises(ValueError, match="dtype must be one of .* got 'float64'"):
        labkit.warmup(arch="sm_80", progress=False, dtypes=("float64",))


@pytest.mark.parametrize("kwargs, says", [
    ({"shapes": [(16, 4096)], "device": "cpu"}, "needs a GPU"),
    ({"arch": "sm_90", "device": "cpu"}, "not both"),
    ({"arch": "90"}, "arch must look like"),
    ({"device": "meta"}, "CUDA device or 'cpu'"),
    ({"device": "gpu0"}, "CUDA device or 'cpu'"),
])
def test_bad_input_is_a_value_error_naming_it(kwargs, says):
    with pytest.raises(ValueError, match=says):
        labkit.warmup(progress=False, **kwargs)


@pytest.mark.parametrize("shape", [(16, 0), (1, 2, 3), "16,4096", (16.0, 4096), (True, 4096)])
def test_a_shape_is_rows_and_n(shape):
    with pytest.raises(ValueError, match="rows, N"):
        wu._shapes([shape])


def test_cli_refuses_a_shape_that_is_not_rows_n(capsys):
    assert main(["warmup", "--shape", "16,x"]) == 2
    assert "--shape takes ROWS,N" in capsys.readouterr().err


def test_the_host_build_logs_once_and_a_cached_load_not_at_all(tmp_path, monkeypatch, caplog):
    from torch.utils import cpp_extension

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.delenv("LABKIT_HOST", raising=False)
    monkeypatch.setattr(cpp_extension, "load", lambda **kw: "module")  # the build itself: tests/test_host.py
    caplog.set_level(logging.INFO, logger="labkit")
    module, why, seconds = host._build()
    assert (module, why) == ("module", None) and seconds is not None
    # a line when the build starts (its wait is the long one), and one with how long it took
    assert [r.getMessage().split(" in ")[0].split(" (")[0] for r in caplog.records] == \
        [f"building the host extension {host.extension_name()}", f"built the host extension {host.extension_name()}"]
    caplog.clear()
    (tmp_path / host.extension_name() / f"{host.extension_name()}.so").write_bytes(b"")
    assert host._build() == ("module", None, None) and caplog.records == []


COMPILE_TWICE = ("{setup}from labkit.core.compile import compile_kernel\n"
                 "compile_kernel('affine_rows', 'sm_90'); compile_kernel('affine_rows', 'sm_90')\n")


@pytest.mark.parametrize("setup, quiet, prefix", [
    ("", False, "labkit: NVRTC compiled affine_rows for sm_90 in "),  # nothing configured: labkit's own stderr line
    ("import logging; logging.basicConfig(level=logging.INFO, format='app %(name)s %(message)s')\n", False,
     "app labkit.core.compile NVRTC compiled affine_rows for sm_90 in "),  # configured for INFO: the application's
    ("import logging; logging.basicConfig(format='app %(name)s %(message)s')\n", False,
     None),  # configured at WARNING: the application's choice, so nothing
    ("", True, None),  # LABKIT_QUIET=1 (the book's notebooks)
])
def test_first_use_lines_reach_the_user_once(tmp_path, setup, quiet, prefix):
    env = dict(os.environ, LABKIT_CACHE_DIR=str(tmp_path), PYTHONPATH=str(REPO))
    env.pop("LABKIT_QUIET", None)
    if quiet:
        env["LABKIT_QUIET"] = "1"
    err = subprocess.run([sys.executable, "-c", COMPILE_TWICE.format(setup=setup)], capture_output=True, text=True,
                         env=env, cwd=REPO, check=True).stderr
    lines = [line for line in err.splitlines() if "compiled" in line]
    if prefix is None:
        assert lines == []
    else:
        assert len(lines) == 1 and lines[0].startswith(prefix)


def test_import_labkit_leaves_logging_alone():
    code = ("import logging, labkit; import labkit.core.compile, labkit.ops.dropin.host\n"
            "l = logging.getLogger('labkit'); print(l.level, len(l.handlers), len(logging.root.handlers))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO))).stdout.split()
    assert out == ["0", "0", "0"]


H200 = Device("NVIDIA H200", 90, 132, 232448, 65535)


@pytest.fixture
def committed_tables(tmp_path, monkeypatch):
    monkeypatch.setenv(TABLE_DIR_ENV, str(tmp_path / "no-tuned-tables"))  # the rule reads the committed tables only


def test_a_gpu_warms_what_its_table_may_pick_and_shapes_narrow_it(committed_tables):
    every = wu._device_kernels(H200, None)
    assert set(every) == set(rule.pickable_kernels(90, 132)) | set(backward.KERNELS)
    l1_40 = wu._device_kernels(H200, ((16, 1 << 22),))
    assert set(l1_40) < set(every) and "chain_stats_tma" in l1_40 and "rows_fused" not in l1_40
    assert wu._device_kernels(Device("unmeasured", 80, 108, 166912, 65535), None) == ()  # torch's kernel serves


def test_warmup_for_a_gpu_compiles_for_its_target(tmp_path, monkeypatch, no_host, committed_tables):
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(wu, "_device", lambda device, arch: H200)
    monkeypatch.setattr(wu, "_trust", lambda device: "verified by committed run r")  # the gate's check (a GPU's)
    done = labkit.warmup(shapes=[(64, 1 << 15)], progress=False)
    assert (done.target, done.device) == ("sm_90", H200.label)
    assert set(done.compiled) == set(wu._device_kernels(H200, ((64, 1 << 15),))) and not done.refused
    assert done.line().endswith(f"for {H200.label}; trust: verified by committed run r")
