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
SLAB_CHUNKS = 256   # chunk matrices (batch row x head pair x chunk) per slab


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


def _entering_log_decay(chunk_log_decay: torch.Tensor, events: torch.Tensor) -> torch.Tensor:
    """Log of the factor from the last snapshot to the state entering chunk c, for c = 0..NC: [B,HV,NC+1].

    A segmented cumulative sum of chunk log-decays that restarts after each commit, taken as a
    difference of float64 prefix sums so that long sequences lose no precision.
    """
    batch, heads, n_chunks = events.shape
    prefix = torch.zeros(batch, heads, n_chunks + 1, dtype=torch.float64, device=events.device)
    prefix[..., 1:] = chunk_log_decay.to(torch.float64).cumsum(-1)
    after = torch.arange(1, n_chunks + 1, device=events.device)
    start = torch.where(events, after, 0).cummax(-1).values              # first chunk after the last commit
    start = torch.cat([start.new_zeros(batch, heads, 1), start], dim=-1)
    return prefix - prefix.gather(-1, start)


def _chunk_slab(x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Chunks start..stop-1 of x [B,T,HV,...], chunk-major and zero-padded: [(stop-start)*B*HV, 64, ...].

    Row (c - start) * B*HV + b * HV + h holds chunk c of batch row b, head pair h. Zero padding is
    neutral, as in the reference.
    """
    part = x[:, start * CHUNK:stop * CHUNK]
    pad = (stop - start) * CHUNK - part.shape[1]
    if pad:
        part = torch.cat([part, part.new_zeros((part.shape[0], pad) + tuple(part.shape[2:]))], dim=1)
    part = part.unflatten(1, (stop - start, CHUNK)).movedim(1, 0).transpose(2, 3)   # [n,B,HV,64,...]
    return part.reshape((-1, CHUNK) + tuple(x.shape[3:]))


def _chunk_major(x: torch.Tensor) -> torch.Tensor:
    """[B,HV,N] -> [N*B*HV], the row order of `_chunk_slab`."""
    return x.permute(2, 0, 1).flatten()


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


def _writes(kc, gamma, wu) -> torch.Tensor:
    """What a chunk adds to the decayed state it commits: k_commit^T [w | u], [M, K, K+V]."""
    commit_keys = kc * (gamma[:, -1:] - gamma).exp()[..., None]
    return torch.bmm(commit_keys.transpose(-1, -2), wu)


def _snapshots(writes, entering, chunk_log_decay, commit_chunks, real, initial_state):
    """The committed state after each commit rank: [B*HV*(R+1), K, V], rank 0 being the initial state.

    writes [B*HV*R, K, K+V] are the commits' `_writes` (zero for padding); entering [B,HV,NC+1] is
    the factor from the last snapshot to the state entering each chunk. The r-th commit of a head
    pair, at chunk c, maps snapshot_r to
        snapshot_{r+1} = F (e^{gamma_L} I - k_commit^T w) snapshot_r + k_commit^T u,   F = entering[c],
    one small matrix product per rank for all head pairs at once.
    """
    batch, heads, rank_count = commit_chunks.shape
    key_dim = writes.shape[1]
    value_dim = writes.shape[2] - key_dim
    factor = entering.gather(-1, commit_chunks).flatten()
    carry = torch.where(real.flatten(), factor * chunk_log_decay.gather(-1, commit_chunks).exp().flatten(), 1)
    transition = writes[..., :key_dim].mul_(-factor[:, None, None])
    transition.diagonal(dim1=-2, dim2=-1).add_(carry[:, None])
    # rank-major, so that each step reads one contiguous slice
    transition = transition.view(batch * heads, rank_count, key_dim, key_dim).transpose(0, 1).contiguous()
    added = writes[..., key_dim:].reshape(batch * heads, rank_count, key_dim, value_dim).transpose(0, 1).contiguous()

    snapshots = writes.new_empty(rank_count + 1, batch * heads, key_dim, value_dim)
    if initial_state is not None:
        snapshots[0] = initial_state.to(writes.dtype).reshape(batch * heads, key_dim, value_dim)
    else:
        snapshots[0].zero_()
    for rank in range(rank_count):
        torch.baddbmm(added[rank], transition[rank], snapshots[rank], out=snapshots[rank + 1])
    return snapshots.transpose(0, 1).reshape(-1, key_dim, value_dim)


def event_chunk_forward(q, k, v, g, beta, events, *, band: int, scale: float, initial_state=None,
                        record_commit_norms: bool = False):
    """SparseGDN forward in the chunk form, recurring over committed events only.

    Same inputs and outputs as `reference.chunk_forward`, which stays the contract it is tested
    against: q, k [B,T,HV,K] (prepared: normalised if asked, expanded to value heads); v [B,T,HV,V];
    g, beta [B,T,HV]; events bool [B,HV,NC]; band 0..3; all floating tensors in one compute dtype.
    Returns o [B,T,HV,V], the final committed state [B,HV,K,V] and, when asked, the Frobenius norm
    of what each chunk would commit [B,HV,NC] (else None).

    The sequential part costs one small matrix product per commit rank (the largest number of
    commits of any head pair), not per chunk; the rest is batched over slabs of chunks.
    """
    batch, num_tokens, heads, key_dim = q.shape
    value_dim = v.shape[-1]
    n_chunks = num_chunks(num_tokens)
    pairs = batch * heads
    slab = max(1, SLAB_CHUNKS // pairs)
    slabs = [(start, min(start + slab, n_chunks)) for start in range(0, n_chunks, slab)]
    commit_chunks, real = _commit_order(events)                            # [B,HV,R]
    rank_count = commit_chunks.shape[-1]
    commit_pair = torch.arange(pairs, device=q.device).repeat_interleave(rank_count)

    # 1. State-independent terms and the commits' writes, slab by slab; rows are chunk-major.
    reads_local = q.new_empty(n_chunks * pairs, CHUNK, key_dim + value_dim)
    chunk_log_decay = q.new_empty(n_chunks * pairs)
    commit_writes = q.new_zeros(pairs * rank_count, key_dim, key_dim + value_dim)   # padding writes nothing
    all_writes = q.new_empty(n_chunks * pairs, key_dim, key_dim + value_dim) if record_commit_norms else None
    for start, stop in slabs:
        rows = slice(start * pairs, stop * pairs)
        qc, kc, vc, gc, bc = (_chunk_slab(x, start, stop) for x in (q, k, v, g, beta))
        gamma = gc.cumsum(-1)
        wu, reads_local[rows] = _chunk_terms(qc, kc, vc, gamma, bc, band)
        chunk_log_decay[rows] = gamma[:, -1]
        in_slab = (real & (commit_chunks >= start) & (commit_chunks < stop)).flatten().nonzero().squeeze(1)
        slab_row = (commit_chunks.flatten()[in_slab] - start) * pairs + commit_pair[in_slab]
        if all_writes is not None:
            all_writes[rows] = _writes(kc, gamma, wu)
            commit_writes[in_slab] = all_writes[rows][slab_row]
        else:
            commit_writes[in_slab] = _writes(kc[slab_row], gamma[slab_row], wu[slab_row])

    # 2. The recurrence over commits.
    chunk_log_decay = chunk_log_decay.view(n_chunks, batch, heads).permute(1, 2, 0)   # [B,HV,NC]
    entering = _entering_log_decay(chunk_log_decay, events).exp().to(q.dtype)   # [B,HV,NC+1]
    snapshots = _snapshots(commit_writes, entering, chunk_log_decay, commit_chunks, real, initial_state)

    # 3. Every chunk enters with a decayed copy of the last snapshot before it.
    before = events.cumsum(-1) - events.long()                             # snapshot index [B,HV,NC]
    snapshot_row = _chunk_major(before + torch.arange(pairs, device=q.device).view(batch, heads, 1) * (rank_count + 1))
    entering_chunk = _chunk_major(entering[..., :n_chunks])
    o = q.new_empty(batch, n_chunks * CHUNK, heads, value_dim)
    commit_norms = q.new_empty(n_chunks * pairs) if record_commit_norms else None
    for start, stop in slabs:
        rows = slice(start * pairs, stop * pairs)
        state_in = snapshots[snapshot_row[rows]].mul_(entering_chunk[rows, None, None])
        reads, local = reads_local[rows, :, :key_dim], reads_local[rows, :, key_dim:]
        o_slab = torch.baddbmm(local, reads, state_in, alpha=scale, beta=scale)     # [n*B*HV,64,V]
        o_view = o[:, start * CHUNK:stop * CHUNK].unflatten(1, (stop - start, CHUNK)).movedim(1, 0).transpose(2, 3)
        o_view.copy_(o_slab.view(o_view.shape))
        if commit_norms is not None:
            written = all_writes[rows]
            commit = torch.baddbmm(written[..., key_dim:], written[..., :key_dim], state_in, alpha=-1)
            commit_norms[rows] = commit.flatten(1).norm(dim=-1)
    last_row = events.sum(-1) + torch.arange(pairs, device=q.device).view(batch, heads) * (rank_count + 1)
    final_state = snapshots[last_row.flatten()].mul_(entering[..., -1].reshape(-1, 1, 1))
    if commit_norms is not None:
        commit_norms = commit_norms.view(n_chunks, batch, heads).permute(1, 2, 0)
    return o[:, :num_tokens], final_state.view(batch, heads, key_dim, value_dim), commit_norms
