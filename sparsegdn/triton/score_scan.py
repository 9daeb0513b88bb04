"""Pass 2: the event scores of the `score` selector from the per-chunk statistics of pass 1.

One program per (batch row, head pair) scans its chunks backwards (sparsegdn.selection.score_events):

    life_c    = read_{c+1} + exp(gamma_L(c+1)) life_{c+1},   life_{NC-1} = 0
    persist_c = exp(sum of gamma_L after c)
    score_c   = write_c (life_c + FINAL_STATE_WEIGHT persist_c)

The scan is a composition of affine maps x -> r + a x, done with one associative scan over the
chunks read in reverse order.
"""
import torch
import triton
import triton.language as tl

from ..selection import FINAL_STATE_WEIGHT
from . import call_record
from .chunk_loads import padded
from .launch import Launcher

NUM_WARPS = 4


@triton.jit
def _compose(offset_earlier, factor_earlier, offset_later, factor_later):
    # Scan order is reversed chunk order: the later element is the map applied outside.
    return offset_later + factor_later * offset_earlier, factor_later * factor_earlier


@triton.jit
def score_scan_kernel(log_decay_ptr, write_ptr, read_ptr, score_ptr, NC, FINAL_WEIGHT: tl.constexpr,
                      BLOCK_NC: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, BLOCK_NC)
    chunk = NC - 1 - i                      # position i of the scan holds chunk NC-1-i
    nxt = chunk + 1                         # the map of chunk c is the one of chunk c+1
    has_next = (chunk >= 0) & (nxt < NC)
    base = row * NC
    offset = tl.load(read_ptr + base + nxt, mask=has_next, other=0.0)
    factor = tl.exp(tl.load(log_decay_ptr + base + nxt, mask=has_next, other=0.0))
    life, persist = tl.associative_scan((offset, factor), 0, _compose)
    valid = chunk >= 0
    write = tl.load(write_ptr + base + chunk, mask=valid, other=0.0)
    tl.store(score_ptr + base + chunk, write * (life + FINAL_WEIGHT * persist), mask=valid)


launch_score_scan = Launcher(score_scan_kernel)


def score_scan(log_decay, write, read):
    """float32 [B,HV,NC] statistics -> float32 [B,HV,NC] scores."""
    batch, heads, n_chunks = write.shape
    scores = call_record.empty(batch, heads, n_chunks, dtype=write.dtype, device=write.device)
    launch_score_scan(
        (batch * heads,), log_decay, write, read, scores, n_chunks, FINAL_WEIGHT=FINAL_STATE_WEIGHT,
        BLOCK_NC=padded(n_chunks), num_warps=NUM_WARPS)
    return scores
