"""Pass 3, every selected event in parallel: what the sequential pass needs of each commit.

Grid: one program per (event slot, batch row). Only selected chunks get

    w = Tinv (beta e^gamma K),   u = Tinv (beta V),   k_commit = K e^(gamma_L - gamma)

written into lists of E entries, so this memory scales with the budget, not with T, and the
sequential pass is left with two products per commit. Unselected chunks need w and u only for
their own outputs; pass 5 forms those products in registers instead.
"""
import torch
import triton
import triton.language as tl

from .chunk_loads import inverse_norm, load_gates, load_rows, load_tile, mma, round_to

CHUNK = tl.constexpr(64)
NUM_WARPS = 4


@triton.jit
def event_prepare_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, event_chunks_ptr, w_ptr, u_ptr, k_commit_ptr,
                         T, NC, E, H: tl.constexpr, HV: tl.constexpr, K, V,
                         BK: tl.constexpr, BV: tl.constexpr, NORMALIZE: tl.constexpr):
    e = tl.program_id(0).to(tl.int64)
    b = tl.program_id(1).to(tl.int64)
    flat = tl.load(event_chunks_ptr + b * E + e).to(tl.int64)
    if flat >= 0:
        hv = flat // NC
        c = flat % NC
        hk = hv // (HV // H)
        t0 = c * CHUNK
        dot_dtype = k_ptr.dtype.element_ty
        k = load_tile(k_ptr + (b * T * H + hk) * K, t0, T, H * K, K, CHUNK, BK)
        k_scale = inverse_norm(k, NORMALIZE)
        k = k.to(tl.float32)
        v = load_rows(v_ptr + (b * T * HV + hv) * V, t0, T, HV * V, V, CHUNK, BV)
        g = load_gates(g_ptr + b * T * HV + hv, t0, T, HV, CHUNK)
        beta = load_gates(beta_ptr + b * T * HV + hv, t0, T, HV, CHUNK)
        gamma = tl.cumsum(g, axis=0)
        rows = tl.arange(0, CHUNK)
        t_inv = tl.load(t_inv_ptr + ((b * HV + hv) * NC + c) * CHUNK * CHUNK + rows[:, None] * CHUNK + rows[None, :])
        w = mma(t_inv, round_to((beta * tl.exp(gamma) * k_scale)[:, None] * k, dot_dtype))
        k_commit = (k_scale * tl.exp(tl.sum(g, axis=0) - gamma))[:, None] * k
        u = mma(t_inv, round_to((beta[:, None] * v), dot_dtype))
        ck = tl.arange(0, BK)
        cv = tl.arange(0, BV)
        slot = b * E + e
        tl.store(w_ptr + slot * CHUNK * K + rows[:, None] * K + ck[None, :], round_to(w, dot_dtype), mask=(ck < K)[None, :])
        tl.store(k_commit_ptr + slot * CHUNK * K + rows[:, None] * K + ck[None, :], round_to(k_commit, dot_dtype),
                 mask=(ck < K)[None, :])
        tl.store(u_ptr + slot * CHUNK * V + rows[:, None] * V + cv[None, :], round_to(u, dot_dtype), mask=(cv < V)[None, :])


def event_prepare(k, v, g, beta, t_inv, event_chunks, *, normalize, num_value_heads):
    """Returns w, k_commit [B,E,64,K] and u [B,E,64,V] in k.dtype for the events in event_chunks [B,E]."""
    batch, tokens, key_heads, key_dim = k.shape
    value_dim = v.shape[-1]
    n_events = event_chunks.shape[1]
    w = torch.empty(batch, n_events, 64, key_dim, device=k.device, dtype=k.dtype)
    u = torch.empty(batch, n_events, 64, value_dim, device=k.device, dtype=k.dtype)
    k_commit = torch.empty_like(w)
    event_prepare_kernel[(n_events, batch)](
        k, v, g, beta, t_inv, event_chunks, w, u, k_commit, tokens, t_inv.shape[2], n_events, key_heads, num_value_heads,
        key_dim, value_dim, BK=max(16, triton.next_power_of_2(key_dim)), BV=max(16, triton.next_power_of_2(value_dim)),
        NORMALIZE=normalize, num_warps=NUM_WARPS)
    return w, u, k_commit
