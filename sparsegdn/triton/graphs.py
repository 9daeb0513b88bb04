"""Short calls replayed from CUDA graphs: the host's work of a call done once per shape (off by default: plans
launch faster, see CUDA_GRAPH).

Why: at short lengths the kernels of one call take less time than the host's work to launch them (the
call's Python and ~12 launches), and the public call read its value flags back after its last kernel, a sync
after which that host time was no longer hidden behind the GPU (a replayed call still does: it runs without the
early checks). A CUDA graph replays every launch of a call in one: the
host then copies the inputs in, replays, and copies the outputs out. The copies cost GPU time (q, k and
v read and written once more), so the replay pays only where the host's time outweighs them. On the H200
(2026-12-01, analysis/results/kernel_bench.json, build 2e1ce401944d, budget 0.29, public call), replayed
against the launches of the run before: 4K 0.342 against 0.609 ms, 8K 0.563 against 0.829, but 16K 0.997
against 0.924, hence MAX_TOKENS.

What is captured: the Triton backend's forward (forward._forward) for one key: every tensor's shape,
strides, dtype, device and 16-byte alignment, and every option's value. Only calls whose host work does
not depend on the data are captured: the `score`, `uniform` and `all` selectors (their event count is
known on the host), no caller-given events (sizing their lists reads the count back), no stage hook,
and at most MAX_TOKENS tokens over the batch, where the host dominates; and only calls that read their
value flags back (a caller that defers its checks, as a model's layers do, does not sync per call, so its
launches already overlap the GPU and the copies would only add work). A key is captured on its second
call (a length seen once, as in an app serving documents of every length, is launched: a capture costs a
device sync and an uncaptured run); the capture runs the forward once outside the graph (compiling,
autotuning and planning every launch) on a stream of the inputs' device, then captures it. If capturing
fails, the key is launched from then on (with a warning). Copies in and out run outside autograd and
outside inference mode, so a graph captured under torch.inference_mode serves callers under no_grad too.

Costs: each captured key keeps its inputs' copies and its intermediates (the graph's memory pool) alive
until it is evicted (at most CACHE_SIZE keys, least recently used first); the outputs are copied out of
the graph's buffers on every call, so a later replay never changes what an earlier call returned.
"""
from __future__ import annotations

import os
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass

import torch

# Off. It was on from 2026-12-01 (H200, build c0d514b73af1, config_probe --timed at 4K: the public call 0.464 ms
# replayed against 0.755-0.911 ms launched). Calls launched from recorded plans (call_plans.py), which copy
# nothing, beat the replay since: on the H200 (2026-12-02, benchmarks/public_call_probe.py,
# analysis/results/overlap/batch10/call1) the public call took 0.296 ms at 4K and 0.442 ms at 8K from plans
# against 0.384 and 0.568 replayed (`score` selector). Short `uniform` calls, which no plan serves, are launched
# now. tests/test_triton_gpu_matrix.py still checks the replay bit for bit; SPARSEGDN_CUDA_GRAPH=1 turns it on
# (calls up to MAX_TOKENS).
CUDA_GRAPH = os.environ.get("SPARSEGDN_CUDA_GRAPH", "0") == "1"
MAX_TOKENS = 8192           # batch x tokens: above it the copies in cost more than the launches saved
CACHE_SIZE = 4
GRAPHED_SELECTORS = ("score", "uniform", "all")


@dataclass
class CapturedCall:
    graph: "torch.cuda.CUDAGraph"
    inputs: dict            # name -> the graph's own copy of that input (or None)
    outputs: tuple          # the forward's return value, in the graph's buffers
    last_use: object = None  # a CUDA event recorded after the last replay's outputs were copied out


_captured: OrderedDict = OrderedDict()
# One caller at a time copies into a captured call's buffers, replays and copies out (an app serves several
# sessions from threads); a later caller's stream also waits for the previous use's event, so a caller on
# another stream cannot overwrite the buffers while that replay still runs.
_lock = threading.Lock()
_seen: OrderedDict = OrderedDict()      # keys called once, not captured yet (the newest SEEN_SIZE)
_failed: set = set()                    # keys whose capture failed: launched
SEEN_SIZE = 64


def wanted(tensors: dict, *, events, selector, stage_hook, deferred=False) -> bool:
    """Whether this call is replayed from a graph (see the module docstring); `deferred`: the caller defers its
    value checks."""
    v = tensors["v"]
    return (CUDA_GRAPH and v.is_cuda and events is None and selector in GRAPHED_SELECTORS and stage_hook is None
            and not deferred and v.shape[0] * v.shape[1] <= MAX_TOKENS
            and not torch.cuda.is_current_stream_capturing())


def tensor_key(x):
    if x is None:
        return None
    return x.shape, x.stride(), x.dtype, x.device, x.data_ptr() % 16 == 0


PLAIN_VALUES = (bool, int, float, str, type(None))


def call_key(tensors: dict, options: dict, design=()) -> tuple:
    """What a captured graph (or a recorded plan, call_plans.py) is valid for: every tensor's layout, every
    option's value (plain values as they are, anything else by its repr) and the design switches the forward
    reads (forward.design_switches). Made on every call of those paths, so kept to cheap attribute reads."""
    return (tuple((name, tensor_key(x)) for name, x in sorted(tensors.items())),
            tuple(sorted((name, value if type(value) in PLAIN_VALUES else repr(value))
                         for name, value in options.items())), design)


def replay(forward, tensors: dict, options: dict, design=()):
    """forward(**tensors, **options), replayed from the graph of this call's key (captured on the key's second
    call; launched on its first and after a failed capture). Returns the forward's return value with every
    tensor copied out of the graph's buffers."""
    key = call_key(tensors, options, design)
    device = next(x.device for x in tensors.values() if x is not None)
    # Outside autograd (nothing here has a backward) and outside inference mode (buffers made under
    # inference_mode could not be written by a later caller under no_grad).
    with torch.inference_mode(False), torch.no_grad():
        with _lock:
            outputs = _replay_locked(forward, tensors, options, key, device)
        if outputs is None:                 # launched, not replayed (outside the lock)
            outputs = forward(**tensors, **options)
    return outputs


def _replay_locked(forward, tensors, options, key, device):
    """The replay of `key`'s graph (captured now if the key was seen before), or None where the call is to be
    launched instead."""
    call = _captured.get(key)
    if call is None:
        if key in _failed:
            return None
        if _seen.pop(key, None) is None:    # first call of this key: remembered, launched
            _seen[key] = True
            while len(_seen) > SEEN_SIZE:
                _seen.popitem(last=False)
            return None
        try:
            call = _capture(forward, tensors, options)
        except Exception as error:  # noqa: BLE001 - any capture failure: launch this key from now on
            _failed.add(key)
            warnings.warn(f"sparsegdn: CUDA graph capture failed ({type(error).__name__}: {error}); these calls "
                          "are launched instead", RuntimeWarning, stacklevel=4)
            return None
        _captured[key] = call
        while len(_captured) > CACHE_SIZE:
            _, evicted = _captured.popitem(last=False)
            _finished(evicted.last_use)         # its memory is freed: no replay of it may still be running
    else:
        _captured.move_to_end(key)
        _wait_for(call.last_use, device)
        for name, x in tensors.items():
            if x is not None:
                call.inputs[name].copy_(x)
    call.graph.replay()
    outputs = tuple(out.clone() if isinstance(out, torch.Tensor) else out for out in call.outputs)
    call.last_use = _mark(device)
    return outputs


def _mark(device):
    """An event on the current stream, after the work enqueued so far."""
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event


def _wait_for(event, device):
    """The current stream waits (on the GPU) for `event`, when there is one."""
    if event is not None:
        torch.cuda.current_stream(device).wait_event(event)


def _finished(event):
    """The host waits for `event`, when there is one."""
    if event is not None:
        event.synchronize()


def _copy_of(x):
    """A tensor with x's shape, strides and values (the kernels read some inputs through their strides)."""
    if x is None:
        return None
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device).copy_(x)


def _capture(forward, tensors: dict, options: dict) -> CapturedCall:
    inputs = {name: _copy_of(x) for name, x in tensors.items()}
    device = tensors["v"].device
    side = torch.cuda.Stream(device)        # of the inputs' device: torch's own capture stream is made once,
    side.wait_stream(torch.cuda.current_stream(device))            # on whichever device came first
    with torch.cuda.stream(side):           # compile, autotune and plan every launch outside the capture
        forward(**inputs, **options)
    graph = torch.cuda.CUDAGraph()
    # thread_local: other threads may use the GPU meanwhile
    with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
        outputs = forward(**inputs, **options)
    torch.cuda.current_stream(device).wait_stream(side)
    return CapturedCall(graph, inputs, outputs)


def clear():
    """Forget every captured call (and free its memory once no output refers to it), every key seen once and
    every failed capture."""
    with _lock:
        for call in _captured.values():
            _finished(call.last_use)
        _captured.clear()
        _seen.clear()
        _failed.clear()
