"""Commits in pairs: half the dependent steps on the sequential chain (an option, PAIRED in forward.py).

A commit (state_pass.commit) is two dependent products: A = d S, v = u - w A, S' = c A + k^T v. The
chain's time is its number of commits times that latency, and the shared budget makes a few head pairs'
chains ~NC commits long. Two commits in a row, written from the state before the first:

    A1 = d1 S
    v1 = u1 - w1 A1                        v2 = u2' - w2' A1        (both products at once)
    S1 = c1 A1 + k1^T v1                   k2^T v2                  (both products at once)
    S2 = c2 d2 S1 + k2^T v2

with P = w2 k1^T ([64, 64]) and

    w2' = d2 (c1 w2 - P w1),    u2' = u2 - d2 P u1

(substitute S1 into the second commit's v2 = u2 - w2 d2 S1). So a pair costs two dependent steps of
products instead of four; S1 is still formed (its snapshot is some chunk's starting state). This module's
kernel rewrites the second event of every pair in the lists, in place, after event_prepare: one program
per (pair, batch row x head pair), pairs (0, 1), (2, 3), ... of each head pair's events; an odd last
event is walked with an empty partner. The chain (state_pass.commit_run with PAIRED) then walks pairs.
"""
import triton
import triton.language as tl

from .chunk_loads import CHUNK, cdiv, mma, padded, round_to
from .launch import Launcher

NUM_WARPS = 4


@triton.jit
def pair_prepare_kernel(w_ptr, u_ptr, k_commit_ptr, event_decays_ptr, first_event_ptr, per_head_ptr, E, HV, K, V,
                        BK: tl.constexpr, BV: tl.constexpr):
    pair = tl.program_id(0).to(tl.int64)
    row = tl.program_id(1).to(tl.int64)
    count = tl.load(per_head_ptr + row).to(tl.int64)
    if 2 * pair + 1 < count:
        b = row // HV
        first_slot = b * E + tl.load(first_event_ptr + row).to(tl.int64) + 2 * pair
        second_slot = first_slot + 1
        first_chunk_decay = tl.load(event_decays_ptr + first_slot * 2 + 1)       # Schedule.event_decays
        decay_between = tl.load(event_decays_ptr + second_slot * 2)
        rows = tl.arange(0, CHUNK)
        ck = tl.arange(0, BK)
        cv = tl.arange(0, BV)
        key_offsets = rows[:, None] * K + ck[None, :]
        key_mask = (ck < K)[None, :]
        value_offsets = rows[:, None] * V + cv[None, :]
        value_mask = (cv < V)[None, :]
        w1 = tl.load(w_ptr + first_slot * CHUNK * K + key_offsets, mask=key_mask, other=0.0)
        k1 = tl.load(k_commit_ptr + first_slot * CHUNK * K + key_offsets, mask=key_mask, other=0.0)
        u1 = tl.load(u_ptr + first_slot * CHUNK * V + value_offsets, mask=value_mask, other=0.0)
        w2 = tl.load(w_ptr + second_slot * CHUNK * K + key_offsets, mask=key_mask, other=0.0)
        u2 = tl.load(u_ptr + second_slot * CHUNK * V + value_offsets, mask=value_mask, other=0.0)
        p = round_to(mma(w2, tl.trans(k1)), w1.dtype)                              # [64, 64]
        w2_pair = decay_between * (first_chunk_decay * w2.to(tl.float32) - mma(p, w1))
        u2_pair = u2.to(tl.float32) - decay_between * mma(p, u1)
        tl.store(w_ptr + second_slot * CHUNK * K + key_offsets, round_to(w2_pair, w_ptr.dtype.element_ty),
                 mask=key_mask)
        tl.store(u_ptr + second_slot * CHUNK * V + value_offsets, round_to(u2_pair, u_ptr.dtype.element_ty),
                 mask=value_mask)


launch_pair_prepare = Launcher(pair_prepare_kernel)


def pair_prepare(w, u, k_commit, schedule):
    """Rewrite the second event of every pair in w and u (in place) for state_pass's paired walk."""
    batch, heads, n_chunks = schedule.events.shape
    key_dim, value_dim = w.shape[-1], u.shape[-1]
    launch_pair_prepare(
        (cdiv(n_chunks, 2), batch * heads), w, u, k_commit, schedule.event_decays, schedule.first_event,
        schedule.per_head, schedule.max_events, heads, key_dim, value_dim, BK=padded(key_dim), BV=padded(value_dim),
        num_warps=NUM_WARPS)


@triton.jit
def commit_pair(state, first_decay, first_chunk_decay, w1, u1, k1, second_decay, second_chunk_decay, w2, u2, k2):
    """Two commits from the state before the first, w2 and u2 rewritten by pair_prepare: (S1, S2)."""
    a1 = state * first_decay
    a1_operand = round_to(a1, w1.dtype)
    v1 = u1.to(tl.float32) - mma(w1, a1_operand)
    v2 = u2.to(tl.float32) - mma(w2, a1_operand)
    after_first = a1 * first_chunk_decay + mma(tl.trans(k1), round_to(v1, w1.dtype))
    after_second = after_first * (second_decay * second_chunk_decay) + mma(tl.trans(k2), round_to(v2, w1.dtype))
    return after_first, after_second
