"""Notebook 06's study: each kernel's sources and compile options, its compile record, what ptxas made of it, and
whether its machine code makes the same FMA contractions as torch's own vectorized LayerNorm kernel.

Torch's side is the committed summary under data/sass/ (disassembled from the torch 2.11.0+cu130 wheel, too large
to keep); ours is disassembled now when cuobjdump or nvdisasm is present, otherwise replayed from that summary.
"""
from __future__ import annotations

from pathlib import Path

import json

from labkit.core import compile as kc
from labkit.core.sources import kernel_dir
from labkit.sass import elf, ptxas, summary, tools

TORCH_VECTORIZED = "vectorized_layer_norm_kernel<float, float, false>"


# ------------------------------------------------------------------------------------------- compiling ---

def compile_records(arch: str) -> list[kc.CompileRecord]:
    """Compile every kernel under kernels/ that builds for `arch` (NVRTC: no GPU needed) and return the compile
    records; `unbuilt(arch)` lists the others (below sm_90: the chain kernels)."""
    return kc.compile_buildable(arch)[0]


def unbuilt(arch: str) -> list[dict]:
    """The kernels NVRTC refuses for `arch`, with the first error it gives (a one-line reason, not its log)."""
    return [{"kernel": k, "arch": arch, "why not (NVRTC)": why[:160]}
            for k, why in kc.compile_buildable(arch)[1].items()]


def unbuilt_line(arch: str) -> str:
    rows = unbuilt(arch)
    if not rows:
        return f"every kernel in kernels/ compiles for {arch}"
    reasons = "; ".join(dict.fromkeys(r["why not (NVRTC)"] for r in rows))
    return (f"{len(rows)} kernel(s) do not compile for {arch}, and no path offers them there: "
            f"{', '.join(r['kernel'] for r in rows)} (NVRTC: {reasons})")


def sources(records: list[kc.CompileRecord]) -> list[tuple[str, str]]:
    """(file, text) of every kernel source and, after them, every header they include, each file once however
    many kernels include it."""
    kernels = [f"{r.kernel}.cu" for r in records]
    headers = sorted({h for r in records for h in r.headers})
    return [(name, (kernel_dir() / name).read_text()) for name in dict.fromkeys(kernels + headers)]


def compile_rows(records: list[kc.CompileRecord]) -> list[dict]:
    return [{"kernel": r.kernel, "arch": r.arch, "nvrtc": r.nvrtc_version, "headers": r.headers,
             "options": " ".join(r.options), "source_sha256": r.source_sha256[:16],
             "cubin_sha256": r.cubin_sha256[:16], "cache_hit": r.cache_hit} for r in records]


def resource_rows(records: list[kc.CompileRecord]) -> list[dict]:
    """Per function: ptxas's report (the kernel recompiled with --ptxas-options=-v, whose machine code must equal
    the cached cubin's: `code identical`) beside the cubin's own resource usage (local and shared bytes)."""
    rows = []
    for r in records:
        info = ptxas.ptxas_info(r.kernel, r.arch)
        usage = {u.function: u for u in elf.resource_usage(kc.compile_kernel(r.kernel, r.arch).cubin)}
        for f in info["functions"]:
            u = usage.get(f["function"])
            rows.append({"kernel": r.kernel, "function": f["function"], "registers": f.get("registers"),
                         "barriers": f.get("barriers"), "static smem (B)": f.get("static_smem_bytes"),
                         "stack (B)": f.get("stack_bytes"), "spill stores (B)": f.get("spill_store_bytes"),
                         "spill loads (B)": f.get("spill_load_bytes"),
                         "local (B)": u.local_bytes if u else None,
                         "cubin shared (B)": u.shared_bytes if u else None,
                         "code identical": info["code_identical"]})
    return rows


# ---------------------------------------------------------------------------------------- machine code ---

def tool_rows() -> list[dict]:
    return [{"tool": k, "found": Path(v["path"]).name if v else None, "version": v["version"] if v else None}
            for k, v in tools.tool_versions().items()]


def can_disassemble() -> bool:
    return tools.find_tool("cuobjdump") is not None or tools.find_tool("nvdisasm") is not None


FALLBACK_ARCH = "sm_90"  # the H200's: the arch every study of this book was first recorded on


def committed_record(arch: str, root=None) -> tuple:
    """(path, note) of the committed SASS comparison for a device of `arch` (labkit.sass.summary.committed_comparison):
    note is None, or, when data/sass holds none for `arch`, the sentence saying sm_90's is read instead. Raises
    RuntimeError when there is neither."""
    args = [root] if root is not None else []
    path = summary.committed_comparison(arch, *args)
    if path is not None:
        return path, None
    path = summary.committed_comparison(FALLBACK_ARCH, *args)
    if path is None:
        raise RuntimeError("no committed SASS comparison under data/sass/: run python -m labkit.sass --wheel ...")
    return path, (f"no committed SASS comparison for {arch} under data/sass/: torch's side is {FALLBACK_ARCH}'s "
                  f"({path.name}), not the code torch runs on {arch}")


def contraction_evidence(arch: str, live: bool | None = None, root=None) -> dict:
    """Torch's vectorized kernel (the committed summary for `arch`, else sm_90's: `committed_record`) against ours:
    disassembled now for `arch` when `live` (default: when a disassembler exists), else ours as recorded in the same
    summary. Keys: file, note (None, or why the summary is not `arch`'s), torch (the summary's torch part), vec
    (torch's function), ours (by function), source, same_code (live, and the summary `arch`'s: each of our cubins
    identical to the summary's), comparison, verdict."""
    path, note = committed_record(arch, root)
    rec = json.loads(path.read_text())
    vec = rec["torch"]["functions"][TORCH_VECTORIZED]
    live = can_disassemble() if live is None else live
    if live:
        ours = summary.our_kernels_summary(arch)
        source = "ours disassembled now"
        # a summary of another arch holds that arch's cubins: comparing bytes with them says nothing
        same_code = None if note else {
            fn: ours[fn]["compile_record"]["cubin_sha256"] == rec["ours"][fn]["compile_record"]["cubin_sha256"]
            for fn in ours if fn in rec["ours"]}
    else:
        ours = rec["ours"]
        source = f"ours REPLAYED from {path.name}"
        same_code = None
    fns = list(ours.values())
    return {"file": path.name, "note": note, "record": {k: rec[k] for k in ("created_utc", "produced_by")},
            "torch": rec["torch"], "vec": vec, "ours": ours, "source": source, "same_code": same_code,
            "comparison": summary.compare(vec, fns), "verdict": summary.verdict(vec, fns)}


def comparison_rows(evidence: dict) -> list[dict]:
    """Pattern by pattern, torch's count beside ours, with one SASS instruction of each as an example."""
    return evidence["comparison"]


def check_rows(evidence: dict) -> list[dict]:
    return [{"check": k, "holds": v} for k, v in evidence["verdict"]["checks"].items()]


def _first_merge(fn: dict) -> list[str]:
    """The FP opcodes of the first shuffle-down merge: up to the SHFL that starts the second one."""
    ops = fn["regions"]["warp_merge"]
    second = [i for i, o in enumerate(ops) if o.startswith("SHFL") and i >= 3]
    return ops[:second[0]] if second else ops


def first_merge_rows(evidence: dict, ours_function: str = "reference_order_stats") -> list[dict]:
    """Torch's and our first warp merge (offset 16), FP opcode by opcode in address order."""
    t, o = _first_merge(evidence["vec"]), _first_merge(evidence["ours"][ours_function])
    return [{"#": i, "torch": t[i] if i < len(t) else "", "ours": o[i] if i < len(o) else ""}
            for i in range(max(len(t), len(o)))]


def region_rows(evidence: dict) -> list[dict]:
    vec, fns = evidence["vec"], list(evidence["ours"].values())
    return [{"region": r, "torch FP ops": len(vec["regions"].get(r, [])),
             "ours FP ops": sum(len(f["regions"].get(r, [])) for f in fns)} for r in vec["regions"]]


def provenance_rows(evidence: dict) -> list[dict]:
    """How the torch summary was made: the wheel, library and cubin with their hashes, the commands, the tools."""
    t = evidence["torch"]
    facts = {"wheel": t["wheel"], "wheel sha256": t["wheel_sha256"], "torch": t["torch_version"],
             "torch git": t["torch_git_version"], "library sha256": t["library_sha256"], "cubin": t["cubin"],
             "cubin sha256": t["cubin_sha256"], "commands": " ; ".join(t["commands"]),
             "made by": evidence["record"]["produced_by"],
             "tools": ", ".join(f"{k} {v['version']}" for k, v in t["tools"].items() if v),
             "created": evidence["record"]["created_utc"]}
    return [{"key": k, "value": v} for k, v in facts.items()]


def torch_function_rows(evidence: dict) -> list[dict]:
    return [{"torch function": k, "instructions": v["instructions"],
             "registers": (v.get("resource_usage") or {}).get("registers"),
             "FFMA explained by the vectorized contract": v["contract"]["unexplained_count"] == 0,
             "FP opcodes": ", ".join(f"{op} {n}" for op, n in v["contract"]["fp_opcodes"].items())}
            for k, v in evidence["torch"]["functions"].items()]


def _low_precision_records() -> list[tuple[str, dict]]:
    """(device arch, record) of every committed 2-byte SASS record (data/sass/low_precision), by arch number."""
    from labkit.studies import low_precision_sass as lps

    found = [(p.stem.rsplit("-", 1)[1], json.loads(p.read_text()))
             for p in lps.OUT_DIR.glob("layernorm-t-torch-*.json")]
    return sorted(found, key=lambda f: int(f[0].removeprefix("sm_")))


def low_precision_rows() -> list[dict]:
    """torch's bfloat16/float16 LayerNorm per device arch: how many of the contract's claims hold, forward and
    backward, each recomputed here from the record's kept instructions (labkit.studies.low_precision_sass.replay),
    not read from a stored verdict."""
    from labkit.studies import low_precision_sass as lps

    rows = []
    for arch, rec in _low_precision_records():
        for dtype, parts in lps.replay(rec).items():
            row = {"device": arch, "torch": rec["torch"]["torch_version"], "torch's cubin": rec["torch"]["cubin"],
                   "dtype": dtype}
            for direction, claims in parts.items():
                row[f"{direction}: claims holding"] = f"{sum(c['holds'] is True for c in claims)}/{len(claims)}"
                failed = [c["claim"] for c in claims if c["holds"] is not True]
                row[f"{direction}: not holding"] = ", ".join(failed) or "—"
            rows.append(row)
    return rows


def low_precision_claim_rows(arch: str, dtype: str = "bfloat16") -> list[dict]:
    """The forward's claims for `dtype` on device `arch` (the nearest committed arch at or below it), each with
    whether it holds: what "the same contract" means, claim by claim."""
    from labkit.studies import low_precision_sass as lps

    records = _low_precision_records()
    number = int(arch.removeprefix("sm_").removeprefix("compute_"))
    below = [r for r in records if int(r[0].removeprefix("sm_")) <= number] or records[:1]
    if not below:
        return []
    device, rec = below[-1]
    return [{"device": device, "dtype": dtype, "forward claim": c["claim"],
             "holds": "yes" if c["holds"] is True else "NO"} for c in lps.replay(rec)[dtype]["forward"]]


def same_code_line(same: dict) -> str:
    """Whether the cubins compiled here are byte-identical to those the committed SASS summary was made from, and
    what a difference means: the verdict reads the SASS of the cubins compiled here, so it holds for them."""
    differ = [k for k, v in same.items() if not v]
    if not differ:
        return f"our cubins are byte-identical to the committed summary's ({len(same)} of {len(same)})"
    return (f"our cubins byte-identical to the committed summary's: {len(same) - len(differ)} of {len(same)}; "
            f"{', '.join(differ)} differ (compiled here by this machine's NVRTC, the summary's by the toolchain in "
            f"its provenance); the FMA verdict above reads the SASS compiled here, so it holds for these cubins")


def verdict_lines(evidence: dict, resources: list[dict]) -> list[str]:
    """The FMA-contraction verdict and what ptxas reported, from the records."""
    t = evidence["torch"]
    spills = [f"{r['kernel']}/{r['function']}" for r in resources
              if (r["spill stores (B)"] or 0) or (r["spill loads (B)"] or 0)]
    # the FMA verdict first: it is the answer the front page shows
    lines = [f"SAME FMA CONTRACTIONS as torch {t['torch_version']}'s {t['arch']} cubin: "
             f"{'yes' if evidence['verdict']['same_contractions'] else 'NO'}",
             f"torch {t['torch_version']} ({t['wheel']}, sha256 {t['wheel_sha256'][:16]}…), {t['arch']} cubin "
             f"{t['cubin']} vs {evidence['source']}"]
    if evidence.get("note"):
        lines.append(evidence["note"])
    if evidence["same_code"] is not None:
        lines.append(same_code_line(evidence["same_code"]))
    lines += [f"- {note}" for note in evidence["verdict"]["notes"]]
    same = all(r["code identical"] for r in resources)
    lines.append(f"ptxas: {len(resources)} functions, machine code identical to the cached cubins: "
                 f"{'yes' if same else 'no'}; spills: {', '.join(spills) or 'none'}")
    return lines
