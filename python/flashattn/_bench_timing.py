"""Timing for flashattn.bench: CUDA events around each run, L2 flushed before each run, runners of
one cell alternating round-robin, medians.

Order on the stream per timed run: flush (a 256 MiB write) -> start event -> run -> stop event.
The flush keeps the GPU busy while the host issues the run, so host-side launch overhead shorter
than the flush is not counted; longer overhead is (it is real).
"""
from __future__ import annotations

import statistics
from typing import Callable, Dict, List, Tuple

import torch

from ._bench_runners import one_line

L2_FLUSH_BYTES = 256 * 1024 * 1024


class L2Flusher:
    """Evicts the L2 cache (H200: 60 MB) by writing a buffer several times its size."""

    def __init__(self, device: torch.device, nbytes: int = L2_FLUSH_BYTES):
        self._buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)

    def __call__(self) -> None:
        self._buffer.fill_(1)


def warm_up(runners: Dict[str, Callable[[], object]], iterations: int) -> Dict[str, str]:
    """Runs each runner `iterations` times; returns {name: reason} for those that raised (they
    are then left out of the timing)."""
    failed = {}
    for name, run in runners.items():
        try:
            for _ in range(iterations):
                run()
            torch.cuda.synchronize()
        except Exception as e:  # a peer that cannot run this cell: report it, never crash
            failed[name] = one_line(e)
            torch.cuda.synchronize()
    return failed


def time_round_robin(runners: Dict[str, Callable[[], object]], repeats: int,
                     flush: Callable[[], None]) -> Tuple[Dict[str, float], Dict[str, str]]:
    """(median milliseconds per runner, {name: reason} for runners that raised while timed).
    Repetition r starts with runner r mod n, so no runner always follows the same other one."""
    names = list(runners)
    pairs: Dict[str, List] = {name: [] for name in names}
    failed: Dict[str, str] = {}
    for r in range(repeats):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            if name in failed:
                continue
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            flush()
            start.record()
            try:
                runners[name]()
            except Exception as e:  # e.g. out of memory at a later repetition: drop, say why
                failed[name] = one_line(e)
                continue
            stop.record()
            pairs[name].append((start, stop))
    torch.cuda.synchronize()
    medians = {name: statistics.median(s.elapsed_time(e) for s, e in pairs[name])
               for name in names if name not in failed}
    return medians, failed
