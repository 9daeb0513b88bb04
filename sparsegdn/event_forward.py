"""SparseGDN forward for the CPU: the chunk form, with the recurrence run over committed events only.

The same computation as `reference.chunk_forward` (which stays the contract the tests compare
against), arranged so that a skipped event costs no recurrence step:

1. The part that does not read the state is batched over chunks: gamma, the band-limited
   intra-chunk inverse (for band 0/1 only the 16x16 diagonal blocks D_i and the adjacent blocks
   -D_{i+1} A_{i+1,i} D_i are formed), w, u and the intra-chunk attention. A chunk's output is
   then linear in the state S entering it:
       o = scale * (reads S + attn u),     reads = Q exp(gamma) - attn w.
2. The recurrence steps once per commit, not once per chunk. Between two commits of a head pair
   the committed state only decays, so the state entering chunk c is F_c * snapshot, the last
   committed snapshot times a factor whose log is a segmented sum of the chunk log-decays since
   that commit (no product per skipped chunk). Head pairs commit different numbers of times; step
   r runs over the head pairs with more than r commits, so the work follows the events.
3. Every chunk enters with a decayed copy of the last snapshot before it, so all outputs come from
   one batched product.

The three steps run slab by slab (all batch rows and head pairs of a range of chunks, about 2 MiB
per [rows, 64, K+V] tensor), each slab entering with the last snapshot of the slab before and the
log-decay since it. One slab of every chunk is the plain three-step algorithm; smaller slabs keep
the temporaries in cache and let the allocator reuse them, where a fresh tensor over all chunks
costs page faults that took more time than the arithmetic (see benchmarks/cpu_core_bench.py).
"""
from __future__ import annotations

import torch

from .config import BLOCK_SIZE as BLOCK
from .config import BLOCKS_PER_CHUNK, num_chunks
from .config import CHUNK_SIZE as CHUNK
from .reference import band_mask

SLAB_VALUES = 1 << 19    # values in a slab's [rows, 64, K + V] tensors (2 MiB in float32)
LOG_DECAY_FLOOR = -80.0  # decays below e^-80 are computed as e^-80 (see `_decay`)


def _no_hook(name: str) -> None:
    pass


def _decay(gamma: torch.Tensor) -> torch.Tensor:
    """exp(gamma_i - gamma_j) on and below the diagonal, zero above: [..., 64, 64].

    With g <= 0 (the API checks it) gamma_i - gamma_j <= 0 on and below the diagonal, so the clamp
    at 0 changes nothing there and keeps exp finite above it, where tril zeroes it. The floor keeps
    exp out of the subnormal range, many times slower on the CPU; e^-80 is far below rounding next
    to the O(1) terms such a decay multiplies.
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
    """w | u = Tinv_band (beta * [exp(gamma) K | V]) for a stack of chunks: [..., 64, K + V].

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
        exact = band == BLOCKS_PER_CHUNK - 1
        if exact and rhs.shape[-1] <= CHUNK:   # narrow right-hand sides: one triangular solve
            return torch.linalg.solve_triangular(a, rhs, upper=False, unitriangular=True)
        # wide ones: the inverse, then a 64x64 product (a wide triangular solve is slower on the CPU)
        eye = torch.eye(CHUNK, dtype=kc.dtype, device=kc.device)
        t_inv = torch.linalg.solve_triangular(a, eye.expand_as(a), upper=False, unitriangular=True)
        return (t_inv if exact else t_inv.mul_(band_mask(band, kc.device))) @ rhs

    # Bands 0 and 1: the band-projected inverse from 16x16 blocks, then one 64x64 product (faster
    # on the CPU than per-block products, which are too small for the matrix library).
    a_diag = _near_blocks(kc, beta, decay, 0)                              # [..., 4, 16, 16]
    eye = torch.eye(BLOCK, dtype=kc.dtype, device=kc.device)
    d = torch.linalg.solve_triangular(a_diag, eye.expand_as(a_diag), upper=False, unitriangular=True)
    t_inv = kc.new_zeros(kc.shape[:-2] + (CHUNK, CHUNK))
    t_blocks = _blocks(t_inv)                                              # a view: writes land in t_inv
    t_blocks.diagonal(dim1=-4, dim2=-2).copy_(d.movedim(-3, -1))
    if band == 1:   # the adjacent blocks -D_{i+1} A_{i+1,i} D_i
        adjacent = -(d[..., 1:, :, :] @ _near_blocks(kc, beta, decay, 1) @ d[..., :-1, :, :])
        t_blocks.diagonal(offset=-1, dim1=-4, dim2=-2).copy_(adjacent.movedim(-3, -1))
    return t_inv @ rhs


# ---- layout: a slab is chunk-major, row (c - start) * B*HV + b * HV + h is chunk c of (b, h) ----

def _chunk_view(x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Chunks start..stop-1 of x [B,T,HV,...] as a view [n, B, HV, 64, ...] (whole chunks only)."""
    part = x[:, start * CHUNK:stop * CHUNK]
    return part.unflatten(1, (stop - start, CHUNK)).movedim(1, 0).transpose(2, 3)


def _chunk_slab(x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Chunks start..stop-1 of x [B,T,HV,...] as rows [n*B*HV, 64, ...], the last one zero-padded.

    Zero padding is neutral, as in the reference: g = 0, beta = 0, k = 0.
    """
    part = x[:, start * CHUNK:stop * CHUNK]
    pad = (stop - start) * CHUNK - part.shape[1]
    if pad:
        part = torch.cat([part, part.new_zeros((part.shape[0], pad) + tuple(part.shape[2:]))], dim=1)
    return _chunk_view(part, 0, stop - start).reshape((-1, CHUNK) + tuple(x.shape[3:]))


def _chunk_major(x: torch.Tensor) -> torch.Tensor:
    """[B,HV,n] -> [n*B*HV], in the row order of a slab."""
    return x.permute(2, 0, 1).flatten()


def _head_major(x: torch.Tensor, batch: int, heads: int) -> torch.Tensor:
    """[n*B*HV] -> [B,HV,n], the inverse of `_chunk_major`."""
    return x.view(-1, batch, heads).permute(1, 2, 0)


def _rows(index: torch.Tensor, slot: torch.Tensor | None = None) -> torch.Tensor:
    """Rows of a chunk-major stack at positions index [B,HV,n] (chunks or commit ranks): [n*B*HV].

    A stack has B*HV rows per position; head pair p sits in row slot[p] of them (default p).
    """
    batch, heads, _ = index.shape
    if slot is None:
        slot = torch.arange(batch * heads, device=index.device)
    return _chunk_major(index * (batch * heads) + slot.view(batch, heads, 1))


# ---- the three steps on one slab ----

def _chunk_terms(qc, kc, wu, gamma, decay):
    """The output's state-free part on a stack of chunks (qc, kc [M,64,K]; wu = w | u [M,64,K+V];
    gamma [M,64]; decay from `_decay`).

    Returns reads | local [M,64,K+V], where reads = Q exp(gamma) - attn w and local = attn u, so that
    a chunk entering with state S outputs scale (reads S + local).
    """
    key_dim = kc.shape[-1]
    attn = torch.bmm(qc, kc.transpose(-1, -2)).mul_(decay)                 # lower incl. diagonal
    reads_local = torch.bmm(attn, wu)
    reads = reads_local[..., :key_dim]
    torch.sub(qc * gamma.exp()[..., None], reads, out=reads)
    return reads_local


def _entering_log_decay(chunk_log_decay, events, log_decay_before) -> torch.Tensor:
    """Log of the factor from the last snapshot to the state entering chunk c, c = 0..n: [B,HV,n+1].

    chunk_log_decay and events [B,HV,n]; log_decay_before [B,HV] is the log-decay from the last
    snapshot to chunk 0. A cumulative sum of chunk log-decays that restarts after each commit,
    taken in float64 as a difference of prefix sums.
    """
    batch, heads, n_chunks = events.shape
    prefix = torch.empty(batch, heads, n_chunks + 1, dtype=torch.float64, device=events.device)
    prefix[..., 0] = log_decay_before
    torch.cumsum(chunk_log_decay.to(torch.float64), -1, out=prefix[..., 1:]).add_(log_decay_before[..., None])
    after = torch.arange(1, n_chunks + 1, device=events.device)
    segment = torch.where(events, after, 0).cummax(-1).values             # chunk after the last commit
    segment = torch.cat([segment.new_zeros(batch, heads, 1), segment], dim=-1)
    # before a head pair's first commit of the slab the segment began earlier: prefix counts it all
    return prefix - torch.where(segment > 0, prefix.gather(-1, segment), 0)


def _commit_terms(kc, gamma, wu, entering, events, state):
    """Stage `event_prepare` of a slab: what each commit of the slab needs, gathered rank by rank.

    Returns the snapshots [R+1, B*HV, K, V] with rank 0 (the entering snapshot `state` [B*HV,K,V]) filled,
    slot [B*HV] (the row of each head pair within a rank), the head pairs active at each rank, and per
    commit: u, the scaled w, the transposed commit keys and the carry factor. entering [B,HV,n+1] is
    the factor from the last snapshot to the state entering each chunk. The r-th commit of a head pair,
    at chunk c, is the reference's update of the state entering c, F snapshot_r with F = entering[c]:
        v_new = u - (F w) snapshot_r,     snapshot_{r+1} = F e^{gamma_L} snapshot_r + k_commit^T v_new.
    Slots sort the head pairs by commit count, so those committing at rank r are a leading block of rows.
    """
    pairs, key_dim, value_dim = state.shape
    counts = events.sum(-1).flatten()                                      # [B*HV]
    order = counts.argsort(descending=True, stable=True)                   # head pairs by commit count
    slot = torch.empty_like(order)
    slot[order] = torch.arange(pairs, device=order.device)
    rank_count = int(counts.max())
    active = (counts[:, None] > torch.arange(rank_count, device=counts.device)).sum(0).tolist()

    # A stable sort of "not selected" lists each head pair's committed chunks first, in chunk order.
    chunks = torch.sort((~events).to(torch.uint8), dim=-1, stable=True).indices[..., :rank_count]
    chunks = chunks.flatten(0, 1)[order].T                                 # [R, B*HV] in slot order
    active_at_rank = torch.tensor(active, dtype=torch.long, device=order.device)[:, None]   # on the inputs' device
    committed = torch.arange(pairs, device=order.device) < active_at_rank
    rows = (chunks * pairs + order)[committed]                             # every commit, rank by rank
    factor = _chunk_major(entering[..., :-1])[rows][:, None, None]
    commit_gamma = gamma.index_select(0, rows)                             # [commits, 64]
    commit_wu = wu.index_select(0, rows)
    scaled_w, u = commit_wu[..., :key_dim].mul_(factor), commit_wu[..., key_dim:]
    commit_keys = kc.index_select(0, rows).mul_((commit_gamma[:, -1:] - commit_gamma).exp()[..., None])
    carry = factor * commit_gamma[:, -1:, None].exp()

    snapshots = state.new_empty(rank_count + 1, pairs, key_dim, value_dim)
    snapshots[0] = state[order]
    return snapshots, slot, active, (u, scaled_w, commit_keys.transpose(-1, -2), carry)


def _state_pass(snapshots, active, commits):
    """Stage `state_pass` of a slab: the committed state after each commit rank, two small matrix
    products per rank over the head pairs that commit that many times (see `_commit_terms`). The rows
    after the active block of a rank are left unwritten, and no chunk reads them."""
    u, scaled_w, keys_t, carry = commits
    offset = 0
    for rank, count in enumerate(active):
        at, now, after = slice(offset, offset + count), snapshots[rank, :count], snapshots[rank + 1, :count]
        _commit(now, u[at], scaled_w[at], keys_t[at], carry[at], out=after)
        offset += count
    return snapshots.flatten(0, 1)


def _commit(snapshot, u, scaled_w, keys_t, carry, *, out):
    """One recurrence step for a batch of head pairs, each committing one chunk: out = the new snapshot."""
    v_new = torch.baddbmm(u, scaled_w, snapshot, alpha=-1)
    torch.mul(snapshot, carry, out=out).baddbmm_(keys_t, v_new)


def _slab_forward(qc, kc, vc, gc, bc, events, state, log_decay_before, *, band, scale, record_commit_norms,
                  stage_hook):
    """The three steps on one slab: chunk rows qc, kc, vc [n*B*HV,64,D], gc, bc [n*B*HV,64], events
    [B,HV,n], entering with snapshot `state` [B*HV,K,V] decayed by exp(log_decay_before [B,HV]).
    `stage_hook(name)` is called after each of the slab's stages (intra_solve, event_prepare,
    state_pass, output).

    Returns o [n*B*HV,64,V], the last snapshot, the log-decay since it at the slab's end, and the
    commit norms [B,HV,n] (or None).
    """
    batch, heads, _ = events.shape
    key_dim = kc.shape[-1]
    gamma = gc.cumsum(-1)                                                  # [n*B*HV,64]
    decay = _decay(gamma)                                                  # [n*B*HV,64,64]
    wu = banded_solve(kc, vc, bc, gamma, decay, band)
    stage_hook("intra_solve")

    chunk_log_decay = _head_major(gamma[:, -1], batch, heads)              # [B,HV,n]
    log_entering = _entering_log_decay(chunk_log_decay, events, log_decay_before)
    entering = log_entering.exp().to(qc.dtype)                             # [B,HV,n+1]
    snapshots, slot, active, commits = _commit_terms(kc, gamma, wu, entering, events, state)
    stage_hook("event_prepare")

    snapshots = _state_pass(snapshots, active, commits)
    stage_hook("state_pass")

    # Step 3: every chunk enters with a decayed copy of the last snapshot before it.
    reads_local = _chunk_terms(qc, kc, wu, gamma, decay)
    before = events.cumsum(-1) - events.long()                             # commits before each chunk
    state_in = snapshots.index_select(0, _rows(before, slot))
    state_in.mul_(_chunk_major(entering[..., :-1])[:, None, None])        # [n*B*HV,K,V]
    reads, local = reads_local[..., :key_dim], reads_local[..., key_dim:]
    o = torch.baddbmm(local, reads, state_in, alpha=scale, beta=scale)
    last = snapshots.index_select(0, _rows(events.sum(-1, keepdim=True), slot))

    commit_norms = None
    if record_commit_norms:
        v_new = torch.baddbmm(wu[..., key_dim:], wu[..., :key_dim], state_in, alpha=-1)
        commit_keys = kc * (gamma[:, -1:] - gamma).exp()[..., None]
        norms = torch.bmm(commit_keys.transpose(-1, -2), v_new).flatten(1).norm(dim=-1)
        commit_norms = _head_major(norms, batch, heads)
    stage_hook("output")
    return o, last, log_entering[..., -1], commit_norms


def event_chunk_forward(q, k, v, g, beta, events, *, band: int, scale: float, initial_state=None,
                        record_commit_norms: bool = False, stage_hook=None):
    """SparseGDN forward in the chunk form, stepping the recurrence over committed events only.

    Same inputs and outputs as `reference.chunk_forward`: q, k [B,T,HV,K] (prepared: normalised if
    asked and expanded to value heads); v [B,T,HV,V]; g (<= 0), beta [B,T,HV]; events bool
    [B,HV,NC]; band 0..3; scale; initial_state [B,HV,K,V] or None; all floating tensors in one
    compute dtype. Returns o [B,T,HV,V], the final committed state [B,HV,K,V] and, when asked, the
    Frobenius norm of what each chunk would commit [B,HV,NC] (else None).

    The recurrence costs two small matrix products per commit rank of each slab; skipped chunks
    only contribute decay factors. `stage_hook(name)`, when given, is called after each stage of each
    slab: intra_solve, event_prepare, state_pass, output, once per slab (docs/CONTRACT.md section 5).
    """
    batch, num_tokens, heads, key_dim = q.shape
    value_dim = v.shape[-1]
    n_chunks = num_chunks(num_tokens)
    pairs = batch * heads
    slab = max(1, SLAB_VALUES // (CHUNK * (key_dim + value_dim) * pairs))   # chunks per slab
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
            record_commit_norms=record_commit_norms, stage_hook=stage_hook or _no_hook)
        _chunk_view(o, start, stop).copy_(o_slab.view(stop - start, batch, heads, CHUNK, value_dim))
        norms.append(commit_norms)
    final_state = state.view(batch, heads, key_dim, value_dim) * log_decay_since.exp().to(q.dtype)[..., None, None]
    commit_norms = torch.cat(norms, dim=-1) if record_commit_norms else None
    return o[:, :num_tokens], final_state, commit_norms
