"""Routes and kernels the studies measure that are not the operator.

What sits here is measured beside our LayerNorm but is never on its path: `channel_norm` (notebook 09's
small-channel layout kernels, KernelBench L1/36, 38, 39), `split_stats` (the fast-statistics prototype of notebooks
02/03: torch.var_mean, then one output expression in six forms), `scripted` (TorchScript compiled once, failures as
data), `refusals` (the table of refused inputs, run against every public function, split_stats's included) and
`stages` (one stage of a path's launches alone: the stage breakdown and the sanitizer step).

The layering (pyproject.toml's import-linter contract): labkit.lab may import labkit.ops and labkit.core; neither
of those may import labkit.lab, so a reader of the kernel path never meets study code. tasks, records and studies
sit above it.
"""
