"""Selection and the bookkeeping that turns an event mask into work lists (torch, on the GPU).

Everything here is a handful of small vectorised ops on [B, HV, NC] tensors; no host sync on the
`score`, `uniform` and `all` paths (their event count per batch row is known on the host).

Layout of the lists, per batch row:
- events are numbered in (head pair, chunk) order; head pair h owns slots
  first_event[h] .. first_event[h] + per_head[h] - 1;
- head pair h owns snapshots first_event[h] + h .. first_event[h] + h + per_head[h] of the row's
  E + HV: snapshot 0 is the state entering chunk 0, snapshot j the state right after its j-th commit.
"""
from dataclasses import dataclass

import torch

from .. import selection


@dataclass
class Schedule:
    events: torch.Tensor          # bool [B,HV,NC]
    per_head: torch.Tensor        # int64 [B,HV]: events of each head pair
    event_chunks: torch.Tensor    # int32 [B,E]: flat index h * NC + c of each event, -1 past the row's count
    first_event: torch.Tensor     # int32 [B,HV]
    snapshot_of_chunk: torch.Tensor   # int32 [B,HV,NC]: the snapshot a chunk starts from (flat over rows)
    log_decay_since: torch.Tensor     # float32 [B,HV,NC]: sum of g from that snapshot to the chunk
    final_log_decay: torch.Tensor     # float32 [B,HV]: sum of g after the last commit
    max_events: int               # E, the longest row's count


def select_events(scores, *, budget, selector):
    """bool [B,HV,NC] and the per-row count for the `score`, `uniform` and `all` selectors."""
    batch, heads, n_chunks = scores.shape
    if selector == "all":
        return torch.ones_like(scores, dtype=torch.bool), heads * n_chunks
    count = selection.event_count(budget, heads, n_chunks)
    if selector == "uniform":
        return selection.uniform_events(batch, heads, n_chunks, count, device=scores.device), count
    flat = scores.flatten(1)
    events = torch.zeros_like(flat, dtype=torch.bool)
    events.scatter_(1, flat.topk(count, dim=1, sorted=False).indices, True)
    return events.view_as(scores), count


def build_schedule(events, chunk_log_decay, max_events=None):
    """events bool [B,HV,NC], chunk_log_decay float32 [B,HV,NC] (gamma_L of every chunk)."""
    batch, heads, n_chunks = events.shape
    device = events.device
    if max_events is None:     # caller-given events: one sync to size the lists
        max_events = max(1, int(events.flatten(1).sum(1).max().item()))
    flat = events.flatten(1)
    rank = flat.cumsum(1) - 1                                            # slot of each selected event
    slot = torch.where(flat, rank, torch.full_like(rank, max_events))   # unselected -> spill column
    event_chunks = torch.full((batch, max_events + 1), -1, dtype=torch.int32, device=device)
    positions = torch.arange(heads * n_chunks, dtype=torch.int32, device=device).expand(batch, -1)
    event_chunks.scatter_(1, slot, positions)
    event_chunks = event_chunks[:, :max_events].contiguous()

    per_head = events.sum(-1)                                            # [B,HV] int64
    first_event = per_head.cumsum(-1) - per_head
    commits_before = events.cumsum(-1) - events.long()                   # [B,HV,NC]
    heads_before = torch.arange(heads, device=device)[None, :, None]
    row_start = (torch.arange(batch, device=device) * (max_events + heads))[:, None, None]
    snapshot_of_chunk = (row_start + first_event[..., None] + heads_before + commits_before).to(torch.int32)

    # Decays in float64 prefix sums: over 100K tokens the sum of g is large and float32 differences
    # of it would lose the small decays between nearby commits.
    boundary = torch.zeros(batch, heads, n_chunks + 1, dtype=torch.float64, device=device)
    boundary[..., 1:] = chunk_log_decay.double().cumsum(-1)
    chunk_end = torch.arange(1, n_chunks + 1, device=device).expand(batch, heads, -1)
    last_end = torch.where(events, chunk_end, torch.zeros_like(chunk_end)).cummax(-1).values   # [B,HV,NC]
    start = torch.zeros_like(last_end)
    start[..., 1:] = last_end[..., :-1]
    log_decay_since = (boundary[..., :-1] - boundary.gather(-1, start)).float()
    final_log_decay = (boundary[..., -1] - boundary.gather(-1, last_end[..., -1:]).squeeze(-1)).float()
    return Schedule(events, per_head, event_chunks, first_event.to(torch.int32).contiguous(),
                    snapshot_of_chunk.contiguous(), log_decay_since.contiguous(), final_log_decay.contiguous(),
                    max_events)
