"""Chunked PyTorch reference of SparseGDN (docs/CONTRACT.md sections 1-3): the contract in code.

Every tensor here is already prepared by the caller: q and k normalised (if asked) and expanded to
one key head per value head, all in the compute dtype. Work is vectorised over batch, heads and
chunks; only the state pass loops, once per chunk. The functions are the stages of config.STAGES
(selection lives in selection.py), written for reading, not speed: the public torch backend runs
the same computation through event_forward.py, and the tests compare the two.
"""
from __future__ import annotations

import torch

from .config import BLOCK_SIZE, BLOCKS_PER_CHUNK, CHUNK_SIZE, num_chunks


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| over all elements, in float64 (the contract's error of `a` against the reference `b`)."""
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def expand_key_heads(x: torch.Tensor, num_value_heads: int) -> torch.Tensor:
    """[B, T, H, K] -> [B, T, HV, K]: value head h reads key head h // (HV // H)."""
    group = num_value_heads // x.shape[2]
    return x if group == 1 else x.repeat_interleave(group, dim=2)


def band_mask(band: int, device=None) -> torch.Tensor:
    """bool [64, 64]: the entries of a lower-triangular chunk matrix that band `band` keeps."""
    block = torch.arange(CHUNK_SIZE, device=device) // BLOCK_SIZE
    distance = block[:, None] - block[None, :]
    return (distance >= 0) & (distance <= band)


def to_chunks(x: torch.Tensor, n_chunks: int) -> torch.Tensor:
    """[B, T, HV, ...] -> [B, HV, NC, 64, ...], zero-padded at the end.

    Zero padding is neutral: a padded token has g = 0 (no decay), beta = 0 and k = 0 (no write).
    """
    pad = n_chunks * CHUNK_SIZE - x.shape[1]
    if pad:
        x = torch.cat([x, x.new_zeros((x.shape[0], pad) + tuple(x.shape[2:]))], dim=1)
    x = x.reshape((x.shape[0], n_chunks, CHUNK_SIZE) + tuple(x.shape[2:]))
    return x.movedim(3, 1)  # heads before chunks


def from_chunks(x: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """[B, HV, NC, 64, V] -> [B, T, HV, V]."""
    b, hv, nc, c, d = x.shape
    return x.movedim(1, 3).reshape(b, nc * c, hv, d)[:, :num_tokens]


def intra_solve(k, g, beta, band: int):
    """Stage `intra_solve`: the band-projected inverse (I + A)^-1 of every chunk at once.

    Shapes: k [B,HV,NC,64,K], g and beta [B,HV,NC,64]. Returns gamma [..,64] (within-chunk cumulative
    log decay), decay [..,64,64] (exp(gamma_i - gamma_j) on and below the diagonal, zero above) and
    t_inv [..,64,64].
    """
    gamma = g.cumsum(-1)
    lower = torch.ones(CHUNK_SIZE, CHUNK_SIZE, dtype=torch.bool, device=k.device).tril()
    # Mask before exp: above the diagonal gamma_i - gamma_j >= 0 can overflow.
    log_decay = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~lower, float("-inf"))
    decay = log_decay.exp()
    a = (beta[..., :, None] * (k @ k.transpose(-1, -2)) * decay).tril(-1)
    eye = torch.eye(CHUNK_SIZE, dtype=k.dtype, device=k.device)
    t_inv = torch.linalg.solve_triangular(a + eye, eye.expand_as(a), upper=False, unitriangular=True)
    if band < BLOCKS_PER_CHUNK - 1:
        t_inv = t_inv * band_mask(band, k.device)
    return gamma, decay, t_inv


def event_prepare(k, v, beta, gamma, t_inv):
    """Stage `event_prepare`: w [..,64,K], u [..,64,V] and the commit keys k * exp(gamma_L - gamma).

    The reference prepares every chunk (a skipped event's w and u are not read by the state pass
    either way); the GPU backend prepares only the selected ones.
    """
    w = t_inv @ ((beta * gamma.exp())[..., None] * k)
    u = t_inv @ (beta[..., None] * v)
    k_commit = k * (gamma[..., -1:] - gamma).exp()[..., None]
    return w, u, k_commit


def state_pass(w, u, k_commit, gamma, events, initial_state=None, record_commit_norms: bool = False):
    """Stage `state_pass`: the committed state entering every chunk, chunk by chunk.

    events bool [B,HV,NC]; initial_state [B,HV,K,V] or None. Returns the entering states
    [B,HV,NC,K,V], the final committed state [B,HV,K,V] and, when asked, the Frobenius norm of what
    each chunk would commit [B,HV,NC] (the oracle's ranking).
    """
    batch, heads, n_chunks = w.shape[:3]
    chunk_decay = gamma[..., -1].exp()                   # [B,HV,NC]
    state = (initial_state.to(w.dtype).clone() if initial_state is not None
             else w.new_zeros(batch, heads, w.shape[-1], u.shape[-1]))
    entering, norms = [], []
    for c in range(n_chunks):
        entering.append(state)
        v_new = u[:, :, c] - w[:, :, c] @ state                      # [B,HV,64,V]
        writes = k_commit[:, :, c].transpose(-1, -2) @ v_new         # [B,HV,K,V]
        decayed = chunk_decay[:, :, c, None, None] * state
        if record_commit_norms:
            norms.append(writes.flatten(-2).norm(dim=-1))
        state = torch.where(events[:, :, c, None, None], decayed + writes, decayed)
    commit_norms = torch.stack(norms, dim=-1) if record_commit_norms else None
    return torch.stack(entering, dim=2), state, commit_norms


def chunk_output(q, k, gamma, decay, w, u, states, scale: float):
    """Stage `output`: o [B,HV,NC,64,V] of every token from the state entering its chunk.

    o = scale * [ (q exp(gamma)) S + lower_incl_diag(q k^T exp(gamma_i - gamma_j)) (u - w S) ].
    """
    v_new = u - w @ states
    attention = (q @ k.transpose(-1, -2)) * decay         # lower triangle incl. the diagonal
    return scale * ((q * gamma.exp()[..., None]) @ states + attention @ v_new)


def cut_into_chunks(q, k, v, g, beta):
    """[B,T,HV,...] token tensors -> the same five as [B,HV,NC,64,...] chunk tensors."""
    n_chunks = num_chunks(q.shape[1])
    return tuple(to_chunks(x, n_chunks) for x in (q, k, v, g, beta))


def commit_and_output(chunks, solve, events, *, scale: float, num_tokens: int, initial_state=None,
                      record_commit_norms: bool = False, stage_hook=None):
    """The stages after selection (event_prepare, state_pass, output) for chunked inputs `chunks`
    (see cut_into_chunks) and the intra-chunk solve `solve` (see intra_solve).

    Returns o [B,T,HV,V], the final committed state and the commit norms (None unless asked).
    """
    hook = stage_hook or (lambda name: None)
    qc, kc, vc, _, bc = chunks
    gamma, decay, t_inv = solve
    w, u, k_commit = event_prepare(kc, vc, bc, gamma, t_inv)
    hook("event_prepare")
    states, final_state, commit_norms = state_pass(w, u, k_commit, gamma, events, initial_state, record_commit_norms)
    hook("state_pass")
    o = from_chunks(chunk_output(qc, kc, gamma, decay, w, u, states, scale), num_tokens)
    hook("output")
    return o, final_state, commit_norms


def chunk_forward(q, k, v, g, beta, events, *, band: int, scale: float, initial_state=None,
                  record_commit_norms: bool = False):
    """SparseGDN forward in the chunk form, every stage in order, for given events.

    q, k [B,T,HV,K]; v [B,T,HV,V]; g, beta [B,T,HV]; events bool [B,HV,NC]; all floating tensors in
    one compute dtype. Returns o [B,T,HV,V], the final committed state [B,HV,K,V], and, when asked,
    the Frobenius norm of what each chunk would commit [B,HV,NC].
    """
    chunks = cut_into_chunks(q, k, v, g, beta)
    solve = intra_solve(chunks[1], chunks[3], chunks[4], band)
    return commit_and_output(chunks, solve, events, scale=scale, num_tokens=q.shape[1], initial_state=initial_state,
                             record_commit_norms=record_commit_norms)
