"""Host time against GPU time of a repeated call, and its Python profile: what
tools/profile/decode_step.py and forward_host.py measure. The host time is issue only (the calls
without a sync), the GPU time CUDA events around the same calls; a call whose host time is the
larger is bound by the host path, not by the kernels."""
import time

import torch


def host_and_gpu_us(call, steps: int, warmup: int):
    """(host us, GPU us) per call over `steps` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for _ in range(steps):
        call()
    host_us = (time.perf_counter() - t0) / steps * 1e6
    stop.record()
    torch.cuda.synchronize()
    return host_us, start.elapsed_time(stop) / steps * 1e3


def print_cprofile(call, steps: int) -> None:
    """The host path's 25 functions by cumulative time over `steps` calls (after one untimed)."""
    import cProfile
    import pstats

    call()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        call()
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
