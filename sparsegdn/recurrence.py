"""Token-by-token recurrence of SparseGDN (docs/CONTRACT.md sections 1-2): the independent check of the chunk form.

Deliberately naive: one step per token in float64, no chunk algebra, no shared code with the
reference. Slow; for tests and small inputs only.
"""
from __future__ import annotations

import math

import torch

from .config import CHUNK_SIZE


def token_recurrence(q, k, v, g, beta, events=None, *, scale=None, initial_state=None,
                     use_qk_l2norm=True, chunk=CHUNK_SIZE):
    """q, k [B,T,H,K]; v [B,T,HV,V]; g, beta [B,T,HV]; events bool [B,HV,NC] or None (all committed).

    Returns o [B,T,HV,V] and the final committed state [B,HV,K,V], both float64.
    """
    q, k, v, g, beta = (x.detach().to(torch.float64) for x in (q, k, v, g, beta))
    batch, num_tokens, key_heads, key_dim = q.shape
    value_heads, value_dim = v.shape[2], v.shape[3]
    if use_qk_l2norm:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    scale = key_dim ** -0.5 if scale is None else scale
    key_head = torch.arange(value_heads) // (value_heads // key_heads)
    q, k = q[:, :, key_head], k[:, :, key_head]
    n_chunks = math.ceil(num_tokens / chunk)
    if events is None:
        events = torch.ones(batch, value_heads, n_chunks, dtype=torch.bool)
    committed = (initial_state.to(torch.float64).clone() if initial_state is not None
                 else torch.zeros(batch, value_heads, key_dim, value_dim, dtype=torch.float64))
    o = torch.zeros(batch, num_tokens, value_heads, value_dim, dtype=torch.float64)
    for c in range(n_chunks):
        local = committed.clone()
        chunk_log_decay = torch.zeros(batch, value_heads, dtype=torch.float64)
        for t in range(c * chunk, min((c + 1) * chunk, num_tokens)):
            a = g[:, t].exp()[..., None, None]                              # [B,HV,1,1]
            kt, vt, qt = k[:, t], v[:, t], q[:, t]                          # [B,HV,K] / [B,HV,V]
            decayed = a * local
            predicted = torch.einsum("bhkv,bhk->bhv", decayed, kt)
            delta = beta[:, t, :, None] * (vt - predicted)
            local = decayed + kt[..., :, None] * delta[..., None, :]
            o[:, t] = scale * torch.einsum("bhkv,bhk->bhv", local, qt)
            chunk_log_decay += g[:, t]
        keep = events[:, :, c].to(torch.bool)[..., None, None]
        committed = torch.where(keep, local, chunk_log_decay.exp()[..., None, None] * committed)
    return o, committed
