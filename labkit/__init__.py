"""labkit: helpers behind the Wide LayerNorm lab book.

One path per layer: kernels/*.cu -> compile (NVRTC, cached) -> launch (raw device pointers on torch's stream)
-> public wrappers (reference_order, split_stats) that validate first; check and bench return records;
results writes them with provenance; book runs the notebooks.
"""
__version__ = "0.1.0"
