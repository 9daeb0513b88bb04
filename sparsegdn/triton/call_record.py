"""What one call of the forward allocated and launched, recorded for call_plans.py.

The forward's host functions allocate their buffers through `empty` and `zeros` here, and every kernel goes
through a `launch.Launcher`. While a thread records (`recording(...)`), both are noted in the order they
happen: each allocation with its tensor and whether it was zeroed, each launch with its compiled kernel, its
grid and its arguments as the compiled kernel received them. A launch that had to go through Triton (a first
compile or autotuning) marks the recording incomplete: such a call is no plan yet.

Outside a recording these functions are torch.empty and torch.zeros, and a launch notes nothing.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from .. import validation

_local = threading.local()


@dataclass
class Recording:
    allocations: list = field(default_factory=list)    # (tensor, fill) in allocation order: fill None (empty) or a value
    launches: list = field(default_factory=list)       # (compiled kernel, grid dims, positional arguments)
    complete: bool = True                               # every launch went straight through a compiled kernel
    replayable: bool = True                             # no launch of a kind a plan cannot replay (note_unreplayable)
    early: tuple | None = None                          # (launches before it, the flags): copy_early's


def active() -> Recording | None:
    """This thread's recording, or None."""
    return getattr(_local, "recording", None)


@contextmanager
def recording():
    """Record the allocations and launches this thread makes inside the block (see the module docstring)."""
    record = Recording()
    outer, _local.recording = active(), record
    try:
        yield record
    finally:
        _local.recording = outer


def empty(*shape, dtype, device) -> torch.Tensor:
    """torch.empty(shape), noted by an active recording."""
    return _noted(torch.empty, shape, None, dtype=dtype, device=device)


def zeros(*shape, dtype, device) -> torch.Tensor:
    """torch.zeros(shape), noted by an active recording as one to zero again."""
    return _noted(torch.zeros, shape, 0, dtype=dtype, device=device)


def full(*shape, value, dtype, device) -> torch.Tensor:
    """torch.full(shape, value), noted by an active recording as one to fill again."""
    return _noted(torch.full, shape, value, value, dtype=dtype, device=device)


def _noted(make, shape, fill, *values, dtype, device):
    """make(shape, *values), noted by an active recording. While one records, the tensor is made outside inference
    mode: under torch.inference_mode (the app's analysis pass; any planned caller, one without a stage hook) it would
    be an inference tensor, which keeps no version counter, and call_plans.build reads the counter to refuse a
    recording that torch wrote into (a normal tensor's writes are counted inside inference mode too)."""
    record = active()
    if record is None:
        return make(shape, *values, dtype=dtype, device=device)
    with torch.inference_mode(False):
        tensor = make(shape, *values, dtype=dtype, device=device)
    record.allocations.append((tensor, fill))
    return tensor


def copy_early(flags: torch.Tensor) -> None:
    """validation.copy_early(flags) (the early checks' flags on their way to the host), noted by an active
    recording with its place among the launches, where a plan's replay makes the same copy."""
    record = active()
    if record is not None:
        record.early = (len(record.launches), flags)
    validation.copy_early(flags)


def note_launch(compiled, dims, arguments) -> None:
    """A launch straight through a compiled kernel (launch.Launcher's fast path)."""
    record = active()
    if record is not None:
        record.launches.append((compiled, dims, arguments))


def note_unreplayable() -> None:
    """A launch no plan can replay (not a Launcher's: list_output's Gluon kernels): the call's key is refused, so
    later calls are launched and not recorded (a recording keeps every allocation alive until the call returns)."""
    record = active()
    if record is not None:
        record.replayable = False


def note_untracked_launch() -> None:
    """A launch through Triton's own path (a first compile, autotuning): the recording cannot replay it."""
    record = active()
    if record is not None:
        record.complete = False
