"""Selector policies: which recurrent events (head pair x chunk commits) to keep (docs/CONTRACT.md section 4).

The `score` selector
--------------------
A skipped event loses the chunk's writes from the long-range state; that loss then reaches every
later token through the decay. So an event's score is an upper-bound estimate of

    (how much the chunk writes) x (how much of the future still reads it)

computed from per-token quantities only, so one fused pass over the inputs (the same pass that
builds the intra-chunk solve) can produce it, before any recurrence:

    gamma_t    cumulative log decay inside chunk c, gamma_L its last value
    write_c    = sum_t beta_t * exp(gamma_L - gamma_t) * ||k_t|| * ||v_t||
                 (each token's rank-one write k v^T, decayed to the chunk end: the triangle bound
                 on the norm of the commit when the state entering the chunk is zero)
    read_c     = sum_t exp(gamma_t)            (how strongly chunk c's tokens see an earlier commit)
    life_c     = read_{c+1} + exp(gamma_L(c+1)) * life_{c+1},    life_{NC-1} = 0
                 (total decayed weight with which all later tokens read a commit made at the end
                 of chunk c: a backward scan over chunks)
    persist_c  = exp(sum of g after chunk c)     (what survives into the final state)
    score_c    = write_c * (life_c + FINAL_STATE_WEIGHT * persist_c)

The final state is what decoding reads after the prefill, so it counts as FINAL_STATE_WEIGHT = 1024
future tokens. With weight 1 the selector favoured early, long-lived chunks and the final state
lost most of the recent writes (relative state error ~1.0 on random inputs at budget 0.29); with 1024
the state error falls to ~0.2 for an output error within 0.01 (benchmarks/selector_eval.py).

One budget of ceil(budget * HV * NC) events is shared by all head pairs of a layer: a head pair with
slow decay (long life) or strong writes receives many events, a fast-decaying one few.
"""
from __future__ import annotations

import math

import torch

from .config import num_chunks
from .reference import to_chunks

FINAL_STATE_WEIGHT = 1024.0


def event_count(budget: float, num_heads: int, num_chunks: int) -> int:
    """ceil(budget * HV * NC) events per batch row, at least one, at most all.

    The small tolerance keeps float noise (0.07 * 100 = 7.000000000000001) from adding an event.
    """
    total = num_heads * num_chunks
    return max(1, min(total, math.ceil(budget * total - 1e-9)))


def score_events(k, v, g, beta) -> torch.Tensor:
    """The dynamic score. k [B,T,HV,K] (normalised, expanded), v [B,T,HV,V], g and beta [B,T,HV].

    Returns float32 [B, HV, NC].
    """
    n_chunks = num_chunks(k.shape[1])
    magnitude = k.float().norm(dim=-1) * v.float().norm(dim=-1) * beta.float()   # [B,T,HV]
    magnitude = to_chunks(magnitude, n_chunks)                                   # [B,HV,NC,64]
    gamma = to_chunks(g.float(), n_chunks).cumsum(-1)
    gamma_last = gamma[..., -1]                                                  # [B,HV,NC]
    write = (magnitude * (gamma_last[..., None] - gamma).exp()).sum(-1)
    read = gamma.exp().sum(-1)
    life = torch.zeros_like(write)
    persist = torch.ones_like(write)
    for c in range(n_chunks - 2, -1, -1):
        carry = gamma_last[..., c + 1].exp()
        life[..., c] = read[..., c + 1] + carry * life[..., c + 1]
        persist[..., c] = carry * persist[..., c + 1]
    return write * (life + FINAL_STATE_WEIGHT * persist)


def top_events(scores: torch.Tensor, count: int) -> torch.Tensor:
    """bool [B,HV,NC]: the `count` highest scores of each batch row, over all head pairs at once; scores tied
    at the threshold are taken in (head pair, chunk) order (a stable sort), as the GPU path's select_kernel
    takes them (sparsegdn/triton/schedule.py, SELECT_KERNEL, the default; torch's top-k, used with it off, orders
    ties its own way), so that the backends keep the same events where scores tie (all-zero writes, say)."""
    flat = scores.flatten(1)
    keep = torch.zeros_like(flat, dtype=torch.bool)
    keep.scatter_(1, flat.sort(dim=1, descending=True, stable=True).indices[:, :count], True)
    return keep.view_as(scores)


def uniform_events(batch: int, heads: int, n_chunks: int, count: int, device=None) -> torch.Tensor:
    """Equal counts per head pair, evenly spaced chunks.

    count // HV events for every head pair; the first count % HV head pairs get one more, so the
    total is exactly `count`. Chunk i of m sits at floor((i + 1/2) NC / m), distinct for m <= NC.
    All head pairs at once, with no host sync. The loop over head pairs this replaces launched about four small
    kernels a head pair; with it the GPU path's selection stage read 3.9-4.1 ms at HV = 32 at 32K and 128K tokens (an
    H100, benchmarks/chain_probe.py, batch 34), the `score` selector's 0.11-0.18 ms. The division is by a tensor, a
    true division on every device: the loop divided by a Python number, which torch computes on a GPU as a multiply
    by its float32 reciprocal, and that puts some chunks one early (NC = 52, m = 41: 25 for 26, in a float32
    reproduction), off the rule above.
    """
    base, extra = divmod(count, heads)
    per_head = torch.full((heads, 1), base, dtype=torch.long, device=device)
    per_head[:extra] += 1
    i = torch.arange(base + (1 if extra else 0), device=device)
    chunks = ((i + 0.5) * n_chunks / per_head).floor().long()          # [heads, max m]; past m: dropped below
    chunks = torch.where(i < per_head, chunks, n_chunks)                # one spare column takes the unused places
    events = torch.zeros(batch, heads, n_chunks + 1, dtype=torch.bool, device=device)
    events.scatter_(2, chunks.expand(batch, -1, -1), True)
    return events[..., :n_chunks].contiguous()


def random_scores(batch: int, heads: int, n_chunks: int, seed: int, device=None) -> torch.Tensor:
    """Seeded uniform keys; their top-k is a uniformly random set of events.

    The keys depend on the seed and the row's shape (HV, NC) only, so every batch row gets the same
    ones: a row selects the same events in any batch as alone (drawing [B, HV, NC] from one generator
    made each row's events depend on the rows before it).
    """
    generator = torch.Generator().manual_seed(seed)
    keys = torch.rand(heads, n_chunks, generator=generator)
    return keys.expand(batch, heads, n_chunks).contiguous().to(device)
