"""Pass 4, sequential: the sparse recurrence, commits only, one snapshot per commit.

Grid: one program per (value block, batch row, head pair); each walks only its head pair's events
(its slots of the event list), so the sequential work scales with the budget. Between commits the
state only decays, folded into one factor from the float64 prefix sums (Schedule.log_decay_since):

    S <- exp(decay since last commit) S
    v_new = u - w S                                  (w, u of the event from pass 3)
    S <- exp(gamma_L) S + (K exp(gamma_L - gamma))^T v_new,  stored as the next snapshot

Snapshots are stored in the input dtype (pass 5 reads them as a dot operand); the running state and
the final state stay float32.
"""
import os

import triton
import triton.language as tl

from .chunk_loads import l2_normalize, load_gates, load_rows, mma, round_to

CHUNK = tl.constexpr(64)
NUM_WARPS = 8        # the prefetched tiles of the next event live in registers too
STATE_BLOCK_V = 32     # value columns per program: V = 128 gives 4 x HV programs, about one per SM


@triton.jit
def _load_event(i, count, b, hv, row, first, k_base, g_base, w_ptr, u_ptr, event_chunks_ptr, log_decay_since_ptr,
                T, NC, E, H: tl.constexpr, HV: tl.constexpr, K, V, ck, cv, rows, BK: tl.constexpr,
                NORMALIZE: tl.constexpr):
    """The tiles of this head pair's i-th event (clamped to its last, so a prefetch past it is harmless)."""
    slot = b * E + tl.minimum(first + tl.minimum(i, tl.maximum(count - 1, 0)), E - 1)
    c = tl.maximum(tl.load(event_chunks_ptr + slot).to(tl.int64) - hv * NC, 0)
    decay = tl.exp(tl.load(log_decay_since_ptr + row * NC + c))
    w = tl.load(w_ptr + slot * CHUNK * K + rows[:, None] * K + ck[None, :], mask=(ck < K)[None, :], other=0.0)
    u = tl.load(u_ptr + slot * CHUNK * V + rows[:, None] * V + cv[None, :], mask=(cv < V)[None, :], other=0.0)
    k = load_rows(k_base, c * CHUNK, T, H * K, K, CHUNK, BK)
    g = load_gates(g_base, c * CHUNK, T, HV, CHUNK)
    return decay, w, u, k, g


@triton.jit
def _commit(state, decay, w, u, k, g, NORMALIZE: tl.constexpr):
    """One commit: decay since the last one, v_new = u - w S, then the chunk's decayed writes."""
    dot_dtype = w.dtype
    state = state * decay
    k = l2_normalize(k, NORMALIZE)
    gamma = tl.cumsum(g, axis=0)
    gamma_last = tl.sum(g, axis=0)
    v_new = u.to(tl.float32) - mma(w, round_to(state, dot_dtype))
    k_commit = round_to(k * tl.exp(gamma_last - gamma)[:, None], dot_dtype)
    return state * tl.exp(gamma_last) + mma(tl.trans(k_commit), round_to(v_new, dot_dtype))


@triton.jit
def state_pass_kernel(k_ptr, g_ptr, w_ptr, u_ptr, event_chunks_ptr, first_event_ptr, per_head_ptr,
                      log_decay_since_ptr, final_log_decay_ptr, initial_state_ptr, snapshot_ptr, final_state_ptr,
                      T, NC, E, H: tl.constexpr, HV: tl.constexpr, K, V,
                      BK: tl.constexpr, BV: tl.constexpr, NORMALIZE: tl.constexpr,
                      HAS_INITIAL: tl.constexpr, STORE_FINAL: tl.constexpr,
                      WHILE_LOOP: tl.constexpr):
    i_v = tl.program_id(0)
    row = tl.program_id(1).to(tl.int64)        # b * HV + hv
    b = row // HV
    hv = row % HV
    hk = hv // (HV // H)
    dot_dtype = k_ptr.dtype.element_ty
    ck = tl.arange(0, BK)
    cv = i_v * BV + tl.arange(0, BV)
    rows = tl.arange(0, CHUNK)
    state_mask = (ck < K)[:, None] & (cv < V)[None, :]
    state_offsets = ck[:, None] * V + cv[None, :]

    if HAS_INITIAL:
        state = tl.load(initial_state_ptr + row * K * V + state_offsets, mask=state_mask, other=0.0).to(tl.float32)
    else:
        state = tl.zeros([BK, BV], dtype=tl.float32)
    first = tl.load(first_event_ptr + row).to(tl.int64)
    count = tl.load(per_head_ptr + row).to(tl.int64)
    snapshot = snapshot_ptr + (b * (E + HV) + first + hv) * K * V
    tl.store(snapshot + state_offsets, round_to(state, snapshot_ptr.dtype.element_ty), mask=state_mask)

    k_base = k_ptr + (b * T * H + hk) * K
    g_base = g_ptr + b * T * HV + hv
    # Software prefetch: the next event's tiles are requested before this commit's products, so
    # their latency hides behind the arithmetic of the sequential chain.
    decay, w, u, k, g = _load_event(0, count, b, hv, row, first, k_base, g_base, w_ptr, u_ptr, event_chunks_ptr,
                                    log_decay_since_ptr, T, NC, E, H, HV, K, V, ck, cv, rows, BK, NORMALIZE)
    if WHILE_LOOP:   # the interpreter cannot run a for loop over a loaded bound
        i = 0
        while i < count:
            next_decay, next_w, next_u, next_k, next_g = _load_event(
                i + 1, count, b, hv, row, first, k_base, g_base, w_ptr, u_ptr, event_chunks_ptr, log_decay_since_ptr,
                T, NC, E, H, HV, K, V, ck, cv, rows, BK, NORMALIZE)
            state = _commit(state, decay, w, u, k, g, NORMALIZE)
            snapshot += K * V
            tl.store(snapshot + state_offsets, round_to(state, snapshot_ptr.dtype.element_ty), mask=state_mask)
            decay = next_decay
            w = next_w
            u = next_u
            k = next_k
            g = next_g
            i += 1
    else:
        for i in range(count):
            next_decay, next_w, next_u, next_k, next_g = _load_event(
                i + 1, count, b, hv, row, first, k_base, g_base, w_ptr, u_ptr, event_chunks_ptr, log_decay_since_ptr,
                T, NC, E, H, HV, K, V, ck, cv, rows, BK, NORMALIZE)
            state = _commit(state, decay, w, u, k, g, NORMALIZE)
            snapshot += K * V
            tl.store(snapshot + state_offsets, round_to(state, snapshot_ptr.dtype.element_ty), mask=state_mask)
            decay = next_decay
            w = next_w
            u = next_u
            k = next_k
            g = next_g

    if STORE_FINAL:
        state = state * tl.exp(tl.load(final_log_decay_ptr + row))
        tl.store(final_state_ptr + row * K * V + state_offsets, state, mask=state_mask)


def state_pass(k, g, w, u, schedule, initial_state, *, normalize, num_value_heads, store_final):
    """Returns snapshots [B, E + HV, K, V] (k.dtype) and the final state float32 [B,HV,K,V] or None."""
    import torch

    batch, tokens, key_heads, key_dim = k.shape
    value_dim = u.shape[-1]
    n_events = schedule.max_events
    n_chunks = schedule.events.shape[-1]
    snapshots = torch.empty(batch, n_events + num_value_heads, key_dim, value_dim, device=k.device, dtype=k.dtype)
    final_state = (torch.empty(batch, num_value_heads, key_dim, value_dim, device=k.device, dtype=torch.float32)
                   if store_final else snapshots)
    block_v = min(STATE_BLOCK_V, max(16, triton.next_power_of_2(value_dim)))
    grid = (triton.cdiv(value_dim, block_v), batch * num_value_heads)
    state_pass_kernel[grid](
        k, g, w, u, schedule.event_chunks, schedule.first_event, schedule.per_head, schedule.log_decay_since,
        schedule.final_log_decay, initial_state if initial_state is not None else snapshots, snapshots, final_state,
        tokens, n_chunks, n_events, key_heads, num_value_heads, key_dim, value_dim,
        BK=max(16, triton.next_power_of_2(key_dim)), BV=block_v, NORMALIZE=normalize,
        HAS_INITIAL=initial_state is not None, STORE_FINAL=store_final,
        WHILE_LOOP=os.environ.get("TRITON_INTERPRET") == "1", num_warps=NUM_WARPS)
    return snapshots, (final_state if store_final else None)
