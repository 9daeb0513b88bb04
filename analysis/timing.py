"""Timing that a person can trust: intervals that do not stall the GPU (CUDA events there, read once
at the end; perf_counter on the CPU), per-stage clocks, the spread of repeated measurements and when
two of them differ, the first-call work (Triton compiling and autotuning) that landed inside a timed
span, and the number of CPU threads a process computes with.

A model spread over several GPUs is timed on each GPU's own stream: a layer's core on its GPU's, a
whole prefill on every GPU's, taking the longest span. The GPUs of a layer placement run one after
the other (each waits, through the copy of the hidden state, for the one before), so the span of the
GPU that finishes last covers the whole prefill; a CUDA event can only be compared with one of its
own device.
"""
from __future__ import annotations

import os
import statistics
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

import torch

from sparsegdn import STAGES

THREADS_VARIABLE = "SPARSEGDN_THREADS"
PATH_NAMES = {"dense": "dense", "sparse": "SparseGDN"}     # how a timed path is named to a person
# How a prefill record's FLA ran (analysis.bench_prefill.fla_backend), as its reports say it after FLA's version;
# records made before the field say nothing.
FLA_BACKENDS = {"flash_qla": " (dispatching to FlashQLA)", "native": " (native kernels)"}


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


@dataclass(frozen=True)
class FirstCall:
    """One piece of first-call work a FirstCallWatch saw: a Triton JIT compile ("compile") or the autotuner's
    benchmark of one config ("autotune"), the kernel's name and its wall time in seconds."""

    kind: str
    kernel: str
    seconds: float


class _TritonHooks:
    """Triton's compile hooks and Autotuner._bench, replaced while at least one FirstCallWatch is active
    (a count, under a lock) and put back when the last one leaves. Both are process-wide, so every
    active watch records what any thread compiles or tunes meanwhile (see FirstCallWatch)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.watches: list = []
        self.undo: list = []               # what puts back each replaced hook, in installation order
        self.compiling: dict = {}          # (JIT function's id, compile key) -> perf_counter when it began
        self.installed_at = 0.0
        self.thread = threading.local()    # .benchmarks: autotune benchmarks running on this thread

    def enter(self, watch) -> None:
        with self.lock:
            if not self.watches:
                self.installed_at = time.perf_counter()
                self.undo = _install(self)
            self.watches.append(watch)

    def leave(self, watch) -> None:
        with self.lock:
            self.watches.remove(watch)
            if not self.watches:
                for undo in reversed(self.undo):
                    undo()
                self.undo, self.compiling = [], {}

    def record(self, kind: str, kernel: str, seconds: float) -> None:
        with self.lock:
            for watch in self.watches:
                watch.calls.append(FirstCall(kind, kernel, seconds))

    def compile_started(self, hook_kwargs: Mapping) -> None:
        with self.lock:
            if self.watches:
                self.compiling[_compile_id(hook_kwargs)] = time.perf_counter()

    def compile_finished(self, hook_kwargs: Mapping) -> None:
        with self.lock:
            began = self.compiling.pop(_compile_id(hook_kwargs), self.installed_at)
        # A compile inside an autotune benchmark (each config's own) is counted in that benchmark's time.
        if not getattr(self.thread, "benchmarks", 0):
            self.record("compile", _kernel_name(hook_kwargs.get("fn")), time.perf_counter() - began)

    def benchmark(self, original):
        """Autotuner._bench, timed: one "autotune" record per config benchmarked."""
        def _bench(tuner, *args, **kwargs):
            self.thread.benchmarks = getattr(self.thread, "benchmarks", 0) + 1
            began = time.perf_counter()
            try:
                return original(tuner, *args, **kwargs)
            finally:
                self.thread.benchmarks -= 1
                self.record("autotune", _kernel_name(getattr(tuner, "base_fn", None)), time.perf_counter() - began)

        return _bench


def _kernel_name(fn) -> str:
    """A kernel's name from what Triton hands a hook (JitFunctionInfo.name) or an Autotuner's base_fn."""
    return str(getattr(fn, "name", None) or getattr(fn, "__name__", None) or "unnamed kernel")


def _compile_id(hook_kwargs: Mapping) -> tuple:
    return id(getattr(hook_kwargs.get("fn"), "jit_function", None)), str(hook_kwargs.get("key"))


def _replace(owner, name: str, new):
    """Set owner.name to `new`; return what puts back what `owner` itself held (or nothing of its own, so
    that the class's value shows again), unless someone has replaced `new` since."""
    own = vars(owner)
    had, old = name in own, own.get(name)
    setattr(owner, name, new)

    def undo():
        if vars(owner).get(name) is new:
            if had:
                setattr(owner, name, old)
            else:
                delattr(owner, name)

    return undo


def _install(hooks: _TritonHooks) -> list:
    """Chain `hooks` into Triton's jit_cache_hook / jit_post_compile_hook and wrap Autotuner._bench, each
    where this Triton has it; returns the undo of each. Without Triton (or with neither), nothing."""
    try:
        from triton import knobs
        from triton.runtime import autotuner
    except Exception:  # noqa: BLE001 - no usable Triton: nothing can compile or tune, so nothing to watch
        return []
    undo = []
    runtime = getattr(knobs, "runtime", None)
    if all(hasattr(runtime, name) for name in ("jit_cache_hook", "jit_post_compile_hook")):
        before_compile, after_compile = runtime.jit_cache_hook, runtime.jit_post_compile_hook

        def jit_cache_hook(*args, **kwargs):
            skip = before_compile(*args, **kwargs) if before_compile else None
            if not skip:        # a true value makes Triton skip the compile: nothing to time
                hooks.compile_started(kwargs)
            return skip

        def jit_post_compile_hook(*args, **kwargs):
            hooks.compile_finished(kwargs)
            return after_compile(*args, **kwargs) if after_compile else None

        undo += [_replace(runtime, "jit_cache_hook", jit_cache_hook),
                 _replace(runtime, "jit_post_compile_hook", jit_post_compile_hook)]
    tuner = getattr(autotuner, "Autotuner", None)
    if callable(getattr(tuner, "_bench", None)):
        undo.append(_replace(tuner, "_bench", hooks.benchmark(tuner._bench)))
    return undo


_hooks = _TritonHooks()


class FirstCallWatch:
    """`with FirstCallWatch() as watch:` records in `watch.calls` (FirstCall) every Triton JIT compile
    and every autotuner config benchmark of this process while it is active; a compile inside a benchmark
    counts in the benchmark's time, not again. Seconds are wall time on the host, where both happen.

    Through Triton's public hooks (triton.knobs.runtime.jit_cache_hook and jit_post_compile_hook,
    chained to any installed before) and a wrapper of triton.runtime.autotuner.Autotuner._bench; both
    are put back when the last active watch leaves, on an exception too. Where Triton or one of these is
    missing, that kind is not recorded (without Triton, nothing is) and the watched code runs as ever.

    Limits: it sees Triton's own JIT and autotuner only: kernels compiled by other means (FlashQLA's TileLang
    kernels, which FLA 0.6 calls when flash-qla is installed; torch.compile) are not recorded. The hooks are
    process-wide, so with sessions served from threads a watch also records what another thread compiles or
    tunes while it is active (it may over-report, never miss its own Triton work);
    overlapping watches each get every record. A compile begun before the first watch entered counts
    from that entry. Disk-cache hits of Triton's compile cache still count as compiles (short ones).
    """

    def __init__(self):
        self.calls: list[FirstCall] = []

    def __enter__(self) -> "FirstCallWatch":
        _hooks.enter(self)
        return self

    def __exit__(self, *exc) -> bool:
        _hooks.leave(self)
        return False


def group_first_calls(calls: Sequence[FirstCall]) -> list[dict]:
    """[{kind, kernel, count, seconds}]: the calls summed per kind and kernel, in the order first seen."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for call in calls:
        groups[call.kind, call.kernel].append(call.seconds)
    return [{"kind": kind, "kernel": kernel, "count": len(seconds), "seconds": sum(seconds)}
            for (kind, kernel), seconds in groups.items()]


def first_call_text(rows: Sequence[Mapping]) -> str:
    """Grouped first calls (group_first_calls) in words: '3 compiles of 2 kernels (9.8 s: state_output_kernel x2,
    chunk_output_kernel) and autotuning of 1 kernel (1.2 s: intra_chunk_kernel, 8 configs)'."""
    def kernels(n: int) -> str:
        return f"{n} kernel{'s' if n > 1 else ''}"

    parts = []
    compiles = [row for row in rows if row["kind"] == "compile"]
    if compiles:
        count = sum(row["count"] for row in compiles)
        names = ", ".join(row["kernel"] + (f" x{row['count']}" if row["count"] > 1 else "") for row in compiles)
        parts.append(f"{count} compile{'s' if count > 1 else ''} of {kernels(len(compiles))} "
                     f"({sum(row['seconds'] for row in compiles):,.1f} s: {names})")
    tuned = [row for row in rows if row["kind"] == "autotune"]
    if tuned:
        names = ", ".join(f"{row['kernel']}, {row['count']} configs" for row in tuned)
        parts.append(f"autotuning of {kernels(len(tuned))} ({sum(row['seconds'] for row in tuned):,.1f} s: {names})")
    return " and ".join(parts)


def spread_text(spread: Mapping) -> str:
    """'1,234.5 ms [1,200.1-1,300.2]': a spread's median and range, or its one measurement."""
    if spread["n"] < 2:
        return f"{spread['median']:,.1f} ms (one measurement)"
    return f"{spread['median']:,.1f} ms [{spread['low']:,.1f}-{spread['high']:,.1f}]"


def first_call_notes(timing: Mapping) -> list[str]:
    """Sentences on the first-call work inside a run's timed repeats (`summary["timing"]`): each affected
    repeat, what it included, and each affected path's medians without those repeats. None when the
    repeats held none, or the run was recorded before they were watched."""
    repeats = defaultdict(list)
    for row in timing.get("first_calls") or []:
        repeats[row["path"], row["repeat"]].append(row)
    notes = [f"Repeat {repeat + 1} of {timing['repeats']} of {PATH_NAMES[path]} included {first_call_text(rows)}: "
             "excluded from the clean median." for (path, repeat), rows in sorted(repeats.items())]
    for path, clean in (timing.get("clean") or {}).items():
        name = PATH_NAMES[path]
        if clean.get("prefill") is None:
            notes.append(f"Every repeat of {name} included first-call work: no clean median; its figures hold it.")
            continue
        core = spread_text(clean["core"]) if clean.get("core") else "-"
        notes.append(f"{name} without those repeats (clean median of {clean['prefill']['n']}): prefill "
                     f"{spread_text(clean['prefill'])}, GDN core {core}; the medians shown elsewhere are over all "
                     f"{timing['repeats']}.")
    return notes


def stage_source_text(timing: Mapping) -> str:
    """Where a run's stage times come from, in words (the end of a sentence): the timed repeats, or one more
    sparse prefill after them (`timing.stages_apart`), with that prefill's own core time beside the timed one."""
    if not timing.get("stages_apart"):
        return "(median over the repeats)."
    staged = timing.get("staged") or {}
    core = (timing.get("core_sparse") or {}).get("median")
    beside = (f", whose GDN core took {staged['core_ms']:,.1f} ms against the timed median {core:,.1f} ms"
              if staged.get("core_ms") is not None and core is not None else "")
    return (f"(from one more SparseGDN prefill after the timed ones{beside}: a call that reports its stages takes "
            "no launch plan, so the timed prefills ran without the stage clock, and these bars may add up to more "
            "than the timed core).")


def plan_text(timing: Mapping) -> str | None:
    """How many of the timed SparseGDN prefills' core calls replayed a recorded launch plan, in words; None
    where none did (the CPU, the torch backend, runs recorded before it was counted)."""
    rows = timing.get("planned_calls") or []
    if not any(row["replayed"] for row in rows):
        return None
    calls, replayed = sum(row["calls"] for row in rows), sum(row["replayed"] for row in rows)
    return (f"The timed SparseGDN prefills launched {replayed:,} of their {calls:,} core calls from recorded launch "
            "plans (the host's work done once per shape in the warm-up).")


def warm_up_text(warm_up: Mapping) -> str:
    """The warm-up a run recorded (`summary["timing"]["warm_up"]`), in words: each path's wall time and
    the tokens it ran on (in pieces, the state carried from one to the next, where it had several; rounds over
    them where it ran them more than once)."""
    paths = ", ".join(f"{path} {warm_up[f'{path}_ms']:,.1f} ms" for path in ("dense", "sparse")
                      if f"{path}_ms" in warm_up)
    pieces = len(warm_up.get("pieces", ()))
    carried = f" ({pieces} pieces, the state carried)" if pieces > 1 else ""
    rounds = warm_up.get("rounds", 1)
    twice = f", {rounds} rounds (compiling, then recording the launch plans)" if rounds > 1 else ""
    return f"{paths} on the first {warm_up.get('tokens', 0):,} tokens{carried}{twice}"


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
