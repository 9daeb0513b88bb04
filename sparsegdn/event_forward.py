"""SparseGDN forward on the CPU: the chunk form with a recurrence over committed events only.

The same computation as `reference.chunk_forward`, arranged so that the work of a skipped event is
not done:

1. Everything that does not read the state is done for all chunks at once: gamma, the
   band-limited intra-chunk inverse (for band 0/1 only the 16x16 diagonal blocks D_i and the
   adjacent blocks -D_{i+1} A_{i+1,i} D_i are formed), w, u, and the intra-chunk attention.
   A chunk's output is then linear in the state S entering it:
       o = scale * (reads @ S + attn @ u),     reads = Q exp(gamma) - attn @ w.
2. The sequential recurrence runs once per commit, not once per chunk. Between two commits of a
   head pair the state only decays, so the state entering the r-th commit is F_r * snapshot_r,
   where log F_r is a segmented sum of chunk log-decays since the last commit. A commit is then
   one affine map of the snapshot:
       snapshot_{r+1} = (F_r e^{gamma_L} I - F_r k_commit^T w) snapshot_r + k_commit^T u.
   Head pairs commit different numbers of times; they step together over the commit rank, a head
   pair with fewer commits padded with the identity map.
3. Every chunk's entering state is a decayed copy of the last snapshot before it, so all outputs
   come from one batched product.

Inputs are prepared as for the reference (q, k normalised if asked and expanded to value heads,
one compute dtype).
"""
from __future__ import annotations

import torch

from .reference import BLOCK, BLOCKS_PER_CHUNK, CHUNK, band_mask, from_chunks, num_chunks, to_chunks


def _decay(gamma: torch.Tensor) -> torch.Tensor:
    """exp(gamma_i - gamma_j) on and below the diagonal, zero above: [..., 64, 64]."""
    upper = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=gamma.device).triu(1)
    # Mask before exp: above the diagonal gamma_i - gamma_j >= 0 can overflow.
    return (gamma[..., :, None] - gamma[..., None, :]).masked_fill_(upper, float("-inf")).exp_()


def _blocks(x: torch.Tensor) -> torch.Tensor:
    """[..., 64, 64] -> [..., 4, 16, 4, 16]: (block row, row, block column, column)."""
    return x.unflatten(-1, (BLOCKS_PER_CHUNK, BLOCK)).unflatten(-3, (BLOCKS_PER_CHUNK, BLOCK))


def _near_blocks(kc, beta, decay, distance: int) -> torch.Tensor:
    """Blocks (i, i - distance) of A = diag(beta) (K K^T) * decay: [..., 4 - distance, 16, 16].

    Only these blocks of K K^T are multiplied; for distance 0 the block is made strictly lower.
    """
    keys = kc.unflatten(-2, (BLOCKS_PER_CHUNK, BLOCK))                     # [..., 4, 16, K]
    rows, cols = keys[..., distance:, :, :], keys[..., :BLOCKS_PER_CHUNK - distance, :, :]
    decay_blocks = _blocks(decay).diagonal(offset=-distance, dim1=-4, dim2=-2).movedim(-1, -3)
    row_beta = beta.unflatten(-1, (BLOCKS_PER_CHUNK, BLOCK))[..., distance:, :, None]
    a = row_beta * (rows @ cols.transpose(-1, -2)) * decay_blocks
    return a.tril(-1) if distance == 0 else a


def banded_solve(kc, vc, beta, gamma, decay, band: int) -> torch.Tensor:
    """w | u = Tinv_band (beta * [exp(gamma) K | V]) for every chunk: [..., 64, K + V].

    kc [..,64,K], vc [..,64,V], beta and gamma [..,64], decay from `_decay`. Bands 0 and 1 build
    the band-projected inverse from 16x16 blocks only (the far blocks of K K^T and of the inverse
    are never formed); bands 2 and 3 solve the whole 64x64 system.
    """
    rhs = torch.cat([kc * (beta * gamma.exp())[..., None], vc * beta[..., None]], dim=-1)
    if band >= 2:
        a = (beta[..., :, None] * (kc @ kc.transpose(-1, -2)) * decay).tril_(-1)
        if band == BLOCKS_PER_CHUNK - 1:   # exact: solve against the right-hand sides directly
            return torch.linalg.solve_triangular(a, rhs, upper=False, unitriangular=True)
        eye = torch.eye(CHUNK, dtype=kc.dtype, device=kc.device)
        t_inv = torch.linalg.solve_triangular(a, eye.expand_as(a), upper=False, unitriangular=True)
        return (t_inv * band_mask(band, kc.device)) @ rhs

    a_diag = _near_blocks(kc, beta, decay, 0)                              # [..., 4, 16, 16]
    eye = torch.eye(BLOCK, dtype=kc.dtype, device=kc.device)
    d = torch.linalg.solve_triangular(a_diag, eye.expand_as(a_diag), upper=False, unitriangular=True)
    t_inv = kc.new_zeros(kc.shape[:-2] + (CHUNK, CHUNK))
    t_blocks = _blocks(t_inv)                                              # a view: writes land in t_inv
    t_blocks.diagonal(dim1=-4, dim2=-2).copy_(d.movedim(-3, -1))
    if band == 1:
        adjacent = -d[..., 1:, :, :] @ _near_blocks(kc, beta, decay, 1) @ d[..., :-1, :, :]
        t_blocks.diagonal(offset=-1, dim1=-4, dim2=-2).copy_(adjacent.movedim(-3, -1))
    return t_inv @ rhs


def _commit_order(events: torch.Tensor):
    """Chunks of each head pair's commits in order, padded: (chunks [B,HV,R] long, real [B,HV,R] bool)."""
    counts = events.sum(-1)                                                # [B,HV]
    rank_count = int(counts.max()) if events.numel() else 0
    # A stable sort of "not selected" puts each head pair's committed chunks first, in chunk order.
    order = torch.sort((~events).to(torch.uint8), dim=-1, stable=True).indices[..., :rank_count]
    real = torch.arange(rank_count, device=events.device) < counts[..., None]
    return order, real


def _entering_log_decay(chunk_log_decay: torch.Tensor, events: torch.Tensor) -> torch.Tensor:
    """Log of the factor from the last snapshot to the state entering chunk c, for c = 0..NC: [B,HV,NC+1].

    A segmented cumulative sum of chunk log-decays that restarts after each commit, taken as a
    difference of float64 prefix sums so long sequences lose no precision.
    """
    batch, heads, n_chunks = events.shape
    prefix = torch.zeros(batch, heads, n_chunks + 1, dtype=torch.float64, device=events.device)
    prefix[..., 1:] = chunk_log_decay.to(torch.float64).cumsum(-1)
    after = torch.arange(1, n_chunks + 1, device=events.device)
    start = torch.where(events, after, 0).cummax(-1).values              # first chunk after the last commit
    start = torch.cat([start.new_zeros(batch, heads, 1), start], dim=-1)
    return prefix - prefix.gather(-1, start)


def event_chunk_forward(q, k, v, g, beta, events, *, band: int, scale: float, initial_state=None,
                        record_commit_norms: bool = False):
    """SparseGDN forward in the chunk form, recurring over committed events only.

    Same inputs and outputs as `reference.chunk_forward`, which stays the contract it is tested
    against: q, k [B,T,HV,K] (prepared: normalised if asked, expanded to value heads); v [B,T,HV,V];
    g, beta [B,T,HV]; events bool [B,HV,NC]; band 0..3; all floating tensors in one compute dtype.
    Returns o [B,T,HV,V], the final committed state [B,HV,K,V] and, when asked, the Frobenius norm
    of what each chunk would commit [B,HV,NC] (else None).

    The sequential part costs one small matrix product per commit rank (the largest number of
    commits of any head pair), not per chunk; the rest is batched over all chunks.
    """
    batch, num_tokens, heads, key_dim = q.shape
    value_dim = v.shape[-1]
    n_chunks = num_chunks(num_tokens)
    qc, kc, vc = (to_chunks(x, n_chunks) for x in (q, k, v))
    gc, bc = (to_chunks(x, n_chunks) for x in (g, beta))

    # 1. The state-independent part, every chunk at once.
    gamma = gc.cumsum(-1)                                                  # [B,HV,NC,64]
    decay = _decay(gamma)                                                  # [B,HV,NC,64,64]
    wu = banded_solve(kc, vc, bc, gamma, decay, band)                      # [B,HV,NC,64,K+V]
    attn = (qc @ kc.transpose(-1, -2)).mul_(decay)                         # lower incl. diagonal
    attn_wu = attn @ wu
    reads = qc * gamma.exp()[..., None] - attn_wu[..., :key_dim]           # [B,HV,NC,64,K]
    local = attn_wu[..., key_dim:]                                         # [B,HV,NC,64,V]

    # 2. The recurrence over commits.
    chunk_log_decay = gamma[..., -1]                                       # [B,HV,NC]
    entering = _entering_log_decay(chunk_log_decay, events).exp().to(q.dtype)   # [B,HV,NC+1]
    commit_chunks, real = _commit_order(events)                            # [B,HV,R]
    b_index = torch.arange(batch, device=q.device)[:, None, None]
    h_index = torch.arange(heads, device=q.device)[None, :, None]
    at_commit = (b_index, h_index, commit_chunks)
    commit_keys = kc[at_commit] * (chunk_log_decay[..., None] - gamma)[at_commit].exp()[..., None]
    commit_keys = commit_keys * real[..., None, None]                      # padding writes nothing
    writes = commit_keys.transpose(-1, -2) @ wu[at_commit]                 # [B,HV,R,K,K+V]
    factor = entering[at_commit][..., None, None]
    carry = torch.where(real, (entering[at_commit] * chunk_log_decay[at_commit].exp()), 1)
    transition = -factor * writes[..., :key_dim]                           # [B,HV,R,K,K]
    transition.diagonal(dim1=-2, dim2=-1).add_(carry[..., None])
    rank_count = commit_chunks.shape[-1]
    transition = transition.movedim(2, 0).reshape(rank_count, batch * heads, key_dim, key_dim)
    added = writes[..., key_dim:].movedim(2, 0).reshape(rank_count, batch * heads, key_dim, value_dim)

    snapshots = q.new_empty(rank_count + 1, batch * heads, key_dim, value_dim)
    if initial_state is not None:
        snapshots[0] = initial_state.to(q.dtype).reshape(batch * heads, key_dim, value_dim)
    else:
        snapshots[0].zero_()
    for rank in range(rank_count):
        torch.baddbmm(added[rank], transition[rank], snapshots[rank], out=snapshots[rank + 1])
    snapshots = snapshots.view(rank_count + 1, batch, heads, key_dim, value_dim).movedim(0, 2)

    # 3. Every output from the state entering its chunk.
    before = (events.cumsum(-1) - events.long())                           # commits before each chunk
    last_snapshot = snapshots[b_index, h_index, before]                    # [B,HV,NC,K,V]
    o = scale * ((reads * entering[..., :n_chunks, None, None]) @ last_snapshot + local)
    final_state = entering[..., -1, None, None] * snapshots[b_index[..., 0], h_index[..., 0], events.sum(-1)]

    commit_norms = None
    if record_commit_norms:
        state_in = entering[..., :n_chunks, None, None] * last_snapshot
        v_new = wu[..., key_dim:] - wu[..., :key_dim] @ state_in
        all_keys = kc * (chunk_log_decay[..., None] - gamma).exp()[..., None]
        commit_norms = (all_keys.transpose(-1, -2) @ v_new).flatten(-2).norm(dim=-1)
    return from_chunks(o, num_tokens), final_state, commit_norms
