"""The commit chain cut into segments, part 2: the state entering each segment.

Grid: one program per (block of BV value columns, batch row, head pair). Starting from the initial
state (or zeros), the program applies each segment's map from segment_maps.py in turn,

    S_{s+1} = M_s S_s + N_s,

and writes every S_s, so the chain it walks has one step per segment, not one per commit. The maps
and starts stay float32; the products are three tf32 products (near float32 accuracy).
"""
import torch
import triton
import triton.language as tl

from .chunk_loads import cdiv, mma, padded
from .segment_maps import segment_maps
from .state_pass import load_initial_state, segment_bounds
from .launch import Launcher

VALUE_BLOCK = 32
NUM_WARPS = 4


@triton.jit
def segment_starts_kernel(maps_ptr, ends_ptr, per_head_ptr, initial_state_ptr, starts_ptr, flags_ptr, NC, SEGMENT, K, V,
                          BK: tl.constexpr, BV: tl.constexpr, HAS_INITIAL: tl.constexpr):
    i_v = tl.program_id(0)
    row = tl.program_id(1).to(tl.int64)
    ck = tl.arange(0, BK)
    cv = i_v * BV + tl.arange(0, BV)
    mask = (ck < K)[:, None] & (cv < V)[None, :]
    state_offsets = ck[:, None] * V + cv[None, :]
    state = load_initial_state(initial_state_ptr, flags_ptr, row, state_offsets, mask, K, V, BK, BV, HAS_INITIAL)
    count = tl.load(per_head_ptr + row).to(tl.int64)
    _, _, n_segments = segment_bounds(count, 0, SEGMENT)
    n_slots = tl.cdiv(NC, SEGMENT)
    tl.store(starts_ptr + row * n_slots * K * V + state_offsets, state, mask=mask)
    map_offsets = ck[:, None] * K + ck[None, :]
    s = 1
    while s < n_segments:
        slot = row * n_slots + s - 1
        m = tl.load(maps_ptr + slot * K * K + map_offsets, mask=(ck < K)[:, None] & (ck < K)[None, :], other=0.0)
        end = tl.load(ends_ptr + slot * K * V + state_offsets, mask=mask, other=0.0)
        state = mma(m, state) + end
        tl.store(starts_ptr + (row * n_slots + s) * K * V + state_offsets, state, mask=mask)
        s += 1


launch_segment_starts = Launcher(segment_starts_kernel)


def segment_starts(w, u, k_commit, schedule, initial_state, flags, *, segment):
    """float32 [B*HV, ceil(NC/segment), K, V]: the state entering each segment of `segment` commits."""
    batch, heads, n_chunks = schedule.events.shape
    key_dim, value_dim = w.shape[-1], u.shape[-1]
    maps, ends = segment_maps(w, u, k_commit, schedule, segment=segment)
    starts = torch.empty(batch * heads, cdiv(n_chunks, segment), key_dim, value_dim, device=w.device,
                         dtype=torch.float32)
    launch_segment_starts(
        (cdiv(value_dim, VALUE_BLOCK), batch * heads), maps, ends, schedule.per_head,
        initial_state if initial_state is not None else starts, starts, flags, n_chunks, segment, key_dim, value_dim,
        BK=padded(key_dim), BV=VALUE_BLOCK, HAS_INITIAL=initial_state is not None, num_warps=NUM_WARPS)
    return starts
