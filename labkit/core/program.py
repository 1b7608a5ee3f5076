"""A path's launches bound as data: the one description both runners execute.

Vocabulary (one meaning per word): "launches" is a kernel path's launch list for one shape (labkit.ops.launches,
each path's `launches(rows, n, device)`); a `Program` is those launches bound as data for a runner; "plan" is only
the drop-in's per-signature choice (labkit.ops.dropin.plan), which holds a path's bound Program.

Every kernel path describes one call as a `Program`: named pointer slots (the call's tensors and scratch), then
steps — `Memset` of a slot's bytes and `Launch` of a labkit.core.launch Kernel with its arguments, each a slot's
address (`Ptr`), a tensor map encoded at a slot's address (`Map`), a constant (`I32`, `U64`, `F32`) or the call's
eps (`EPS`). Two runners execute the same Program:
- `BoundProgram` (here): CuPy's launches from Python, always available where CuPy is;
- the host extension (host/launch_program.h, through labkit.ops.dropin.host): the same steps from C++, so the
  drop-in's eager calls and its autograd node launch without Python between the kernels.
So a path's launch sequence is written once, and the two runners cannot disagree on what a call launches.

Steps carry a `stage` name ("stats", "output", ...) so experiments can run one stage alone (`stage=`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.core.launch import Kernel, memset_async, prepare
from labkit.core.tensormap import TensorMapEncoder, TensorMapGeometry

# the slots of the two call forms every LayerNorm path uses
FORWARD_SLOTS = ("x", "weight", "bias", "y", "mean", "rstd", "scratch")
BACKWARD_SLOTS = ("dy", "x", "mean", "rstd", "weight", "dx", "dgamma", "dbeta", "scratch")


@dataclass(frozen=True)
class Ptr:
    """The address of slot `slot` plus `offset` bytes, as a 64-bit kernel argument."""

    slot: str
    offset: int = 0


@dataclass(frozen=True)
class Map:
    """A tensor map (128 bytes, by value) of `geometry` at slot `slot`'s address."""

    slot: str
    geometry: TensorMapGeometry


@dataclass(frozen=True)
class I32:
    value: int


@dataclass(frozen=True)
class U64:
    value: int


@dataclass(frozen=True)
class F32:
    """A float32 constant (an epilogue's scale: labkit.ops.epilogue). Python's runner only: the host extension's
    programs have no float constant kind, and `native_steps` refuses one."""

    value: float


@dataclass(frozen=True)
class _Eps:
    """The call's eps as a float32 argument."""


EPS = _Eps()


@dataclass(frozen=True)
class Launch:
    kernel: Kernel
    args: tuple
    stage: str = ""


@dataclass(frozen=True)
class Memset:
    """Zero `nbytes` at slot `slot` + `offset` on the call's stream (a memset node under graph capture)."""

    slot: str
    offset: int
    nbytes: int
    stage: str = ""


@dataclass(frozen=True)
class Program:
    slots: tuple[str, ...]
    steps: tuple

    def __post_init__(self):
        for step in self.steps:
            named = [step.slot] if isinstance(step, Memset) else [a.slot for a in step.args
                                                                  if isinstance(a, (Ptr, Map))]
            for name in named:
                if name not in self.slots:
                    raise ValueError(f"step {step} names slot {name!r}, not one of {self.slots}")

    def stages(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.stage for s in self.steps))


_PTR, _MAP, _CONST, _EPS = 0, 1, 2, 3


class BoundProgram:
    """A Program on one device, run from Python through CuPy: `bp(ptrs, eps, stream)` with `ptrs` the slots'
    addresses in the program's slot order and `stream` labkit.core.launch.stream()'s pair. The device must be
    current (`device_scope`)."""

    def __init__(self, program: Program, device_index: int):
        self.program, self.device_index = program, device_index
        index = {name: i for i, name in enumerate(program.slots)}
        encoders: dict[TensorMapGeometry, TensorMapEncoder] = {}
        self._steps = []
        for step in program.steps:
            if isinstance(step, Memset):
                self._steps.append((None, step.stage, (index[step.slot], step.offset, step.nbytes)))
                continue
            spec = []
            for a in step.args:
                if isinstance(a, Ptr):
                    spec.append((_PTR, index[a.slot], a.offset))
                elif isinstance(a, Map):
                    enc = encoders.setdefault(a.geometry, TensorMapEncoder(a.geometry))
                    spec.append((_MAP, index[a.slot], enc))
                elif isinstance(a, I32):
                    spec.append((_CONST, 0, np.int32(a.value)))
                elif isinstance(a, U64):
                    spec.append((_CONST, 0, np.uint64(a.value)))
                elif isinstance(a, F32):
                    spec.append((_CONST, 0, np.float32(a.value)))
                elif a is EPS:
                    spec.append((_EPS, 0, None))
                else:
                    raise ValueError(f"unknown argument {a!r} in {step}")
            self._steps.append((prepare(step.kernel, device_index), step.stage, tuple(spec)))

    def __call__(self, ptrs, eps, stream, stage: str | None = None) -> None:
        if stage is not None and all(st != stage for _, st, _ in self._steps):
            raise ValueError(f"this program has no stage {stage!r}; its stages: {self.program.stages()}")
        s, s_ptr = stream
        u = np.uint64
        steps = [(fn, spec) for fn, st, spec in self._steps if stage is None or st == stage]
        # every launch's arguments before the first step: a tensor map's encode raises ValueError for an address it
        # cannot take (a 2-byte x 8 bytes off 16), and it must do so before anything runs on the stream
        args = [None if fn is None else
                tuple(u(ptrs[i] + v) if k == _PTR else v if k == _CONST else v(ptrs[i]) if k == _MAP else eps
                      for k, i, v in spec) for fn, spec in steps]
        for (fn, spec), a in zip(steps, args):
            if fn is None:
                slot, offset, nbytes = spec
                memset_async(ptrs[slot] + offset, nbytes, s_ptr)
            else:
                fn(a, s)


def native_steps(bp: BoundProgram) -> list:
    """The bound program as the host extension's constructor takes it: per step ("memset", slot, offset, nbytes)
    or ("launch", function handle, grid, block, shared bytes, [(kind, slot, value), ...]) with kinds
    0 pointer (value: offset), 1 tensor map (value: (dims, strides, box, CUtensorMapDataType)), 2 int32, 3 uint64, 4 eps."""
    out = []
    for step, (fn, _, spec) in zip(bp.program.steps, bp._steps):
        if fn is None:
            out.append(("memset",) + spec)
            continue
        args = []
        for (k, i, v), a in zip(spec, step.args):
            if isinstance(a, F32):
                raise ValueError(f"the host extension's programs take no float constant ({a} in {step.kernel})")
            if k == _PTR:
                args.append((0, i, int(v)))
            elif k == _MAP:
                g = a.geometry
                args.append((1, i, (tuple(g.dims), tuple(g.strides_bytes), tuple(g.box), g.data_type)))
            elif k == _CONST:
                args.append((2 if isinstance(a, I32) else 3, 0, int(a.value)))
            else:
                args.append((4, 0, 0))
        grid = tuple(step.kernel.grid) + (1,) * (3 - len(step.kernel.grid))
        block = tuple(step.kernel.block) + (1,) * (3 - len(step.kernel.block))
        out.append(("launch", int(fn.function_handle), grid, block, int(step.kernel.shared_mem), args))
    return out
