"""labkit: helpers behind the Wide LayerNorm lab book, in layers that depend only downward.

    core     NVRTC compile + digest-checked cubin cache, cubin completion, launch on torch's stream, tensor maps,
             input validation
    ops      the LayerNorm functions users call (reference order, chain, the drop-in), their launches, torch's path
             decision, pure-torch references
    lab      what the studies measure beside the operator: channel_norm, split statistics, TorchScript, the
             refused-inputs table, one launch stage alone
    exact    bit-exact CPU arithmetic: fma, emulator of torch's kernel, exact oracle
    sass     machine-code analysis: tools, ELF, ptxas, parser, symbolic evaluator, patterns, summaries
    tasks, inputs   the task/config table and the input recipes
    records  run directories with provenance, the live-or-replay session, checks, audit, summary, fixtures
    studies  one module per notebook: run functions return records; table/figure/verdict functions read them
    display, site, book, cli   the only code that knows about notebooks, pages and terminals

The direction is enforced by import-linter (pyproject.toml); importing core or ops reads nothing under data/.
"""
__version__ = "0.1.0"

_DROPIN = ("layer_norm", "LayerNorm", "swap_layer_norms", "explain", "dispatch_protocol", "enable", "disable",
           "enabled", "fused_layer_norm", "explain_fused")


def __getattr__(name):
    """labkit.layer_norm / LayerNorm / swap_layer_norms / explain / dispatch_protocol / enable / disable / enabled /
    fused_layer_norm / explain_fused (labkit.ops.dropin), labkit.tune (labkit.studies.tune: this GPU's dispatch
    table) and labkit.warmup (labkit.ops.warmup: the host extension and this GPU's kernels built ahead of a first
    call), imported on first use so that `import labkit` stays free of torch."""
    if name in _DROPIN:
        from labkit.ops import dropin

        value = globals()[name] = getattr(dropin, name)  # later lookups skip this hook (a call's microsecond)
        return value
    if name == "tune":
        from labkit.studies.tune import tune

        return tune
    if name == "warmup":
        from labkit.ops.warmup import warmup

        return warmup
    raise AttributeError(f"module 'labkit' has no attribute {name!r}")
