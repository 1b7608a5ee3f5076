"""The one live-or-replay switch of every notebook and benchmark.

On a CUDA GPU a session opens a fresh run directory and writes each record as it is computed; on a CPU it finds
the newest complete committed run of the same name under data/runs and hands back its records, labelled REPLAYED
with the run id (or says that there is no committed GPU run yet).
"""
from __future__ import annotations

from pathlib import Path

from labkit.records import run as results


def resolve(device: str = "auto") -> str:
    """'cuda' or 'cpu' from a user's choice of 'auto', 'cuda' or 'cpu'."""
    import torch

    if device not in ("auto", "cuda", "cpu"):
        raise ValueError(f"device must be 'auto', 'cuda' or 'cpu', got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no CUDA device")
    return device


def mode_banner(device: str, replay_run: str | None = None) -> str:
    if device == "cuda":
        import torch

        return f"LIVE on {torch.cuda.get_device_name()} (torch {torch.__version__})"
    suffix = f" — figures below are REPLAYED from committed GPU run {replay_run}" if replay_run else ""
    return f"CPU mode (no GPU): kernels compiled for sm_90 with NVRTC, arithmetic checked on CPU{suffix}"


def lacking(needs_arch: int | None, why: str = "", needs_path: str | None = None) -> str | None:
    """What the present GPU lacks for a notebook that needs sm_<needs_arch> and, with `needs_path`, that path's
    launches at L1/40 (an sm_120 GPU is past sm_90 but cannot hold the chain's rings), or None when it has both (or
    nothing is needed). `why` names the feature. Read as the paths' launches read the GPU (labkit.core.device, the arch
    override included)."""
    if needs_arch is None and needs_path is None:
        return None
    import torch

    from labkit.core.device import device_info

    dev = device_info(torch.cuda.current_device())
    if needs_arch is not None and dev.arch < needs_arch:
        return f"this GPU, {dev.label}, lacks what it measures: {why or f'sm_{needs_arch}'}"
    if needs_path is not None:
        from labkit.ops import paths
        from labkit.tasks import L1_40

        rows, n = L1_40[0], L1_40[1] * L1_40[2] * L1_40[3]
        if needs_path not in paths.candidates(rows, n, dev):
            return (f"this GPU, {dev.label}, cannot launch the {needs_path} path at L1/40 (its shared memory, "
                    f"{dev.smem_optin_bytes // 1024} KiB per block, or its features), which this notebook measures")
    return None


class RunSession:
    """A notebook's source of records: live (a fresh run directory on the GPU) or REPLAYED (a committed run). A
    notebook that measures something the GPU lacks (`needs_arch`) replays the committed run there too, saying so."""

    def __init__(self, name: str, device: str, run=None, replay: dict | None = None, lacks: str | None = None):
        self.name, self.device, self.run, self.replay, self.lacks = name, device, run, replay, lacks
        self._written: dict[str, object] = {}  # live: the records this session wrote, to read back

    @classmethod
    def open(cls, name: str, device: str, output_dir, params: dict | None = None,
             runs_root=None, needs_arch: int | None = None, why: str = "", needs_path: str | None = None
             ) -> "RunSession":
        """device is already resolved ('cuda' or 'cpu'). runs_root: where committed runs live (data/runs).
        needs_arch, why: the arch the notebook's kernels need and the feature, e.g. 90 and "the chain kernels'
        bulk copies and mbarrier transactions (sm_90)": below it, the committed run is replayed, labelled."""
        if device == "cuda":
            lacks = lacking(needs_arch, why, needs_path)
            if lacks is None:
                return cls(name, device, run=results.Run.create(Path(output_dir) / "runs", name, params,
                                                                device="cuda"))
            return cls(name, device, replay=newest_complete_run(name, runs_root), lacks=lacks)
        return cls(name, device, replay=newest_complete_run(name, runs_root))

    @classmethod
    def replaying(cls, name: str, run_dir=None, runs_root=None) -> "RunSession":
        """A session that replays `run_dir` (any run directory, complete or not), or without one the newest
        complete committed run of `name`, whatever this machine has: for readers of records, which measure
        nothing. `replay` is None when there is no such committed run."""
        replay = results.load_run(Path(run_dir)) if run_dir else newest_complete_run(name, runs_root)
        return cls(name, "cpu", replay=replay)

    @property
    def replay_path(self) -> str | None:
        """The replayed run's directory (None when live or when there is nothing to replay)."""
        return self.replay["path"] if self.replay else None

    @property
    def live(self) -> bool:
        return self.run is not None

    @property
    def run_id(self) -> str | None:
        if self.live:
            return self.run.run_id
        return self.replay["records"]["run"]["run_id"] if self.replay else None

    @property
    def source(self) -> str:
        if self.live:
            return f"LIVE run {self.run_id}"
        if self.replay:
            return f"REPLAYED committed GPU run {self.run_id}"
        return f"no committed GPU run yet (no complete '{self.name}' run under data/runs)"

    @property
    def provenance(self) -> dict:
        if self.live:
            return self.run.meta["provenance"]
        return self.replay["records"]["run"]["provenance"] if self.replay else {}

    def banner(self) -> str:
        if self.lacks:
            shown = (f"the figures below are REPLAYED from committed GPU run {self.run_id}" if self.replay
                     else self.source)
            return f"GPU present, not measured live: {self.lacks}; {shown}"
        text = mode_banner(self.device, self.run_id if self.replay else None)
        return text if (self.live or self.replay) else text + f" — {self.source}"

    def describe(self) -> dict:
        """Which run this session is, for the executed notebook's metadata (labkit.book lifts it there; the site
        reads it): {"name", "run_id", "live", "missing"}; missing: no committed run of `name` to replay."""
        return {"name": self.name, "run_id": self.run_id, "live": self.live,
                "missing": not self.live and self.replay is None, "lacks": self.lacks}

    def record(self, name: str, compute=None):
        """Live: compute() and write it as `name`, or without `compute` the record `name` this session wrote
        (None if none). Replay: the committed run's record `name` (or None). One switch for every reader."""
        if self.live:
            if compute is None:
                return self._written.get(name)
            rec = compute()
            self.run.write(name, rec)
            self._written[name] = rec
            return rec
        return (self.replay or {}).get("records", {}).get(name)

    def add_figure(self, fig, name: str) -> str | None:
        """Save a figure into the live run directory (listed in the manifest); nothing on replay."""
        if not self.live or fig is None:
            return None
        target = self.run.path / f"{name}.png"
        fig.savefig(target, dpi=110, bbox_inches="tight")
        self.run.add_file(target)
        return str(target)

    def absent(self, name: str) -> str:
        """What a cell shows where record `name` gives nothing: the session's source, or, replaying a committed run
        that has no such record, that the run predates the measurement."""
        if not self.live and self.replay and name not in self.replay.get("records", {}):
            return (f"not in REPLAYED committed GPU run {self.run_id}: the run predates this measurement, which the "
                    f"notebook's next GPU run records")
        return self.source

    def label(self, what: str) -> str:
        return f"{what} — {self.source}"

    def close(self) -> str:
        if self.live:
            self.run.close()
            return f"run {self.run_id} written ({len(self._written)} records)"
        return f"nothing written ({self.source})"


def newest_complete_run(name: str, runs_root=None) -> dict | None:
    """The newest committed run of `name` whose manifest is complete and whose hashes still match."""
    root = Path(runs_root) if runs_root else results.DATA_RUNS
    for path in reversed(results.committed_runs(name, root)):
        run = results.load_run(path)
        if run["complete"]:
            return run
    return None
