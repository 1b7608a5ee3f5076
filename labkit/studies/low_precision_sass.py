"""torch's bfloat16/float16 LayerNorm kernels in the machine code of its CUDA wheel: the contract read from the source
(docs/decisions.md#low_precision_reading) confirmed claim by claim, forward and backward, per device arch.

One record per device arch, data/sass/low_precision/layernorm-t-torch-<version>-<arch>.json, written by
`python -m labkit.studies.low_precision_sass --wheel <wheel> --workdir <tmp> --arch sm_XY [--arch ...]` (`main`). It
reads the cubin the float32 records read (labkit.sass.summary.torch_device_summary: the loadable-arch rule, one
translation unit), and keeps, per T:
- forward: `vectorized_layer_norm_kernel<T, float, false>`'s full instruction stream (labkit.sass.parser.compact),
  its contract report, and labkit.sass.low_precision.forward_claims on it, against the contract report of torch's
  float32 kernel from the same cubin (kept in the record: `float32`);
- backward: the dX kernel and the GammaBeta kernels of the float32 study plus the partial-sums one
  (backward_contract.low_precision_functions), each a full instruction stream, and backward_contract.
  low_precision_checks on them.
`replay(record)` recomputes every claim from the kept instructions (tests/test_sass_low_precision.py): no wheel and
no CUDA tool needed.
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path

from labkit.core.compile import REPO_ROOT
from labkit.sass import tools

OUT_DIR = REPO_ROOT / "data" / "sass" / "low_precision"
DTYPES = ("bfloat16", "float16")
VEC = "vectorized_layer_norm_kernel<float, float, false>"
# The float32 kernel's contract counts the forward claims compare with (labkit.sass.low_precision).
FLOAT32_KEYS = ("push_mean", "push_m2", "merge", "merge_m2", "division", "rsqrt", "unexplained_count")


def command(wheel: str, arch: str) -> str:
    """The command line that writes the record for a device of `arch` (its `produced_by`)."""
    return f"python -m labkit.studies.low_precision_sass --wheel {wheel} --workdir <tmp> --arch {arch}"


def record_path(arch: str, torch_version: str, folder: Path = OUT_DIR) -> Path:
    return Path(folder) / f"layernorm-t-torch-{torch_version}-{arch}.json"


def _function(funcs: dict, frag: str) -> tuple[str, list]:
    names = [f for f in funcs if frag in f]
    if len(names) != 1:
        raise RuntimeError(f"expected one function matching {frag}, found {names}")
    return names[0], funcs[names[0]]


def forward_part(instrs: list, dtype: str, float32_contract: dict) -> dict:
    """The forward's committed part from its instructions: the stream, its contract report and the claims (all three
    from the compacted stream, so that `replay` recomputes exactly what was written)."""
    from labkit.sass import low_precision
    from labkit.sass.parser import compact, parse_compact
    from labkit.sass.patterns import contract_report

    lines = compact(instrs)
    kept = parse_compact(lines)
    contract = contract_report(kept, dtype=dtype)
    return {"contract": {k: contract[k] for k in (*FLOAT32_KEYS, "output", "output_rstd")},
            "claims": low_precision.forward_claims(kept, dtype, float32_contract), "sass": lines}


def record_for_device(wheel: Path, workdir: Path, arch: str) -> tuple[dict, str]:
    """(record, the wheel's torch version) for a device of `arch`."""
    from labkit.sass import summary
    from labkit.sass.elf import resource_usage
    from labkit.sass.parser import compact, parse_sass
    from labkit.sass.tools import disassemble
    from labkit.studies import backward_contract as bc

    wheel, workdir = Path(wheel), Path(workdir)
    part = summary.torch_device_summary(wheel, workdir, arch)
    cubin = (workdir / part["arch"] / part["cubin"]).read_bytes()
    if summary.sha256_file(workdir / part["arch"] / part["cubin"]) != part["cubin_sha256"]:
        raise RuntimeError(f"{part['cubin']} changed under {workdir} while it was read")
    funcs = parse_sass(disassemble(cubin))
    usage = {u.function: u.to_json() for u in resource_usage(cubin)}
    f32 = {k: part["functions"][VEC]["contract"][k] for k in FLOAT32_KEYS}
    dtypes = {}
    for dtype in DTYPES:
        (pretty, frag), = summary.retype({VEC: summary.TORCH_FUNCTIONS[VEC]}, dtype).items()
        mangled, instrs = _function(funcs, frag)
        forward = {"function": pretty, "mangled": mangled, "resource_usage": usage.get(mangled),
                   **forward_part(instrs, dtype, f32)}
        backward = {}
        for bpretty, bfrag in bc.low_precision_functions(dtype).items():
            bmangled, binstrs = _function(funcs, bfrag)
            backward[bpretty] = {"mangled": bmangled, "resource_usage": usage.get(bmangled), "sass": compact(binstrs)}
        claims = bc.low_precision_checks({k: v["sass"] for k, v in backward.items()}, dtype)
        dtypes[dtype] = {"forward": forward, "backward": {"functions": backward, "claims": claims}}
    torch_part = {k: v for k, v in part.items() if k != "functions"}
    record = {"schema": 1, "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "produced_by": command(wheel.name, arch), "torch": torch_part,
              "float32": {"function": VEC, "contract": f32,  # the float32 record of this arch has it too
                          "record": str((summary.SASS_DIR / f"layernorm-torch-{part['torch_version']}-{arch}.json")
                                        .relative_to(REPO_ROOT))},
              "dtypes": dtypes}
    record["verdicts"] = verdicts(record)
    return record, part["torch_version"]


def replay(record: dict) -> dict[str, dict[str, list[dict]]]:
    """{dtype: {"forward": claims, "backward": claims}} recomputed from the record's kept instructions."""
    from labkit.sass.low_precision import forward_claims
    from labkit.sass.parser import parse_compact
    from labkit.studies import backward_contract as bc

    out = {}
    for dtype, part in record["dtypes"].items():
        fwd = forward_claims(parse_compact(part["forward"]["sass"]), dtype, record["float32"]["contract"])
        bwd = bc.low_precision_checks({k: v["sass"] for k, v in part["backward"]["functions"].items()}, dtype)
        out[dtype] = {"forward": fwd, "backward": bwd}
    return out


def verdicts(record: dict) -> dict:
    """Per T and direction: whether every claim holds, and the claims that do not."""
    out = {}
    for dtype, part in record["dtypes"].items():
        for direction, claims in (("forward", part["forward"]["claims"]), ("backward", part["backward"]["claims"])):
            failed = [c["claim"] for c in claims if c["holds"] is not True]
            out.setdefault(dtype, {})[direction] = {"claims": len(claims), "all_hold": not failed, "failed": failed}
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m labkit.studies.low_precision_sass --wheel ... --workdir ... --arch sm_86 [--arch ...]`: write
    data/sass/low_precision/layernorm-t-torch-<version>-<arch>.json per arch and print the verdicts."""
    import argparse

    from labkit.core.atomic import atomic_write_json

    ap = argparse.ArgumentParser(description="Record torch's bfloat16/float16 LayerNorm SASS (from a CUDA wheel) "
                                             "per arch, with the contract's claims checked on it")
    tools.add_wheel_arguments(ap, "; the float32 records' commands may share it")
    ap.add_argument("--arch", action="append", required=True, help="device arch (sm_XY); repeat for several")
    ap.add_argument("--out-dir", default=None, help="folder to write into (default data/sass/low_precision)")
    args = ap.parse_args(argv)
    workdir = tools.scratch_dir(args.workdir)
    for arch in args.arch:
        rec, torch_version = record_for_device(Path(args.wheel), workdir, arch)
        out = record_path(arch, torch_version, Path(args.out_dir) if args.out_dir else OUT_DIR)
        atomic_write_json(out, rec)
        said = "; ".join(f"{dt} {d}: " + ("every claim holds" if v["all_hold"] else f"FAILED {v['failed']}")
                         for dt, dirs in rec["verdicts"].items() for d, v in dirs.items())
        print(f"wrote {out} ({rec['torch']['cubin']}): {said}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
