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

# Chunks per slab of the batched passes. Working on slabs, not on all chunks at once, keeps the
# temporaries (a few [slab, 64, 64] matrices) in cache and lets the allocator reuse them: on the
# CPU a fresh tensor of all chunks costs page faults that measured 1.7x the slab-wise time.
LOG_DECAY_FLOOR = -80.0
SLAB_CHUNKS = 256   # chunk matrices (batch row x head pair x chunk) per slab


def _decay(gamma: torch.Tensor) -> torch.Tensor:
    """exp(gamma_i - gamma_j) on and below the diagonal, zero above: [..., 64, 64].

    With g <= 0 (the API checks it) gamma_i - gamma_j <= 0 on and below the diagonal, so clamping
    at 0 changes nothing there and keeps exp finite above it, where tril zeroes it. The floor keeps
    exp out of the subnormal range, many times slower on the CPU; a decay below e^-80 is far under
    rounding next to the O(1) terms it is added to.
    """
    difference = gamma[..., :, None] - gamma[..., None, :]
    return difference.clamp_(min=LOG_DECAY_FLOOR, max=0.0).exp_().tril_()


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
    a = (rows @ cols.transpose(-1, -2)).mul_(decay_blocks).mul_(row_beta)
    return a.tril_(-1) if distance == 0 else a


def banded_solve(kc, vc, beta, gamma, decay, band: int) -> torch.Tensor:
    """w | u = Tinv_band (beta * [exp(gamma) K | V]) for every chunk: [..., 64, K + V].

    kc [..,64,K], vc [..,64,V], beta and gamma [..,64], decay from `_decay`. Bands 0 and 1 use
    16x16 blocks only (the far blocks of K K^T and of the inverse are never formed); bands 2 and 3
    solve the whole 64x64 system.
    """
    key_dim = kc.shape[-1]
    rhs = kc.new_empty(kc.shape[:-1] + (key_dim + vc.shape[-1],))
    torch.mul(kc, (beta * gamma.exp())[..., None], out=rhs[..., :key_dim])
    torch.mul(vc, beta[..., None], out=rhs[..., key_dim:])
    if band >= 2:
        a = (kc @ kc.transpose(-1, -2)).mul_(decay).mul_(beta[..., :, None]).tril_(-1)
        if band == BLOCKS_PER_CHUNK - 1:   # exact: solve against the right-hand sides directly
            return torch.linalg.solve_triangular(a, rhs, upper=False, unitriangular=True)
        eye = torch.eye(CHUNK, dtype=kc.dtype, device=kc.device)
        t_inv = torch.linalg.solve_triangular(a, eye.expand_as(a), upper=False, unitriangular=True)
        return t_inv.mul_(band_mask(band, kc.device)) @ rhs

    a_diag = _near_blocks(kc, beta, decay, 0)                              # [..., 4, 16, 16]
    eye = torch.eye(BLOCK, dtype=kc.dtype, device=kc.device)
    d = torch.linalg.solve_triangular(a_diag, eye.expand_as(a_diag), upper=False, unitriangular=True)
    rhs_blocks = rhs.unflatten(-2, (BLOCKS_PER_CHUNK, BLOCK))              # [..., 4, 16, K+V]
    wu = d @ rhs_blocks
    if band == 1:
        # the adjacent block of the inverse, -D_{i+1} A_{i+1,i} D_i, applied to block i
        adjacent = d[..., 1:, :, :] @ (_near_blocks(kc, beta, decay, 1) @ d[..., :-1, :, :])
        wu[..., 1:, :, :] -= adjacent @ rhs_blocks[..., :-1, :, :]
    return wu.flatten(-3, -2)


def _commit_order(events: torch.Tensor):
    """Chunks of each head pair's commits in order, padded: (chunks [B,HV,R] long, real [B,HV,R] bool)."""
    counts = events.sum(-1)                                                # [B,HV]
    rank_count = int(counts.max())
    # A stable sort of "not selected" puts each head pair's committed chunks first, in chunk order.
    order = torch.sort((~events).to(torch.uint8), dim=-1, stable=True).indices[..., :rank_count]
    real = torch.arange(rank_count, device=events.device) < counts[..., None]
    return order, real


def _entering_log_decay(chunk_log_decay, events, log_decay_before) -> torch.Tensor:
    """Log of the factor from the last snapshot to the state entering chunk c, for c = 0..n: [B,HV,n+1].

    chunk_log_decay and events [B,HV,n]; log_decay_before [B,HV] float64 is the log-decay from the
    last snapshot to chunk 0. A segmented cumulative sum of chunk log-decays that restarts after
    each commit, in float64, as a difference of prefix sums.
    """
    batch, heads, n_chunks = events.shape
    prefix = torch.empty(batch, heads, n_chunks + 1, dtype=torch.float64, device=events.device)
    prefix[..., 0] = log_decay_before
    torch.cumsum(chunk_log_decay.to(torch.float64), -1, out=prefix[..., 1:]).add_(log_decay_before[..., None])
    after = torch.arange(1, n_chunks + 1, device=events.device)
    start = torch.where(events, after, 0).cummax(-1).values              # first chunk after the last commit
    start = torch.cat([start.new_zeros(batch, heads, 1), start], dim=-1)
    # no commit yet in these chunks: the segment began before chunk 0, log_decay_before counts it
    return prefix - torch.where(start > 0, prefix.gather(-1, start), 0)


def _chunk_view(x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Tokens of chunks start..stop-1 of x [B,T,HV,...] as a view [n, B, HV, 64, ...] (T a multiple of 64)."""
    part = x[:, start * CHUNK:stop * CHUNK]
    return part.unflatten(1, (stop - start, CHUNK)).movedim(1, 0).transpose(2, 3)


def _chunk_slab(x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Chunks start..stop-1 of x [B,T,HV,...], chunk-major and zero-padded: [(stop-start)*B*HV, 64, ...].

    Row (c - start) * B*HV + b * HV + h holds chunk c of batch row b, head pair h. Zero padding is
    neutral, as in the reference.
    """
    part = x[:, start * CHUNK:stop * CHUNK]
    pad = (stop - start) * CHUNK - part.shape[1]
    if pad:
        part = torch.cat([part, part.new_zeros((part.shape[0], pad) + tuple(part.shape[2:]))], dim=1)
    return _chunk_view(part, 0, stop - start).reshape((-1, CHUNK) + tuple(x.shape[3:]))


def _chunk_major(x: torch.Tensor) -> torch.Tensor:
    """[B,HV,n,...] -> [n*B*HV,...], the row order of `_chunk_slab`."""
    return x.movedim(2, 0).flatten(0, 2)


def _chunk_terms(qc, kc, vc, gamma, bc, band: int):
    """The state-independent part of a stack of chunks (qc, kc, vc [M,64,D]; gamma, bc [M,64]).

    Returns wu = w | u and reads | local, both [M,64,K+V], where reads = Q exp(gamma) - attn w and
    local = attn u, so that a chunk entering with state S outputs scale (reads S + local).
    """
    key_dim = kc.shape[-1]
    decay = _decay(gamma)                                                  # [M,64,64]
    wu = banded_solve(kc, vc, bc, gamma, decay, band)
    attn = torch.bmm(qc, kc.transpose(-1, -2)).mul_(decay)                 # lower incl. diagonal
    reads_local = torch.bmm(attn, wu)
    reads = reads_local[..., :key_dim]
    torch.sub(qc * gamma.exp()[..., None], reads, out=reads)
    return wu, reads_local


def _snapshots(kc, gamma, wu, entering, events, state):
    """The committed state after each commit rank of a slab: [R+1, B*HV, K, V], rank 0 being `state`.

    kc, gamma, wu: the slab's chunks (chunk-major rows); entering [B,HV,n+1]: the factor from the last
    snapshot to the state entering each chunk; events [B,HV,n]. The r-th commit of a head pair, at
    chunk c, is the reference's update of the state entering c, F snapshot_r with F = entering[c]:
        v_new = u - (F w) snapshot_r,    snapshot_{r+1} = F e^{gamma_L} snapshot_r + k_commit^T v_new,
    two small matrix products per rank for all head pairs at once (fewer commits: identity steps).
    """
    pairs, key_dim, value_dim = state.shape
    commit_chunks, real = _commit_order(events)                            # [B,HV,R]
    rows = _chunk_major(commit_chunks[..., None] * pairs)[:, 0] + torch.arange(pairs, device=kc.device).repeat(
        commit_chunks.shape[-1])                                           # rank-major [R*B*HV]
    factor = _chunk_major(entering.gather(-1, commit_chunks)[..., None])   # [R*B*HV, 1]
    real = _chunk_major(real[..., None])
    commit_gamma = gamma.index_select(0, rows)
    commit_wu = wu.index_select(0, rows)
    scaled_w = commit_wu[..., :key_dim].mul_(factor[..., None])
    u = commit_wu[..., key_dim:]
    # padding commits nothing and keeps the state: zero keys, carry 1
    keys_t = (kc.index_select(0, rows) * ((commit_gamma[:, -1:] - commit_gamma).exp() * real)[..., None]).transpose(-1, -2)
    carry = torch.where(real, factor * commit_gamma[:, -1:].exp(), 1)[..., None]
    snapshots = state.new_empty((commit_chunks.shape[-1] + 1,) + tuple(state.shape))
    snapshots[0] = state
    for rank, step in enumerate(range(0, rows.shape[0], pairs)):
        at = slice(step, step + pairs)
        v_new = torch.baddbmm(u[at], scaled_w[at], snapshots[rank], alpha=-1)
        torch.mul(snapshots[rank], carry[at], out=snapshots[rank + 1]).baddbmm_(keys_t[at], v_new)
    return snapshots


def _slab_forward(qc, kc, vc, gc, bc, events, state, log_decay_before, *, band, scale, record_commit_norms):
    """The chunk form over one slab of chunks, entering with snapshot `state` [B*HV,K,V] decayed by
    exp(log_decay_before [B,HV]).

    Returns o [n*B*HV,64,V], the last snapshot and the log-decay since it at the slab's end, and
    the commit norms [B,HV,n] or None.
    """
    batch, heads, n_chunks = events.shape
    pairs, key_dim, value_dim = state.shape
    gamma = gc.cumsum(-1)                                                  # [n*B*HV,64]
    wu, reads_local = _chunk_terms(qc, kc, vc, gamma, bc, band)
    chunk_log_decay = gamma[:, -1].view(n_chunks, batch, heads).permute(1, 2, 0)   # [B,HV,n]
    log_entering = _entering_log_decay(chunk_log_decay, events, log_decay_before)  # [B,HV,n+1]
    entering = log_entering.exp().to(qc.dtype)
    snapshots = _snapshots(kc, gamma, wu, entering, events, state).flatten(0, 1)   # [(R+1)*B*HV,K,V]

    # Every chunk enters with a decayed copy of the last snapshot before it: all outputs at once.
    pair = torch.arange(pairs, device=qc.device).view(batch, heads, 1)
    before = (events.cumsum(-1) - events.long()) * pairs + pair            # snapshot rows [B,HV,n]
    state_in = snapshots.index_select(0, _chunk_major(before[..., None])[:, 0])
    state_in.mul_(_chunk_major(entering[..., :n_chunks, None, None, None])[:, 0])
    o = torch.baddbmm(reads_local[..., key_dim:], reads_local[..., :key_dim], state_in, alpha=scale, beta=scale)
    last = snapshots.index_select(0, (events.sum(-1, keepdim=True) * pairs + pair).flatten())

    commit_norms = None
    if record_commit_norms:
        v_new = torch.baddbmm(wu[..., key_dim:], wu[..., :key_dim], state_in, alpha=-1)
        commit_keys = kc * (gamma[:, -1:] - gamma).exp()[..., None]
        norms = torch.bmm(commit_keys.transpose(-1, -2), v_new).flatten(1).norm(dim=-1)
        commit_norms = norms.view(n_chunks, batch, heads).permute(1, 2, 0)
    return o, last, log_entering[..., -1], commit_norms


def event_chunk_forward(q, k, v, g, beta, events, *, band: int, scale: float, initial_state=None,
                        record_commit_norms: bool = False):
    """SparseGDN forward in the chunk form, recurring over committed events only.

    Same inputs and outputs as `reference.chunk_forward`, which stays the contract it is tested
    against: q, k [B,T,HV,K] (prepared: normalised if asked, expanded to value heads); v [B,T,HV,V];
    g, beta [B,T,HV]; events bool [B,HV,NC]; band 0..3; all floating tensors in one compute dtype.
    Returns o [B,T,HV,V], the final committed state [B,HV,K,V] and, when asked, the Frobenius norm
    of what each chunk would commit [B,HV,NC] (else None).

    The sequential part costs two small matrix products per commit rank, not per chunk; the rest
    is batched over slabs of chunks, each slab entering with the last snapshot of the one before.
    """
    batch, num_tokens, heads, key_dim = q.shape
    value_dim = v.shape[-1]
    n_chunks = num_chunks(num_tokens)
    pairs = batch * heads
    slab = max(1, SLAB_CHUNKS // pairs)
    state = (initial_state.to(q.dtype).reshape(pairs, key_dim, value_dim) if initial_state is not None
             else q.new_zeros(pairs, key_dim, value_dim))                 # the last snapshot
    log_decay_since = torch.zeros(batch, heads, dtype=torch.float64, device=q.device)
    o = q.new_empty(batch, n_chunks * CHUNK, heads, value_dim)
    norms = []
    for start in range(0, n_chunks, slab):
        stop = min(start + slab, n_chunks)
        chunks = (_chunk_slab(x, start, stop) for x in (q, k, v, g, beta))
        o_slab, state, log_decay_since, commit_norms = _slab_forward(
            *chunks, events[..., start:stop], state, log_decay_since, band=band, scale=scale,
            record_commit_norms=record_commit_norms)
        _chunk_view(o, start, stop).copy_(o_slab.view(stop - start, batch, heads, CHUNK, value_dim))
        norms.append(commit_norms)
    final_state = state.view(batch, heads, key_dim, value_dim) * log_decay_since.exp().to(q.dtype)[..., None, None]
    return o[:, :num_tokens], final_state, torch.cat(norms, dim=-1) if record_commit_norms else None
