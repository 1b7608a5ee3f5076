"""One stage of a path's launches alone: the statistics launch, or the output launch from given statistics.

Study code, not the operator: the stage breakdown of notebook 07 (labkit.studies.parallel_stats) and the sanitizer
step (labkit.studies.reliability) time or check one stage of a path's launches (labkit.ops.launches) by running its
bound Program with `stage=` (labkit.core.program); no public function of ours runs a stage alone.
"""
from __future__ import annotations

import numpy as np

from labkit.core.device import current_index
from labkit.core.launch import device_scope, stream
from labkit.ops.launches import bound, scratch_for


def stats_only(launches, x, mean, rstd, eps: float) -> None:
    """The statistics stage of `launches` alone (stage-breakdown and sanitizer experiments)."""
    index = current_index(x.device)
    scratch = scratch_for(launches, x.device)
    b = bound(launches, index)
    sp = scratch.data_ptr() if scratch is not None else 0
    with device_scope(index):
        b((x.data_ptr(), 0, 0, 0, mean.data_ptr(), rstd.data_ptr(), sp), np.float32(eps), stream(index), stage="stats")


def output_only(launches, x, mean, rstd, weight, bias, y) -> None:
    """The output stage of `launches` alone, from given statistics."""
    index = current_index(x.device)
    b = bound(launches, index)
    with device_scope(index):
        b((x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(), mean.data_ptr(), rstd.data_ptr(), 0),
          np.float32(0.0), stream(index), stage="output")
