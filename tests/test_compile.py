import pytest

from labkit.core import compile as kc


@pytest.mark.parametrize("kernel", kc.available_kernels())
@pytest.mark.slow
def test_every_kernel_compiles_for_sm90_without_a_gpu(kernel, cache_dir):
    compiled = kc.compile_kernel(kernel, "sm_90")
    assert compiled.cubin.startswith(b"\x7fELF")
    rec = compiled.record
    assert "--fmad=true" in rec.options and "--ftz=false" in rec.options
    assert not any("fast-math" in o or "fast_math" in o for o in rec.options)
    assert rec.arch == "sm_90" and len(rec.source_sha256) == 64 and rec.nvrtc_version[0] >= 12


def test_cache_hit_on_second_compile_and_key_changes_with_options(cache_dir):
    first = kc.compile_kernel("affine_rows", "sm_90")
    second = kc.compile_kernel("affine_rows", "sm_90")
    assert not first.record.cache_hit and second.record.cache_hit
    assert first.cubin == second.cubin
    other = kc.compile_kernel("affine_rows", "sm_90", extra_options=("-DLABKIT_UNUSED=1",))
    assert not other.record.cache_hit  # different options, different key
    assert kc.cache_path(other.record) != kc.cache_path(first.record)


def test_key_changes_with_arch(cache_dir):
    a = kc.compile_kernel("affine_rows", "sm_90")
    b = kc.compile_kernel("affine_rows", "sm_80")
    assert not b.record.cache_hit and kc.cache_path(a.record) != kc.cache_path(b.record)


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_corrupt_cache_entry_is_detected_and_rebuilt(cache_dir, damage):
    good = kc.compile_kernel("affine_rows", "sm_90")
    path = kc.cache_path(good.record)
    blob = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(blob[: len(blob) // 2])
    elif damage == "flip":
        i = len(blob) - 10
        path.write_bytes(blob[:i] + bytes([blob[i] ^ 0xFF]) + blob[i + 1:])
    else:
        path.write_bytes(b"not a cubin")
    again = kc.compile_kernel("affine_rows", "sm_90")
    assert not again.record.cache_hit and again.cubin == good.cubin
    assert kc.compile_kernel("affine_rows", "sm_90").record.cache_hit  # the rebuilt entry is valid


def test_header_change_changes_source_hash(cache_dir):
    rec = kc.compile_kernel("reference_stats", "sm_90").record
    assert rec.headers == ("welford_ln.cuh",)
    source, headers = kc.kernel_sources("reference_stats")
    assert rec.source_sha256 == kc.digest(source, *headers.values())
    assert rec.source_sha256 != kc.digest(source)  # the header is part of the key


def test_bad_arguments_raise_valueerror(cache_dir):
    with pytest.raises(ValueError, match="unknown kernel"):
        kc.compile_kernel("no_such_kernel", "sm_90")
    with pytest.raises(ValueError, match="arch"):
        kc.compile_kernel("affine_rows", "90")


def test_cache_writes_leave_no_temporary_files(cache_dir):
    import pathlib

    kc.compile_kernel("split_affine", "sm_90")
    assert not list(pathlib.Path(cache_dir).glob("*.tmp"))
