"""Pass 5 of the two-launch design in Gluon on Hopper: every output from two persistent launches over chunk lists.

Why: the output pass (chunk_output.py) runs one 64-token chunk a program, and a program waits for its tiles
before each product: latency-bound at two programs an SM. Here a program walks many chunks, and the tiles of the
next ones arrive by TMA into shared memory while this one's products run (Triton's Gluon dialect: layouts, shared
memory, wgmma, mbarriers and TMA written by the kernel). On the H200 (2026-12-04, benchmarks/gluon_probe.py
--output-pass, benchmark inputs, budget 0.29's selection, stored Tinv, vectors and snapshots) the probe's kernel of
this design (B = 1, no flag) took 1.29 ms for the whole output pass at 128K tokens against chunk_output's 2.01
(0.337 against 0.515 at 32K), with outputs equal to it within 1.4e-5; this kernel, in the backend entry, 1.49 ms
with the lists' making and the stage hooks' syncs (analysis/results/overlap/batch22, calls 6 and 7).

Work: `chunk_lists` orders every (batch row, head pair, chunk) chunk-major (the value heads of one key head side
by side, so q and k come from L2 the second time), the chunks that start from a zero state first (no initial state,
no commit of their head pair before them: their output is the chunk's own part, o = scale M (beta V)), then the
chunks with a state (o = scale [e^d (Q e^gamma - M X) S + M (beta V)], S their snapshot); the count of the first
kind stays on the device (no sync). One launch walks each list, persistent over programs_per_sm x SMs programs.
The products and their roundings are output_chunks' with the vectors stored, Tinv stored or solved as band_solve
solves it (on chip in both), and FOLD_SCALES off, so
chunk_output is this path's twin: the interpreter and CPU machines run that (Gluon needs a GPU), and the GPU
matrix checks the two against each other and against the torch backend.

Used by forward.py for the two launches when LIST_OUTPUTS is on (OVERLAP off) or forward.LISTS_FROM takes
the lists for a long call by default (beside the chain pass, claimed chunks), and `eligible` finds nothing
against it: an sm_90 device, 16-bit inputs, K = V = 128, the vectors stored by pass 1 (forward's STORE_VECTORS),
Tinv stored too (STORE_INVERSE) or a band of 0 or 1, which the kernel then solves itself from the k tile
(gluon_band_solve: band_solve's batched products and roundings, so chunk_output solving on chip is the twin), q, k,
v contiguous (the 2-D views TMA reads: tokens x heads x dim), B = 1 or T a multiple of 64 (a chunk never crosses
into the next batch row), FOLD_SCALES off. Anything else takes chunk_output. A call through this path gets a
launch plan (call_plans.py) as the one launch's does: the lists are made by two small kernels (make_chunk_lists), every
kernel goes through launch.Launcher, and a plan rebuilds the TMA descriptors from its pointers at each replay. Without
a plan (the first call of a key, or SIDE_STREAM, whose second stream a plan cannot replay) the host needed ~1.1 ms to
issue a call on the H200's host (batch 24, before the plans).

With OVERLAP_LISTS both lists run beside the chain pass on the call's stream (programmatic dependent launches; the
list with a state waits tile by tile on the chain pass's progress counts, as state_output's output programs do).

Peak memory beyond the inputs at 128K (batch 23, benchmark inputs): 3,058 MB with Tinv stored, 2,546 solved here
(the difference is Tinv, 512 MiB), against the one launch's 2,514. Batch 22 blamed the 3,058 on a plan recording
holding w, u and k_commit; with the key refused since, it measured the same, so that was not its cause.
"""
import functools
import os

import torch
import triton
import triton.language as tl

from . import call_record
from .launch import REGISTER_CAPS, Launcher
from .chunk_loads import CHUNK_SIZE, FOLD_SCALES, INTERPRET, cdiv, solve_precision
from .gluon_band_solve import band_inverse_batched, band_zero_blocks
from .state_pass import PROGRESS_BV

# Off by default. On the H200 (benchmarks/config_probe.py --timed, backend entry, benchmark inputs, budget 0.29,
# band 1, one stream, fixed shares) the two launches with these outputs took at 128K 4.77 ms with Tinv stored and
# 4.87-4.89 solved here (batch 23 call 3), against the default one launch's 4.39-4.45; with warm-up segments of 256
# (forward.WARM_UP: the approximate decay join) 3.78-3.81 stored and 3.89-3.90 solved (batch 23 call 6). At 32K
# none beat the one launch's 1.15 in batch 23: 1.27-2.03 across runs (calls 3-7; replayed from a CUDA graph 1.64).
# What holds them back: pass 1 storing Tinv costs 1.2-1.4 ms at 128K against 0.65-0.78 without it, and solving it
# here costs about the same (the zero-state list 1.07 ms against 0.71, the other 0.81 against 0.56); the chains
# come before the lists with a state, and the zero-state list after them on one stream.
# SPARSEGDN_LIST_OUTPUTS=1 turns it on (with OVERLAP off and STORE_VECTORS on; STORE_INVERSE on, or band <= 1).
LIST_OUTPUTS = os.environ.get("SPARSEGDN_LIST_OUTPUTS", "0") == "1"
# (pipeline stages, programs an SM) of the two launches, measured best on the H200 (batch 22): the zero-state
# list two stages at two programs an SM (115 KB of shared memory each, 107 KB solving Tinv), the list with a state
# one stage at two. SPARSEGDN_LIST_LAUNCH="SxP,SxP" sets them (zero-state list, list with a state), read at import,
# so that a process-level A/B (benchmarks/ab_rounds.sh) can time other shapes: stages 1 or 2, 1 to 4 programs an SM
# (the list with a state runs one stage beside the chain pass: ListCall refuses two there).
_LIST_LAUNCH_SETTING = os.environ.get("SPARSEGDN_LIST_LAUNCH", "2x2,1x2")


def _launch_shapes(setting: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """SPARSEGDN_LIST_LAUNCH's two (stages, programs an SM): "SxP,SxP", stages 1 or 2, programs 1 to 4."""
    parts = [part.partition("x") for part in setting.split(",")]
    if len(parts) != 2 or not all(stages in ("1", "2") and per_sm in ("1", "2", "3", "4")
                                  for stages, _, per_sm in parts):
        raise ValueError(f"SPARSEGDN_LIST_LAUNCH={setting!r}: two launch shapes 'SxP,SxP' (zero-state list, list "
                         f"with a state), each 1 or 2 stages by 1 to 4 programs an SM, e.g. '2x2,1x2'")
    (own_stages, _, own_per_sm), (state_stages, _, state_per_sm) = parts
    return (int(own_stages), int(own_per_sm)), (int(state_stages), int(state_per_sm))


OWN_LAUNCH, STATE_LAUNCH = _launch_shapes(_LIST_LAUNCH_SETTING)
# A register cap for each list's programs (0: none, the default): (zero-state list, list with a state). Uncapped,
# the zero-state list takes 227 registers a thread at two stages (244 at one) and the list with a state 255
# (benchmarks/gluon_probe.py --list-caps: sm_90, bf16, band 1 solved, claims, overlapped; batch 35's reordered
# kernel), so registers hold two programs a multiprocessor; the zero-state list at one stage (57,608 B of shared
# memory) fits three under a cap of 168 (44 local-memory instructions; 98 at 128, still three by shared memory).
# The list with a state (106,760 B at one stage) stays at two by shared memory. Batch 35's SM ledger (H100, 128K):
# the two lists are 293 of our call's 502-546 SM-ms, at 8 resident warps a multiprocessor. Timed on an H100 before
# the reorder (batch 35, benchmarks/overlap_check.py, public call; then 128 local-memory instructions under 168):
# the zero-state list at one stage, three programs and 168 lost 8% / 10% at 32K / 128K (4.640 against 4.216-4.229
# ms), at 128 21-23%, both lists at 168 19-21% (whether three were resident, and the spills' own cost, not
# measured). On the reordered kernel (batch 36, H100, two rounds) the same zero-state list at 168 tied the default:
# medians 0.2-0.7% lower, the 128K samples overlapping (4.154-4.163 against 4.156-4.177 ms); ncu found three programs
# resident and 3.8 M local loads executed. Off; SPARSEGDN_LIST_MAXNREG="own,state" sets them, read at import.
_LIST_MAXNREG_SETTING = os.environ.get("SPARSEGDN_LIST_MAXNREG", "0,0")


def _register_caps(setting: str) -> tuple[int, int]:
    """SPARSEGDN_LIST_MAXNREG's two caps, each 0 (none) or a multiple of 8 from 64 to 248; anything else refused."""
    parts = setting.split(",")
    if len(parts) != 2 or not all(part.isdigit() and int(part) in REGISTER_CAPS for part in parts):
        raise ValueError(f"SPARSEGDN_LIST_MAXNREG={setting!r}: two caps 'own,state', each 0 (no cap) or a multiple "
                         f"of 8 from 64 to 248")
    return int(parts[0]), int(parts[1])


LIST_MAXNREG = _register_caps(_LIST_MAXNREG_SETTING)
# The zero-state list on a stream of its own beside the chain pass (it reads no snapshot), or after it on the
# call's stream (the default). Off: on the H200 at 128K (benchmark inputs) the side stream took 5.75-5.81 ms against
# 4.75 on one stream with whole chains and Tinv stored (batch 22, fixed shares; 5.72-5.80 again in batch 23 call
# 9); with claimed chunks 4.25-4.28 in two processes and 5.91-5.97 in a third (batch 23 calls 4, 9); with Tinv
# solved 4.32-5.89 fixed and 4.17-6.05 claimed (calls 4-5: the two rounds of one process can differ so);
# with warm-up segments of 256 3.69-4.13 (stored, claimed) and 3.92-3.98 (solved, fixed) against 3.78-3.90 on
# one stream: no gain that holds from run to run.
SIDE_STREAM = os.environ.get("SPARSEGDN_LIST_SIDE_STREAM", "0") == "1"
# Each program claims its next chunk from its list's counter (an atomic add, one thread, broadcast through shared
# memory) instead of taking a fixed share (pid, pid + programs, ...), so that beside the chain pass (SIDE_STREAM)
# programs that find no SM free until the chains' programs end take fewer chunks. Off: on the H200 (2026-12-04,
# backend entry at 128K, benchmark inputs, budget 0.29, warm-up segments of 256; analysis/results/overlap/batch23,
# call 6) claims took 3.90-3.91 ms against fixed shares' 3.78-3.81 on one stream (Tinv stored; solved 4.01-4.03
# against 3.89-3.90): the claim sits before each tile's loads. Beside the chains (calls 4-5) the side stream's
# times jumped between rounds either way (4.17-6.05 ms claimed, 4.32-5.89 fixed, whole chains, Tinv solved); with
# Tinv stored and whole chains, claims took 4.25-4.28 in two processes of three and 5.91-5.97 in the third, fixed
# shares 5.72-5.80 (calls 4, 9): claims open a faster mode, but the arrangement does not hold it. With OVERLAP_LISTS
# claims are what makes the overlap pay (batch 24 call 4: 3.89 against 4.38 ms at 128K with fixed shares).
# SPARSEGDN_LIST_CLAIM=1 turns it on; the lists forward.LISTS_FROM takes by default claim whatever it says.
CLAIM = os.environ.get("SPARSEGDN_LIST_CLAIM", "0") == "1"
# With CLAIM and two stages, each program claims the position two tiles ahead at the start of a tile and reads it
# (one thread's atomic, its tile looked up halfway, both passed through shared memory) at the tile's end, so that
# neither the atomic's round trip nor the tile's lookup sits between a tile's start and its work. Without it the
# next position is claimed at the tile's start and read at once (a barrier waits for the atomic), then its tile is
# looked up before the next loads can be issued: ncu's source counters (batch 38, H100, 128K, the zero-state list)
# put 12.6% of the warps' stall samples on the claim and 7% on the two lookups. Off: on the H100 (batch 38,
# analysis/results/overlap/batch38/calls.md; benchmark inputs at 128K) the zero-state list took 1.015 ms under ncu
# with it and relaxed claims, 1.143 with batch 37's acq_rel claims read at once (relaxed claims read at once were not
# measured so); its serial call tied with relaxed claims read at once, and its public call, whose lists run beside
# the chain pass and end with it, was 0.2-0.8% slower than theirs at 32K and 128K in each of five rounds (the
# zero-state list at its default launch, 2 x 2; at 1 x 1 it was 0.9% faster in one round): the chains are that
# call's critical path (2.65-2.68 ms beside the lists, 2.20 alone). With blocks of 16 in the chains
# (SPARSEGDN_CHAIN_BV=16) it was the fastest form in two rounds (4.150-4.158 ms at 128K against 4.166-4.181 for
# today's default). Once the chains beside the lists are cut into segments (forward.lists_segment) they no longer
# hold the call to their walk and the lists' own speed counts: batch 42 (H100, analysis/results/overlap/batch42 call 1,
# three alternating rounds, public call at 32K / 64K / 128K) timed claims ahead at 1.112 / 2.104 / 4.092 ms against
# 1.103 / 2.096 / 4.066 beside whole chains (+0.8 / +0.4 / +0.6%), and beside segments of 1,024 at 3.942 against 3.978
# at 128K (-0.9%; +0.5% at 32K-64K, where 1,024 cuts no chain). So the default, "cut", claims ahead only where the
# chains beside the lists walk segments (ListCall's `cut`: segments shorter than the call's chunk count,
# state_pass.segmented_chains). Which chains are long enough to be cut is known on the device only (the selection's
# counts), so a call whose every chain is shorter than its segment (the `uniform` selector's longest chain at 128K,
# 594 of 2,048 chunks, against segments of 1,024) claims ahead beside chains that are in fact whole, the form that lost
# 0.4-0.8% above. SPARSEGDN_LIST_CLAIM_AHEAD=1 claims ahead always, 0 never (the zero-state list at two stages, with
# CLAIM: claims_ahead).
_CLAIM_AHEAD_SETTING = os.environ.get("SPARSEGDN_LIST_CLAIM_AHEAD", "cut")
if _CLAIM_AHEAD_SETTING not in ("0", "1", "cut"):
    raise ValueError(f"SPARSEGDN_LIST_CLAIM_AHEAD={_CLAIM_AHEAD_SETTING!r}: 1 (always), 0 (never) or cut (where the "
                     "chains beside the lists are cut into segments)")
CLAIM_AHEAD: bool | str = "cut" if _CLAIM_AHEAD_SETTING == "cut" else _CLAIM_AHEAD_SETTING == "1"


def claims_ahead(claim: bool, stages: int, has_state: bool, cut: bool = False) -> bool:
    """Whether a list's launch claims two tiles ahead (CLAIM_AHEAD; "cut": where `cut`, the chains beside the lists
    walk segments shorter than the call's chunk count): the zero-state list at two stages, claiming."""
    wanted = cut if CLAIM_AHEAD == "cut" else CLAIM_AHEAD is True
    return wanted and claim and stages == 2 and not has_state

# The two lists beside the chain pass on the call's stream, as programmatic dependent launches: the chain pass's
# programs each let the next kernel start as they begin (state_pass's PUBLISH), the zero-state list then fills the
# SMs the chains leave, and the list with a state starts once the zero-state list's programs have all started and
# waits tile by tile for its snapshot's progress count (as state_output's output programs do). Every chain program
# has started before any list program can wait, and chains wait on nothing, so every wait ends; a driver that starts
# a dependent only when the kernel before it ends loses the overlap, not the result. Off: on the H200 (2026-12-04,
# benchmark inputs, budget 0.29, band 1, whole chains; analysis/results/overlap/batch24) with CLAIM, Tinv solved
# here and the calls launched from their plans (call 12: benchmarks/config_probe.py --timed baseline
# list-outputs-overlap-solved-claim) the backend entry took 1.04 ms at 32K and 3.93-3.94 at 128K against the one
# launch's 1.14 and 4.40 (-9% / -11%), the public call 4.02 against 4.49-4.58 at 128K but 1.22-1.24 against 1.19 at
# 32K; its outputs equal the serial lists' bit for bit (benchmarks/overlap_check.py). With fixed shares it gained
# less (4.28-4.39 at 128K: the list with a state starts late and each program walks its share in order); with
# warm-up segments it loses (4.07-4.32). Off as a switch: forward.LISTS_FROM takes these lists (with CLAIM) by default
# for long calls whose selection keeps at most half of the events (batch 25: they lose at 4K-8K and with every event
# kept). SPARSEGDN_LIST_OVERLAP=1 turns it on for every call (with LIST_OUTPUTS; SIDE_STREAM is then ignored).
OVERLAP_LISTS = os.environ.get("SPARSEGDN_LIST_OVERLAP", "0") == "1"
HEAD_DIM = 128
PROGRESS_COLUMNS = tl.constexpr(PROGRESS_BV)     # the value columns of one progress count (state_pass's)

try:                        # Triton 3.6's Gluon; absent or unusable elsewhere (then `eligible` says so)
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                                   warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    GLUON_PROBLEM = None
except ImportError as error:                # pragma: no cover - depends on the installed Triton
    GLUON_PROBLEM = f"Gluon unavailable ({error})"


def eligible(q, k, v, t_inv, vectors, snapshot_dtype, band) -> str | None:
    """None when this path can write the outputs of these tensors, else why not (chunk_output writes them). The
    tensors' own conditions first, then the machine's. t_inv None: bands 0 and 1 are solved here."""
    if vectors is None:
        return "the chunk vectors are not stored by pass 1"
    return eligible_inputs(q, k, v, t_inv is None, snapshot_dtype, band)


def eligible_inputs(q, k, v, solved, snapshot_dtype, band) -> str | None:
    """`eligible` before pass 1 has run, for a design that stores the vectors: `solved` when pass 1 will not store
    Tinv (forward.store_inverse), snapshot_dtype the dtype of the lists pass 3 will write."""
    if solved and band > 1:
        return "Tinv not stored by pass 1 for a band above 1 (solved here only for bands 0 and 1)"
    if solved and solve_precision(q.dtype) != "tf32":
        return "Tinv solved at a precision other than tf32 (SPARSEGDN_SOLVE_PRECISION; solved here in tf32 only)"
    if FOLD_SCALES:
        return "FOLD_SCALES rounds M differently"
    if q.dtype not in (torch.bfloat16, torch.float16) or not (q.dtype == k.dtype == v.dtype == snapshot_dtype):
        return "inputs other than bfloat16 or float16 (all alike)"
    if q.shape[-1] != HEAD_DIM or v.shape[-1] != HEAD_DIM:
        return f"head sizes other than {HEAD_DIM}"
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
        return "q, k or v not contiguous"
    if any(x.data_ptr() % 16 for x in (q, k, v)):
        return "q, k or v not 16-byte aligned (TMA reads them)"
    if q.shape[0] > 1 and q.shape[1] % CHUNK_SIZE:
        return "batch rows with a ragged last chunk"
    if GLUON_PROBLEM:
        return GLUON_PROBLEM
    if INTERPRET:
        return "the interpreter runs no Gluon kernel"
    if not (v.is_cuda and torch.cuda.get_device_capability(v.device) == (9, 0)):
        return "not an sm_90 (Hopper) device"
    return None


LIST_BLOCK = 1024      # list positions a program of make_chunk_lists' kernels orders


def make_chunk_lists(schedule, zero_start):
    """chunk_lists' two tensors made by two small kernels (a count of zero-state chunks per block of LIST_BLOCK
    positions, then each block's ranks placed), so that a launch plan can replay them (torch's ops cannot be)."""
    snapshot_of_chunk = schedule.snapshot_of_chunk
    batch, heads, n_chunks = snapshot_of_chunk.shape
    total = batch * heads * n_chunks
    device = snapshot_of_chunk.device
    n_blocks = cdiv(total, LIST_BLOCK)
    counts = call_record.empty(n_blocks, dtype=torch.int32, device=device)
    tiles = call_record.empty(total, dtype=torch.int32, device=device)
    own_count = call_record.empty(1, dtype=torch.int32, device=device)
    launch_list_counts((n_blocks,), snapshot_of_chunk, counts, total, heads, n_chunks, ZERO_START=zero_start,
                       BLOCK=LIST_BLOCK)
    launch_list_place((n_blocks,), snapshot_of_chunk, counts, tiles, own_count, total, n_blocks, heads, n_chunks,
                      ZERO_START=zero_start, BLOCK=LIST_BLOCK, BLOCKS=triton.next_power_of_2(n_blocks))
    return tiles, own_count


@triton.jit
def _list_position(snapshot_of_chunk_ptr, position, total, HV, NC, ZERO_START: tl.constexpr):
    """For list positions in chunk-major order ((b, c, hv), hv fastest): the tile ((b * HV + hv) * NC + c), whether
    it starts from a state (see chunk_lists) and whether the position exists."""
    live = position < total
    hv = position % HV
    c = (position // HV) % NC
    row = position // (HV * NC) * HV + hv
    tile = row * NC + c
    if ZERO_START:
        first = tl.load(snapshot_of_chunk_ptr + row * NC, mask=live, other=0)
        has_state = tl.load(snapshot_of_chunk_ptr + tile, mask=live, other=0) != first
    else:
        has_state = live
    return tile, has_state & live, live


@triton.jit
def list_counts_kernel(snapshot_of_chunk_ptr, counts_ptr, total, HV, NC, ZERO_START: tl.constexpr,
                       BLOCK: tl.constexpr):
    """counts[block]: the zero-state chunks among this block's list positions."""
    position = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    _, has_state, live = _list_position(snapshot_of_chunk_ptr, position, total, HV, NC, ZERO_START)
    tl.store(counts_ptr + tl.program_id(0), tl.sum((live & ~has_state).to(tl.int32), axis=0))


@triton.jit
def list_place_kernel(snapshot_of_chunk_ptr, counts_ptr, tiles_ptr, own_count_ptr, total, n_blocks, HV, NC,
                      ZERO_START: tl.constexpr, BLOCK: tl.constexpr, BLOCKS: tl.constexpr):
    """This block's tiles at their places: the zero-state ones after those of earlier blocks, the others after every
    zero-state one and those of earlier blocks; block 0 writes the zero-state count."""
    block = tl.program_id(0)
    blocks = tl.arange(0, BLOCKS)
    counts = tl.load(counts_ptr + blocks, mask=blocks < n_blocks, other=0)
    own_total = tl.sum(counts, axis=0)
    own_before = tl.sum(tl.where(blocks < block, counts, 0), axis=0)
    position = block * BLOCK + tl.arange(0, BLOCK)
    tile, has_state, live = _list_position(snapshot_of_chunk_ptr, position, total, HV, NC, ZERO_START)
    own = live & ~has_state
    own_rank = own_before + tl.cumsum(own.to(tl.int32), axis=0) - 1
    state_rank = block * BLOCK - own_before + tl.cumsum(has_state.to(tl.int32), axis=0) - 1
    tl.store(tiles_ptr + tl.where(has_state, own_total + state_rank, own_rank), tile.to(tl.int32), mask=live)
    tl.store(own_count_ptr + tl.arange(0, 1), tl.full([1], 0, tl.int32) + own_total, mask=tl.arange(0, 1) == block)


launch_list_counts = Launcher(list_counts_kernel)
launch_list_place = Launcher(list_place_kernel)


def chunk_lists(schedule, zero_start):
    """In torch's ops, the reference of make_chunk_lists (tests/test_list_output.py): int32 [B * HV * NC] tiles
    ((b * HV + hv) * NC + c), chunk-major within each batch row, the zero-state chunks first and then the chunks
    with a state (each kind in that order), and int32 [1]: how many of the first kind.
    zero_start: no initial state (chunk_output.zero_start), so a chunk that starts from its head pair's snapshot 0
    has no state; else every chunk has one."""
    snapshot_of_chunk = schedule.snapshot_of_chunk
    batch, heads, n_chunks = snapshot_of_chunk.shape
    device = snapshot_of_chunk.device
    if zero_start:
        has_state = snapshot_of_chunk != snapshot_of_chunk[..., :1]
    else:
        has_state = torch.ones_like(snapshot_of_chunk, dtype=torch.bool)
    tile = torch.arange(batch * heads * n_chunks, device=device, dtype=torch.int32).view(batch, heads, n_chunks)
    tile, has_state = tile.transpose(1, 2).reshape(-1), has_state.transpose(1, 2).reshape(-1)
    state_rank = torch.cumsum(has_state, 0, dtype=torch.int32)
    own_rank = torch.cumsum(~has_state, 0, dtype=torch.int32)
    own_count = own_rank[-1:]
    position = torch.where(has_state, own_count + state_rank - 1, own_rank - 1).long()
    tiles = call_record.empty(tile.numel(), dtype=torch.int32, device=device)
    tiles.scatter_(0, position, tile)
    return tiles, own_count


def every_chunk_list(schedule, pair=False):
    """Every chunk of the schedule as one list (for ListCall.own_over), chunk-major as chunk_lists orders it: int32
    tiles ((b * HV + hv) * NC + c) of every value head, or (pair) of the even ones (the kernel's PAIR form takes hv
    and hv + 1 at each), and int32 [1] their count."""
    batch, heads, n_chunks = schedule.snapshot_of_chunk.shape
    device = schedule.snapshot_of_chunk.device
    tile = torch.arange(batch * heads * n_chunks, device=device, dtype=torch.int32).view(batch, heads, n_chunks)
    tile = (tile[:, 0::2] if pair else tile).transpose(1, 2).reshape(-1).contiguous()
    return tile, torch.tensor([tile.numel()], dtype=torch.int32, device=device)


class ListCall:
    """One call's list outputs: o, the lists and the TMA descriptors of everything but the snapshots (made before the
    chain pass stores them). `own` launches the zero-state list, which needs no snapshot (with SIDE_STREAM on a
    stream of its own, issued after the chain pass so that its programs take the SMs the chains leave); `with_state`
    the rest once the snapshots exist, then joins that stream. Both raise chunk_output's flag for a non-finite o."""

    def __init__(self, q, k, v, beta, t_inv, vectors, schedule, flags, *, scale, normalize, out_dtype, zero_start,
                 band, overlap=False, claim=None, cut=False):
        if SIDE_STREAM and not overlap:         # a plan launches on the call's stream only: this key is launched
            call_record.note_unreplayable()     # (otherwise every launch is a Launcher's and a plan replays them)
        batch, tokens, key_heads, _ = q.shape
        value_heads = v.shape[2]
        self.q, self.beta, self.vectors, self.schedule, self.flags = q, beta, vectors, schedule, flags
        self.scale, self.normalize, self.tokens = float(scale), normalize, tokens
        self.key_heads, self.value_heads = key_heads, value_heads
        self.o = call_record.empty(batch, tokens, value_heads, HEAD_DIM, device=q.device, dtype=out_dtype)
        self.solve = t_inv is None              # Tinv's bands 0 to `band` solved in the kernel (not stored)
        self.band = band
        if self.solve:                          # no Tinv read: a stand-in of the type for its descriptor
            t_inv = call_record.empty(CHUNK_SIZE, CHUNK_SIZE, dtype=q.dtype, device=q.device)
        self.tiles, self.own_count = make_chunk_lists(schedule, zero_start)
        self.overlap = overlap                  # launched beside the chain pass (OVERLAP_LISTS)
        self.claim = CLAIM if claim is None else claim      # chunks claimed from a counter (CLAIM)
        self.cut = cut                          # the chains beside these lists walk segments (claims_ahead's `cut`)
        if overlap and STATE_LAUNCH[0] != 1:
            raise ValueError(f"list_output: the list with a state waits before its loads, so beside the chain pass it "
                             f"runs one stage (STATE_LAUNCH is {STATE_LAUNCH})")
        # each list's next position (CLAIM) and its programs that have ended (overlap); unread without either
        self.claims = (call_record.zeros(4, dtype=torch.int32, device=q.device) if self.claim or overlap
                       else self.tiles)
        self.element = element = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}[q.dtype]
        wide = _layout(CHUNK_SIZE, HEAD_DIM, element)
        square = _layout(CHUNK_SIZE, CHUNK_SIZE, element)
        rows = batch * tokens
        self.descriptors = (
            TensorDescriptor.from_tensor(q.view(rows, key_heads * HEAD_DIM), [CHUNK_SIZE, HEAD_DIM], wide),
            TensorDescriptor.from_tensor(k.view(rows, key_heads * HEAD_DIM), [CHUNK_SIZE, HEAD_DIM], wide),
            TensorDescriptor.from_tensor(v.view(rows, value_heads * HEAD_DIM), [CHUNK_SIZE, HEAD_DIM], wide),
            TensorDescriptor.from_tensor(t_inv.view(-1, CHUNK_SIZE), [CHUNK_SIZE, CHUNK_SIZE], square),
            TensorDescriptor.from_tensor(self.o.view(rows, value_heads * HEAD_DIM), [CHUNK_SIZE, HEAD_DIM], wide))
        self.sms = torch.cuda.get_device_properties(q.device).multi_processor_count
        if SIDE_STREAM and not overlap:         # the lists and every input exist from here on the call's stream
            self.ready = torch.cuda.Event()
            self.ready.record()
        self.side = None

    def own(self):
        """The zero-state list: on a side stream (SIDE_STREAM) that waits only for `ready`; with overlap, on the call's
        stream as the chain pass's programmatic dependent."""
        if SIDE_STREAM and not self.overlap:
            self.side = torch.cuda.Stream(device=self.q.device)
            self.side.wait_event(self.ready)
            with torch.cuda.stream(self.side):
                self._launch(None, False, OWN_LAUNCH)
        else:
            self._launch(None, False, OWN_LAUNCH)

    def with_state(self, snapshots, progress=None, segment=0):
        """The chunks with a state (the snapshots stored by the chain pass), then the join; returns o. progress: the
        chain pass's progress counts (state_pass(progress=...), chains cut into segments of `segment` commits, 0 for
        whole chains), waited on tile by tile (overlap: the chain pass may still run)."""
        if self.overlap and progress is None:
            raise ValueError("ListCall(overlap=True).with_state needs the chain pass's progress counts")
        self._launch(snapshots, True, STATE_LAUNCH, progress, segment)
        if self.side is not None:
            torch.cuda.current_stream(self.q.device).wait_stream(self.side)
        return self.o

    def own_over(self, tiles, count, launch, pair=False):
        """The zero-state list's launch over other tiles (a probe's: `every_chunk_list`, each chunk's products as if
        it started from zero) at launch (stages, programs an SM), one value head a position or two (pair: the value
        heads of a key head must come in pairs). The call's own lists are replaced: it is a probe's from here on."""
        if self.claim or self.overlap:
            raise ValueError("ListCall.own_over launches fixed shares alone: make the ListCall with claim=False and "
                             "overlap=False")
        if pair and (self.value_heads // self.key_heads) % 2:
            raise ValueError(f"ListCall.own_over(pair=True) needs an even number of value heads a key head, not "
                             f"{self.value_heads // self.key_heads}")
        self.tiles, self.own_count = tiles, count
        self._launch(None, False, launch, pair=pair)

    def _launch(self, snapshots, has_state, launch, progress=None, segment=0, pair=False):
        """One list's launch. pair: the kernel's PAIR form (a probe's: the tiles then hold even value heads)."""
        from .chunk_loads import FLAG_OUTPUT
        stages, per_sm = launch
        cap = LIST_MAXNREG[has_state]
        if snapshots is None:                   # the zero-state list reads no snapshot: a stand-in of the type
            stand_in = call_record.empty(HEAD_DIM, HEAD_DIM, dtype=self.q.dtype, device=self.q.device)
            snapshots_desc = self._state_descriptor(stand_in)
        else:
            snapshots_desc = self._state_descriptor(snapshots.view(-1, HEAD_DIM))
        q_desc, k_desc, v_desc, t_desc, o_desc = self.descriptors
        n_chunks = self.schedule.snapshot_of_chunk.shape[2]
        launch_list_output(
            (min(self.tiles.numel(), per_sm * self.sms),), q_desc, k_desc, v_desc, t_desc, snapshots_desc, o_desc,
            self.tiles, self.own_count, self.tiles.numel(), self.beta, *self.beta.stride(), self.vectors,
            self.schedule.snapshot_of_chunk, self.schedule.log_decay_since, self.flags, self.scale, self.tokens,
            n_chunks, self.key_heads, self.value_heads, HEAD_DIM, HEAD_DIM, self.normalize, stages, has_state,
            FLAG_OUTPUT.value, self.solve, min(self.band, 1) if self.solve else 1, self.claims, self.claim,
            progress if progress is not None else self.tiles, self.schedule.first_event,
            self.schedule.max_events if progress is not None else 0,      # read only by the waits: one plan else
            max(segment, 1), progress is not None, segment > 0, self.overlap, num_warps=4, launch_pdl=self.overlap,
            **({"maxnreg": cap} if cap else {}), **({"PAIR": True} if pair else {}),
            **({"AHEAD": True} if claims_ahead(self.claim, stages, has_state, self.cut) else {}))

    def _state_descriptor(self, rows):
        return TensorDescriptor.from_tensor(rows, [HEAD_DIM, HEAD_DIM], _layout(HEAD_DIM, HEAD_DIM, self.element))


@functools.lru_cache(maxsize=None)
def _layout(rows, columns, element):
    """The shared-memory layout TMA fills for a [rows, columns] tile of `element` (made once: its Python is not
    free on every call)."""
    return gl.NVMMASharedLayout.get_default_for([rows, columns], element)


if GLUON_PROBLEM is None:
    @gluon.jit
    def list_output_kernel(q_desc, k_desc, v_desc, t_desc, s_desc, o_desc, tiles_ptr, own_count_ptr, total, beta_ptr,
                           beta_sb, beta_st, beta_sh, vectors_ptr, snapshot_of_chunk_ptr, log_decay_since_ptr,
                           flags_ptr, scale, T, NC, H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr,
                           V: gl.constexpr, NORMALIZE: gl.constexpr, STAGES: gl.constexpr, HAS_STATE: gl.constexpr,
                           FLAG: gl.constexpr, SOLVE: gl.constexpr, BAND: gl.constexpr, claims_ptr,
                           CLAIM: gl.constexpr, progress_ptr, first_event_ptr, E, SEGMENT, WAIT: gl.constexpr,
                           SEGMENTED: gl.constexpr, DEPENDENT: gl.constexpr, num_warps: gl.constexpr,
                           PAIR: gl.constexpr = False, AHEAD: gl.constexpr = False):
        """The outputs of one list: the zero-state chunks (tiles[:own_count]) or the chunks with a state (the rest).
        Persistent over one or two stages: program pid takes the list's positions pid, pid + programs, ... (or
        claims each from the list's counter, CLAIM); with two stages the next position's tiles are loaded (TMA, one
        mbarrier a stage) before this one's products. round(beta V) is written
        over v and X = round(beta e^gamma k_scale K) over k in shared memory once they are read; o leaves by TMA
        from q's buffer. SOLVE: Tinv's bands 0 to BAND are solved here from the k tile (gluon_band_solve, band_solve's
        products and roundings) into one buffer, instead of read; the solve's float32 scratch is q's buffer in the
        zero-state list (q is used up by then) and 16 KB of its own in the other.

        DEPENDENT (OVERLAP_LISTS): launched as the programmatic dependent of the kernel before it on the stream (the
        zero-state list of the chain pass, the list with a state of the zero-state list), so it may run beside it;
        the zero-state list lets its own dependent start once its programs have all started, and the program of
        each list that ends last waits for the kernel before it to end (griddepcontrol.wait), so that a list ends
        only after the chains do. WAIT (the list with a state, one stage): each tile's snapshot is loaded once the
        chain pass has published it (state_pass's progress counts, as state_output's output programs wait).

        PAIR (a probe's form, benchmarks/gluon_probe.py --pairs; the zero-state list solving Tinv only): each list
        position is a chunk of value head hv (even) and hv + 1, two value heads of one key head (HV / H even):
        q and k are loaded once for both, v for each into a buffer of its own; the heads' products and roundings are
        the unpaired kernel's, so o is equal bit for bit. The solve's scratch is its own (q is read again) and each
        head's o leaves from its v's buffer. On an H100 (batch 36, every chunk as the zero-state list's, benchmark
        inputs) at one stage and two programs an SM it took 0.441 / 1.692 ms at 32K / 128K against the unpaired
        list's 0.433 / 1.665 at its launch (two stages, two programs) and 0.477 / 1.820 at one stage: loading q and k
        once buys what the second stage buys; two stages of pairs leave room for one program an SM (2.572 ms)."""
        CHUNK: gl.constexpr = 64
        gl.static_assert(not WAIT or (HAS_STATE and STAGES == 1), "waits only in the list with a state, one stage")
        if DEPENDENT and not HAS_STATE:
            _grid_dependency_launch(num_warps)
        dtype: gl.constexpr = q_desc.dtype
        q_bufs = gl.allocate_shared_memory(dtype, [STAGES, CHUNK, K], q_desc.layout)
        k_bufs = gl.allocate_shared_memory(dtype, [STAGES, CHUNK, K], k_desc.layout)
        HEADS: gl.constexpr = 2 if PAIR else 1
        gl.static_assert(not PAIR or (SOLVE and not HAS_STATE), "pairs in the zero-state list solving Tinv only")
        v_bufs = gl.allocate_shared_memory(dtype, [STAGES * HEADS, CHUNK, V], v_desc.layout)
        T_BUFFERS: gl.constexpr = 1 if SOLVE else STAGES
        t_bufs = gl.allocate_shared_memory(dtype, [T_BUFFERS, CHUNK, CHUNK], t_desc.layout)
        INVERSE_BYTES: gl.constexpr = 0 if SOLVE else 2 * CHUNK * CHUNK
        if HAS_STATE:
            s_bufs = gl.allocate_shared_memory(dtype, [STAGES, K, V], s_desc.layout)
            TILE_BYTES: gl.constexpr = 2 * CHUNK * (2 * K + V) + INVERSE_BYTES + 2 * K * V
        else:
            s_bufs = t_bufs                                         # unused
            TILE_BYTES: gl.constexpr = 2 * CHUNK * (2 * K + HEADS * V) + INVERSE_BYTES
        if SOLVE and (HAS_STATE or PAIR):   # q is read again by the state's part or the next head: a scratch of its own
            solve_scratch = gl.allocate_shared_memory(gl.float32, [CHUNK, CHUNK],
                                                      gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for st in gl.static_range(STAGES):
            mbarrier.init(bars.index(st), count=1)
        if SOLVE:
            band_zero_blocks(t_bufs.index(0), BAND, num_warps)      # the blocks outside the band, once
        own_count = gl.load(own_count_ptr)
        if HAS_STATE:
            begin = own_count
            end = total
        else:
            begin = own_count * 0
            end = own_count
        gl.static_assert(STAGES <= 2, "one or two stages (the next position is claimed one tile ahead)")
        pid = gl.program_id(0)
        programs = gl.num_programs(0)
        position = _next_position(claims_ptr, begin, pid, programs, 0, CLAIM, HAS_STATE)
        tile = gl.load(tiles_ptr + position, mask=position < end, other=0)
        gl.static_assert(not AHEAD or (CLAIM and STAGES == 2), "claims two tiles ahead: CLAIM with two stages")
        lanes: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        if AHEAD:       # the second position claimed now; each tile claims the one two ahead (thread 0's atomic)
            lane = gl.arange(0, 32 * num_warps, layout=lanes)
            first = lane == 0
            slots = gl.allocate_shared_memory(gl.int32, [2, 32 * num_warps], gl.SwizzledSharedLayout(1, 1, 1, [0]))
            next_position = _next_position(claims_ptr, begin, pid, programs, 1, CLAIM, HAS_STATE)
            next_tile = gl.load(tiles_ptr + next_position, mask=next_position < end, other=0)
        if STAGES == 2:                                             # the prologue: the first tile's loads
            _issue_loads(q_desc, k_desc, v_desc, t_desc, s_desc, q_bufs, k_bufs, v_bufs, t_bufs, s_bufs, bars,
                         tile, snapshot_of_chunk_ptr, 0, position < end, T, NC, H, HV, K, V,
                         TILE_BYTES, HAS_STATE, SOLVE, progress_ptr, first_event_ptr, E, SEGMENT, WAIT, SEGMENTED,
                         num_warps, HEADS)

        acc64: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                        instr_shape=[16, CHUNK, 16])
        acc_o: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                        instr_shape=[16, V, 16])
        rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
        i = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc64))
        j = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, acc64))
        r = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, rows_layout))
        causal = i[:, None] >= j[None, :]
        n = 0
        while position < end:
            row = tile // NC
            b = row // HV
            hv = row % HV
            c = tile % NC
            if AHEAD:                                               # claimed at the last tile's start, read at its end
                ahead = next_position
                ahead_tile = next_tile
                # two tiles ahead, read at this tile's end; the added 1 as thread 0's flag, not a constant, which
                # ptxas would aggregate over the warp and broadcast (a shuffle right behind the atomic, waiting)
                claimed = gl.atomic_add(claims_ptr + HAS_STATE + lane * 0, first.to(gl.int32), mask=first,
                                        sem="relaxed")
            elif STAGES == 2:                                       # the next tile's loads before this one's work
                ahead = _next_position(claims_ptr, begin, pid, programs, n + 1, CLAIM, HAS_STATE)
                ahead_tile = gl.load(tiles_ptr + ahead, mask=ahead < end, other=0)
            else:
                ahead = position
                ahead_tile = tile
            gl.thread_barrier()                                     # the stage about to be loaded is read by all
            tma.store_wait(0)                                       # and the o that left from it has left
            _issue_loads(q_desc, k_desc, v_desc, t_desc, s_desc, q_bufs, k_bufs, v_bufs, t_bufs, s_bufs, bars,
                         ahead_tile, snapshot_of_chunk_ptr, (n + STAGES - 1) % STAGES, ahead < end, T, NC, H,
                         HV, K, V, TILE_BYTES, HAS_STATE, SOLVE, progress_ptr, first_event_ptr, E, SEGMENT, WAIT,
                         SEGMENTED, num_warps, HEADS)
            for g in gl.static_range(HEADS):                        # PAIR: value heads hv and hv + 1 in turn
                tile_h = tile + g * NC
                hv_h = hv + g
                base = tile_h.to(gl.int64) * 2 * CHUNK              # this chunk's vectors: gamma, k's inverse norms
                gamma_i = gl.load(vectors_ptr + base + i)
                gamma_j = gl.load(vectors_ptr + base + j)
                k_scale_j = gl.load(vectors_ptr + base + CHUNK + j)
                token_r = c * CHUNK + r
                beta_r = gl.load(beta_ptr + b * beta_sb + token_r * beta_st + hv_h * beta_sh, mask=token_r < T,
                                 other=0.0).to(gl.float32)
                if g == 0:
                    stage = n % STAGES
                    mbarrier.wait(bars.index(stage), (n // STAGES) & 1)
                    q_smem = q_bufs.index(stage)
                    k_smem = k_bufs.index(stage)
                v_smem = v_bufs.index(stage * HEADS + g)
                # Q K^T and (SOLVE) K K^T issued together; P is made before the solve and round(beta V) after it, so
                # that neither S nor the decays nor the values are held through it. Batch 35 (H100, 128K;
                # reorder.sh): the list with a state had 42 local-memory instructions compiled, now 2; its launch
                # 0.942 ms serialized against 0.995 (one ncu sample each); the public call's medians 0.8-1.2% faster
                # at 32K and 0.3-0.5% at 128K (about the rounds' drift; its serial twin faster in every sample). The
                # zero-state list's solve writes q's buffer: band_inverse_batched's first barrier keeps it after
                # every warp's read of q. PAIR: both heads make Q K^T and K K^T from the same q and k (no product is
                # held from one head to the next); q's scale is taken once.
                s = warpgroup_mma(q_smem, k_smem.permute((1, 0)),
                                  gl.zeros([CHUNK, CHUNK], gl.float32, layout=acc64), use_acc=False, is_async=True)
                if SOLVE:       # A = decayed beta K K^T below the diagonal (band_solve.decayed_kkt), then its Tinv
                    kk = warpgroup_mma(k_smem, k_smem.permute((1, 0)),
                                       gl.zeros([CHUNK, CHUNK], gl.float32, layout=acc64), use_acc=False,
                                       is_async=True)
                if g == 0:
                    qf = q_smem.load(rows_layout).to(gl.float32)
                    if NORMALIZE:
                        q_scale = gl.rsqrt(gl.sum(qf * qf, axis=1) + 1e-6)      # chunk_loads.inverse_norm's
                    else:
                        q_scale = gl.sum(qf * 0.0, axis=1) + 1.0
                if SOLVE:
                    token_i = c * CHUNK + i
                    beta_i = gl.load(beta_ptr + b * beta_sb + token_i * beta_st + hv_h * beta_sh, mask=token_i < T,
                                     other=0.0).to(gl.float32)
                    k_scale_i = gl.load(vectors_ptr + base + CHUNK + i)
                    s, kk = warpgroup_mma_wait(num_outstanding=0, deps=(s, kk))
                else:
                    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
                # band_solve.log_decay_between's cap: a NaN (a cumulative sum past float32's range) stays NaN, so
                # that the overflow reaches o and its flag
                decay = gl.exp(gl.minimum(gl.where(causal, gamma_i[:, None] - gamma_j[None, :], 0.0), 0.0,
                                          propagate_nan=tl.PropagateNan.ALL))
                q_scale_i = gl.convert_layout(q_scale, gl.SliceLayout(1, acc64))
                p = gl.where(causal, s * (q_scale_i[:, None] * k_scale_j[None, :]) * decay, 0.0)
                p_op = gl.convert_layout(p.to(dtype),
                                         gl.DotOperandLayout(operand_index=0, parent=acc64, k_width=2))
                if SOLVE:
                    a = gl.where(i[:, None] > j[None, :],
                                 kk * ((beta_i * k_scale_i)[:, None] * k_scale_j[None, :]) * decay, 0.0)
                    if HAS_STATE or PAIR:       # q is read again (the state's part, the next head)
                        scratch = solve_scratch
                    else:       # q is used up (its scale taken, Q K^T done): its 16 KB hold the solve
                        scratch = q_smem._reinterpret(gl.float32, [CHUNK, CHUNK],
                                                      gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
                    band_inverse_batched(a, scratch, t_bufs.index(0), BAND, num_warps)
                    fence_async_shared()
                    gl.thread_barrier()
                if AHEAD and g == HEADS - 1:    # the claimed position's tile, looked up halfway (thread 0)
                    claimed_tile = gl.load(tiles_ptr + begin + claimed, mask=first & (begin + claimed < end), other=0)
                m = warpgroup_mma(p_op, t_bufs.index(stage % T_BUFFERS),
                                  gl.zeros([CHUNK, CHUNK], gl.float32, layout=acc64), use_acc=False, is_async=True)
                values = (beta_r[:, None] * v_smem.load(rows_layout).to(gl.float32)).to(dtype)
                gl.thread_barrier()                                     # every warp's read of v done
                v_smem.store(values)                                    # round(beta V) over v
                if HAS_STATE:
                    gamma_r = gl.load(vectors_ptr + base + r)
                    k_scale_r = gl.load(vectors_ptr + base + CHUNK + r)
                    x = (beta_r * gl.exp(gamma_r) * k_scale_r)[:, None] * k_smem.load(rows_layout).to(gl.float32)
                    gl.thread_barrier()                                 # every warp's read of k done
                    k_smem.store(x.to(dtype))                           # X over k
                fence_async_shared()
                gl.thread_barrier()
                m = warpgroup_mma_wait(num_outstanding=0, deps=(m,))
                m_op = gl.convert_layout(m.to(dtype),
                                         gl.DotOperandLayout(operand_index=0, parent=acc_o, k_width=2))
                if HAS_STATE:
                    mx = warpgroup_mma(m_op, k_smem, gl.zeros([CHUNK, K], gl.float32, layout=acc_o), use_acc=False,
                                       is_async=True)
                    mx = warpgroup_mma_wait(num_outstanding=0, deps=(mx,))
                    decay_since = gl.exp(gl.load(log_decay_since_ptr + tile_h))
                    gamma_o = gl.load(vectors_ptr + base + gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc_o)))
                    q_rows = gl.convert_layout(q_scale, gl.SliceLayout(1, acc_o)) * gl.exp(gamma_o)
                    left = (q_rows[:, None] * q_smem.load(acc_o).to(gl.float32) - mx) * decay_since
                    left_op = gl.convert_layout(left.to(dtype),
                                                gl.DotOperandLayout(operand_index=0, parent=acc_o, k_width=2))
                    o = warpgroup_mma(left_op, s_bufs.index(stage),
                                      gl.zeros([CHUNK, V], gl.float32, layout=acc_o), use_acc=False, is_async=True)
                    o = warpgroup_mma(m_op, v_smem, o, is_async=True)
                else:
                    o = warpgroup_mma(m_op, v_smem, gl.zeros([CHUNK, V], gl.float32, layout=acc_o),
                                      use_acc=False, is_async=True)
                o = warpgroup_mma_wait(num_outstanding=0, deps=(o,))
                stored = (o * scale).to(o_desc.dtype)
                # rows past T hold zeros (TMA filled q, k and v with zeros there) and are not stored (TMA clips
                # them); bad is NaN exactly when one is not finite
                bad = gl.sum(gl.sum(stored.to(gl.float32) * 0.0, axis=1), axis=0)
                gl.store(flags_ptr + FLAG, 1, mask=bad != bad)
                if PAIR:        # q is read by the next head: o leaves from v's buffer (v is used up by o's product)
                    o_smem = v_smem
                else:           # q is used up: o leaves from its buffer
                    o_smem = q_smem
                gl.thread_barrier()                                 # every warp's read of it done
                o_smem.store(stored)
                if AHEAD and g == HEADS - 1:    # thread 0's claim and its tile, for every thread after the barrier
                    slots.index(0).store(begin + claimed)
                    slots.index(1).store(claimed_tile)
                fence_async_shared()
                gl.thread_barrier()
                tma.async_copy_shared_to_global(o_desc, [b * T + c * CHUNK, hv_h * V], o_smem)
            if STAGES == 2:
                position = ahead
                tile = ahead_tile
            else:
                position = _next_position(claims_ptr, begin, pid, programs, n + 1, CLAIM, HAS_STATE)
                tile = gl.load(tiles_ptr + position, mask=position < end, other=0)
            if AHEAD:       # slot 0 of each (thread 0's): gl.max over the one element's copies
                next_position = gl.max(slots.index(0).slice(0, 1).load(lanes), axis=0)
                next_tile = gl.max(slots.index(1).slice(0, 1).load(lanes), axis=0)
            n += 1
        tma.store_wait(0)
        for st in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(st))
        if DEPENDENT:       # the list's last program to end waits for the kernel before it (claims_ptr[2 + list])
            gl.thread_barrier()
            ended = gl.atomic_add(claims_ptr + (3 if HAS_STATE else 2), 1)
            if ended == programs - 1:
                _grid_dependency_wait(num_warps)

    @gluon.jit
    def _every_thread(ASM: gl.constexpr, num_warps: gl.constexpr):
        """One PTX instruction (no operands) run once by every thread (Gluon's inline assembly wants a tensor)."""
        layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        gl.inline_asm_elementwise(ASM, "=r,r", [gl.full([32 * num_warps], 0, gl.int32, layout)], dtype=gl.int32,
                                  is_pure=False, pack=1)

    @gluon.jit
    def _grid_dependency_launch(num_warps: gl.constexpr):
        """griddepcontrol.launch_dependents (state_pass.launch_dependents in Gluon)."""
        _every_thread("griddepcontrol.launch_dependents; mov.b32 $0, $1;", num_warps)

    @gluon.jit
    def _grid_dependency_wait(num_warps: gl.constexpr):
        """griddepcontrol.wait: until the kernel this one depends on has ended and its stores are visible."""
        _every_thread("griddepcontrol.wait; mov.b32 $0, $1;", num_warps)

    @gluon.jit
    def _wait_for_snapshot(progress_ptr, first_event_ptr, snapshot, row, hv, b, E, NC, SEGMENT, HV: gl.constexpr,
                           V: gl.constexpr, SEGMENTED: gl.constexpr, num_warps: gl.constexpr):
        """Spin until every value block of head pair `row`'s chain (of its segment, SEGMENTED) has published
        snapshot `snapshot` (chunk_output.wait_for_snapshot's counts and its relaxed poll: volatile loads, then one
        acquire), then fence the generic proxy's stores before the async proxy's (TMA) read of it."""
        BLOCKS: gl.constexpr = V // PROGRESS_COLUMNS
        needed = snapshot.to(gl.int64) - (b * (E + HV) + gl.load(first_event_ptr + row).to(gl.int64) + hv) + 1
        counter = row.to(gl.int64)
        if SEGMENTED:
            counter = counter * ((NC + SEGMENT - 1) // SEGMENT) + gl.maximum(needed - 2, 0) // SEGMENT
        layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        counters = progress_ptr + counter * BLOCKS + gl.arange(0, BLOCKS, layout=layout)
        stored = gl.min(gl.load(counters, volatile=True), axis=0)
        while stored < needed:
            stored = gl.min(gl.load(counters, volatile=True), axis=0)
        gl.atomic_add(counters, gl.full([BLOCKS], 0, gl.int32, layout), sem="acquire", scope="gpu")
        gl.thread_barrier()
        _every_thread("fence.proxy.async.global; mov.b32 $0, $1;", num_warps)

    @gluon.jit
    def _next_position(claims_ptr, begin, pid, programs, n, CLAIM: gl.constexpr, HAS_STATE: gl.constexpr):
        """The list position of a program's n-th tile: claimed from the list's counter (CLAIM: the programs that
        start late take fewer tiles), else pid + n programs on (a fixed share each)."""
        # relaxed: the counter only hands out positions. Triton's default, acq_rel, compiled to a GPU-wide fence
        # before the atomic and an L1 flush after it, every tile; relaxed, the serial call ran 2-3% faster at 32K
        # and 3-5% at 128K, and the public call tied at 128K (+0.5% to -0.2%) and was 0.2-0.5% faster at 32K (batch
        # 38, H100, three rounds)
        if CLAIM:
            return begin + gl.atomic_add(claims_ptr + HAS_STATE, 1, sem="relaxed")
        return begin + pid + n * programs

    @gluon.jit
    def _issue_loads(q_desc, k_desc, v_desc, t_desc, s_desc, q_bufs, k_bufs, v_bufs, t_bufs, s_bufs, bars, tile,
                     snapshot_of_chunk_ptr, stage, live, T, NC, H: gl.constexpr, HV: gl.constexpr,
                     K: gl.constexpr, V: gl.constexpr, TILE_BYTES: gl.constexpr, HAS_STATE: gl.constexpr,
                     SOLVE: gl.constexpr, progress_ptr, first_event_ptr, E, SEGMENT, WAIT: gl.constexpr,
                     SEGMENTED: gl.constexpr, num_warps: gl.constexpr, HEADS: gl.constexpr):
        """The TMA loads of `tile` (a list position's, looked up by the caller) into `stage` (nothing where live is
        false): v of HEADS value heads from hv on; WAIT: the snapshot's once the chain pass has published it, after
        the others are on their way."""
        CHUNK: gl.constexpr = 64
        row = tile // NC
        b = row // HV
        hv = row % HV
        c = tile % NC
        token = b * T + c * CHUNK
        head = (hv // (HV // H)) * K
        bar = bars.index(stage)
        mbarrier.expect(bar, TILE_BYTES, pred=live)
        tma.async_copy_global_to_shared(q_desc, [token, head], bar, q_bufs.index(stage), pred=live)
        tma.async_copy_global_to_shared(k_desc, [token, head], bar, k_bufs.index(stage), pred=live)
        for g in gl.static_range(HEADS):
            tma.async_copy_global_to_shared(v_desc, [token, (hv + g) * V], bar, v_bufs.index(stage * HEADS + g),
                                            pred=live)
        if not SOLVE:
            tma.async_copy_global_to_shared(t_desc, [tile * CHUNK, 0], bar, t_bufs.index(stage), pred=live)
        if HAS_STATE:
            snapshot = gl.load(snapshot_of_chunk_ptr + tile, mask=live, other=0)
            if WAIT:
                if live:
                    _wait_for_snapshot(progress_ptr, first_event_ptr, snapshot, row, hv, b, E, NC, SEGMENT, HV, V,
                                       SEGMENTED, num_warps)
            tma.async_copy_global_to_shared(s_desc, [snapshot * K, 0], bar, s_bufs.index(stage), pred=live)

    # Launched straight through the compiled kernel once a key has been compiled (launch.Launcher: Triton's argument
    # binding done once; descriptors keyed as Triton keys them). Its launches stay out of the call plans (ListCall).
    launch_list_output = Launcher(list_output_kernel)
