"""Tensor checks of the public API (docs/CONTRACT.md section 5): every problem is a ValueError naming the argument.

The options (budget, selector, band, backend, seed) are checked once, where a `SparseConfig` is made.
"""
from __future__ import annotations

import math
import numbers

import torch

from .config import num_chunks


def _tensor(name, x, ndim):
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"{name}: expected a floating-point tensor, got {x.dtype}")


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


def check_values_after(o, q, k, v, g, beta, initial_state):
    """The same contract as `check_values`, checked after a GPU computation and without reading q, k, v.

    A host sync before the kernels are launched would leave the GPU idle while Python launches them
    one by one (measured: the public call 0.46 ms slower than the kernels at 32K tokens). Here the
    sync comes once, at the end. NaN and inf in q, k or v always reach o (NaN and inf survive every
    product, even with zero), so o, g, beta and the initial state are reduced instead of q, k and v;
    only when something is non-finite are the inputs read one by one to name the argument. An
    overflow inside the computation with finite inputs is left for the caller to see in o.
    """
    small = [o, g, beta] + ([initial_state] if initial_state is not None else [])
    extremes = _extremes(small)
    bad = any(not (math.isfinite(low) and math.isfinite(high)) for low, high in extremes)
    if bad or extremes[1][1] > 0:
        check_values(q, k, v, g, beta, initial_state)


def check_flags(flags, q, k, v, g, beta, initial_state):
    """The contract of `check_values` for the Triton path, from the flags its kernels raised.

    The kernels check what they read anyway (g and beta in the intra-chunk solve, the initial state
    in the state pass, o as it is written), so no pass over the inputs is added, and reading the
    flags back is the call's one device sync, after every launch. NaN and inf in q, k or v always
    reach o (they survive every product, even with zero), so a clean o clears them. Only when a flag
    is set are the inputs read one by one, to name the argument; finite inputs whose computation
    overflowed are reported as such.
    """
    if not any(flags.tolist()):
        return
    check_values(q, k, v, g, beta, initial_state)
    raise ValueError("q, k, v, g, beta: every input is finite, but the computation overflowed "
                     "(non-finite output); check the scale of g (log decays), beta and scale")


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
        rows = torch.stack(self._flags).tolist()
        labels = self._labels
        self._labels, self._flags = [], []
        for label, row in zip(labels, rows):
            if any(row):
                raise ValueError(f"{label}: the GDN core saw a NaN or infinite value (or g > 0) in its inputs, "
                                 "initial state or output")


def check_scale(scale) -> None:
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)
                              or not math.isfinite(scale) or scale <= 0):
        raise ValueError(f"scale: expected a positive finite number, got {scale!r}")


def check_events(events, batch, value_heads, num_tokens, device):
    expected = (batch, value_heads, num_chunks(num_tokens))
    if not isinstance(events, torch.Tensor) or events.dtype != torch.bool:
        got = events.dtype if isinstance(events, torch.Tensor) else type(events).__name__
        raise ValueError(f"events: expected a bool tensor of shape {expected}, got {got}")
    if tuple(events.shape) != expected:
        raise ValueError(f"events: expected shape {expected} (B, HV, NC), got {tuple(events.shape)}")
    if events.device != device:
        raise ValueError(f"events: on {events.device}, but q is on {device}")
