"""Swap the Gated DeltaNet core of a transformers Qwen3.5 model, and put it back.

Only the core changes (the chunked gated delta rule: q, k, v, g, beta -> o, state); projections,
convolutions, norms, attention layers and the cache stay transformers' own. Two layouts exist:

- transformers <= 5.14: each GDN module holds the core as an instance attribute
  (`self.chunk_gated_delta_rule`, `self.recurrent_gated_delta_rule`) -> patched per instance;
- transformers >= 5.16: `forward` calls module-level functions (`torch_chunk_gated_delta_rule`,
  `torch_recurrent_gated_delta_rule`) -> the module globals are replaced by a dispatcher that
  knows, through forward hooks, which layer is calling.

Both the chunked (prefill) and the token-recurrent (one-token) entry points go through the new
core, so a one-token last segment is handled like any other. Analysis, the evaluation and training
all swap the core through `swap_gdn_core`, so its lock guards every use. Usage:

    with swap_gdn_core(model, sparse_core(SparseConfig(budget=0.29))):
        model(input_ids)
"""
from __future__ import annotations

import inspect
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Optional

import torch

import sparsegdn
from sparsegdn import CHUNK_SIZE, SparseConfig

# (instance attribute of the <= 5.14 layout, module global of the >= 5.16 layout)
ENTRY_POINTS = (
    ("chunk_gated_delta_rule", "torch_chunk_gated_delta_rule"),
    ("recurrent_gated_delta_rule", "torch_recurrent_gated_delta_rule"),
)

# One patched model at a time per process: the >= 5.16 layout patches module globals shared by all
# models of that class. Re-entrant so a core may run the model's own code while patched.
_PATCH_LOCK = threading.RLock()
_calling = threading.local()   # .module: the GDN module whose forward is running in this thread


class PatchError(RuntimeError):
    """The model's GDN layers do not have a layout this module knows."""


@dataclass
class CoreCall:
    """One call of the GDN core, in the contract's layout: q, k [B,T,H,K] (one per key head), v [B,T,HV,V]."""

    layer: int
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    initial_state: Optional[torch.Tensor]
    output_final_state: bool
    use_qk_l2norm_in_kernel: bool
    scale: Optional[float]
    original: Callable          # transformers' own core, for an exact "unpatched" comparison


Core = Callable[[CoreCall], tuple]   # CoreCall -> (o [B,T,HV,V], final_state or None)


def gdn_modules(model) -> list:
    """The Gated DeltaNet modules of a Qwen3.5 model (dense or MoE), in layer order."""
    found = [m for m in model.modules() if type(m).__name__.endswith("GatedDeltaNet") and hasattr(m, "layer_idx")]
    return sorted(found, key=lambda m: m.layer_idx)


def layout_of(module) -> str:
    """'instance' (<= 5.14) or 'module' (>= 5.16)."""
    if "chunk_gated_delta_rule" in vars(module):
        return "instance"
    if hasattr(sys.modules[type(module).__module__], "torch_chunk_gated_delta_rule"):
        return "module"
    raise PatchError(f"{type(module).__name__} has neither an instance core nor a module-level "
                     "torch_chunk_gated_delta_rule: this transformers version is not supported.")


def _deduplicate_key_heads(x: torch.Tensor, key_heads: int) -> torch.Tensor:
    """transformers repeat_interleaves q and k to HV heads; SparseGDN takes the H key heads."""
    group = x.shape[2] // key_heads
    return x if group == 1 else x[:, :, ::group]


def _adapter(module, original: Callable, core: Core) -> Callable:
    """A function with transformers' core signature that hands a `CoreCall` to `core`."""

    def gated_delta_rule(query, key, value, g, beta, chunk_size=CHUNK_SIZE, initial_state=None,
                         output_final_state=False, use_qk_l2norm_in_kernel=False, scale=None,
                         cu_seqlens=None, **kwargs):
        if cu_seqlens is not None:
            raise NotImplementedError("packed sequences (cu_seqlens) are not supported by the GDN core swap")
        if initial_state is not None:
            initial_state = initial_state.float()
        call = CoreCall(
            layer=int(module.layer_idx),
            q=_deduplicate_key_heads(query, module.num_k_heads),
            k=_deduplicate_key_heads(key, module.num_k_heads),
            v=value, g=g.float(), beta=beta, initial_state=initial_state,
            output_final_state=bool(output_final_state),
            use_qk_l2norm_in_kernel=bool(use_qk_l2norm_in_kernel), scale=scale, original=original,
        )
        o, state = core(call)
        return o.to(query.dtype), state

    return gated_delta_rule


@contextmanager
def swap_gdn_core(model, core: Core):
    """Route every GDN core call of `model` to `core` inside the block; restore on exit (also on error)."""
    modules = gdn_modules(model)
    if not modules:
        raise PatchError(f"{type(model).__name__} has no Gated DeltaNet layers.")
    with _PATCH_LOCK:
        undo: list[Callable[[], None]] = []
        try:
            for module in modules:
                if layout_of(module) == "instance":
                    for attribute, _ in ENTRY_POINTS:
                        if attribute in vars(module):
                            original = vars(module)[attribute]
                            setattr(module, attribute, _adapter(module, original, core))
                            undo.append(lambda m=module, a=attribute, o=original: setattr(m, a, o))
            module_layout = [m for m in modules if layout_of(m) == "module"]
            if module_layout:
                _patch_module_globals(module_layout, core, undo)
            yield model
        finally:
            for action in reversed(undo):
                action()


def _patch_module_globals(modules: list, core: Core, undo: list) -> None:
    by_python_module: dict[str, list] = {}
    for module in modules:
        by_python_module.setdefault(type(module).__module__, []).append(module)
    for python_module_name, members in by_python_module.items():
        python_module = sys.modules[python_module_name]
        patched = {id(m): m for m in members}
        for _, name in ENTRY_POINTS:
            original = getattr(python_module, name, None)
            if original is None:
                continue
            setattr(python_module, name, _dispatcher(patched, original, core))
            undo.append(lambda pm=python_module, n=name, o=original: setattr(pm, n, o))
        for module in members:
            undo.append(module.register_forward_pre_hook(_enter).remove)
            undo.append(module.register_forward_hook(_leave, always_call=True).remove)


def _enter(module, args):
    _calling.module = module


def _leave(module, args, output):
    _calling.module = None


def _dispatcher(patched: dict, original: Callable, core: Core) -> Callable:
    adapters = {key: _adapter(module, original, core) for key, module in patched.items()}

    def gated_delta_rule(*args, **kwargs):
        module = getattr(_calling, "module", None)
        adapter = adapters.get(id(module)) if module is not None else None
        # A model that is not the patched one (another thread, another instance) keeps its core.
        return (adapter or original)(*args, **kwargs)

    return gated_delta_rule


# ---------------------------------------------------------------------------------- cores

def _call_transformers_core(function: Callable, call: CoreCall, **extra):
    """`function` (transformers' core signature) on `call`, q and k repeated back to the HV heads."""
    group = call.v.shape[2] // call.q.shape[2]
    q, k = (x.repeat_interleave(group, dim=2) if group > 1 else x for x in (call.q, call.k))
    return function(q, k, call.v, g=call.g, beta=call.beta, initial_state=call.initial_state,
                    output_final_state=call.output_final_state,
                    use_qk_l2norm_in_kernel=call.use_qk_l2norm_in_kernel, **extra)


def original_core(call: CoreCall):
    """transformers' own core (FLA when installed, else its torch reference): the unpatched path."""
    return _call_transformers_core(call.original, call)


def dense_core(backend: str = "auto") -> Core:
    """sparsegdn's dense core ('torch' reference, 'fla', or 'auto')."""

    def core(call: CoreCall):
        return sparsegdn.dense_gated_delta_rule(
            call.q, call.k, call.v, call.g, call.beta, scale=call.scale, initial_state=call.initial_state,
            output_final_state=call.output_final_state,
            use_qk_l2norm_in_kernel=call.use_qk_l2norm_in_kernel, backend=backend)

    return core


def sparse_core(config: SparseConfig, checks=None, stages=None) -> Core:
    """SparseGDN as the core, with the options of `config`. `checks` (sparsegdn.validation.DeferredChecks):
    collect the GPU value checks instead of one device sync per layer; the caller checks them after
    the forward. `stages` (analysis.timing.StageClock): mark each call's stages on it."""

    def core(call: CoreCall):
        if stages is not None:
            stages.start(call.v.device)
        o, state, _ = sparsegdn.sparse_gated_delta_rule(
            call.q, call.k, call.v, call.g, call.beta, scale=call.scale, initial_state=call.initial_state,
            output_final_state=call.output_final_state, use_qk_l2norm_in_kernel=call.use_qk_l2norm_in_kernel,
            config=config, checks=checks, stage_hook=stages.hook if stages is not None else None)
        return o, state

    return core


def sparse_reference_core(config: SparseConfig) -> Core:
    """SparseGDN with the options of `config` as a differentiable core, for sparsity-aware training
    (training/sparse_finetune.py): the events are chosen by config's selector as the public call chooses
    them (no gradient flows through the choice), then the chunked reference (sparsegdn/reference.py, plain
    torch ops, float32) computes the outputs and the final state, so gradients reach q, k, v, g and beta
    through every kept commit and every intra-chunk solve. Slower than the public call; for training only."""
    from sparsegdn import reference
    from sparsegdn.api import prepare, select_torch

    def core(call: CoreCall):
        key_dim = call.q.shape[-1]
        scale = key_dim ** -0.5 if call.scale is None else float(call.scale)
        with torch.autocast(call.v.device.type, enabled=False):        # the recurrence stays in float32
            q, k, v, g, beta = (x.float() for x in (call.q, call.k, call.v, call.g, call.beta))
            q, k, v, g, beta = prepare(q, k, v, g, beta, call.use_qk_l2norm_in_kernel)
            with torch.no_grad():
                events, _ = select_torch(q, k, v, g, beta, config, scale=scale)
            initial = call.initial_state.float() if call.initial_state is not None else None
            o, state = reference.chunk_forward(q, k, v, g, beta, events, band=config.band, scale=scale,
                                               initial_state=initial)[:2]
        return o.to(call.v.dtype), (state if call.output_final_state else None)

    return core


def torch_reference_core(chunk_size: int = CHUNK_SIZE) -> Core:
    """transformers' own PyTorch implementation of the core, in float32, with chunks of `chunk_size`.

    The function beneath whatever transformers installed (a hub kernel or FLA wraps it), so it is
    exact and differentiable on any device; used to train where FLA cannot. Its exponents are all
    <= 0 (masked before exp), so longer chunks (fewer Python loop steps, faster) are as safe as 64.
    The token-recurrent entry point has no chunks and runs as it is.
    """

    def core(call: CoreCall):
        reference = inspect.unwrap(call.original)
        chunked = {"chunk_size": chunk_size} if "chunk_size" in inspect.signature(reference).parameters else {}
        with torch.autocast(call.v.device.type, enabled=False):   # the recurrence stays in float32
            return _call_transformers_core(reference, call, **chunked)

    return core
