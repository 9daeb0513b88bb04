"""Pass 3b of the affine-commit design: every selected commit as one affine map of the state.

A commit takes the state S [K, V] to

    d (c S - A S) + N,    A = k_commit^T w  [K, K],    N = k_commit^T u  [K, V]

(d the decay since the last commit, c the chunk's own decay; w, u, k_commit from pass 3). Forming A and N
here, for every event at once, leaves the sequential pass one product per commit (A S) instead of two
dependent ones (w S, then k_commit^T v_new) with a layout change between them: the chain's latency per
commit is what bounds that pass (analysis/results/kernel_bench.notes.md). A and N are stored in the input
dtype, like w, u and k_commit (A replaces their 16-bit rounding of w and k_commit by one of their product).

Grid: one program per (event slot, batch row, block of BC columns of [A | N]).
"""
import torch
import triton
import triton.language as tl

from .chunk_loads import CHUNK, cdiv, mma, padded, round_to
from .launch import Launcher

COLUMNS = 32       # BC
NUM_WARPS = 4


@triton.jit
def commit_maps_kernel(w_ptr, u_ptr, k_commit_ptr, event_chunks_ptr, a_ptr, n_ptr, E, K, V,
                       BK: tl.constexpr, BC: tl.constexpr):
    e = tl.program_id(0).to(tl.int64)
    b = tl.program_id(1).to(tl.int64)
    block = tl.program_id(2)
    if tl.load(event_chunks_ptr + b * E + e) >= 0:
        slot = b * E + e
        rows = tl.arange(0, CHUNK)
        ck = tl.arange(0, BK)
        k_commit = tl.load(k_commit_ptr + slot * CHUNK * K + rows[:, None] * K + ck[None, :], mask=(ck < K)[None, :],
                           other=0.0)
        key_blocks = tl.cdiv(K, BC)
        if block < key_blocks:       # columns of A, from w
            cols = block * BC + tl.arange(0, BC)
            x = tl.load(w_ptr + slot * CHUNK * K + rows[:, None] * K + cols[None, :], mask=(cols < K)[None, :],
                        other=0.0)
            tl.store(a_ptr + slot * K * K + ck[:, None] * K + cols[None, :],
                     round_to(mma(tl.trans(k_commit), x), a_ptr.dtype.element_ty),
                     mask=(ck < K)[:, None] & (cols < K)[None, :])
        else:                        # columns of N, from u
            cols = (block - key_blocks) * BC + tl.arange(0, BC)
            x = tl.load(u_ptr + slot * CHUNK * V + rows[:, None] * V + cols[None, :], mask=(cols < V)[None, :],
                        other=0.0)
            tl.store(n_ptr + slot * K * V + ck[:, None] * V + cols[None, :],
                     round_to(mma(tl.trans(k_commit), x), n_ptr.dtype.element_ty),
                     mask=(ck < K)[:, None] & (cols < V)[None, :])


launch_commit_maps = Launcher(commit_maps_kernel)


def commit_maps(w, u, k_commit, event_chunks):
    """A [B,E,K,K] and N [B,E,K,V] in w's dtype from pass 3's lists (see the module docstring)."""
    batch, n_events, _, key_dim = w.shape
    value_dim = u.shape[-1]
    a = torch.empty(batch, n_events, key_dim, key_dim, device=w.device, dtype=w.dtype)
    n = torch.empty(batch, n_events, key_dim, value_dim, device=w.device, dtype=w.dtype)
    launch_commit_maps(
        (n_events, batch, cdiv(key_dim, COLUMNS) + cdiv(value_dim, COLUMNS)), w, u, k_commit, event_chunks, a, n,
        n_events, key_dim, value_dim, BK=padded(key_dim), BC=COLUMNS, num_warps=NUM_WARPS)
    return a, n
