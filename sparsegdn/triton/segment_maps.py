"""The commit chain cut into segments, part 1: what each segment does to the state it is handed.

Grid: one program per (block of BC columns, batch row, head pair, segment). A commit maps the state
affinely, S -> M_i S + N_i with M_i = d_i (c_i I - k_commit_i^T w_i) and N_i = k_commit_i^T u_i (d_i
the decay since the last commit, c_i the chunk's own decay), so a run of commits does too: with
HOMOGENEOUS the program pushes identity columns through the run without the u terms and writes
M_seg = prod M_i ([K, K]); without, it pushes zero columns through the whole commits and writes
N_seg ([K, V]), the run's end state from a zero start. Every segment of every head pair runs at once;
segment_scan.py then joins them in a short sequential pass, and state_pass.py (or the one launch,
state_output.py) replays each segment from its true start. The last segment of a head pair needs no map
(nothing follows it).

The maps are products of float32 tiles (tf32x3, near float32), not of the running state rounded to
the input dtype as in the state pass: a map is applied to every later segment's start, so its
rounding would be carried down the chain (on the H200 bfloat16 maps left the output 2.07e-2 from the
torch backend in the matrix's segmented case).

DELTA_MAPS (off; SPARSEGDN_DELTA_MAPS=1; not yet on a GPU) computes M in the input dtype's products, as
the state pass does, without that loss: M = c I + D, c the product of the run's decays (a scalar) and D
what the commits subtracted, pushed through the chain from zero. A commit maps c I + D to c' I + D' with
c' = d_i c_i c and D' = c_i (d_i D) + k_i^T (-d_i c w_i[:, cols] - w_i (d_i D)): the state pass's commit on
D with u = -d_i c w_i[:, cols]. Rounding M itself to bfloat16 loses most of a diagonal entry's difference
from c (1 - p to 8 bits); D holds that difference at full relative precision. The N maps use the input
dtype's products too. Why: the float32 maps made the segmented pass slower than the whole chain (the
kernel notes, 2026-11-30: 1.20 against 0.97 ms at 32K); the input dtype's products are about three times
cheaper, and the maps' wider column blocks (DELTA_COLUMNS) fit a pass bound by its total work.
"""
import os

import torch
import triton
import triton.language as tl

from .chunk_loads import CHUNK, cdiv, padded
from .state_pass import commit, load_event, segment_program
from .launch import Launcher

COLUMNS = 32       # BC: columns of the map per program (the state pass's value block)
DELTA_MAPS = os.environ.get("SPARSEGDN_DELTA_MAPS", "0") == "1"
DELTA_COLUMNS = 64  # BC with DELTA_MAPS: products in the input dtype leave room for wider blocks
NUM_WARPS = 4
# One stage: with the default pipelining (3) compute-sanitizer found an out-of-bounds shared-memory read
# in this kernel's product (H200, 2026-11-30, the matrix's segmented cases: wrong maps, then faults).
NUM_STAGES = 1


@triton.jit
def segment_maps_kernel(w_ptr, u_ptr, k_commit_ptr, event_decays_ptr, first_event_ptr, per_head_ptr, out_ptr, NC, E,
                        SEGMENT, HV: tl.constexpr, K, V,
                        COLS, BK: tl.constexpr, BC: tl.constexpr, HOMOGENEOUS: tl.constexpr, DELTA: tl.constexpr):
    i_c = tl.program_id(0)
    row, segment, b, hv, count, begin, end, n_segments = segment_program(per_head_ptr, SEGMENT, HV)
    if segment >= n_segments - 1:
        return
    ck = tl.arange(0, BK)
    cc = i_c * BC + tl.arange(0, BC)
    rows = tl.arange(0, CHUNK)
    identity = tl.where(ck[:, None] == cc[None, :], 1.0, 0.0)
    if HOMOGENEOUS and not DELTA:
        x = identity                                                 # identity columns
        u_width = 0                                                  # u is never read: its terms are dropped
    else:
        x = tl.zeros([BK, BC], dtype=tl.float32)                    # N from a zero start; or D (see DELTA_MAPS)
        u_width = 0 if HOMOGENEOUS else V
    scale = 1.0                                                      # c: the identity part's factor (DELTA)
    first = tl.load(first_event_ptr + row).to(tl.int64)
    for i in range(begin, end):
        decay, chunk_decay, w, u, k = load_event(i, b, first, w_ptr, u_ptr, k_commit_ptr, event_decays_ptr, E, K,
                                                 u_width, ck, cc, rows)
        if DELTA:
            if HOMOGENEOUS:                                          # u = -d c w[:, cols]
                slot = b * E + first + i
                w_cols = tl.load(w_ptr + slot * CHUNK * K + rows[:, None] * K + cc[None, :],
                                 mask=(cc < K)[None, :], other=0.0)
                u = -(decay * scale) * w_cols.to(tl.float32)
                scale = scale * decay * chunk_decay
            x = commit(x, decay, chunk_decay, w, u, k)               # products in the input dtype
        else:
            x = commit(x, decay, chunk_decay, w.to(tl.float32), u, k.to(tl.float32))   # float32 maps, see above
    if DELTA and HOMOGENEOUS:
        x = x + scale * identity
    n_slots = tl.cdiv(NC, SEGMENT)
    offsets = ck[:, None] * COLS + cc[None, :]
    tl.store(out_ptr + (row * n_slots + segment) * K * COLS + offsets, x, mask=(ck < K)[:, None] & (cc < COLS)[None, :])


launch_segment_maps = Launcher(segment_maps_kernel)


def segment_maps(w, u, k_commit, schedule, *, segment):
    """M [B*HV, S, K, K] and N [B*HV, S, K, V] float32 of every segment of SEGMENT commits (S = ceil(NC/SEGMENT)
    slots; the last segment of each head pair is left unwritten)."""
    batch, heads, n_chunks = schedule.events.shape
    key_dim, value_dim = w.shape[-1], u.shape[-1]
    n_slots = cdiv(n_chunks, segment)
    maps = {}
    block = DELTA_COLUMNS if DELTA_MAPS else COLUMNS
    for name, columns, homogeneous in (("M", key_dim, True), ("N", value_dim, False)):
        out = torch.empty(batch * heads, n_slots, key_dim, columns, device=w.device, dtype=torch.float32)
        launch_segment_maps(
            (cdiv(columns, block), batch * heads, n_slots), w, u, k_commit, schedule.event_decays,
            schedule.first_event, schedule.per_head, out, n_chunks,
            schedule.max_events, segment, heads, key_dim, value_dim, columns, BK=padded(key_dim), BC=block,
            HOMOGENEOUS=homogeneous, DELTA=DELTA_MAPS, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        maps[name] = out
    return maps["M"], maps["N"]
