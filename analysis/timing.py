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


class StageClock:
    """Per-stage time of the sparse core, from the `stage_hook` the library calls after each stage.

    Each stage's span runs from the previous mark (the call's start or the last stage) to its own
    mark: CUDA events on a GPU (read after `Timer.resolve()`), perf_counter on the CPU. Totals are
    summed over every call (layers and segments).
    """

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.spans: dict[str, list] = {}
        self._last = None

    def _mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def start(self) -> None:
        self._last = self._mark()

    def hook(self, name: str) -> None:
        now = self._mark()
        self.spans.setdefault(name, []).append((self._last, now))
        self._last = now

    def totals_ms(self) -> list[dict]:
        """[{stage, ms, share}] in the order the stages ran; share of the summed stage time."""
        def elapsed(start, end):
            return float(start.elapsed_time(end)) if self.cuda else (end - start) * 1e3

        totals = {name: sum(elapsed(a, b) for a, b in spans) for name, spans in self.spans.items()}
        whole = sum(totals.values()) or 1.0
        return [{"stage": name, "ms": ms, "share": ms / whole} for name, ms in totals.items()]
