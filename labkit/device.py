"""Which mode a notebook or test runs in: live on a CUDA GPU, or on the CPU replaying committed GPU runs."""
from __future__ import annotations


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
