"""The Triton backend of SparseGDN (`backend="triton"`): our own kernels, see forward.py."""
import os

if os.environ.get("TRITON_INTERPRET") == "1":
    try:
        from .interpreter_compat import install as _install_interpreter_compat
        _install_interpreter_compat()
    except ImportError:     # no Triton: the backend reports itself unavailable
        pass


def is_available() -> bool:
    """Triton importable and a CUDA device present (or the interpreter asked for)."""
    try:
        import torch
        import triton  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"


def sparse_gdn_forward(q, k, v, g, beta, *, events, budget, selector, band, scale, initial_state,
                       output_final_state, use_qk_l2norm_in_kernel, stage_hook=None, replayable=True, call_key=None):
    """Inputs already validated by the caller. events: None or bool[B,HV,NC] (then selector/budget are
    ignored); selector one of "score", "uniform", "all" when events is None; scale a float.

    stage_hook(name), when given, is called after each of the five passes (forward.STAGES, for timing).
    replayable=False keeps the call off the CUDA graphs (graphs.py) and the early checks (forward.EARLY_CHECKS): for a
    caller that defers its checks.
    call_key: the caller's key of everything but the pointers (sparsegdn.api.checked_key), or None to make one here.
    Returns (o [B,T,HV,V] in v.dtype, final_state float32 [B,HV,K,V] or None,
             events bool[B,HV,NC], scores float32[B,HV,NC], budget_per_head int64[B,HV],
             flags int32 [4]: non-zero where the kernels saw a non-finite output, bad gates or a
             non-finite initial state, and (the early checks only) where the call must wait for them all;
             read back by the caller, see sparsegdn.validation.check_flags).
    """
    from .forward import sparse_gdn_forward as forward

    return forward(q, k, v, g, beta, events=events, budget=budget, selector=selector, band=band, scale=scale,
                   initial_state=initial_state, output_final_state=output_final_state,
                   use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, stage_hook=stage_hook, replayable=replayable,
                   call_key=call_key)
