"""Calls launched from a recorded plan: the host's work of a call done once per key, the tensors read in place.

Why: the public call reads its value flags back (after its last kernel when this was built; after pass 1 with
the early checks, forward.EARLY_CHECKS), a sync after which nothing of the next call's host work is hidden behind
the GPU, and above graphs.MAX_TOKENS its kernels wait on the host. On the H200 (2026-12-02,
benchmarks/public_call_probe.py, analysis/results/overlap/batch9/call4) a call at 16K tokens took 1.04 ms for
0.61 ms of kernels: the host needed ~0.5 ms to reach the last launch (the Python of six host functions, ~20
allocations, two fills and six launches, each launch keyed by all of its ~20-60 arguments), and the
one-launch pass (0.44 ms) could only start then. CUDA graphs (graphs.py) do the launches at once but must copy
q, k and v into their own buffers, which costs more than it saves above 8K tokens.

How: a call of the Triton forward whose key has no plan yet runs as usual while call_record.py notes its
allocations and its launches. If every launch went straight through a compiled kernel (no compile, no
autotuning in the call) and every tensor a kernel received is an input of the call (the same object) or lies
inside a recorded allocation, and every tensor the forward returns is one of those allocations, the
recording becomes the key's plan; it keeps no tensor, only the compiled kernels, their grids, their other
arguments, and for each pointer the buffer it points into and the offset there. A later call of the key:
- allocates: the returned tensors each on its own (o, the final state, events, scores, budget per head; the
  `all` selector's events filled with True), the zeroed ones (value flags, the one launch's counters) in one
  small buffer cleared by one compiled launch (zero_words), the rest (statistics, lists, snapshots) in one
  workspace, each part at a 256-byte boundary; each returned tensor is allocated just before the first launch
  that uses it;
- launches the compiled kernels in the recorded order, each pointer the input's data_ptr or its buffer's
  address plus the recorded offset (ints: Triton's launcher then asks the driver nothing about them); a TMA
  descriptor argument (list_output's Gluon kernels) is remade around such an address with its recorded shape,
  strides, block shape, layout and padding, its base found in an input (a view inside exactly one input counts)
  or a recorded allocation;
- where the recorded call copied its early flags (forward.EARLY_CHECKS: right after pass 1), copies this call's
  flags at the same place among the launches (call_record.copy_early);
- returns fresh tensors, as a launched call does (nothing is kept between calls, nothing copied).

The key is graphs.call_key: every tensor's shape, strides, dtype, device and 16-byte alignment, every option's
value and the design switches (forward.design_switches), which fix every launch argument but the pointers. The
public call hands in its own key of the same (sparsegdn.api.checked_key, made for its checks), used instead.
Module constants outside those switches (the kernels' configs, SELECT_RESIDENT, the tile offset limit) are
taken as fixed in a process; a probe that changes them clears the plans (benchmarks/config_probe.py).
A recording is refused, and its key launched as before from then on, when it holds a tensor of another origin
(torch's own ops for the `uniform` selector and for rows longer than the select kernel holds, caller-given
events, a copy of an input the kernels cannot read in place, the buffers the probes' switches fill), when one
object was passed as two inputs (a later call's distinct tensors would share its pointer), or when torch wrote
into a recorded allocation after making it (a replay would skip that write; torch's version counter shows it,
the kernels' own writes do not move it).

Not used under the interpreter, with a launch hook set (profilers see Triton's own launches), with a stage
hook, or with SPARSEGDN_CALL_PLANS=0.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from . import call_record, graphs, launch

CALL_PLANS = os.environ.get("SPARSEGDN_CALL_PLANS", "1") == "1"
CACHE_SIZE = 32
ALIGN = 256
assert ALIGN % 64 == 0, "zero_words needs the zeroed buffer's size a multiple of 16 words"

OWN, WORKSPACE, ZEROED = "own", "workspace", "zeroed"


@dataclass(frozen=True)
class Part:
    """One recorded allocation as a plan makes it again: its shape, dtype and where it lives."""
    shape: tuple
    dtype: torch.dtype
    place: str          # OWN (a tensor of its own: returned or filled), WORKSPACE or ZEROED (inside that buffer)
    offset: int         # bytes from the buffer's start (WORKSPACE, ZEROED)
    nbytes: int
    fill: object = None  # an OWN part's value at the start of every call (None: any)


@dataclass(frozen=True)
class Launch:
    compiled: object
    dims: tuple
    arguments: tuple    # the recorded arguments, pointers left as None
    pointers: tuple     # (position, source, byte offset, Descriptor or None): source indexes the call's base addresses
    allocate: tuple     # the OWN parts this launch is the first to use: allocated just before it


@dataclass(frozen=True)
class Descriptor:
    """A TMA descriptor argument (Gluon's TensorDescriptor: list_output's kernels) without its tensor: remade at each
    replay around the call's address, with what Triton's launcher reads of it (the base's data_ptr, shape, strides,
    padding) and what keys it (block shape, layout)."""
    shape: tuple
    strides: tuple
    block_shape: tuple
    layout: object
    padding: str

    def at(self, address: int):
        return _ReplayedDescriptor(_Address(address), self.shape, self.strides, self.block_shape, self.layout,
                                   self.padding)


@dataclass(frozen=True)
class _Address:
    address: int

    def data_ptr(self) -> int:
        return self.address


@dataclass(frozen=True)
class _ReplayedDescriptor:
    base: _Address
    shape: tuple
    strides: tuple
    block_shape: tuple
    layout: object
    padding: str


@dataclass(frozen=True)
class Plan:
    input_names: tuple  # sources 0.. are these inputs' data_ptr; the parts follow
    parts: tuple
    workspace_bytes: int
    zeroed_bytes: int
    launches: tuple
    outputs: tuple      # ("part", index) or ("value", value) for each item the forward returned
    early: tuple | None = None  # (launches before it, the flags' part): where the replay copies the early flags


_plans: OrderedDict = OrderedDict()
_refused: OrderedDict = OrderedDict()   # keys whose recordings cannot be replayed (launched), the newest CACHE_SIZE
_lock = threading.Lock()
replays = 0                         # planned calls so far (read by benchmarks/kernel_bench.py; not locked: a count)


def wanted(*, events, stage_hook) -> bool:
    """Whether this GPU call may go through a plan (see the module docstring)."""
    return (CALL_PLANS and launch.FAST_LAUNCH and events is None and stage_hook is None
            and not launch.launch_hooks_set())


def call(forward, tensors: dict, options: dict, design=(), key=None):
    """forward(**tensors, **options), from the plan of this call's key when there is one (else launched, and
    recorded to make one). Returns what forward returns. `key`: the caller's key of the tensors' layouts and the
    options (sparsegdn.api.checked_key: it fixes them as graphs.call_key does), or None to make graphs.call_key;
    the design switches are added to either."""
    key = graphs.call_key(tensors, options, design) if key is None else ("caller", key, design)
    with _lock:
        plan = _plans.get(key)
        if plan is not None:
            _plans.move_to_end(key)
        refused = key in _refused
    if plan is not None:
        return run(plan, tensors)
    if refused:
        return forward(**tensors, **options)
    with call_record.recording() as record:
        outputs = forward(**tensors, **options)
    if not record.replayable:       # a launch a plan cannot make (call_record.note_unreplayable)
        _refuse(key)
    elif record.complete:   # else a kernel compiled or tuned in this call: record the next one
        plan = build(record, tensors, outputs)
        if plan is None:
            _refuse(key)
        else:
            with _lock:
                _plans[key] = plan
                while len(_plans) > CACHE_SIZE:
                    _plans.popitem(last=False)
    return outputs


def _refuse(key) -> None:
    """Launch this key's calls from now on, unrecorded (the newest CACHE_SIZE refusals are kept)."""
    with _lock:
        _refused[key] = True
        while len(_refused) > CACHE_SIZE:
            _refused.popitem(last=False)


def build(record: call_record.Recording, tensors: dict, outputs) -> Plan | None:
    """The plan of one complete recording, or None when it cannot be replayed: a tensor that is neither an input
    nor inside a recorded allocation; one object passed as two inputs (the key cannot tell a later call's
    distinct tensors from it); a recorded allocation that torch wrote into after making it (a replay would skip
    that write: kernels' writes leave torch's version counter alone)."""
    input_names = tuple(name for name, x in tensors.items() if x is not None)
    input_source = {id(tensors[name]): source for source, name in enumerate(input_names)}
    if len(input_source) < len(input_names):
        return None
    if any(tensor._version for tensor, _ in record.allocations):
        return None
    allocated = [tensor for tensor, _ in record.allocations]
    returned = {id(x) for x in outputs if isinstance(x, torch.Tensor)}
    parts, sizes = [], {WORKSPACE: 0, ZEROED: 0}
    for tensor, fill in record.allocations:
        nbytes = tensor.numel() * tensor.element_size()
        if fill is None:                # empty: returned ones get a tensor of their own, the rest share one
            place = OWN if id(tensor) in returned else WORKSPACE
        else:                           # zeroed ones share one zeroed buffer; other values: filled on their own
            place = ZEROED if fill == 0 else OWN
        offset = 0
        if place != OWN:
            offset = sizes[place]
            sizes[place] += -(-nbytes // ALIGN) * ALIGN
        parts.append(Part(tuple(tensor.shape), tensor.dtype, place, offset, nbytes, fill if place == OWN else None))

    def source_of(x, views=False):
        """(source, byte offset) of a tensor argument, or None. views: also a view into an input (a descriptor's
        base: list_output makes 2-D views of q, k, v for TMA)."""
        if id(x) in input_source:
            return input_source[id(x)], 0
        address = x.data_ptr()
        if views:           # inside exactly one input (inside two, as with aliased inputs: which is unknowable)
            inside = [(input_source[id(tensors[name])], address - tensors[name].data_ptr()) for name in input_names
                      if 0 <= address - tensors[name].data_ptr() < max(extent_bytes(tensors[name]), 1)]
            if len(inside) > 1:
                return None
            if inside:
                return inside[0]
        for index, tensor in enumerate(allocated):
            start = tensor.data_ptr()
            if start <= address < start + max(parts[index].nbytes, 1):
                return len(input_names) + index, address - start
        return None

    launches, allocated_before = [], set()
    for compiled, dims, arguments in record.launches:
        kept, pointers, allocate = list(arguments), [], []
        for position, x in enumerate(arguments):
            descriptor = launch.is_descriptor(x)
            if isinstance(x, torch.Tensor) or descriptor:
                found = source_of(x.base, views=True) if descriptor else source_of(x)
                if found is None:
                    return None
                template = (Descriptor(tuple(x.shape), tuple(x.strides), tuple(x.block_shape),
                                       getattr(x, "layout", None), x.padding) if descriptor else None)
                pointers.append((position, *found, template))
                kept[position] = None
                part = found[0] - len(input_names)
                if part >= 0 and parts[part].place == OWN and part not in allocated_before:
                    allocated_before.add(part)
                    allocate.append(part)
        launches.append(Launch(compiled, dims, tuple(kept), tuple(pointers), tuple(allocate)))
    if any(part.place == OWN and index not in allocated_before for index, part in enumerate(parts)):
        return None     # a tensor no kernel reads or writes: not a plan's to make
    result = []
    for x in outputs:
        if isinstance(x, torch.Tensor):
            index = next((i for i, tensor in enumerate(allocated) if tensor is x), None)
            if index is None:
                return None
            result.append(("part", index))
        else:
            result.append(("value", x))
    early = None
    if record.early is not None:        # the early flags: a whole recorded allocation (forward's flags)
        after, flags = record.early
        index = next((i for i, tensor in enumerate(allocated) if tensor is flags), None)
        if index is None:
            return None
        early = (after, index)
    return Plan(input_names, tuple(parts), sizes[WORKSPACE], sizes[ZEROED], tuple(launches), tuple(result), early)


def extent_bytes(x: torch.Tensor) -> int:
    """The bytes from x's first element to just past its last, through its strides."""
    if x.numel() == 0:
        return 0
    return (sum((size - 1) * stride for size, stride in zip(x.shape, x.stride())) + 1) * x.element_size()


def run(plan: Plan, tensors: dict):
    """One call from `plan`: fresh buffers, the recorded launches with this call's pointers. The zeroed parts have
    a small allocation of their own, cleared by one launch of zero_words, apart from the workspace: the value flags
    are returned, and a view into the workspace would keep all of it allocated for as long as a caller holds them
    (DeferredChecks holds every layer's). The tensors a call returns are allocated just before the first launch that
    writes them, so the first launch waits only for the two shared buffers."""
    global replays
    replays += 1
    device = tensors["v"].device
    stream = launch.driver.active.get_current_stream(launch.driver.active.get_current_device())
    workspace = zeroed = None
    bases = [tensors[name].data_ptr() for name in plan.input_names]
    if plan.zeroed_bytes:
        zeroed = call_record.empty(plan.zeroed_bytes, dtype=torch.uint8, device=device)
        zero_words(zeroed.data_ptr(), plan.zeroed_bytes // 4, stream, zeroed)
    if plan.workspace_bytes:
        workspace = call_record.empty(plan.workspace_bytes, dtype=torch.uint8, device=device)
    own = {}
    for part in plan.parts:      # an OWN part's address is filled in when it is allocated
        bases.append(0 if part.place == OWN else
                     (workspace if part.place == WORKSPACE else zeroed).data_ptr() + part.offset)
    first_part = len(plan.input_names)

    def part_tensor(index):
        part = plan.parts[index]
        if part.place == OWN:
            return own[index]
        buffer = workspace if part.place == WORKSPACE else zeroed
        return buffer[part.offset:part.offset + part.nbytes].view(part.dtype).view(part.shape)
    early_after, early_part = plan.early if plan.early is not None else (-1, None)
    for done, step in enumerate(plan.launches):
        if done == early_after:       # the early flags, copied where the recorded call copied them
            call_record.copy_early(part_tensor(early_part))
        for index in step.allocate:
            part = plan.parts[index]
            own[index] = (call_record.empty(*part.shape, dtype=part.dtype, device=device) if part.fill is None else
                          call_record.full(*part.shape, value=part.fill, dtype=part.dtype, device=device))
            bases[first_part + index] = own[index].data_ptr()
        arguments = list(step.arguments)
        for position, source, offset, descriptor in step.pointers:
            address = bases[source] + offset
            arguments[position] = address if descriptor is None else descriptor.at(address)
        compiled = step.compiled
        compiled.run(*step.dims, stream, compiled.function, compiled.packed_metadata, None, None, None, *arguments)
    if early_after == len(plan.launches):
        call_record.copy_early(part_tensor(early_part))
    return tuple(value if kind == "value" else part_tensor(value) for kind, value in plan.outputs)


@triton.jit
def zero_words_kernel(words_ptr, n_words, BLOCK: tl.constexpr):
    """Zeroes n_words int32 words from words_ptr (a plan's zeroed parts)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(words_ptr + offsets, tl.zeros([BLOCK], dtype=tl.int32), mask=offsets < n_words)


ZERO_BLOCK = 1024
_zero_kernels: dict = {}       # device index -> the compiled zero_words_kernel


def zero_words(address: int, n_words: int, stream, buffer: torch.Tensor) -> None:
    """Clears n_words int32 words at `address` (inside `buffer`, a tensor on the device, to compile for it the
    first time) on `stream`: one launch of a compiled kernel, against torch.zeros' allocation, TensorIterator
    and fill (on an H200 machine's host, batch 20: the fill's host work ~45 us under the profiler, a compiled
    launch ~10 us). One compiled kernel serves every plan because Triton specialises it on the address being a
    multiple of 16 bytes and n_words a multiple of 16, which ALIGN (parts at 256-byte boundaries) and the allocator
    give every time; checked here, since a call outside them would run a kernel compiled for other arguments."""
    if address % 16 or n_words % 16:
        raise ValueError(f"zero_words: the address ({address:#x}) and the word count ({n_words}) must be multiples "
                         "of 16")
    device = buffer.device.index
    compiled = _zero_kernels.get(device)
    if compiled is None:
        offset = address - buffer.data_ptr()
        words = buffer[offset:offset + 4 * n_words].view(torch.int32)
        _zero_kernels[device] = zero_words_kernel[(triton.cdiv(n_words, ZERO_BLOCK),)](words, n_words,
                                                                                         BLOCK=ZERO_BLOCK)
        return
    # Triton 3.6's launcher takes every parameter, the constexpr ones too (as launch.Launcher passes them)
    compiled.run(triton.cdiv(n_words, ZERO_BLOCK), 1, 1, stream, compiled.function, compiled.packed_metadata,
                 None, None, None, address, n_words, ZERO_BLOCK)


def clear():
    """Forget every plan and every refused key."""
    with _lock:
        _plans.clear()
        _refused.clear()
