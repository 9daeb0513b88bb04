"""Timing that a person can trust: intervals that do not stall the GPU (CUDA events there, read once
at the end; perf_counter on the CPU), per-stage clocks, the spread of repeated measurements and when
two of them differ, and the number of CPU threads a process computes with.

A model spread over several GPUs is timed on each GPU's own stream: a layer's core on its GPU's, a
whole prefill on every GPU's, taking the longest span. The GPUs of a layer placement run one after
the other (each waits, through the copy of the hidden state, for the one before), so the span of the
GPU that finishes last covers the whole prefill; a CUDA event can only be compared with one of its
own device.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

import torch

from sparsegdn import STAGES

THREADS_VARIABLE = "SPARSEGDN_THREADS"


def _event(device: torch.device) -> torch.cuda.Event:
    """A timing event recorded now on `device`'s current stream (not the current device's)."""
    event = torch.cuda.Event(enable_timing=True)
    event.record(torch.cuda.current_stream(device))
    return event


class Interval:
    """One timed span; `ms` is valid after `Timer.resolve()` (which synchronises once). On CUDA
    devices, the longest of the span's events pairs, one pair per device (see the module docstring)."""

    def __init__(self, devices: list[torch.device]):
        self.devices = devices
        self.cuda = bool(devices)
        self._ms: float | None = None

    def __enter__(self):
        if self.cuda:
            self._starts = [_event(device) for device in self.devices]
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self._ends = [_event(device) for device in self.devices]
        else:
            self._ms = (time.perf_counter() - self._t0) * 1e3
        return False

    @property
    def ms(self) -> float:
        if self._ms is None:
            self._ms = max(float(start.elapsed_time(end)) for start, end in zip(self._starts, self._ends))
        return self._ms


class Timer:
    """Intervals on `device`, or on every device of a list (a model spread over GPUs)."""

    def __init__(self, device):
        devices = [torch.device(d) for d in (device if isinstance(device, (list, tuple)) else [device])]
        self.devices = [d for d in devices if d.type == "cuda"]
        self.cuda = bool(self.devices)

    def interval(self, device=None) -> Interval:
        """A span on every device of the timer, or on `device` alone (one layer's core)."""
        if not self.cuda:
            return Interval([])
        return Interval(self.devices if device is None else [torch.device(device)])

    def resolve(self) -> None:
        for device in self.devices:
            torch.cuda.synchronize(device)


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
        self._device = None

    def _mark(self):
        if self.cuda:
            return _event(self._device if self._device is not None else torch.device("cuda",
                                                                                     torch.cuda.current_device()))
        return time.perf_counter()

    def start(self, device=None) -> None:
        """A call begins; its stages are marked on `device`'s stream (the call's tensors' GPU)."""
        self._device = torch.device(device) if device is not None and self.cuda else None
        self._last = self._mark()

    def hook(self, name: str) -> None:
        now = self._mark()
        self.spans.setdefault(name, []).append((self._last, now))
        self._last = now

    def totals_ms(self) -> dict[str, float]:
        """{stage: ms} summed over every span of the stage (the torch backend reports its stages once
        per slab), in the order of sparsegdn.STAGES, then any other names in the order they ran."""
        def elapsed(start, end):
            return float(start.elapsed_time(end)) if self.cuda else (end - start) * 1e3

        names = [name for name in STAGES if name in self.spans] + [n for n in self.spans if n not in STAGES]
        return {name: sum(elapsed(a, b) for a, b in self.spans[name]) for name in names}


@dataclass(frozen=True)
class Spread:
    """Repeated measurements of one quantity: their median and range (min to max), and how many."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> "Spread | None":
        values = sorted(float(x) for x in samples if x is not None)
        if not values:
            return None
        return cls(statistics.median(values), values[0], values[-1], len(values))

    @classmethod
    def from_dict(cls, values: Mapping | None) -> "Spread | None":
        return None if not values else cls(values["median"], values["low"], values["high"], values["n"])

    def to_dict(self) -> dict:
        return asdict(self)

    def overlaps(self, other: "Spread") -> bool:
        return self.low <= other.high and other.low <= self.high


@dataclass(frozen=True)
class Difference:
    """`new` against `old`: the change of the median, and whether it is outside the noise, i.e. both
    were repeated and their ranges do not overlap. A change inside the noise is not a difference."""

    change: float          # new median / old median - 1
    distinct: bool
    repeated: bool         # both sides measured more than once

    def describe(self) -> str:
        if not self.repeated:
            return f"{self.change:+.1%}, single measurement (no spread)"
        return f"{self.change:+.1%}" if self.distinct else f"{self.change:+.1%}, within the noise"


def difference(new: Spread | None, old: Spread | None) -> Difference | None:
    if new is None or old is None or old.median <= 0:
        return None
    repeated = new.n > 1 and old.n > 1
    return Difference(new.median / old.median - 1.0, repeated and not new.overlaps(old), repeated)


def warm_up_text(warm_up: Mapping) -> str:
    """The warm-up a run recorded (`summary["timing"]["warm_up"]`), in words: each path's wall time and
    the tokens it ran on."""
    paths = ", ".join(f"{path} {warm_up[f'{path}_ms']:,.1f} ms" for path in ("dense", "sparse")
                      if f"{path}_ms" in warm_up)
    return f"{paths} on the first {warm_up.get('tokens', 0):,} tokens"


def choose_threads(environ: Mapping[str, str] | None = None, cores: int | None = None) -> tuple[int, str]:
    """How many threads torch computes with here, and why: SPARSEGDN_THREADS, else OMP_NUM_THREADS,
    else one less than the cores this process may run on (at least one). Two threads of one matrix
    product on a 2-core machine wait on each other whenever anything else runs (the server, a
    browser): one triangular solve took 25-4,100 ms that way and 17-34 ms with one thread."""
    environ = os.environ if environ is None else environ
    for name in (THREADS_VARIABLE, "OMP_NUM_THREADS"):
        raw = environ.get(name, "").strip()
        if raw:
            try:
                value = int(raw)
            except ValueError:
                raise ValueError(f"{name} must be a positive integer, got {raw!r}") from None
            if value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
            return value, f"{name}={value}"
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores - 1), f"{cores} core(s) available, one left for the rest of the machine"


_threads: dict | None = None


def use_threads() -> dict:
    """Set torch's thread count once per process (see `choose_threads`); {threads, reason}."""
    global _threads
    if _threads is None:
        threads, reason = choose_threads()
        torch.set_num_threads(threads)
        _threads = {"threads": threads, "reason": reason}
    return _threads
