"""Tensor checks of the public API (docs/CONTRACT.md section 5): every problem is a ValueError naming the argument.

The options (budget, selector, band, backend, seed) are checked once, where a `SparseConfig` is made;
here: the tensors, their values, the scale and the boolean switches.
"""
from __future__ import annotations

import math
import numbers
import threading

import torch

from .config import CHUNK_SIZE, num_chunks

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# Below this a chunk's cumulative log decay (64 terms) overflows float32; exp(g) is 0 long before it.
LOWEST_LOG_DECAY = -torch.finfo(torch.float32).max / CHUNK_SIZE
LARGEST_SCALE = torch.finfo(torch.float32).max
SMALLEST_SCALE = torch.finfo(torch.float32).tiny    # below it float32 holds a scale as a subnormal or 0
# The GPU path's value flags (sparsegdn/triton/chunk_loads.py FLAG_*): slots 0..ERROR_FLAGS-1 are errors (o or the
# final state not finite, g or beta bad, the initial state not finite); the slot after them (FLAG_WAIT) only says
# that the early checks did not clear the call, which then waits for every flag.
ERROR_FLAGS = 3


class ResultOverflowError(ValueError):
    """Every input is finite and in range, yet the result holds NaN or inf (values too large)."""


def _tensor(name, x, ndim):
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.layout != torch.strided:
        raise ValueError(f"{name}: expected a dense tensor, got layout {x.layout}; call .to_dense() first")
    if x.is_meta:
        raise ValueError(f"{name}: on the meta device, which holds no values")
    if x.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"{name}: expected a floating-point tensor, got {x.dtype}")
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name}: expected float16, bfloat16, float32 or float64, got {x.dtype}")


def check_no_gradient(q, k, v, g, beta, initial_state):
    """The sparse core and the dense torch core compute the forward only: an input that requires grad, with
    grad mode on, would get no gradient through them (the Triton kernels) or fail deep inside (the torch
    path's in-place products). Refused up front, naming the input."""
    if not torch.is_grad_enabled():
        return
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("initial_state", initial_state)):
        if x is not None and x.requires_grad:
            raise ValueError(f"{name}: requires grad, but this path computes the forward only (no gradients); "
                             "call it under torch.no_grad() or torch.inference_mode(), or train through "
                             "analysis.patching.sparse_reference_core (differentiable)")


def check_inputs(q, k, v, g, beta, initial_state):
    """Shapes, ranks, dtypes and devices. Returns (B, T, H, HV, K, V)."""
    _tensor("q", q, 4)
    _tensor("k", k, 4)
    _tensor("v", v, 4)
    _tensor("g", g, 3)
    _tensor("beta", beta, 3)
    batch, num_tokens, key_heads, key_dim = q.shape
    if num_tokens == 0:
        raise ValueError("q: the sequence length T is 0; at least one token is needed")
    if batch == 0 or key_heads == 0 or key_dim == 0:
        raise ValueError(f"q: every dimension must be non-empty, got shape {tuple(q.shape)}")
    if k.shape != q.shape:
        raise ValueError(f"k: shape {tuple(k.shape)} must equal q's {tuple(q.shape)}")
    if v.shape[:2] != (batch, num_tokens):
        raise ValueError(f"v: shape {tuple(v.shape)} must start with (B, T) = {(batch, num_tokens)}")
    value_heads, value_dim = v.shape[2], v.shape[3]
    if value_heads == 0 or value_dim == 0:
        raise ValueError(f"v: every dimension must be non-empty, got shape {tuple(v.shape)}")
    if value_heads % key_heads:
        raise ValueError(f"v: value heads HV={value_heads} must be a multiple of key heads H={key_heads}")
    for name, x in (("g", g), ("beta", beta)):
        if x.shape != (batch, num_tokens, value_heads):
            raise ValueError(f"{name}: expected shape {(batch, num_tokens, value_heads)}, got {tuple(x.shape)}")
    if initial_state is not None:
        _tensor("initial_state", initial_state, 4)
        expected = (batch, value_heads, key_dim, value_dim)
        if tuple(initial_state.shape) != expected:
            raise ValueError(f"initial_state: expected shape {expected}, got {tuple(initial_state.shape)}")
    for name, x in (("k", k), ("v", v), ("g", g), ("beta", beta), ("initial_state", initial_state)):
        if x is not None and x.device != q.device:
            raise ValueError(f"{name}: on {x.device}, but q is on {q.device}")
    return batch, num_tokens, key_heads, value_heads, key_dim, value_dim


def _extremes(tensors) -> list[list[float]]:
    """[min, max] of each tensor, read back with one device sync for all of them."""
    return torch.stack([torch.stack(torch.aminmax(x)).float() for x in tensors]).tolist()


def check_values(q, k, v, g, beta, initial_state):
    """Non-finite inputs and positive log decays.

    One min/max reduction per tensor (NaN propagates through both) and a single device sync for
    all of them: on a GPU this reads each input once and allocates nothing of its size, where
    `isfinite(x).all()` would write a mask as large as the input.
    """
    named = [("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)]
    if initial_state is not None:
        named.append(("initial_state", initial_state))
    extremes = _extremes([x for _, x in named])
    for (name, _), (low, high) in zip(named, extremes):
        if not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError(f"{name}: contains NaN or infinite values")
    if extremes[3][1] > 0:
        raise ValueError("g: log decays must be <= 0 (g > 0 would grow the state without bound)")
    if extremes[3][0] < LOWEST_LOG_DECAY:
        raise ValueError(f"g: log decays below {LOWEST_LOG_DECAY:.2g} overflow a chunk's cumulative sum in "
                         f"float32 (got {extremes[3][0]:.3g}); clamp g, exp(g) is already 0 far above that")
    if extremes[4][0] < 0 or extremes[4][1] > 1:
        raise ValueError(f"beta: write strengths must be in [0, 1], got values in "
                         f"[{extremes[4][0]:.3g}, {extremes[4][1]:.3g}]")


def _out_of_range(extremes) -> bool:
    """Any [min, max] pair non-finite, or g ([1]) / beta ([2]) outside their ranges."""
    non_finite = any(not (math.isfinite(low) and math.isfinite(high)) for low, high in extremes)
    (g_low, g_high), (beta_low, beta_high) = extremes[1], extremes[2]
    return non_finite or g_high > 0 or g_low < LOWEST_LOG_DECAY or beta_low < 0 or beta_high > 1


def check_result(o, final_state, q, k, v, g, beta, scale):
    """Raise ResultOverflowError when o or the final state holds NaN/inf although the inputs passed.

    Finite inputs in range can still overflow inside the computation (o in float16 beyond 65504, huge
    q, k or v times a large scale); the caller gets an error instead of NaN/inf in the result.
    """
    results = [o] + ([final_state] if final_state is not None else [])
    if all(math.isfinite(low) and math.isfinite(high) for low, high in _extremes(results)):
        return
    _raise_overflow(o, q, k, v, g, beta, scale)


def _raise_overflow(o, q, k, v, g, beta, scale):
    largest = {name: max(abs(low), abs(high)) for name, (low, high)
               in zip("qkv", _extremes([q, k, v]))}
    raise ResultOverflowError(
        f"o: the result overflowed to NaN/inf in {o.dtype} although every input is finite (largest |q| "
        f"{largest['q']:.3g}, |k| {largest['k']:.3g}, |v| {largest['v']:.3g}, scale {scale:.3g}); "
        "scale the inputs down or pass float32/float64 tensors")


def check_values_after(o, final_state, q, k, v, g, beta, initial_state, scale):
    """The same contract as `check_values`, checked after a GPU computation and without reading q, k, v.

    A host sync before the kernels are launched would leave the GPU idle while Python launches them
    one by one (measured: the public call 0.46 ms slower than the kernels at 32K tokens). Here the
    sync comes once, at the end. NaN and inf in q, k or v always reach o (NaN and inf survive every
    product, even with zero), so o, g, beta and the initial state are reduced instead of q, k and v;
    only when something is non-finite or out of range are the inputs read one by one to name the
    argument. A non-finite o from inputs that all pass is an overflow (ResultOverflowError).
    """
    small = [o, g, beta] + [x for x in (initial_state, final_state) if x is not None]
    extremes = _extremes(small)
    if _out_of_range(extremes):
        check_values(q, k, v, g, beta, initial_state)
        _raise_overflow(o, q, k, v, g, beta, scale)


_read_back = threading.local()      # this thread's pinned buffers and events (_copy_to_host)
early_returns = 0       # calls the early checks cleared (check_flags; read by benchmarks: not locked, a count)


def host_buffer(flags: torch.Tensor) -> torch.Tensor:
    """A host tensor of flags' shape and dtype that later calls copy into, whatever their grad mode: made outside
    inference mode (one made under torch.inference_mode is an inference tensor, which a later caller outside it,
    under no_grad, may not write: GPU matrix, batch 34), pinned where flags are on a GPU."""
    with torch.inference_mode(False):
        return torch.empty(flags.shape, dtype=flags.dtype, pin_memory=flags.is_cuda)


def _copy_to_host(flags: torch.Tensor, role: str) -> list:
    """Queues a copy of flags (on a GPU) into this thread's pinned buffer for `role` ("read" or "early") on their
    device, of their shape and dtype, behind the work queued so far on the current stream, and records that place's
    event. Returns the place, [pinned buffer, event, last]: `last` is the role's last EarlyFlags (copy_early), whose
    copy, if nobody waited for it (a backend call's), may still land in the buffer: it is waited for first. Buffers
    and events are made once and used again."""
    places = getattr(_read_back, "places", None)
    if places is None:
        places = _read_back.places = {}
    key = (role, flags.device, tuple(flags.shape), flags.dtype)
    place = places.get(key)
    if place is None:
        place = places[key] = [host_buffer(flags), torch.cuda.Event(), None]
    host, event, last = place
    if last is not None:
        last.wait()
    host.copy_(flags, non_blocking=True)
    event.record(torch.cuda.current_stream(flags.device))
    return place


def read_flags(flags: torch.Tensor) -> list:
    """The flags on the host, as `tolist()` gives them (nested for stacked flags). On a GPU they are copied
    into pinned memory behind the last kernel and waited for on an event (a spinning wait), not with
    `tolist()`'s pageable copy, whose wait came back late when the host had finished launching well before
    the kernels ended (benchmarks/public_call_probe.py). The wait ends before this returns, so no later read
    finds the copy running."""
    if not flags.is_cuda:
        return flags.tolist()
    host, event, _ = _copy_to_host(flags, "read")
    event.synchronize()
    return host.tolist()


def check_flags(flags, o, q, k, v, g, beta, initial_state, scale, early=None):
    """The contract of `check_values` for the Triton path, from the flags its kernels raised.

    The kernels check what they read anyway (g and beta, finite and in range, in the intra-chunk pass;
    the initial state in the state pass; o as it is written); only the early checks add a pass, a scan of q and the
    initial state. Reading the flags back is the call's device sync: after pass 1 only where the early checks
    cleared the call (`early`); else after every launch (and first for the early copy, where one was made). NaN and
    inf in q, k or v always
    reach o (they survive every product, even with zero), so a clean o clears them. Only when a flag
    is set are the inputs read one by one, to name the argument; inputs that all pass with a
    non-finite o are an overflow (ResultOverflowError).

    `early`: the call's EarlyFlags (take_early), or None. Where the early checks cleared the call (every head
    vector of q, k and v and every element of the initial state finite and within their bound, g and beta in
    range), it returns as
    soon as they are read, while the later kernels still run (chunk_loads.WAIT_BOUND says why o cannot overflow
    then, but for keys chosen to make band 0-2 commits expand); else it waits for every flag, as without them.
    """
    if early is not None and not any(early.read()):
        global early_returns
        early_returns += 1
        return
    if not any(read_flags(flags)[:ERROR_FLAGS]):
        return
    check_values(q, k, v, g, beta, initial_state)
    _raise_overflow(o, q, k, v, g, beta, scale)


class EarlyFlags:
    """The value flags as pass 1 left them (the early checks), copied to the host behind it: `read` waits for that
    copy only, not for the kernels queued after pass 1."""

    def __init__(self, host, event):
        self.host, self.event, self.copied = host, event, event is None

    def wait(self) -> None:
        if not self.copied:
            self.event.synchronize()
            self.copied = True

    def read(self) -> list:
        self.wait()
        return self.host.tolist()


def copy_early(flags: torch.Tensor) -> None:
    """Called by the GPU path right after pass 1's launch (and by a plan's replay at the same point): copies the
    flags to this thread's pinned buffer behind pass 1 and keeps them for take_early. On the CPU (the interpreter)
    the kernels have run: a copy of the flags as they are now."""
    if not flags.is_cuda:
        _read_back.early = EarlyFlags(flags.clone(), None)
        return
    place = _copy_to_host(flags, "early")
    place[2] = _read_back.early = EarlyFlags(place[0], place[1])


def take_early() -> EarlyFlags | None:
    """The early flags this thread's last GPU call copied (copy_early), or None; forgotten once taken."""
    early = getattr(_read_back, "early", None)
    _read_back.early = None
    return early


class DeferredChecks:
    """Value flags of many GPU calls, read back once (one device sync) instead of once per call.

    A model calls the core once per layer; reading each call's flags back would stop the host from
    queueing the next layers while the GPU works. Pass one collector to every call
    (`sparse_gated_delta_rule(..., checks=collector)`) and call `collector.check()` after the last:
    it raises a ValueError naming the first call (by its label) whose kernels saw a non-finite input
    or output, without naming the argument (the inputs are not kept to re-read).
    """

    def __init__(self):
        self._labels: list[str] = []
        self._flags: list[torch.Tensor] = []

    def add(self, flags: torch.Tensor, label: str | None = None) -> None:
        self._labels.append(label or f"GDN core call {len(self._labels) + 1}")
        self._flags.append(flags)

    def check(self) -> None:
        if not self._flags:
            return
        # One read-back per device (a model spread over GPUs hands in flags from each of them).
        by_device: dict[torch.device, list[int]] = {}
        for index, flags in enumerate(self._flags):
            by_device.setdefault(flags.device, []).append(index)
        rows: list = [None] * len(self._flags)
        for indices in by_device.values():
            for index, row in zip(indices, read_flags(torch.stack([self._flags[i] for i in indices]))):
                rows[index] = row
        labels = self._labels
        self._labels, self._flags = [], []
        for label, row in zip(labels, rows):
            if any(row[:ERROR_FLAGS]):
                raise ValueError(f"{label}: the GDN core saw a NaN or infinite value (or g > 0) in its inputs, "
                                 "initial state or output")


def check_scale(scale) -> None:
    """None or a real number that float32 holds as a positive normal number (a scale that rounds to 0 or to a
    subnormal would zero the outputs silently; an int too large for a float is refused the same way)."""
    if scale is None:
        return
    try:
        ok = (not isinstance(scale, bool) and isinstance(scale, numbers.Real) and math.isfinite(scale)
              and SMALLEST_SCALE <= scale <= LARGEST_SCALE)
    except OverflowError:           # an int past float's range
        ok = False
    if not ok:
        raise ValueError(f"scale: expected a positive number that float32 holds as a normal number "
                         f"({SMALLEST_SCALE:.3g} to {LARGEST_SCALE:.3g}), got {scale!r}")


def check_callbacks(stage_hook, checks) -> None:
    """stage_hook: None or a callable; checks: None or a DeferredChecks (refused before any work starts)."""
    if stage_hook is not None and not callable(stage_hook):
        raise ValueError(f"stage_hook: expected a callable taking a stage name, got {type(stage_hook).__name__}")
    if checks is not None and not isinstance(checks, DeferredChecks):
        raise ValueError(f"checks: expected a sparsegdn.validation.DeferredChecks, got {type(checks).__name__}")


def check_switches(**switches) -> None:
    """Boolean switches (output_final_state, use_qk_l2norm_in_kernel): True or False, nothing else."""
    for name, value in switches.items():
        if not isinstance(value, bool):
            raise ValueError(f"{name}: expected True or False, got {value!r}")


def check_events(events, batch, value_heads, num_tokens, device):
    expected = (batch, value_heads, num_chunks(num_tokens))
    if not isinstance(events, torch.Tensor) or events.dtype != torch.bool:
        got = events.dtype if isinstance(events, torch.Tensor) else type(events).__name__
        raise ValueError(f"events: expected a bool tensor of shape {expected}, got {got}")
    if tuple(events.shape) != expected:
        raise ValueError(f"events: expected shape {expected} (B, HV, NC), got {tuple(events.shape)}")
    if events.device != device:
        raise ValueError(f"events: on {events.device}, but q is on {device}")
