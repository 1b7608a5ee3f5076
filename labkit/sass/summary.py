"""Committable summaries: our kernels' and torch's (from a CUDA wheel) LayerNorm SASS, their side-by-side
comparison and verdict, the records under data/sass/, and `main`, the CLI that writes them
(`python -m labkit.sass --wheel ... --workdir ...`)."""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

from labkit.core.compile import REPO_ROOT
from labkit.core.cubin import complete_cubin
from labkit.sass import tools
from labkit.sass.elf import resource_usage
from labkit.sass.parser import Instr, fp_op_sequence, parse_sass, subroutine_start
from labkit.sass.patterns import CONTRACT_KEYS, contract_report
from labkit.sass.symbolic import Node
from labkit.sass.tools import disassemble, find_tool, run_tool, tool_versions


SASS_DIR = REPO_ROOT / "data" / "sass"


def _clean(obj):
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items() if not isinstance(v, Node)}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def function_summary(sass_text: str, function: str, label: str) -> dict:
    """Small, committable summary of one function's SASS: FP opcode histogram, the ordered FP op sequence of the
    stats loop / merges / finish / output regions, and the contract report."""
    funcs = parse_sass(sass_text)
    if function not in funcs:
        raise ValueError(f"{function!r} not in the disassembly; have {sorted(funcs)[:5]}…")
    instrs = funcs[function]
    return {"label": label, "function": function, "instructions": len(instrs),
            "regions": regions(instrs), "contract": _clean(contract_report(instrs))}


def regions(instrs: list[Instr]) -> dict[str, list[str]]:
    """FP opcode sequences of a LayerNorm kernel's regions, split at anchors: `loop` (up to the first
    SHFL.DOWN), `warp_merge` (up to the first barrier or SHFL.IDX after the last SHFL.DOWN),
    `block_tree_and_finish` (up to just past the first MUFU.RSQ), `output` (the rest of the kernel body) and
    `subroutines` (the division/reciprocal slow paths reached by CALL, after the body). A kernel without
    shuffles (output only) has `output` and `subroutines`."""
    sub = subroutine_start(instrs)
    end = sub if sub is not None else instrs[-1].addr + 0x10
    out: dict[str, list[str]] = {}
    shfl = [i.addr for i in instrs if i.opcode.startswith("SHFL.DOWN") and i.addr < end]
    if shfl:
        after = [i.addr for i in instrs if shfl[-1] < i.addr < end
                 and (i.opcode.startswith("BAR") or i.opcode.startswith("SHFL.IDX"))]
        tree = after[0] if after else shfl[-1] + 0x10
        rsq = [i.addr for i in instrs if i.opcode == "MUFU.RSQ" and i.addr < end]
        finish = rsq[0] + 0x30 if rsq else end
        out["loop"] = fp_op_sequence(instrs, None, shfl[0])
        out["warp_merge"] = fp_op_sequence(instrs, shfl[0], tree)
        out["block_tree_and_finish"] = fp_op_sequence(instrs, tree, finish)
        out["output"] = fp_op_sequence(instrs, finish, end)
    else:
        out["output"] = fp_op_sequence(instrs, None, end)
    out["subroutines"] = fp_op_sequence(instrs, end, None) if sub is not None else []
    return out


def our_kernels_summary(arch: str = "sm_90", kernels: tuple[str, ...] = ("reference_stats", "affine_rows")) -> dict:
    """Compile our reference-order kernels (through labkit.core.compile) and summarise their SASS."""
    from labkit.core.compile import compile_kernel

    out = {}
    for k in kernels:
        compiled = compile_kernel(k, arch)
        text = disassemble(compiled.cubin)
        funcs = parse_sass(text)
        for fn in funcs:
            out[fn] = {**function_summary(text, fn, f"ours: kernels/{k}.cu"),
                       "compile_record": compiled.record.to_json(),
                       "cubin_padded_bytes": complete_cubin(compiled.cubin)[1]}
    return out


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


TORCH_FUNCTIONS = {
    "vectorized_layer_norm_kernel<float, float, false>": "vectorized_layer_norm_kernelIffLb0EE",
    "RowwiseMomentsCUDAKernel<float, float, false>": "RowwiseMomentsCUDAKernelIffLb0EE",
    "LayerNormForwardCUDAKernel<float, float, false>": "LayerNormForwardCUDAKernelIffLb0EE",
}


# The element types torch's 2-byte LayerNorm kernels are instantiated for: (name in a demangled signature, its
# mangled form). torch's kernels are templates on T with T_ACC = float, so T's instance of a float32 kernel is its
# name with T in the first template argument.
TYPE_NAMES = {"bfloat16": ("c10::BFloat16", "N3c108BFloat16E"), "float16": ("c10::Half", "N3c104HalfE")}


def retype(functions: dict[str, str], dtype: str) -> dict[str, str]:
    """{pretty: mangled fragment} of float32 kernels (TORCH_FUNCTIONS' form: `<float, float, ...>` and `Iff...`) ->
    the same kernels' instances for `dtype` ("bfloat16"/"float16"): `<c10::BFloat16, float, ...>` and
    `IN3c108BFloat16Ef...`."""
    pretty_t, mangled_t = TYPE_NAMES[dtype]
    out = {}
    for pretty, frag in functions.items():
        if "<float, float" not in pretty or "Iff" not in frag:
            raise ValueError(f"{pretty!r} / {frag!r} is not a float32 instance <float, float, ...> / I f f ...")
        out[pretty.replace("<float, float", f"<{pretty_t}, float", 1)] = frag.replace("Iff", f"I{mangled_t}f", 1)
    return out


class KernelNotShipped(RuntimeError):
    """The wheel's library has no cubin of the asked arch holding torch's LayerNorm kernels."""


def shipped_sass_archs(listing: str) -> list[str]:
    """The SASS archs of a `cuobjdump -lelf` listing (names like libtorch_cuda.2277.sm_90.cubin), sorted."""
    archs = set(re.findall(r"\.(sm_\d+[a-z]?)\.cubin", listing))
    return sorted(archs, key=lambda a: (int(re.search(r"\d+", a).group()), a))


def loadable_archs(arch: str, shipped: list[str]) -> list[str]:
    """The shipped cubin archs a device of `arch` can run, in the order the CUDA driver prefers them: its own, then
    the lower minors of its major, highest first (an sm_XY cubin runs on sm_XZ for Z >= Y). Arch-specific sm_XYa
    cubins are left out (in torch 2.11.0+cu130 they hold none of the LayerNorm kernels), and torch's wheels carry
    no PTX, so a device with none of these runs no LayerNorm of this build."""
    major, minor = divmod(int(arch.removeprefix("sm_")), 10)
    plain = [a for a in shipped if re.fullmatch(r"sm_\d+", a)]
    same = [a for a in plain if divmod(int(a[3:]), 10)[0] == major and divmod(int(a[3:]), 10)[1] <= minor]
    return sorted(same, key=lambda a: -int(a[3:]))


def torch_device_summary(wheel: Path, workdir: Path, arch: str = "sm_90") -> dict:
    """torch_wheel_summary of the cubin torch runs on a device of `arch`: the `arch` cubin when one holds the
    LayerNorm kernels, else the best loadable lower arch (an sm_89 device runs torch's sm_86 LayerNorm). Adds
    `device_arch` (= `arch`); `arch` stays the cubin's."""
    try:
        return {**torch_wheel_summary(wheel, workdir, arch), "device_arch": arch}
    except KernelNotShipped:
        listing = run_tool("cuobjdump", "-lelf", str(Path(workdir) / "libtorch_cuda.so"))
    tried = [arch]
    for cand in loadable_archs(arch, shipped_sass_archs(listing)):
        if cand in tried:
            continue
        tried.append(cand)
        try:
            return {**torch_wheel_summary(wheel, workdir, cand), "device_arch": arch}
        except KernelNotShipped:
            continue
    raise KernelNotShipped(f"no cubin a {arch} device can load holds torch's LayerNorm (tried {tried})")


def torch_wheel_summary(wheel: Path, workdir: Path, arch: str = "sm_90") -> dict:
    """Extract libtorch_cuda.so from a torch CUDA wheel, find the `arch` cubin holding the LayerNorm kernels,
    and summarise their SASS. Everything large stays in `workdir` (never commit it); the return value is small.
    Needs cuobjdump (the wheel is read with zipfile). About a minute and ~1.2 GB of disk for torch 2.11."""
    import zipfile

    wheel, workdir = Path(wheel), Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    lib = workdir / "libtorch_cuda.so"
    commands = []
    if not lib.is_file():
        with zipfile.ZipFile(wheel) as z, z.open("torch/lib/libtorch_cuda.so") as src, open(lib, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
    commands.append(f"unzip -p {wheel.name} torch/lib/libtorch_cuda.so > libtorch_cuda.so")
    with zipfile.ZipFile(wheel) as z:
        version_py = z.read("torch/version.py").decode()
    listing = run_tool("cuobjdump", "-lelf", str(lib))
    commands.append("cuobjdump -lelf libtorch_cuda.so")
    names = re.findall(r"ELF file\s+\d+:\s+(\S+)", listing)
    candidates = [n for n in names if n.endswith(f".{arch}.cubin")]
    found = None
    cubdir = workdir / arch
    cubdir.mkdir(exist_ok=True)
    existing = sorted(cubdir.glob(f"*.{arch}.cubin"))
    if len(existing) < len(candidates):
        subprocess.run([find_tool("cuobjdump"), "-xelf", arch, str(lib)], cwd=cubdir, check=True,
                       capture_output=True, timeout=1800)
    commands.append(f"cuobjdump -xelf {arch} libtorch_cuda.so")
    key = TORCH_FUNCTIONS["vectorized_layer_norm_kernel<float, float, false>"].encode()
    for path in sorted(cubdir.glob(f"*.{arch}.cubin")):
        if key in path.read_bytes():
            found = path
            break
    if found is None:
        raise KernelNotShipped(f"no {arch} cubin in {lib} holds vectorized_layer_norm_kernel<float,float,false>")
    text = disassemble(found.read_bytes())
    commands.append(f"cuobjdump -sass {found.name}")
    funcs = parse_sass(text)
    usage = {u.function: u.to_json() for u in resource_usage(found.read_bytes())}
    summaries = {}
    for pretty, frag in TORCH_FUNCTIONS.items():
        mangled = [f for f in funcs if frag in f]
        if len(mangled) != 1:
            raise RuntimeError(f"expected one function matching {frag}, found {mangled}")
        summaries[pretty] = {**function_summary(text, mangled[0], f"torch: {pretty}"),
                             "resource_usage": usage.get(mangled[0])}
    return {"wheel": wheel.name, "wheel_sha256": sha256_file(wheel),
            "torch_version": re.search(r"__version__ = '([^']+)'", version_py).group(1),
            "torch_git_version": re.search(r"git_version = '([^']+)'", version_py).group(1),
            "library": "torch/lib/libtorch_cuda.so", "library_sha256": sha256_file(lib),
            "cubin": found.name, "cubin_sha256": sha256_file(found), "arch": arch,
            "commands": commands, "tools": tool_versions(), "functions": summaries}


def _ours_totals(ours_fns: list[dict]) -> dict:
    tot: dict = {}
    for f in ours_fns:
        for k in CONTRACT_KEYS + ("unexplained_count",):
            v = f["contract"].get(k)
            if isinstance(v, dict):
                d = tot.setdefault(k, {})
                for kind, n in v.items():
                    d[kind] = d.get(kind, 0) + n
            else:
                tot[k] = tot.get(k, 0) + (v or 0)
    return tot


def compare(torch_fn: dict, ours_fns: list[dict]) -> list[dict]:
    """Side-by-side rows of the contract patterns: torch's function vs ours (stats + output kernels together),
    with one SASS instruction of each side as an example."""
    ours = _ours_totals(ours_fns)
    rows = []
    for key in CONTRACT_KEYS:
        ex_keys = [k for k in torch_fn["contract"]["examples"] if k == key or k.startswith(key + "_")
                   or (key == "merge" and k == "merge_mean")]
        ex_keys = [k for k in ex_keys if "folded" not in k and "beta_only" not in k] or ex_keys
        ex = ex_keys[0] if ex_keys else None
        ours_ex = next((f["contract"]["examples"][ex]["sass"] for f in ours_fns
                        if ex and ex in f["contract"]["examples"]), "")
        rows.append({"pattern": key, "torch": torch_fn["contract"].get(key), "ours": ours.get(key),
                     "torch SASS": torch_fn["contract"]["examples"].get(ex, {}).get("sass", "") if ex else "",
                     "ours SASS": ours_ex})
    return rows


def verdict(torch_fn: dict, ours_fns: list[dict]) -> dict:
    """Do ours and torch's make the same FMA contractions? Checked pattern by pattern on the kinds present, not on
    how many times each occurs (unrolling differs: torch's loop reads 4 float4 per trip, ours 2)."""
    t, o = torch_fn["contract"], _ours_totals(ours_fns)
    rcp = "rcp(count + 1)"
    checks = {
        "push: new_mean = fma(x - mean, 1/(count+1), mean)": rcp in t["push_mean"] and rcp in o["push_mean"],
        "push: m2 = fma(x - mean, x - new_mean, m2), one per push": t["push_m2"] == sum(t["push_mean"].values())
        and o["push_m2"] == sum(o["push_mean"].values()),
        "merge: mean = fma(nA, A.mean, round(nB*B.mean)), A = the received state":
            bool(t["merge"]) and set(t["merge"]) == set(o["merge"]) and all(k.startswith("first_product")
                                                                            for k in t["merge"]),
        "merge: sigma2 = fma(nB, round(round(delta*delta)*A.count), A.sigma2 + B.sigma2), one per merge":
            t["merge_m2"] == sum(t["merge"].values()) and o["merge_m2"] == sum(o["merge"].values()),
        "finish: m2/N by IEEE division, then rsqrtf(var + eps) (MUFU.RSQ)": t["division"] > 0 and o["division"] > 0
        and t["rsqrt"] > 0 and o["rsqrt"] > 0,
        "output: fma(gamma, round(rstd*round(x - mean)), beta)": t["output"].get("affine", 0) > 0
        and o["output"].get("affine", 0) > 0,
        "every FFMA accounted for (torch)": t["unexplained_count"] == 0,
        "every FFMA accounted for (ours)": o["unexplained_count"] == 0,
    }
    notes = []
    folded = [k for k in o["push_mean"] if k != rcp]
    if folded:
        notes.append("ours: the compiler peels each thread's first float4, where the counts are known, and "
                     "folds its reciprocals (" + ", ".join(folded) + ") into constants: the correctly rounded "
                     "values the IEEE division gives at run time, so the same bits as torch's run-time division")
    torch_folded = [k for k in t["push_mean"] if k != rcp]
    if torch_folded:
        notes.append("torch: the compiler peels each thread's first float4 and folds its reciprocals ("
                     + ", ".join(torch_folded) + ") into constants, the correctly rounded values of the run-time "
                     "division: the same bits")
    if t["output"].get("beta_only") and t["output"].get("beta_only_unfused"):
        notes.append(f"torch: in its gamma-less path (bias only) {t['output']['beta_only']} outputs are "
                     "fma(rstd, x - mean, beta) and " f"{t['output'].get('beta_only_unfused', 0)} are "
                     "round(rstd*(x - mean)) + beta (FMUL then FADD, the FMUL shared with the no-affine path): "
                     "one float4 component in four rounds twice there. Not used by affine LayerNorm")
    elif t["output"].get("beta_only"):
        notes.append(f"torch: in its gamma-less path (bias only) all {t['output']['beta_only']} outputs are "
                     "fma(rstd, x - mean, beta), none round(rstd*(x - mean)) + beta. Not used by affine LayerNorm")
    return {"same_contractions": all(checks.values()), "checks": checks, "ours_totals": o, "notes": notes}


def build_comparison(wheel: Path, workdir: Path, arch: str = "sm_90") -> dict:
    """The committed record: torch's LayerNorm kernels from the wheel vs ours, and the verdict."""
    import datetime as _dt

    torch_part = torch_device_summary(wheel, workdir, arch)  # ours compile for the device: NVRTC targets it
    ours = our_kernels_summary(arch)
    stats = [v for v in ours.values()]
    vec = torch_part["functions"]["vectorized_layer_norm_kernel<float, float, false>"]
    return {"schema": 1, "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "produced_by": f"python -m labkit.sass --wheel {Path(wheel).name} --workdir <tmp> --arch {arch}",
            "torch": torch_part, "ours": ours, "comparison": compare(vec, stats), "verdict": verdict(vec, stats)}


def committed_comparisons(root: Path = SASS_DIR) -> list[Path]:
    return sorted(Path(root).glob("*.json"))


def committed_comparison(arch: str, root: Path = SASS_DIR) -> Path | None:
    """The committed comparison for a device of `arch` (sm_XY), of the newest torch version that has one, or None.
    Pick by arch rather than committed_comparisons()[-1]: with one record per arch, the last file by name is
    whichever arch sorts last (sm_90 after sm_120), not the device's."""
    found = sorted(Path(root).glob(f"layernorm-torch-*-{arch}.json"))

    def version(path: Path) -> tuple:
        v = re.match(r"layernorm-torch-([\d.]+)", path.name).group(1)
        return tuple(int(x) for x in v.strip(".").split("."))

    return max(found, key=version, default=None)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Compare torch's LayerNorm SASS (from a CUDA wheel) with ours")
    tools.add_wheel_arguments(ap)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--out", default=None, help="JSON to write (default data/sass/<torch version>-<arch>.json)")
    args = ap.parse_args(argv)
    record = build_comparison(Path(args.wheel), tools.scratch_dir(args.workdir), args.arch)
    out = Path(args.out) if args.out else SASS_DIR / f"layernorm-torch-{record['torch']['torch_version']}-{args.arch}.json"
    from labkit.core.atomic import atomic_write_json

    atomic_write_json(out, record)
    print(f"wrote {out}: same contractions = {record['verdict']['same_contractions']}")
    return 0
