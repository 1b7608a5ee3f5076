"""KernelBench's cuda_event timing on the GPU (labkit.studies.kernelbench_timing): one sample per trial after the
discarded first, each a positive time that covers the call."""
import pytest

pytestmark = pytest.mark.gpu


def test_cuda_event_times_gives_one_sample_per_kept_trial():
    import torch

    from labkit.studies import kernelbench_timing as kb

    x = torch.randn(1 << 24, device="cuda")
    times = kb.cuda_event_times(lambda: x.mul_(1.0), num_warmup=2, num_trials=5)
    assert len(times) == 5 and all(t > 0 for t in times)
