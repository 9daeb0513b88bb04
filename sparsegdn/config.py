"""The option space of SparseGDN, defined once (docs/CONTRACT.md sections 2 to 5).

Chunk and block sizes, the selector policies, the bands, the backends, the names of the stages a
sparse call reports, and `SparseConfig`: one checked choice of budget, selector, band, backend and
seed. The public API, the analysis pipeline and CLI, the app's controls, the evaluation and training
all read their options from here, so adding a selector touches this file (and its implementation).
"""
from __future__ import annotations

import numbers
import os
from dataclasses import asdict, dataclass, fields, replace
from typing import Mapping

CHUNK_SIZE = 64                      # tokens per chunk (contract section 2)
BLOCK_SIZE = 16                      # tokens per block of the intra-chunk solver (contract section 3)
BLOCKS_PER_CHUNK = CHUNK_SIZE // BLOCK_SIZE

SELECTORS = ("score", "uniform", "random", "oracle", "all")
BANDS = tuple(range(BLOCKS_PER_CHUNK))         # 0..3; 3 is the exact solve, 1 the block-adjacent solver
SPARSE_BACKENDS = ("auto", "torch", "triton")
DENSE_BACKENDS = ("auto", "torch", "fla")

# The stages of one sparse call, in the order they run. `stage_hook(name)` is called once after each,
# with these names, whatever the backend (contract section 5); timings and records use them as keys.
STAGES = (
    "intra_solve",     # the band-projected intra-chunk inverse of every chunk (and the score statistics)
    "selection",       # event scores and the selected events
    "event_prepare",   # w, u and the commit keys of the events that commit
    "state_pass",      # the sequential pass over chunks: committed states
    "output",          # every token's output from the state entering its chunk
)


def num_chunks(num_tokens: int) -> int:
    """NC = ceil(T / CHUNK_SIZE): the last chunk may be shorter."""
    return -(-num_tokens // CHUNK_SIZE)


@dataclass(frozen=True)
class Option:
    """One setting of `SparseConfig`, described for whoever offers it (an app control, a CLI flag)."""

    name: str
    label: str
    help: str
    choices: tuple = ()               # the allowed values, when they are a list
    low: float | None = None          # numeric bounds, when they are a range (see `SparseConfig` checks)
    high: float | None = None
    step: float | None = None         # the granularity a control offers


# What each selector and band means (docs/CONTRACT.md sections 3 and 4), for the options' help.
SELECTOR_MEANINGS = {
    "score": "the dynamic selector: a cheap score per event (how much the chunk writes times how long later tokens "
             "still read it), one budget shared by the layer's head pairs, so each receives its own number of events",
    "uniform": "the same number of events for every head pair, at evenly spaced chunks",
    "random": "events drawn uniformly at random, seeded by the seed",
    "oracle": "ranks events by the true norm of what they commit; needs a dense pass, for analysis only",
    "all": "every event: dense semantics through the sparse code path (the budget is not used)",
}
BAND_MEANINGS = {
    0: "the diagonal 16-token blocks of the intra-chunk inverse only",
    1: "the block-adjacent solver: the diagonal blocks and the blocks just below them",
    2: "all blocks but the farthest one (block row minus column at most 2)",
    3: "the exact intra-chunk solve",
}


def _meanings(meanings: dict) -> str:
    return "; ".join(f"{value}: {meaning}" for value, meaning in meanings.items())


OPTIONS = (
    Option("budget", "Budget ρ", "share of recurrent events kept per layer and sequence, in (0, 1]",
           low=0.0, high=1.0, step=0.01),
    Option("selector", "Selector policy", "which events are kept. " + _meanings(SELECTOR_MEANINGS), choices=SELECTORS),
    Option("band", "Band", "how much of the intra-chunk inverse is kept (blocks of 16 tokens). "
           + _meanings(BAND_MEANINGS), choices=BANDS),
    Option("backend", "Backend", "auto: Triton on a CUDA device, else the PyTorch path.",
           choices=SPARSE_BACKENDS),
    Option("seed", "Seed", "seed of the random selector", low=0),
)


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_integer(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_choice(name: str, value, choices: tuple) -> None:
    """ValueError naming the argument when `value` is not one of `choices`."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}: unknown {name} {value!r}; choose one of {', '.join(choices)}")


@dataclass(frozen=True)
class SparseConfig:
    """One choice of SparseGDN's options, checked where it is made (ValueError naming the argument).

    budget    fraction of events kept per layer and sequence, in (0, 1]
    selector  one of SELECTORS
    band      one of BANDS
    backend   one of SPARSE_BACKENDS ("auto" until `resolved` picks one for a device)
    seed      seed of the `random` selector, >= 0
    """

    budget: float = 0.29
    selector: str = "score"
    band: int = 1
    backend: str = "auto"
    seed: int = 0

    def __post_init__(self):
        if not _is_real(self.budget) or not 0 < self.budget <= 1:
            raise ValueError(f"budget: expected a fraction in (0, 1], got {self.budget!r}")
        check_choice("selector", self.selector, SELECTORS)
        if not _is_integer(self.band) or self.band not in BANDS:
            raise ValueError(f"band: expected an integer in {BANDS[0]}..{BANDS[-1]}, got {self.band!r}")
        check_choice("backend", self.backend, SPARSE_BACKENDS)
        if not _is_integer(self.seed) or not 0 <= self.seed < 2 ** 64:
            raise ValueError(f"seed: expected an integer in [0, 2**64), got {self.seed!r}")
        # Plain Python numbers (not numpy scalars), so configs hash, compare and serialise alike.
        object.__setattr__(self, "budget", float(self.budget))
        object.__setattr__(self, "band", int(self.band))
        object.__setattr__(self, "seed", int(self.seed))

    def replace(self, **changes) -> "SparseConfig":
        """A copy with some options changed, checked again."""
        return replace(self, **changes)

    def resolved(self, device) -> "SparseConfig":
        """The same choice with backend "auto" resolved for `device` (see `resolve_sparse_backend`);
        itself when its backend is resolved already (nothing is checked twice). The resolved copy of a
        choice is made once (the public call resolves on every call)."""
        backend = resolve_sparse_backend(self.backend, device)
        if backend == self.backend:
            return self
        key = (self, backend)
        copy = _RESOLVED.get(key)
        if copy is None:
            if len(_RESOLVED) >= 256:       # an app's many budgets: forget the old ones
                _RESOLVED.clear()
            copy = _RESOLVED[key] = self.replace(backend=backend)
        return copy

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping) -> "SparseConfig":
        """The options named in `values` (other keys are ignored; missing ones take their defaults)."""
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})


_RESOLVED: dict = {}      # (config, backend) -> the config with that backend: configs are frozen, few and small


def _device_type(device) -> str:
    return device.type if hasattr(device, "type") else str(device).split(":")[0]


def triton_available() -> bool:
    try:
        from . import triton as triton_backend
    except ImportError:
        return False
    return triton_backend.is_available()


def fla_available() -> bool:
    try:
        import fla.ops.gated_delta_rule  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_sparse_backend(backend: str, device) -> str:
    """'torch' or 'triton' for inputs on `device`: "auto" is Triton on a CUDA device where Triton is
    usable, else the PyTorch path (event_forward.py); 'triton' where it cannot run is a ValueError."""
    check_choice("backend", backend, SPARSE_BACKENDS)
    if backend == "auto":
        return "triton" if _device_type(device) == "cuda" and triton_available() else "torch"
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if backend == "triton" and not (triton_available() and (_device_type(device) == "cuda" or interpreted)):
        raise ValueError(f"backend: 'triton' needs a CUDA GPU (or TRITON_INTERPRET=1) and triton installed; "
                         f"the inputs are on {_device_type(device)}")
    return backend


def usable_sparse_backends(device) -> tuple[str, ...]:
    """The sparse backends that can run on `device` (those `resolve_sparse_backend` accepts), in order."""
    usable = []
    for backend in SPARSE_BACKENDS:
        try:
            resolve_sparse_backend(backend, device)
        except ValueError:
            continue
        usable.append(backend)
    return tuple(usable)


def resolve_dense_backend(backend: str, device) -> str:
    """'torch' or 'fla': "auto" is FLA on a CUDA device where flash-linear-attention is installed."""
    check_choice("backend", backend, DENSE_BACKENDS)
    on_cuda = _device_type(device) == "cuda"
    if backend == "auto":
        return "fla" if on_cuda and fla_available() else "torch"
    if backend == "fla" and not (on_cuda and fla_available()):
        raise ValueError("backend: 'fla' needs a CUDA device and flash-linear-attention installed")
    return backend
