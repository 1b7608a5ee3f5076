"""Where kernels/ and host/ are read from: the installed package's copy first, else the checkout; setup.py ships them
where labkit.core.sources looks; and every digest of the sources is the same from either place."""
import runpy
import shutil
from pathlib import Path

import pytest

from labkit.core import compile as kc
from labkit.core import sources
from labkit.ops.dropin import host
from labkit.records.run import kernel_source_hashes

REPO = Path(__file__).resolve().parent.parent


def _setup():
    return runpy.run_path(str(REPO / "setup.py"), run_name="setup_py")  # not __main__: setup() does not run


def test_setup_ships_the_folders_where_labkit_reads_them():
    shipped = _setup()["SHIPPED"]
    packaged = sources.PACKAGED.relative_to(REPO).as_posix()
    assert shipped == {"kernels": f"{packaged}/kernels", "host": f"{packaged}/host"}


def test_setup_ships_every_source_and_no_leftovers(tmp_path):
    shipped_files = _setup()["shipped_files"]
    assert [p.relative_to(REPO / "kernels").as_posix() for p in shipped_files(REPO / "kernels")] == \
        sorted(p.relative_to(REPO / "kernels").as_posix() for p in (REPO / "kernels").rglob("*.cu*"))
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.pyc").write_bytes(b"")
    (tmp_path / ".a.cu.swp").write_bytes(b"")
    (tmp_path / "a.cu").write_text("")
    assert shipped_files(tmp_path) == [tmp_path / "a.cu"]


def test_a_checkout_reads_its_own_folders():
    assert not sources.PACKAGED.exists()  # the build writes labkit/_sources only into the wheel
    assert sources.kernel_dir() == REPO / "kernels" and sources.host_dir() == REPO / "host"


def test_the_packaged_copy_wins_and_gives_the_same_digests(tmp_path, monkeypatch):
    before = (kc.sources_digest(), kernel_source_hashes(), host.source_hash(), kc.kernel_sources("rows_staged"))
    for folder in ("kernels", "host"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    monkeypatch.setattr(sources, "PACKAGED", tmp_path)
    assert sources.kernel_dir() == tmp_path / "kernels" and sources.host_dir() == tmp_path / "host"
    assert (kc.sources_digest(), kernel_source_hashes(), host.source_hash(), kc.kernel_sources("rows_staged")) == before


def test_neither_place_is_a_broken_install(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "PACKAGED", tmp_path / "a")
    monkeypatch.setattr(sources, "CHECKOUT", tmp_path / "b")
    with pytest.raises(RuntimeError, match="reinstall labkit"):
        sources.kernel_dir()
