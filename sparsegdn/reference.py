"""Chunked PyTorch reference of SparseGDN (shared/SPEC.md sections 1-3): the contract in code.

Every tensor here is already prepared by the caller: q and k normalised (if asked) and expanded to
one key head per value head, all in the compute dtype. Work is vectorised over batch, heads and
chunks; only the state recurrence loops, once per chunk.
"""
from __future__ import annotations

import torch

CHUNK = 64
BLOCK = 16
BLOCKS_PER_CHUNK = CHUNK // BLOCK


def num_chunks(num_tokens: int) -> int:
    return -(-num_tokens // CHUNK)


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def expand_key_heads(x: torch.Tensor, num_value_heads: int) -> torch.Tensor:
    """[B, T, H, K] -> [B, T, HV, K]: value head h reads key head h // (HV // H)."""
    group = num_value_heads // x.shape[2]
    return x if group == 1 else x.repeat_interleave(group, dim=2)


def band_mask(band: int, device=None) -> torch.Tensor:
    """bool [64, 64]: the entries of a lower-triangular chunk matrix that band `band` keeps."""
    block = torch.arange(CHUNK, device=device) // BLOCK
    distance = block[:, None] - block[None, :]
    return (distance >= 0) & (distance <= band)


def to_chunks(x: torch.Tensor, n_chunks: int) -> torch.Tensor:
    """[B, T, HV, ...] -> [B, HV, NC, 64, ...], zero-padded at the end.

    Zero padding is neutral: a padded token has g = 0 (no decay), beta = 0 and k = 0 (no write).
    """
    pad = n_chunks * CHUNK - x.shape[1]
    if pad:
        x = torch.cat([x, x.new_zeros((x.shape[0], pad) + tuple(x.shape[2:]))], dim=1)
    x = x.reshape((x.shape[0], n_chunks, CHUNK) + tuple(x.shape[2:]))
    return x.movedim(3, 1)  # heads before chunks


def from_chunks(x: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """[B, HV, NC, 64, V] -> [B, T, HV, V]."""
    b, hv, nc, c, d = x.shape
    return x.movedim(1, 3).reshape(b, nc * c, hv, d)[:, :num_tokens]


def intra_chunk(k, v, g, beta, band: int):
    """The parallel part of the chunk form for every chunk at once.

    Shapes: k [B,HV,NC,64,K], v [B,HV,NC,64,V], g and beta [B,HV,NC,64].
    Returns gamma [..,64], decay [..,64,64] (exp(gamma_i - gamma_j) on and below the diagonal,
    zero above), w [..,64,K] and u [..,64,V] built from the band-projected inverse.
    """
    gamma = g.cumsum(-1)
    lower = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=k.device).tril()
    # Mask before exp: above the diagonal gamma_i - gamma_j >= 0 can overflow.
    log_decay = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~lower, float("-inf"))
    decay = log_decay.exp()
    a = (beta[..., :, None] * (k @ k.transpose(-1, -2)) * decay).tril(-1)
    eye = torch.eye(CHUNK, dtype=k.dtype, device=k.device)
    t_inv = torch.linalg.solve_triangular(a + eye, eye.expand_as(a), upper=False, unitriangular=True)
    if band < BLOCKS_PER_CHUNK - 1:
        t_inv = t_inv * band_mask(band, k.device)
    w = t_inv @ ((beta * gamma.exp())[..., None] * k)
    u = t_inv @ (beta[..., None] * v)
    return gamma, decay, w, u


def chunk_forward(q, k, v, g, beta, events, *, band: int, scale: float, initial_state=None,
                  record_commit_norms: bool = False):
    """SparseGDN forward in the chunk form.

    q, k [B,T,HV,K]; v [B,T,HV,V]; g, beta [B,T,HV]; events bool [B,HV,NC]; all floating tensors in
    one compute dtype. Returns o [B,T,HV,V], the final committed state [B,HV,K,V], and, when asked,
    the Frobenius norm of what each chunk would commit [B,HV,NC] (the oracle's ranking).
    """
    batch, num_tokens, heads, _ = q.shape
    n_chunks = num_chunks(num_tokens)
    qc, kc, vc = (to_chunks(x, n_chunks) for x in (q, k, v))
    gc, bc = (to_chunks(x, n_chunks) for x in (g, beta))
    gamma, decay, w, u = intra_chunk(kc, vc, gc, bc, band)

    attn = (qc @ kc.transpose(-1, -2)) * decay          # [B,HV,NC,64,64], lower incl. diagonal
    q_decayed = qc * gamma.exp()[..., None]              # reads the state entering the chunk
    chunk_decay = gamma[..., -1].exp()                   # [B,HV,NC]
    k_commit = kc * (gamma[..., -1:] - gamma).exp()[..., None]

    state = (initial_state.to(q.dtype).clone() if initial_state is not None
             else q.new_zeros(batch, heads, k.shape[-1], v.shape[-1]))
    outputs = []
    norms = [] if record_commit_norms else None
    for c in range(n_chunks):
        v_new = u[:, :, c] - w[:, :, c] @ state                      # [B,HV,64,V]
        outputs.append(scale * (q_decayed[:, :, c] @ state + attn[:, :, c] @ v_new))
        writes = k_commit[:, :, c].transpose(-1, -2) @ v_new         # [B,HV,K,V]
        decayed = chunk_decay[:, :, c, None, None] * state
        if norms is not None:
            norms.append(writes.flatten(-2).norm(dim=-1))
        state = torch.where(events[:, :, c, None, None], decayed + writes, decayed)
    o = from_chunks(torch.stack(outputs, dim=2), num_tokens)
    commit_norms = torch.stack(norms, dim=-1) if norms is not None else None
    return o, state, commit_norms
