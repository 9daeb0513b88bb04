"""Intervals that do not stall the GPU: CUDA events there (read once at the end), perf_counter on CPU."""
from __future__ import annotations

import time

import torch


class Interval:
    """One timed span; `ms` is valid after `Timer.resolve()` (which synchronises once)."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        if cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
        self._ms: float | None = None

    def __enter__(self):
        if self.cuda:
            self._start.record()
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self._end.record()
        else:
            self._ms = (time.perf_counter() - self._t0) * 1e3
        return False

    @property
    def ms(self) -> float:
        if self._ms is None:
            self._ms = float(self._start.elapsed_time(self._end))
        return self._ms


class Timer:
    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"

    def interval(self) -> Interval:
        return Interval(self.cuda)

    def resolve(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
