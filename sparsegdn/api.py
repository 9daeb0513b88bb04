"""The public entry points (SPEC section 5): checks, selection and backend dispatch."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import reference, selection, validation


@dataclass(frozen=True)
class SelectionInfo:
    """What the selector decided: events bool [B,HV,NC], scores float [B,HV,NC], budget_per_head int [B,HV]."""

    events: torch.Tensor
    scores: torch.Tensor
    budget_per_head: torch.Tensor


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


def _triton_available() -> bool:
    try:
        from . import triton as triton_backend
    except ImportError:
        return False
    return triton_backend.is_available()


def _fla_available() -> bool:
    try:
        import fla.ops.gated_delta_rule  # noqa: F401
    except ImportError:
        return False
    return True


def select_torch(q, k, v, g, beta, *, budget, selector, scale, seed=0):
    """Events and scores of a policy, computed in torch on prepared inputs (see `prepare`).

    `oracle` ranks by the norm of what each event commits in a dense pass of the exact operator.
    """
    batch, num_tokens, heads, _ = v.shape
    n_chunks = reference.num_chunks(num_tokens)
    count = selection.event_count(budget, heads, n_chunks)
    if selector == "random":
        scores = selection.random_scores(batch, heads, n_chunks, seed, device=v.device)
        return selection.top_events(scores, count), scores
    if selector == "oracle":
        dense = torch.ones(batch, heads, n_chunks, dtype=torch.bool, device=v.device)
        _, _, scores = reference.chunk_forward(q, k, v, g, beta, dense, band=3, scale=scale,
                                               record_commit_norms=True)
        return selection.top_events(scores.float(), count), scores.float()
    scores = selection.score_events(k, v, g, beta)
    if selector == "score":
        return selection.top_events(scores, count), scores
    if selector == "uniform":
        return selection.uniform_events(batch, heads, n_chunks, count, device=v.device), scores
    return torch.ones(batch, heads, n_chunks, dtype=torch.bool, device=v.device), scores  # "all"


def sparse_gated_delta_rule(q, k, v, g, beta, *, budget=0.29, selector="score", band=1, events=None,
                            scale=None, initial_state=None, output_final_state=False,
                            use_qk_l2norm_in_kernel=True, backend="auto", seed=0, stage_hook=None):
    """SparseGDN: every token gets an output; only the selected events commit to the state.

    Returns (o in v's dtype [B,T,HV,V], final_state float32 [B,HV,K,V] or None, SelectionInfo).
    `seed` seeds the `random` selector. `stage_hook(name)`, when given, is called after each stage of
    the computation (for per-stage timing; the stages are the backend's own).
    """
    batch, num_tokens, _, value_heads, key_dim, _ = validation.check_inputs(q, k, v, g, beta, initial_state)
    validation.check_options(scale=scale, budget=budget, band=band, selector=selector, backend=backend,
                             backends=validation.SPARSE_BACKENDS, seed=seed,
                             flags={"output_final_state": output_final_state,
                                    "use_qk_l2norm_in_kernel": use_qk_l2norm_in_kernel})
    if events is not None:
        validation.check_events(events, batch, value_heads, num_tokens, q.device)
    scale = key_dim ** -0.5 if scale is None else float(scale)
    if backend == "auto":
        backend = "triton" if q.is_cuda and _triton_available() else "torch"
    if backend == "triton" and not _triton_available():
        raise ValueError("backend: 'triton' needs a CUDA device (or TRITON_INTERPRET=1) and triton installed")

    if backend == "triton":
        from . import triton as triton_backend
        if events is None and selector in ("random", "oracle"):
            validation.check_values(q, k, v, g, beta, initial_state)
            events, _ = select_torch(*prepare(q, k, v, g, beta, use_qk_l2norm_in_kernel), budget=budget,
                                     selector=selector, scale=scale, seed=seed)
        o, final_state, events, scores, per_head = triton_backend.sparse_gdn_forward(
            q, k, v, g, beta, events=events, budget=budget, selector=selector, band=band, scale=scale,
            initial_state=initial_state, output_final_state=output_final_state,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, stage_hook=stage_hook)
        validation.check_values_after(o, final_state, q, k, v, g, beta, initial_state, scale)
        return o, final_state, SelectionInfo(events, scores, per_head)

    validation.check_values(q, k, v, g, beta, initial_state)
    hook = stage_hook or (lambda name: None)
    qp, kp, vp, gp, bp = prepare(q, k, v, g, beta, use_qk_l2norm_in_kernel)
    if events is None:
        events, scores = select_torch(qp, kp, vp, gp, bp, budget=budget, selector=selector, scale=scale,
                                      seed=seed)
    else:
        scores = selection.score_events(kp, vp, gp, bp)
    hook("selection")
    o, state, _ = reference.chunk_forward(qp, kp, vp, gp, bp, events, band=band, scale=scale,
                                          initial_state=initial_state)
    hook("chunk_forward")
    final_state = state.float() if output_final_state else None
    o = o.to(v.dtype)
    validation.check_result(o, final_state, q, k, v, g, beta, scale)
    info = SelectionInfo(events, scores.float(), events.sum(-1))
    return o, final_state, info


def dense_gated_delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=True, backend="auto"):
    """The dense Gated DeltaNet core. Returns (o in v's dtype, final_state float32 or None)."""
    _, num_tokens, _, _, key_dim, _ = validation.check_inputs(q, k, v, g, beta, initial_state)
    validation.check_options(scale=scale, backend=backend, backends=validation.DENSE_BACKENDS,
                             flags={"output_final_state": output_final_state,
                                    "use_qk_l2norm_in_kernel": use_qk_l2norm_in_kernel})
    scale = key_dim ** -0.5 if scale is None else float(scale)
    if backend == "auto":
        backend = "fla" if q.is_cuda and _fla_available() else "torch"
    if backend == "fla":
        if not (q.is_cuda and _fla_available()):
            raise ValueError("backend: 'fla' needs a CUDA device and flash-linear-attention installed")
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        o, final_state = chunk_gated_delta_rule(
            q, k, v, g.float(), beta, scale=scale, initial_state=initial_state,
            output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
        final_state = final_state.float() if final_state is not None else None
        validation.check_values_after(o, final_state, q, k, v, g, beta, initial_state, scale)
        return o, final_state

    validation.check_values(q, k, v, g, beta, initial_state)
    qp, kp, vp, gp, bp = prepare(q, k, v, g, beta, use_qk_l2norm_in_kernel)
    events = torch.ones(q.shape[0], v.shape[2], reference.num_chunks(num_tokens), dtype=torch.bool,
                        device=q.device)
    o, state, _ = reference.chunk_forward(qp, kp, vp, gp, bp, events, band=3, scale=scale,
                                          initial_state=initial_state)
    o, final_state = o.to(v.dtype), (state.float() if output_final_state else None)
    validation.check_result(o, final_state, q, k, v, g, beta, scale)
    return o, final_state
