"""The public entry points (docs/CONTRACT.md section 5): checks, selection and backend dispatch."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from . import reference, selection, validation
from .event_forward import event_chunk_forward
from .config import SparseConfig, num_chunks, resolve_dense_backend


@dataclass(frozen=True)
class SelectionInfo:
    """What the selector decided: events bool [B,HV,NC], scores float [B,HV,NC], budget_per_head int [B,HV]."""

    events: torch.Tensor
    scores: torch.Tensor
    budget_per_head: torch.Tensor


# Shapes the Triton kernels do not run on a GPU (H200, 2026-11-30, analysis/results/gpu_matrix.log): head
# size 32 gave wrong results, and float32 inputs with heads over 128 need more shared memory than an SM
# has. The interpreter on the CPU runs every size.
MIN_GPU_HEAD_SIZE = 64
MAX_GPU_FLOAT32_HEAD_SIZE = 128


def gpu_shape_problem(key_dim: int, value_dim: int, dtype: torch.dtype) -> str | None:
    """Why the Triton backend cannot take these heads on a GPU, or None when it can."""
    if min(key_dim, value_dim) < MIN_GPU_HEAD_SIZE:
        return f"needs K and V >= {MIN_GPU_HEAD_SIZE} (smaller heads gave wrong results on an H200)"
    if dtype not in (torch.bfloat16, torch.float16) and max(key_dim, value_dim) > MAX_GPU_FLOAT32_HEAD_SIZE:
        return (f"needs K and V <= {MAX_GPU_FLOAT32_HEAD_SIZE} for {str(dtype).removeprefix('torch.')} inputs "
                "(larger float32 tiles exceed an SM's shared memory); bfloat16 or float16 inputs take up to 256")
    return None


def _compute_dtype(v: torch.Tensor) -> torch.dtype:
    return torch.float64 if v.dtype == torch.float64 else torch.float32


def prepare(q, k, v, g, beta, use_qk_l2norm_in_kernel):
    """Inputs of the torch path: compute dtype, normalised q/k expanded to one key head per value head."""
    dtype = _compute_dtype(v)
    q, k, v, g, beta = (x.to(dtype) for x in (q, k, v, g, beta))
    if use_qk_l2norm_in_kernel:
        q, k = reference.l2norm(q), reference.l2norm(k)
    value_heads = v.shape[2]
    return reference.expand_key_heads(q, value_heads), reference.expand_key_heads(k, value_heads), v, g, beta


def select_torch(q, k, v, g, beta, config: SparseConfig, *, scale):
    """Events and scores of `config`'s policy, computed in torch on prepared inputs (see `prepare`).

    `oracle` ranks by the norm of what each event commits in a dense pass of the exact operator.
    """
    batch, num_tokens, heads, _ = v.shape
    n_chunks = num_chunks(num_tokens)
    count = selection.event_count(config.budget, heads, n_chunks)
    if config.selector == "random":
        scores = selection.random_scores(batch, heads, n_chunks, config.seed, device=v.device)
        return selection.top_events(scores, count), scores
    if config.selector == "oracle":
        dense = torch.ones(batch, heads, n_chunks, dtype=torch.bool, device=v.device)
        _, _, scores = event_chunk_forward(q, k, v, g, beta, dense, band=3, scale=scale, record_commit_norms=True)
        return selection.top_events(scores.float(), count), scores.float()
    scores = selection.score_events(k, v, g, beta)
    if config.selector == "score":
        return selection.top_events(scores, count), scores
    if config.selector == "uniform":
        return selection.uniform_events(batch, heads, n_chunks, count, device=v.device), scores
    return torch.ones(batch, heads, n_chunks, dtype=torch.bool, device=v.device), scores  # "all"


def _is_default(value, default) -> bool:
    """Whether a keyword option holds its default (one of the same type and equal; a tensor or an array never
    does). A keyword given at its default cannot be told from one left out: with `config`, it is not an error."""
    return value is default or (type(value) is type(default) and value == default)


def _config_of(config, **options) -> SparseConfig:
    """`config`, or the SparseConfig of the loose keyword options (checked there, once)."""
    if config is None:
        return SparseConfig(**options)
    if not isinstance(config, SparseConfig):
        raise ValueError(f"config: expected a sparsegdn.SparseConfig, got {type(config).__name__}")
    changed = [name for name, value in options.items() if not _is_default(value, getattr(SparseConfig, name))]
    if changed:
        raise ValueError(f"config: pass the options in config or as keywords, not both ({', '.join(changed)} given)")
    return config


def sparse_gated_delta_rule(q, k, v, g, beta, *, budget=SparseConfig.budget, selector=SparseConfig.selector,
                            band=SparseConfig.band, events=None, scale=None, initial_state=None,
                            output_final_state=False, use_qk_l2norm_in_kernel=True, backend=SparseConfig.backend,
                            seed=SparseConfig.seed, stage_hook=None, config: SparseConfig | None = None,
                            checks: validation.DeferredChecks | None = None):
    """SparseGDN: every token gets an output; only the selected events commit to the state.

    The options come as keywords (budget, selector, band, backend, seed) or as one `config`
    (a sparsegdn.SparseConfig), not both. `events` (bool [B,HV,NC]) overrides selector and budget;
    `seed` seeds the `random` selector. `stage_hook(name)`, when given, is called after each stage,
    with the names of sparsegdn.STAGES in that order on every backend (for per-stage timing).

    Returns (o in v's dtype [B,T,HV,V], final_state float32 [B,HV,K,V] or None, SelectionInfo).
    `checks`, a validation.DeferredChecks, takes the GPU path's value flags instead of reading them back
    here (no device sync in the call; for a model's layers): the caller calls `checks.check()` later.
    """
    key = None
    if events is None and stage_hook is None:
        key = checked_key((q, k, v, g, beta, initial_state), checks, (config, scale, output_final_state,
                          use_qk_l2norm_in_kernel, budget, selector, band, backend, seed))
    known = _checked.get(key) if key is not None else None
    if known is not None:
        config, scale = known
    else:
        config = _config_of(config, budget=budget, selector=selector, band=band, backend=backend, seed=seed)
        batch, num_tokens, _, value_heads, key_dim, _ = validation.check_inputs(q, k, v, g, beta, initial_state)
        validation.check_no_gradient(q, k, v, g, beta, initial_state)
        validation.check_scale(scale)
        validation.check_switches(output_final_state=output_final_state,
                                  use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
        validation.check_callbacks(stage_hook, checks)
        if events is not None:
            validation.check_events(events, batch, value_heads, num_tokens, q.device)
        scale = key_dim ** -0.5 if scale is None else float(scale)
        config = _resolve_for_inputs(config, q, key_dim, v)
        if key is not None:
            remember_checked(key, (config, scale))
    if config.backend == "triton":
        return _triton_forward(q, k, v, g, beta, config, events=events, scale=scale, initial_state=initial_state,
                               output_final_state=output_final_state,
                               use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, stage_hook=stage_hook, checks=checks,
                               call_key=key)
    return _torch_forward(q, k, v, g, beta, config, events=events, scale=scale, initial_state=initial_state,
                          output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                          stage_hook=stage_hook)


# The checks of a call depend only on what checked_key reads (the tensors' shapes, dtypes, devices and grad flags,
# the options' types and values, the grad mode), so a call whose key passed them before passes them again: it
# skips them and takes the options they resolved (the config for these inputs, the scale). On the GPU the public
# call waits for its value flags, after which the host's work until the next call's first launch is not hidden
# behind the GPU; these checks were most of it (~28 us of Python a call on a 2-core CPU, against ~7 for the key,
# which also finds the call's plan: call_plans.py). Only for CUDA inputs (CHECKED_DEVICE_TYPES): on the CPU
# nothing waits, and tests there change the backends' availability under the same keys. Value checks (NaN, inf,
# g > 0) are never skipped: they read the values (the Triton path's flags). SPARSEGDN_CHECKED_KEYS=0 checks every
# call in full and keys its plan in the backend (to measure the gain).
CHECKED_KEYS = os.environ.get("SPARSEGDN_CHECKED_KEYS", "1") == "1"
CHECKED_DEVICE_TYPES = ("cuda",)
CHECKED_SIZE = 256                  # keys remembered; all forgotten at once when full (an app's many shapes)
_checked: dict = {}
_KEY_VALUES = (bool, int, float, str, type(None), SparseConfig)


def checked_key(tensors, checks, options) -> tuple | None:
    """What the public call's checks read of these inputs (see CHECKED_KEYS), or None where a cheap key cannot
    say it all (the key switched off, inputs off CHECKED_DEVICE_TYPES, a tensor subclass or another layout, an
    option of another type): such calls are checked in full. Options are keyed with their types (True == 1).
    With the tensors' strides and 16-byte alignment it also fixes every argument of the Triton path's launches but
    the pointers, so the call's plan is found by it (call_plans.call, with the design switches) and the backend
    does not make a key of its own."""
    if not CHECKED_KEYS:
        return None
    q = tensors[0]
    if type(q) is not torch.Tensor or q.device.type not in CHECKED_DEVICE_TYPES:
        return None
    metas = []
    for x in tensors:
        if x is None:
            metas.append(None)
        elif type(x) is torch.Tensor and x.layout is torch.strided:
            try:
                metas.append((x.shape, x.stride(), x.dtype, x.device, x.requires_grad, x.data_ptr() % 16 == 0))
            except RuntimeError:        # no storage to point at (a functorch wrapper): the checks say what is wrong
                return None
        else:
            return None
    for value in options:
        if type(value) not in _KEY_VALUES:
            return None
    return (tuple(metas), tuple((type(value), value) for value in options), type(checks), torch.is_grad_enabled())


def remember_checked(key, resolved) -> None:
    """Keeps `resolved` (config, scale) for a key whose call passed every check."""
    if len(_checked) >= CHECKED_SIZE:
        _checked.clear()
    _checked[key] = resolved


def _resolve_for_inputs(config, q, key_dim, v) -> SparseConfig:
    """The backend for these inputs: "auto" takes torch for heads the GPU path refuses; an explicit
    "triton" with such heads is a ValueError before any launch."""
    problem = gpu_shape_problem(key_dim, v.shape[-1], v.dtype) if q.is_cuda else None
    if config.backend == "auto" and problem is not None:
        return config.replace(backend="torch")
    config = config.resolved(q.device)
    if config.backend == "triton" and problem is not None:
        raise ValueError(f"k, v: head sizes K={key_dim}, V={v.shape[-1]}: the Triton backend on a GPU {problem}; "
                         "use backend='torch'")
    return config


def _triton_forward(q, k, v, g, beta, config, *, events, scale, initial_state, output_final_state,
                    use_qk_l2norm_in_kernel, stage_hook, checks, call_key=None):
    from . import triton as triton_backend

    if events is None and config.selector in ("random", "oracle"):   # selected in torch, then given as events
        validation.check_values(q, k, v, g, beta, initial_state)
        events, _ = select_torch(*prepare(q, k, v, g, beta, use_qk_l2norm_in_kernel), config, scale=scale)
    validation.take_early()     # forget early flags no public call took (a backend call's): only this call's count
    o, final_state, events, scores, per_head, flags = triton_backend.sparse_gdn_forward(
        q, k, v, g, beta, events=events, budget=config.budget, selector=config.selector, band=config.band,
        scale=scale, initial_state=initial_state, output_final_state=output_final_state,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, stage_hook=stage_hook, replayable=checks is None,
        call_key=call_key)
    if checks is not None:
        checks.add(flags)
    else:
        validation.check_flags(flags, o, q, k, v, g, beta, initial_state, scale, early=validation.take_early())
    return o, final_state, SelectionInfo(events, scores, per_head)


def _torch_forward(q, k, v, g, beta, config, *, events, scale, initial_state, output_final_state,
                   use_qk_l2norm_in_kernel, stage_hook):
    """The torch backend: selection, then `event_forward`'s slabs (the reference's computation with
    the recurrence stepped over committed events only; tests compare it with `reference`)."""
    validation.check_values(q, k, v, g, beta, initial_state)
    hook = stage_hook or (lambda name: None)
    qp, kp, vp, gp, bp = prepare(q, k, v, g, beta, use_qk_l2norm_in_kernel)
    if events is None:
        events, scores = select_torch(qp, kp, vp, gp, bp, config, scale=scale)
    else:
        scores = selection.score_events(kp, vp, gp, bp)
    hook("selection")
    o, state, _ = event_chunk_forward(qp, kp, vp, gp, bp, events, band=config.band, scale=scale,
                                      initial_state=initial_state, stage_hook=hook)
    final_state = state.float() if output_final_state else None
    o = o.to(v.dtype)
    validation.check_result(o, final_state, q, k, v, g, beta, scale)
    return o, final_state, SelectionInfo(events, scores.float(), events.sum(-1))


def dense_gated_delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=True, backend="auto"):
    """The dense Gated DeltaNet core. Returns (o in v's dtype, final_state float32 or None)."""
    _, num_tokens, _, _, key_dim, _ = validation.check_inputs(q, k, v, g, beta, initial_state)
    validation.check_scale(scale)
    validation.check_switches(output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
    backend = resolve_dense_backend(backend, q.device)
    scale = key_dim ** -0.5 if scale is None else float(scale)
    if backend == "fla":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        o, final_state = chunk_gated_delta_rule(
            q, k, v, g.float(), beta, scale=scale, initial_state=initial_state,
            output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
        final_state = final_state.float() if final_state is not None else None
        validation.check_values_after(o, final_state, q, k, v, g, beta, initial_state, scale)
        return o, final_state

    validation.check_no_gradient(q, k, v, g, beta, initial_state)     # FLA above has a backward; this path none
    validation.check_values(q, k, v, g, beta, initial_state)
    qp, kp, vp, gp, bp = prepare(q, k, v, g, beta, use_qk_l2norm_in_kernel)
    events = torch.ones(q.shape[0], v.shape[2], num_chunks(num_tokens), dtype=torch.bool, device=q.device)
    # Every event with the exact solve: the dense operator, on the same fast path as the sparse core,
    # so that dense against sparse on the CPU compares the skipping and not two implementations.
    o, state, _ = event_chunk_forward(qp, kp, vp, gp, bp, events, band=3, scale=scale, initial_state=initial_state)
    o, final_state = o.to(v.dtype), (state.float() if output_final_state else None)
    validation.check_result(o, final_state, q, k, v, g, beta, scale)
    return o, final_state
