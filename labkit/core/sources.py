"""Where labkit reads the CUDA kernel sources (kernels/) and the host extension's sources (host/) from.

The repository keeps them at its top. A built wheel carries the same files, byte for byte, under
labkit/_sources/kernels and labkit/_sources/host (setup.py's build step copies them there: the checkout holds each
file once). The installed copy is read where it exists; an editable install or a run from the checkout has none and
reads the checkout. Every digest of the sources (compile records' source_sha256, `sources_digest`, a run's
kernel_source_hashes, the host extension's name) is taken from the files found here, so a wheel and a checkout of
one commit give the same digests.
"""
from __future__ import annotations

from pathlib import Path

PACKAGED = Path(__file__).resolve().parents[1] / "_sources"  # labkit/_sources: only in a built package
CHECKOUT = Path(__file__).resolve().parents[2]                # the repository root, for a run from the tree


def source_root() -> Path:
    """The folder holding kernels/ and host/: the installed package's copy, else the checkout. RuntimeError (the
    installation, not an input, is wrong) where neither has kernels/."""
    if (PACKAGED / "kernels").is_dir():
        return PACKAGED
    if (CHECKOUT / "kernels").is_dir() and (CHECKOUT / "pyproject.toml").is_file():  # not site-packages' own kernels/
        return CHECKOUT
    raise RuntimeError(f"labkit's kernel sources are in neither {PACKAGED / 'kernels'} (an installed wheel) nor "
                       f"{CHECKOUT / 'kernels'} (a checkout): reinstall labkit")


def kernel_dir() -> Path:
    return source_root() / "kernels"


def host_dir() -> Path:
    return source_root() / "host"
