"""Pass 4, sequential: the sparse recurrence, commits only, one snapshot per commit.

Grid: one program per (value block, batch row, head pair, segment); each walks only its head pair's
events (its slots of the event list), so the sequential work scales with the budget. Between commits
the state only decays, folded into one factor (Schedule.log_decay_since, read by slot from
Schedule.event_decays):

    S <- exp(decay since last commit) S
    v_new = u - w S                                  (w, u, k_commit of the event from pass 3)
    S <- exp(gamma_L) S + k_commit^T v_new,  stored as the next snapshot

Without segments (SEGMENT >= the number of chunks) one program per value block walks the whole
chain from the initial state. With segments, the events of a head pair are cut into runs of SEGMENT
and each run starts from its state computed by segment_scan.py (the commit chain's context
parallelism): the chain a program walks is SEGMENT commits long, not the head pair's whole count.

Folded (FOLDED, forward.FOLD_COMMITS): pass 3 writes m = -k_commit^T w [K, K] and c = k_commit^T u [K, V] in place
of the three tiles, and a commit is S <- e^(gamma_L) S + m S + c for the decayed S: one product waits on the state.

Transposed (TRANSPOSED, the publishing chain pass only): the commits carry S^T, so that both products take their left
operand from registers (commit_transposed).

Streamed (`ready`, forward.STREAM_PREPARE): launched as the programmatic dependent of pass 3's streamed preparation,
each chain waits before every run of PUBLISH commits until pass 3 has marked those events stored (wait_prepared).

Snapshots are stored in the input dtype (pass 5 reads them as a dot operand); the running state and
the final state stay float32.
"""
import os

import torch
import triton
import triton.language as tl

import triton.language.extra.cuda as cuda_extra
from triton.tools.tensor_descriptor import TensorDescriptor

from .chunk_loads import (AUTOTUNE, CHUNK, FLAG_INITIAL_STATE, FLAG_OUTPUT, INTERPRET, any_2d, cdiv, length_bucket,
                          mma, mma_into, not_finite, padded, raise_flag, round_to)
from . import call_record
from .commit_pairs import commit_pair
from .launch import REGISTER_CAPS, Launcher

# Value columns per program, warps and pipeline depth. On the H200 (2026-11-30, `benchmarks/config_probe.py
# --time 32768`, the for loop; analysis/results/kernel_bench.notes.md): state pass at 32K, budget 0.29, BV 16
# 0.790 ms, BV 32 0.868, BV 32 with eight warps 0.984, BV 64 1.079, BV 64 with eight warps 1.314; all computed
# correctly. More programs with narrower blocks win: the pass is a latency-bound chain per program.
# BV 8 (mma.sync products: too narrow for wgmma) compiled without spills and is tried by the autotuner.
CONFIGS = [triton.Config({"BV": bv}, num_warps=4, num_stages=3) for bv in (16, 32, 8)]
# segment_scan multiplies each state block by a float32 K x K map: 256 KB at K = 256, more than the
# H200's 227 KB of shared memory per program (OutOfResources in the GPU matrix, 2026-11-30).
SEGMENT_MAX_KEY_DIM = 128
# Folded commits (forward.FOLD_COMMITS) on a GPU: keys up to this wide (a pipeline stage holds the event's K x K tile).
FOLD_MAX_KEY_DIM = 128
# Tests only: snapshots filled with NaN before the launch, so that a store where none belongs (or a snapshot
# never stored) shows (see state_output.POISON).
POISON = False
WARM_UP_BLOCK = tl.constexpr(128)     # events a step of warm_up_begin's backward search reads
# With progress counts (state_pass(progress=...): a kernel launched after this one waits on them, as
# list_output's list with a state does) every program walks PROGRESS_BV value columns with PROGRESS_WARPS warps, so
# that the counts' layout, [rows, cdiv(V, PROGRESS_BV)], does not depend on the autotuner's choice. 32 and 4: the
# best beside the lists on the H200 (batch 28: the backend entry 4-5% faster than at 16 from 16K, level at 8K; 64,
# 8 warps, 2 warps and the transposed commits all slower). 16 was the separate state pass's best (CONFIGS' note),
# but beside the lists each of a head pair's V / PROGRESS_BV programs reads the same w and k_commit tiles every
# commit. SPARSEGDN_CHAIN_BV and SPARSEGDN_CHAIN_WARPS are read once, at import, so that list_output's waits read
# the same counts' layout.
PROGRESS_BV = int(os.environ.get("SPARSEGDN_CHAIN_BV", "32"))
if PROGRESS_BV not in (8, 16, 32, 64):
    raise ValueError(f"SPARSEGDN_CHAIN_BV={PROGRESS_BV}: 8, 16, 32 or 64 value columns a chain program")
# The publishing chain pass's commits on the state's transpose (commit_transposed: both products with their left
# operand in registers), for unpaired, unfolded chains. Meant with SPARSEGDN_CHAIN_BV=64: Hopper's matrix instruction
# takes a left operand from registers at 64 rows and more, narrower blocks compile to the older mma. Compiled for
# sm_90 (compile_report --lists-path --loop state_pass_kernel; analysis/results/overlap/batch27): a commit of BV 64
# and four warps has no memory barrier and no shared-memory round trip before or between its products (the default's
# BV 16 has two of each), but its snapshot leaves through eight shared-memory rounds of two barriers each (16 barriers
# against 5); with eight warps, 6 barriers. Off: slower than the default on the H200 (batch 28, the entry at 128K:
# 3.96 ms at BV 64 against 3.73 for the state's commits at BV 32, the default; against the state's commits in the same
# shape faster at 64 (4.77), level at 16 and at 32 with 8 warps, slower at 32 with 4; at 16 with 2 warps 4.44 against
# the state's pathological 111 ms). SPARSEGDN_CHAIN_TRANSPOSED=1 turns it on.
TRANSPOSED = os.environ.get("SPARSEGDN_CHAIN_TRANSPOSED", "0") == "1"
if TRANSPOSED and PROGRESS_BV < 16:       # the identity product's inner size is BV: a GPU's products need 16
    raise ValueError(f"SPARSEGDN_CHAIN_TRANSPOSED=1 needs SPARSEGDN_CHAIN_BV of at least 16, got {PROGRESS_BV}")
# With TRANSPOSED, each snapshot stored by the tensor memory accelerator (TMA) from one shared-memory tile, not by
# Triton's conversion to coalesced stores (eight shared-memory rounds of two barriers at BV 64, four warps): compiled
# for sm_90 one round of eight STSM, a fence and a barrier, then UTMASTG (analysis/results/overlap/batch27). Each run of
# PUBLISH commits then waits for its stores to complete before publishing (publish's BULK_STORES), and where the
# snapshots' shape does not allow the tiles (snapshot_descriptor: a key head narrower than its block, a value head not
# a whole number of blocks) the plain stores stay. Off: 3% slower than the plain stores at BV 64 with four warps,
# level with eight (batch 28); SPARSEGDN_CHAIN_TMA_SNAPSHOTS=1.
TMA_SNAPSHOTS = os.environ.get("SPARSEGDN_CHAIN_TMA_SNAPSHOTS", "0") == "1"
if TMA_SNAPSHOTS and not TRANSPOSED:
    raise ValueError("SPARSEGDN_CHAIN_TMA_SNAPSHOTS=1 needs SPARSEGDN_CHAIN_TRANSPOSED=1 (the transposed commits store "
                     "their snapshots by TMA)")
# Where the publishing chains' counts are released: inside the one pipelined loop over a chain's commits, every PUBLISH
# commits under a branch (True), or between runs of PUBLISH commits, each run a loop of its own (False). Each run's
# loop starts by loading its first num_stages - 1 events and ends by waiting for every copy in flight (compiled for
# sm_90, the TTGIR's prologue and `async_wait {num = 0}`), so at a run's boundary a commit waits for an event's whole
# trip from memory: 128 boundaries on the longest chain at 128K. The chain pass alone took 2.20 ms at 128K publishing
# so (blocks of 32) and 1.71 ms walking the serial form's one loop (blocks of 16, no counts; batch 38). Applies to
# unpaired, unstreamed chains whose snapshots are stored plainly; the others keep the runs. Triton's pipeliner gives up
# on a loop with a barrier in it (compiled for sm_90: plain loads again), so the count released at a commit is the one
# before it (release_count, no barrier of its own): the snapshots the earlier commits stored, which every thread
# wrote before the barrier ahead of this commit's first product (the state every thread wrote to shared memory, read
# by the matrix instruction: compiled for sm_90, a bar.sync in the loop header's block,
# tests/test_compile_report.py). Under four warps a commit needs no such barrier, hence refused below. Off: measured
# (batch 39, benchmarks/ab_rounds.sh, the public call) level with the runs every 16 commits on an H100 (4.176 against
# 4.179 ms at 128K; the chains beside the lists 2,654 against 2,661 us: the release's fence waits for the commit's
# snapshot stores, which the compiled loop issues before it) and slower than the runs every 64 on an H200 (3.768 against
# 3.668 ms at 128K, 1.021 against 1.000 at 32K). SPARSEGDN_CHAIN_PUBLISH_IN_LOOP=1 turns it on, read at import.
PUBLISH_IN_LOOP = tl.constexpr(os.environ.get("SPARSEGDN_CHAIN_PUBLISH_IN_LOOP", "0") == "1")
# Under four warps (less than a warpgroup) the chain programs compile to the older mma. The state's commits at two
# warps and blocks of 16 compiled for sm_90 to 32 registers and a loop of 1,187 LDL and 999 STL a commit
# (overlap/batch28/compile_chain_pass_bv16_w2.txt) and took 111 ms at 128K on the H200 (batch 28; 3.94 at four warps).
PROGRESS_WARPS = int(os.environ.get("SPARSEGDN_CHAIN_WARPS", "4"))
if PROGRESS_WARPS not in (1, 2, 4, 8):
    raise ValueError(f"SPARSEGDN_CHAIN_WARPS={PROGRESS_WARPS}: 1, 2, 4 or 8 warps a chain program")
if PUBLISH_IN_LOOP and PROGRESS_WARPS < 4:    # under four warps a commit may need no barrier (see PUBLISH_IN_LOOP)
    raise ValueError(f"SPARSEGDN_CHAIN_PUBLISH_IN_LOOP=1 needs SPARSEGDN_CHAIN_WARPS of at least 4, got "
                     f"{PROGRESS_WARPS}")
# Commits between two progress counts of the publishing chain pass (the lists' route; the one launch's chains publish
# every state_output.PUBLISH). Each count ends a run of commits, and each run's loop starts by loading its first
# num_stages - 1 events and ends by waiting for every copy in flight, then a barrier and a release whose fence waits for
# the run's snapshot stores. On the H200 (batch 39, benchmarks/ab_rounds.sh, the public call, three alternating rounds,
# two for 96): every 16 commits 3.779 ms at 128K and 1.012-1.014 at 32K; every 32 3.697 / 0.995; 64 3.668 / 0.999; 96
# 3.698 / 1.001; 128 3.670 / 1.016; 256 3.706 / 1.058 (a chain publishes too rarely for the lists with a state).
# At 4K-16K (H100, batch 51 call 3, three alternating rounds; segments of 32 / 64 / 128 commits, so that at 4K-8K a
# segment publishes only at its end) 16 and 32 tied 64 at 16K (0.557-0.559 and 0.555-0.560 ms against 0.556-0.557 in
# the two normal rounds); at 4K-8K that host made every form's rounds range over 0.24-0.69 ms, so those lengths are
# not judged.
# SPARSEGDN_CHAIN_PUBLISH sets it, read at import.
_PUBLISH_SETTING = os.environ.get("SPARSEGDN_CHAIN_PUBLISH", "64")
if not _PUBLISH_SETTING.isdigit() or int(_PUBLISH_SETTING) < 1:
    raise ValueError(f"SPARSEGDN_CHAIN_PUBLISH={_PUBLISH_SETTING!r}: commits between two progress counts, at least 1")
PROGRESS_PUBLISH = int(_PUBLISH_SETTING)
# The chain programs' pipeline depth when they publish progress. Each stage holds one event's w, k_commit and u tiles
# (34 KB at K = 128, bf16): compile_report at 3 stages 107 KB of shared memory a program, 4: 141 KB, 5: 176 KB, 6:
# 211 KB. From 4 on neither a second chain program nor a list program (90-115 KB) fits beside a chain program on its
# multiprocessor: the long chains walk alone. On the H200 (2026-12-04, benchmarks/overlap_check.py --chain-stages,
# lists beside the chains at 128K; analysis/results/overlap/batch24, calls 2 and 5) 4-6 stages were no faster than 3
# (4.38-4.42 ms against 4.38 stored, 4.70-4.75 against 4.28 solved; with claims 4.17 against 3.89): the chains walk
# faster alone (1.82 ms against 2.18) but the lists then start later. SPARSEGDN_CHAIN_STAGES sets it.
PROGRESS_STAGES = int(os.environ.get("SPARSEGDN_CHAIN_STAGES", "3"))
# The same when the chains wait for the streamed preparation (`ready`): its persistent programs share the
# multiprocessors, and two chain programs of three stages (106 KB of shared memory each) do not fit beside one of
# them (24 KB); two stages (72 KB, compiled for sm_90) do (event_prepare.STREAM_MAXNREG says the registers' side).
# SPARSEGDN_STREAMED_CHAIN_STAGES sets it.
STREAMED_STAGES = int(os.environ.get("SPARSEGDN_STREAMED_CHAIN_STAGES", "2"))
# A register cap for the publishing chain programs (0: none, the default). Uncapped, a program of PROGRESS_BV 32 and
# four warps takes 255 registers a thread (compile_report --lists-path, sm_90), so two fill a multiprocessor's registers
# and a list program finds no room beside two; segments beside the lists (forward.LISTS_SEGMENT) add chain programs
# (fixed lengths lost in batches 30 and 34; half the chunk count, the default since batch 42, won). A cap of 168 leaves
# registers for three, 128 for four; compiled for sm_90 it spills (BV 32: 172 and 244 local-memory instructions) and
# shared memory still holds two at three stages (114,704 B a program); at BV 16, two stages and 168: 16 local-memory
# instructions, 71,688 B, three a multiprocessor (kernel_bench.notes.md, session of 2026-12-05, sixth). Not timed:
# batch 35's SM ledger put the chain pass at 7-15% of the call's multiprocessor time at 128K, the lists at 54-58%, so
# a schedule cannot reach the target; not for float32 lists, whose products need more. SPARSEGDN_CHAIN_MAXNREG sets
# it, read at import (a plan-key setting).
_CHAIN_MAXNREG_SETTING = os.environ.get("SPARSEGDN_CHAIN_MAXNREG", "0")
if not _CHAIN_MAXNREG_SETTING.isdigit() or int(_CHAIN_MAXNREG_SETTING) not in REGISTER_CAPS:
    raise ValueError(f"SPARSEGDN_CHAIN_MAXNREG={_CHAIN_MAXNREG_SETTING!r}: 0 (no cap) or a multiple of 8, 64 to 248")
CHAIN_MAXNREG = int(_CHAIN_MAXNREG_SETTING)


def _prune(configs, named_args, **kwargs):
    """No value block wider than the (padded) value head: such a program would be mostly masked."""
    widest = padded(named_args["V"])
    kept = [config for config in configs if config.kwargs["BV"] <= widest]
    return kept or configs[:1]


@triton.jit
def event_slot(i, b, first, event_decays_ptr, E, present=True):
    """The list slot of this head pair's i-th event, the decay since the commit before it and its chunk's
    own decay (Schedule.event_decays, read by slot: no load here depends on another load); with `present`
    false, no event: decays of 1 and nothing read."""
    slot = b * E + first + i
    pair = tl.load(event_decays_ptr + slot * 2 + tl.arange(0, 2), mask=present, other=1.0)
    decay = tl.sum(tl.where(tl.arange(0, 2) == 0, pair, 0.0), axis=0)
    chunk_decay = tl.sum(tl.where(tl.arange(0, 2) == 1, pair, 0.0), axis=0)
    return slot, decay, chunk_decay


@triton.jit
def load_event(i, b, first, w_ptr, u_ptr, k_commit_ptr, event_decays_ptr, E, K, V, ck, cv, rows, present=True):
    """The tiles of this head pair's i-th event (see event_slot); with `present` false an empty event
    (zero tiles, decays of 1), which a commit passes through unchanged."""
    slot, decay, chunk_decay = event_slot(i, b, first, event_decays_ptr, E, present)
    key_mask = (ck < K)[None, :] & present
    key_offsets = rows[:, None] * K + ck[None, :]        # 32-bit in the event's tile, 64-bit to the tile
    w = tl.load(w_ptr + slot * CHUNK * K + key_offsets, mask=key_mask, other=0.0)
    k = tl.load(k_commit_ptr + slot * CHUNK * K + key_offsets, mask=key_mask, other=0.0)
    u = tl.load(u_ptr + slot * CHUNK * V + (rows[:, None] * V + cv[None, :]), mask=(cv < V)[None, :] & present,
                other=0.0)
    return decay, chunk_decay, w, u, k


@triton.jit
def commit(state, decay, chunk_decay, w, u, k_commit):
    """One commit: decay since the last one, v_new = u - w S, then the chunk's decayed writes."""
    state = state * decay
    v_new = u.to(tl.float32) - mma(w, round_to(state, w.dtype))
    return state * chunk_decay + mma(tl.trans(k_commit), round_to(v_new, w.dtype))


@triton.jit
def commit_transposed(state_t, decay, chunk_decay, w, u, k_commit):
    """commit on the state's transpose S^T [BV, BK]: v_new^T = u^T - S^T w^T, then S^T <- e^(gamma_L) S^T +
    v_new^T k_commit, the same roundings (S and v_new to the lists' dtype) and sums as commit's. The transposes are
    the products' left operands, which Hopper's matrix instruction reads from registers when they have at least 64
    rows (blocks of 64 value columns): the state and v_new then make no shared-memory round trip and need no barrier
    between the two products (commit reads both as right operands, from shared memory). u^T enters as the product
    I u^T (exact for 16-bit lists; float32 ones go through tf32x3 products on a GPU, which keep ~22 of u's 24 bits):
    as a right operand the loop's pipeliner copies it into shared memory ahead, as it does w and k; loaded into the
    accumulator instead it was a plain load in every commit (compile_report, sm_90)."""
    state_t = state_t * decay
    columns = tl.arange(0, state_t.shape[0])
    identity = round_to((columns[:, None] == columns[None, :]).to(tl.float32), w.dtype)    # exact in any dtype
    v_new_t = mma_into(mma(identity, tl.trans(u)), round_to(-state_t, w.dtype), tl.trans(w))
    return mma_into(state_t * chunk_decay, round_to(v_new_t, w.dtype), k_commit)


@triton.jit
def load_folded(i, b, first, m_ptr, c_ptr, event_decays_ptr, E, K, V, ck, cv, present=True):
    """The folded tiles of this head pair's i-th event (event_prepare's folded: m = -k_commit^T w [K, K] and this
    program's columns of c = k_commit^T u [K, BV]) and its decays; with `present` false an empty event."""
    slot, decay, chunk_decay = event_slot(i, b, first, event_decays_ptr, E, present)
    keys = (ck < K) & present
    m = tl.load(m_ptr + slot * K * K + (ck[:, None] * K + ck[None, :]), mask=keys[:, None] & (ck < K)[None, :],
                other=0.0)
    c = tl.load(c_ptr + slot * K * V + (ck[:, None] * V + cv[None, :]), mask=keys[:, None] & (cv < V)[None, :],
                other=0.0)
    return decay, chunk_decay, m, c


@triton.jit
def commit_folded(state, decay, chunk_decay, m, c):
    """commit's arithmetic with its two products folded into one: S e^(gamma_L) + m S + c for S decayed since the
    last commit (m S = -k_commit^T w S; only that product waits on the state)."""
    state = state * decay
    return mma_into(state * chunk_decay, m, round_to(state, m.dtype)) + c.to(tl.float32)


@triton.jit
def step(state, i, b, first, w_ptr, u_ptr, k_commit_ptr, event_decays_ptr, E, K, V, ck, cv, rows,
         FOLDED: tl.constexpr):
    """The state after the chain's i-th event: its tiles loaded and committed, folded or not."""
    if FOLDED:
        decay, chunk_decay, m, c = load_folded(i, b, first, w_ptr, u_ptr, event_decays_ptr, E, K, V, ck, cv)
        after = commit_folded(state, decay, chunk_decay, m, c)
    else:
        decay, chunk_decay, w, u, k = load_event(i, b, first, w_ptr, u_ptr, k_commit_ptr, event_decays_ptr, E, K, V,
                                                 ck, cv, rows)
        after = commit(state, decay, chunk_decay, w, u, k)
    return after


@triton.jit
def warm_up_begin(begin, first_slot, event_decays_ptr, WARM_UP: tl.constexpr):
    """The latest event j <= begin of a head pair's chain (its events from slot first_slot) such that the state
    after event j - 1 reaches the state before event `begin` decayed by at most exp(-WARM_UP): the sum over
    events j .. begin - 1 of log(decay since the commit before) + log(the chunk's own decay) is <= -WARM_UP.
    0 where no event does: the walk then starts from the initial state, exactly.
    Each commit maps the state by e^(since) (e^(gamma_L) I - k_commit^T w). With normalised keys, beta in [0, 1]
    and band 3 the bracket is the chunk's product of decays and contractions (I - beta k k^T), so what the warm-up
    leaves out is at most that factor times the state left out (e^-20 ~ 2e-9 of it). With bands 0-2 the
    band-projected inverse can make the bracket expand (norms up to ~3.7 a commit at band 1 for keys chosen to
    do so; random keys stay near contracting): there the bound is a heuristic, checked by measurement only."""
    found = begin * 0 - 1
    total = 0.0
    hi = begin
    while (hi > 0) & (found < 0):
        lo = tl.maximum(hi - WARM_UP_BLOCK, 0)
        index = lo + tl.arange(0, WARM_UP_BLOCK)
        live = index < hi
        pair = event_decays_ptr + (first_slot + index) * 2
        logs = tl.log(tl.load(pair, mask=live, other=1.0)) + tl.log(tl.load(pair + 1, mask=live, other=1.0))
        # Clamped at -(WARM_UP + 1): an event that alone passes the bound still does, the sums below stay small
        # (float32 cancellation in them stays ~1e-6, not ~1e-4 as with -1000), an underflowed decay (log 0) stays
        # finite, and a NaN one (NaN gates, which the call reports) counts as underflowed, alike on a GPU and in
        # the interpreter (whose maximum would keep the NaN).
        logs = tl.where(logs >= -(WARM_UP + 1.0), logs, -(WARM_UP + 1.0))
        block_sum = tl.sum(logs, axis=0)
        since_index = total + block_sum - tl.cumsum(logs, axis=0) + logs       # events index .. begin - 1
        found = tl.max(tl.where(live & (since_index <= -WARM_UP), index, -1), axis=0)
        total += block_sum
        hi = lo
    return tl.maximum(found, 0)


@triton.jit
def segment_bounds(count, segment, SEGMENT):
    """(first event, end, number of segments) of this head pair's `segment`; a head pair with no events
    has one empty segment."""
    n_segments = tl.maximum(tl.cdiv(count, SEGMENT), 1)
    start = segment * SEGMENT
    return start, tl.minimum(count, start + SEGMENT), n_segments


@triton.jit
def segment_program(per_head_ptr, SEGMENT, HV: tl.constexpr):
    """This program's place on a (columns, batch row x head pair, segment) grid: row = b * HV + hv, the
    segment, b, hv, the head pair's event count and its segment's bounds (see segment_bounds)."""
    row = tl.program_id(1).to(tl.int64)
    segment = tl.program_id(2)
    count = tl.load(per_head_ptr + row).to(tl.int64)
    begin, end, n_segments = segment_bounds(count, segment, SEGMENT)
    return row, segment, row // HV, row % HV, count, begin, end, n_segments


@triton.jit
def load_initial_state(initial_state_ptr, flags_ptr, row, state_offsets, state_mask, K, V, BK: tl.constexpr,
                       BV: tl.constexpr, HAS_INITIAL: tl.constexpr):
    """float32 [BK, BV]: this program's block of the head pair's initial state (zeros without one), with
    FLAG_INITIAL_STATE raised when it is not finite."""
    if HAS_INITIAL:
        state = tl.load(initial_state_ptr + row * K * V + state_offsets, mask=state_mask, other=0.0).to(tl.float32)
        raise_flag(flags_ptr, FLAG_INITIAL_STATE, any_2d(not_finite(state)))
    else:
        state = tl.zeros([BK, BV], dtype=tl.float32)
    return state


@triton.jit
def walk_chain(i_v, row, segment, w_ptr, u_ptr, k_commit_ptr, event_decays_ptr, first_event_ptr, per_head_ptr,
               final_log_decay_ptr, initial_state_ptr, snapshot_ptr, final_state_ptr, flags_ptr, starts_ptr,
               progress_ptr, NC, E, SEGMENT, HV: tl.constexpr, K, V, BK: tl.constexpr, BV: tl.constexpr,
               HAS_INITIAL: tl.constexpr, STORE_FINAL: tl.constexpr, HAS_STARTS: tl.constexpr, PUBLISH: tl.constexpr,
               PAIRED: tl.constexpr, WARM_UP: tl.constexpr, FOLDED: tl.constexpr, ready_ptr,
               STREAMED: tl.constexpr, TRANSPOSED: tl.constexpr = False, snapshot_desc=None):
    """The commits of value block i_v of head pair `row`'s `segment` (the state pass's program).

    TRANSPOSED (not PAIRED, not FOLDED): the commits carry the state's transpose (commit_run, commit_transposed);
    with `snapshot_desc` (TMA_SNAPSHOTS, PUBLISH > 0) their snapshots are stored by TMA, and each run's stores complete
    before its count is published.

    STREAMED (with PUBLISH, whole unpaired chains): the events are being prepared while the chain walks
    (event_prepare's streamed); before each run of PUBLISH commits the program waits until their slots are marked
    ready (wait_prepared).

    FOLDED (whole chains or warm-up segments, not paired): w_ptr and u_ptr hold event_prepare's folded tiles (m, c),
    k_commit_ptr is unread; each commit is one product on the state (commit_folded).

    PAIRED (whole chains only, lists rewritten by commit_pairs.pair_prepare): the events two at a time.

    PUBLISH > 0 (overlapped passes, state_output.py): every PUBLISH commits (an even number for paired
    chains), and once at the end, the number of snapshots stored so far (counted from the head pair's first
    event) goes to progress[row, segment, i_v] with release semantics, after a barrier so that every thread's
    stores come before it; output programs wait on it (chunk_output.wait_for_snapshot).

    WARM_UP > 0 (with HAS_STARTS; starts_ptr unread): a segment's entering state is not read from segment_scan
    but walked here, from zero, over the commits before the segment back to where the decay since then
    reaches exp(-WARM_UP) (warm_up_begin; from the initial state where it never does, which is exact).
    """
    # A paired run must start on a pair's first event: whole chains, cut (if at all) every even number of commits.
    tl.static_assert(not PAIRED or (PUBLISH % 2 == 0 and not HAS_STARTS))
    tl.static_assert(WARM_UP == 0 or (HAS_STARTS and not PAIRED))
    tl.static_assert(not FOLDED or (not PAIRED and (WARM_UP > 0 or not HAS_STARTS)))
    tl.static_assert(not STREAMED or (PUBLISH > 0 and not PAIRED and not HAS_STARTS))
    tl.static_assert(not TRANSPOSED or not (PAIRED or FOLDED))
    tl.static_assert(snapshot_desc is None or (TRANSPOSED and PUBLISH > 0))
    count = tl.load(per_head_ptr + row).to(tl.int64)
    begin, end, n_segments = segment_bounds(count, segment, SEGMENT)
    b = row // HV
    hv = row % HV
    if segment < n_segments:
        ck = tl.arange(0, BK)
        cv = i_v * BV + tl.arange(0, BV)
        rows = tl.arange(0, CHUNK)
        state_mask = (ck < K)[:, None] & (cv < V)[None, :]
        state_offsets = ck[:, None] * V + cv[None, :]

        first = tl.load(first_event_ptr + row).to(tl.int64)
        if HAS_STARTS and WARM_UP == 0:     # this segment's entering state, from segment_scan.py (it checked the
            n_slots = tl.cdiv(NC, SEGMENT)  # initial state)
            state = tl.load(starts_ptr + (row * n_slots + segment) * K * V + state_offsets, mask=state_mask,
                            other=0.0)
        else:
            state = load_initial_state(initial_state_ptr, flags_ptr, row, state_offsets, state_mask, K, V, BK, BV,
                                       HAS_INITIAL)
            if WARM_UP > 0:                 # segments walk their entering state from a warm-up (see above)
                origin = warm_up_begin(begin, b * E + first, event_decays_ptr, WARM_UP)
                state = tl.where(origin == 0, state, 0.0)
                for i in range(origin, begin):
                    state = step(state, i, b, first, w_ptr, u_ptr, k_commit_ptr, event_decays_ptr, E, K, V, ck, cv,
                                 rows, FOLDED)
        snapshot_row = b * (E + HV) + first + hv + begin        # the snapshot slot of the state before event `begin`
        snapshot = snapshot_ptr + snapshot_row * K * V
        if segment == 0:
            store_snapshot(snapshot, 0, state, snapshot_ptr, K, V, state_offsets, state_mask)

        # A for loop over the loaded bounds (not a while loop): Triton's pipeliner then issues each event's
        # loads num_stages - 1 commits ahead, straight into shared memory where the products read them, so
        # their latency hides behind the sequential chain's arithmetic. Only while no address in the loop
        # comes from another load: decays read through event_chunks kept every load one commit ahead
        # (compile_report --dump, 2026-12-01), hence Schedule.event_decays by slot. Publishing (a barrier
        # and an atomic) inside that loop would stop the pipeliner: it comes between runs of PUBLISH commits.
        if TRANSPOSED:      # the runs carry S^T (commit_run), transposed once here and once after them
            state = tl.trans(state)
        if PUBLISH > 0 and PUBLISH_IN_LOOP and not (PAIRED or STREAMED or TRANSPOSED):
            counter = progress_row(row, segment, NC, SEGMENT, HAS_STARTS)
            for i in range(begin, end):     # one pipelined loop; the counts released inside it (PUBLISH_IN_LOOP)
                state = step(state, i, b, first, w_ptr, u_ptr, k_commit_ptr, event_decays_ptr, E, K, V, ck, cv, rows,
                             FOLDED)
                if i > begin and (i - begin) % PUBLISH == 0:
                    release_count(progress_ptr, counter, i_v, V, BV, i + 1)
                store_snapshot(snapshot, i - begin + 1, state, snapshot_ptr, K, V, state_offsets, state_mask)
            publish(progress_ptr, counter, i_v, V, BV, end + 1)   # the run done (also when it has no events)
        elif PUBLISH > 0:
            counter = progress_row(row, segment, NC, SEGMENT, HAS_STARTS)
            for run in range(begin, end, PUBLISH):
                if STREAMED:
                    wait_prepared(ready_ptr, b * E + first, run, tl.minimum(run + PUBLISH, end))
                state = commit_run(state, run, tl.minimum(run + PUBLISH, end), begin, b, first, w_ptr, u_ptr,
                                   k_commit_ptr, event_decays_ptr, snapshot, snapshot_ptr, E, K, V, ck, cv, rows,
                                   state_offsets, state_mask, PAIRED, FOLDED, TRANSPOSED, snapshot_desc,
                                   snapshot_row, (i_v * BV).to(tl.int32))
                publish(progress_ptr, counter, i_v, V, BV, tl.minimum(run + PUBLISH, end) + 1,
                        snapshot_desc is not None)
            publish(progress_ptr, counter, i_v, V, BV, end + 1)   # the run done (also when it has no events)
        else:
            state = commit_run(state, begin, end, begin, b, first, w_ptr, u_ptr, k_commit_ptr, event_decays_ptr,
                               snapshot, snapshot_ptr, E, K, V, ck, cv, rows, state_offsets, state_mask, PAIRED,
                               FOLDED, TRANSPOSED)
        if TRANSPOSED:
            state = tl.trans(state)

        if STORE_FINAL and segment == n_segments - 1:
            state = state * tl.exp(tl.load(final_log_decay_ptr + row))
            tl.store(final_state_ptr + row * K * V + state_offsets, state, mask=state_mask)
            raise_flag(flags_ptr, FLAG_OUTPUT, any_2d(not_finite(state) & state_mask))


@triton.jit
def commit_run(state, start, stop, begin, b, first, w_ptr, u_ptr, k_commit_ptr, event_decays_ptr, snapshot,
               snapshot_ptr, E, K, V, ck, cv, rows, state_offsets, state_mask, PAIRED: tl.constexpr,
               FOLDED: tl.constexpr, TRANSPOSED: tl.constexpr = False, snapshot_desc=None, snapshot_row=0,
               column=0):
    """Events start .. stop - 1 of the chain, each stored as its snapshot (`snapshot`: the one before `begin`).

    TRANSPOSED (not PAIRED, not FOLDED): `state` is the state's transpose S^T [BV, BK], and so is the result
    (commit_transposed; walk_chain transposes once before its runs and once after). With `snapshot_desc`
    (TMA_SNAPSHOTS) each snapshot is stored by TMA as the tile at rows (snapshot_row + its index) * K, columns
    `column` of the snapshots seen as [rows, V].

    PAIRED: two at a time from `start`, which must be even (pairs are (0, 1), (2, 3), ... of the head pair,
    as commit_pairs.pair_prepare rewrote them). An odd last event is walked inside the same loop, paired with
    an empty event whose snapshot is not stored: no load of the lists follows the pipelined loop. (On the
    H200, 2026-12-01, a lone commit after the loop stored a wrong snapshot at K = 128 in bfloat16,
    benchmarks/pair_check.py; the interpreter computed it right.)"""
    if PAIRED:
        for pair in range(0, (stop - start + 1) // 2):
            i = start + 2 * pair
            second = i + 1 < stop
            d1, c1, w1, u1, k1 = load_event(i, b, first, w_ptr, u_ptr, k_commit_ptr, event_decays_ptr, E, K, V, ck,
                                            cv, rows)
            d2, c2, w2, u2, k2 = load_event(i + 1, b, first, w_ptr, u_ptr, k_commit_ptr, event_decays_ptr, E, K, V,
                                            ck, cv, rows, second)
            after_first, state = commit_pair(state, d1, c1, w1, u1, k1, d2, c2, w2, u2, k2)
            store_snapshot(snapshot, i - begin + 1, after_first, snapshot_ptr, K, V, state_offsets, state_mask)
            store_snapshot(snapshot, i - begin + 2, state, snapshot_ptr, K, V, state_offsets, state_mask & second)
    elif TRANSPOSED:         # `state` is S^T here, and so is what the run returns
        offsets_t = cv[:, None] + ck[None, :] * V          # the snapshots' [K, V] addresses of the transpose
        mask_t = (cv < V)[:, None] & (ck < K)[None, :]
        for i in range(start, stop):
            decay, chunk_decay, w, u, k = load_event(i, b, first, w_ptr, u_ptr, k_commit_ptr, event_decays_ptr, E, K,
                                                     V, ck, cv, rows)
            state = commit_transposed(state, decay, chunk_decay, w, u, k)
            if snapshot_desc is None:
                store_snapshot(snapshot, i - begin + 1, state, snapshot_ptr, K, V, offsets_t, mask_t)
            else:
                snapshot_desc.store([((snapshot_row + i - begin + 1) * K).to(tl.int32), column],
                                    tl.trans(round_to(state, snapshot_ptr.dtype.element_ty)))
    else:
        for i in range(start, stop):
            state = step(state, i, b, first, w_ptr, u_ptr, k_commit_ptr, event_decays_ptr, E, K, V, ck, cv, rows,
                         FOLDED)
            store_snapshot(snapshot, i - begin + 1, state, snapshot_ptr, K, V, state_offsets, state_mask)
    return state


@triton.jit
def store_snapshot(snapshot, index, state, snapshot_ptr, K, V, state_offsets, state_mask):
    """This program's block of `state` as snapshot `index` after `snapshot` (in the snapshots' dtype)."""
    tl.store(snapshot + index * K * V + state_offsets, round_to(state, snapshot_ptr.dtype.element_ty),
             mask=state_mask)


@triton.jit
def bulk_stores_complete():
    """cp.async.bulk.wait_group 0 (this thread's TMA stores written to global memory), then fence.proxy.async.global
    (those writes ordered before the generic proxy's release that follows). Nothing under the interpreter."""
    if not INTERPRET:
        tl.inline_asm_elementwise("cp.async.bulk.wait_group 0;\n\tfence.proxy.async.global;\n\tmov.b32 $0, $1;",
                                  "=r,r", [tl.zeros([1], dtype=tl.int32)], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def wait_prepared(ready_ptr, base, start, stop):
    """Spin until events start .. stop - 1 of a chain (slots base + i) are marked ready by the streamed preparation
    (event_prepare's streamed: 1 with release once stored), then acquire the marks; the barrier orders every thread's
    loads of those events after it."""
    for lo in range(start, stop, 16):
        index = lo + tl.arange(0, 16)
        live = index < stop
        marks = tl.load(ready_ptr + base + index, mask=live, other=1, volatile=True)
        while tl.min(marks, axis=0) == 0:
            marks = tl.load(ready_ptr + base + index, mask=live, other=1, volatile=True)
        tl.atomic_add(ready_ptr + base + index, 0, mask=live, sem="acquire", scope="gpu")
    tl.debug_barrier()


@triton.jit
def progress_row(row, segment, NC, SEGMENT, SEGMENTED: tl.constexpr):
    """The row of the progress counts ([rows, cdiv(V, BV)]) that head pair `row`'s `segment` publishes to and
    its outputs wait on: one a segment (SEGMENTED), else one a head pair."""
    counter = row
    if SEGMENTED:
        counter = row * tl.cdiv(NC, SEGMENT) + segment
    return counter


@triton.jit
def publish(progress_ptr, row, i_v, V, BV: tl.constexpr, stored, BULK_STORES: tl.constexpr = False):
    """progress[row, i_v] = `stored` snapshots, visible after this program's snapshot stores. BULK_STORES (snapshots
    stored by TMA, an asynchronous proxy): every thread first waits for its bulk stores to complete (not only to
    have read shared memory) and fences the asynchronous proxy's global writes before the release."""
    if BULK_STORES:
        bulk_stores_complete()
    tl.debug_barrier()
    release_count(progress_ptr, row, i_v, V, BV, stored)


@triton.jit
def release_count(progress_ptr, row, i_v, V, BV: tl.constexpr, stored):
    """progress[row, i_v] = `stored`, a release at GPU scope: it makes visible what this thread wrote and what the
    program's other threads wrote before a barrier this thread passed since (publish's own barrier; inside the
    chains' one loop, PUBLISH_IN_LOOP, the barrier before the commit's first product, which reads the state every
    thread wrote to shared memory: a barrier in the loop's code would stop Triton's pipeliner)."""
    value = (stored + tl.zeros([], dtype=tl.int64)).to(tl.int32)      # `stored` may be a Python int (interpreter)
    tl.atomic_xchg(progress_ptr + row * tl.cdiv(V, BV) + i_v, value, sem="release", scope="gpu")


@triton.autotune(configs=CONFIGS if AUTOTUNE else CONFIGS[:1],
                 key=["K", "V", "HAS_STARTS", "PAIRED", "WARM_UP", "FOLDED", "LENGTH_BUCKET"],
                 prune_configs_by={"early_config_prune": _prune})
@triton.jit
def state_pass_kernel(w_ptr, u_ptr, k_commit_ptr, event_decays_ptr, first_event_ptr, per_head_ptr,
                      final_log_decay_ptr, initial_state_ptr, snapshot_ptr, final_state_ptr, flags_ptr, starts_ptr,
                      progress_ptr, ready_ptr, snapshot_desc, NC, LENGTH_BUCKET, E, SEGMENT, HV: tl.constexpr, K, V,
                      BK: tl.constexpr,
                      BV: tl.constexpr, HAS_INITIAL: tl.constexpr, STORE_FINAL: tl.constexpr, HAS_STARTS: tl.constexpr,
                      PAIRED: tl.constexpr, WARM_UP: tl.constexpr, FOLDED: tl.constexpr, PUBLISH: tl.constexpr,
                      STREAMED: tl.constexpr, TRANSPOSED: tl.constexpr):
    # PUBLISH > 0: progress counts for a kernel launched after this one as its programmatic dependent (list_output's
    # list with a state), which may start once every program here has started: each says so first.
    if PUBLISH > 0:
        launch_dependents()
    walk_chain(tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2), w_ptr, u_ptr, k_commit_ptr,
               event_decays_ptr, first_event_ptr, per_head_ptr, final_log_decay_ptr, initial_state_ptr, snapshot_ptr,
               final_state_ptr, flags_ptr, starts_ptr, progress_ptr, NC, E, SEGMENT, HV, K, V, BK, BV, HAS_INITIAL,
               STORE_FINAL, HAS_STARTS, PUBLISH, PAIRED, WARM_UP, FOLDED, ready_ptr, STREAMED, TRANSPOSED,
               snapshot_desc)
    if STREAMED:        # launched as the streamed preparation's dependent: the program that ends last waits for it
        done = ready_ptr + (tl.num_programs(1) // HV) * E       # after the B x E marks (ready_marks_shape)
        last_waits_for_prior_grid(done, tl.num_programs(0) * tl.num_programs(1) * tl.num_programs(2))


@triton.jit
def last_waits_for_prior_grid(done_ptr, programs):
    """The program that ends last (each counts itself in done_ptr) executes griddepcontrol.wait, so that the pass ends
    after the kernel it depends on while the other programs leave their slots at once (a chain program that waited
    there would hold its multiprocessor's room until the whole preparation ended)."""
    tl.debug_barrier()
    ended = tl.atomic_add(done_ptr, 1, sem="acq_rel", scope="gpu")
    if ended == programs - 1:
        wait_for_prior_grid()


@triton.jit
def wait_for_prior_grid():
    """griddepcontrol.wait: until the kernel this one depends on has ended and its stores are visible. Nothing under
    the interpreter (which runs kernels one after another)."""
    if not INTERPRET:
        cuda_extra.gdc_wait()


@triton.jit
def launch_dependents():
    """griddepcontrol.launch_dependents: the next kernel of the stream, if launched as a programmatic dependent, may
    start once every program of this one has said so (or ended). Nothing under the interpreter."""
    if not INTERPRET:
        cuda_extra.gdc_launch_dependents()


launch_state_pass = Launcher(state_pass_kernel)
# The publishing chain pass (progress counts for the lists launched after it) runs the plain kernel at one config,
# blocks of PROGRESS_BV columns, PROGRESS_WARPS warps, PROGRESS_STAGES stages: not through the autotuner, which in
# Triton 3.6 benchmarks even a lone config (some 100 runs of the chain pass before the real one, so that in a key's
# first call the lists would find every count final and never wait).
launch_publishing_chains = Launcher(state_pass_kernel.fn)


def state_pass(w, u, k_commit, schedule, initial_state, flags, *, store_final, segment=0,
               paired=False, warm_up=0.0, progress=None, publish=16, folded=False, ready=None):
    """Returns snapshots [B, E + HV, K, V] (the lists' dtype) and the final state float32 [B,HV,K,V] or None.

    segment > 0 cuts each head pair's commit chain into runs of that many events whose entering states
    come from segment_scan.segment_starts (more programs, shorter chains); 0 walks each chain whole, and
    so does a key head wider than SEGMENT_MAX_KEY_DIM. paired: the lists were rewritten by
    commit_pairs.pair_prepare (whole chains only: the caller pairs only when it walks them whole).
    warm_up > 0 (with segment > 0): each segment walks its entering state from a warm-up of the commits
    before it (walk_chain, warm_up_begin) instead of segment_scan's maps; any key head size.
    progress: zeroed int32 counts (progress_counts_shape of them) that the chains publish every `publish` commits
    (walk_chain's PUBLISH), for a kernel launched next as this one's programmatic dependent; None publishes nothing.
    folded: w and u are event_prepare's folded tiles (m, c; k_commit unread): whole chains or warm-up segments, not
    paired (segment_scan's maps read the unfolded lists).
    ready: the marks of event_prepare's streamed preparation, launched just before: this pass is launched as its
    programmatic dependent and each chain waits for its events' marks (with progress, whole unpaired chains only).
    """
    batch, heads, n_chunks = schedule.events.shape
    key_dim, value_dim = w.shape[-1], u.shape[-1]
    n_events = schedule.max_events
    shape = (batch, n_events + heads, key_dim, value_dim)     # allocated as a launch plan can make them again
    snapshots = (call_record.full(*shape, value=float("nan"), device=w.device, dtype=w.dtype) if POISON
                 else call_record.empty(*shape, device=w.device, dtype=w.dtype))
    final_state = (call_record.empty(batch, heads, key_dim, value_dim, device=w.device, dtype=torch.float32)
                   if store_final else snapshots)
    starts = None
    segmented = segmented_chains(segment, n_chunks, key_dim, warm_up)
    if paired and segmented:
        raise ValueError("paired lists (commit_pairs.pair_prepare) need whole chains: segment must be 0")
    check_folded(folded, paired, segmented, warm_up)
    if ready is not None and (progress is None or paired or segmented):
        raise ValueError("state_pass: streamed events (ready) need progress counts and whole unpaired chains")
    if ready is not None:
        check_ready(ready, schedule, "state_pass")
    if progress is not None and transposed_chains(paired, folded) and PROGRESS_BV < 16:     # a probe's setting
        raise ValueError(f"state_pass: transposed chains need blocks of at least 16 columns, got {PROGRESS_BV}")
    if segmented and not warm_up > 0:
        from .segment_scan import segment_starts
        starts = segment_starts(w, u, k_commit, schedule, initial_state, flags, segment=segment)
    elif not segmented:
        segment = max(n_chunks, 1)
    if progress is not None:
        publish_interval(publish, paired, "state_pass: publish")
        expected = progress_counts_shape(schedule, value_dim, segment if segmented else 0)
        if progress.dtype != torch.int32 or progress.numel() < expected:
            raise ValueError(f"state_pass: progress needs {expected} int32 counts, got {progress.numel()} "
                             f"{progress.dtype}")
    grid = lambda meta: (cdiv(value_dim, meta["BV"]), batch * heads, cdiv(n_chunks, segment))  # noqa: E731
    arguments = (grid, w, u, k_commit, schedule.event_decays, schedule.first_event, schedule.per_head,
                 schedule.final_log_decay, initial_state if initial_state is not None else snapshots, snapshots,
                 final_state, flags, starts if starts is not None else snapshots,
                 progress if progress is not None else flags, ready if ready is not None else flags,
                 # positional: the launcher keys it by kind and block (launch.argument_key) and takes each call's own
                 snapshot_descriptor(snapshots) if progress is not None and tma_snapshots(paired, folded) else None,
                 n_chunks,
                 length_bucket(n_chunks), n_events, segment,
                 heads, key_dim, value_dim)
    constants = dict(BK=padded(key_dim), HAS_INITIAL=initial_state is not None, STORE_FINAL=store_final,
                     HAS_STARTS=segmented, PAIRED=paired, WARM_UP=float(warm_up) if segmented else 0.0, FOLDED=folded)
    if progress is None:
        launch_state_pass(*arguments, **constants, PUBLISH=0, STREAMED=False, TRANSPOSED=False)
    else:
        launch_publishing_chains(*arguments, **constants, PUBLISH=publish, BV=PROGRESS_BV,
                                 num_warps=PROGRESS_WARPS,
                                 num_stages=STREAMED_STAGES if ready is not None else PROGRESS_STAGES,
                                 STREAMED=ready is not None, TRANSPOSED=transposed_chains(paired, folded),
                                 **({"launch_pdl": True} if ready is not None else {}),
                                 **chain_register_cap(w.dtype))
    return snapshots, (final_state if store_final else None)


def chain_register_cap(dtype: torch.dtype) -> dict:
    """The publishing chain programs' launch option for CHAIN_MAXNREG: none when 0, under the interpreter (no
    registers), or for float32 lists (their products take three tf32 products each, more registers than the cap is
    meant for)."""
    if not CHAIN_MAXNREG or INTERPRET.value or dtype == torch.float32:
        return {}
    return {"maxnreg": CHAIN_MAXNREG}


def tma_snapshots(paired, folded) -> bool:
    """Whether the publishing chain pass stores its snapshots by TMA (TMA_SNAPSHOTS, with transposed_chains), where
    snapshot_descriptor allows it."""
    return TMA_SNAPSHOTS and transposed_chains(paired, folded)


def snapshot_descriptor(snapshots):
    """The TMA descriptor of the snapshots [B, E + HV, K, V] seen as [B (E + HV) K, V] rows, tiles of [K, PROGRESS_BV]:
    None where a tile would reach past its snapshot (K not a block size: padded(K) > K), a value head is not a whole
    number of blocks, or the rows are not 16-byte aligned (the plain stores then stay)."""
    key_dim, value_dim = snapshots.shape[-2:]
    rows = snapshots.numel() // value_dim
    if (padded(key_dim) != key_dim or value_dim % PROGRESS_BV or (value_dim * snapshots.element_size()) % 16
            or snapshots.data_ptr() % 16 or rows >= 2 ** 31):
        return None
    flat = snapshots.view(rows, value_dim)
    return TensorDescriptor(flat, [rows, value_dim], [value_dim, 1], [key_dim, PROGRESS_BV])


def transposed_chains(paired, folded) -> bool:
    """Whether the publishing chain pass commits on the state's transpose (TRANSPOSED, refused at import with blocks
    under 16 columns): unpaired, unfolded chains."""
    return TRANSPOSED and not paired and not folded


def check_folded(folded, paired, segmented, warm_up):
    """Folded lists (event_prepare's folded) walk whole chains or warm-up segments, one event at a time: paired
    chains and segment_scan's maps need the unfolded w, u and k_commit."""
    if folded and (paired or (segmented and not warm_up > 0)):
        raise ValueError("folded commits need unpaired chains, whole or in warm-up segments (segment_scan's maps and "
                         "commit_pairs read the unfolded lists)")


def progress_publish(paired) -> int:
    """Commits between two progress counts of the publishing chain pass: PROGRESS_PUBLISH (setting_interval)."""
    return setting_interval(PROGRESS_PUBLISH, paired, "state_pass.PROGRESS_PUBLISH")


def setting_interval(publish, paired, name) -> int:
    """A publishing interval taken from a setting (`name`), not from a call: made even for paired chains (a run of
    commits must start on a pair's first event, commit_run) rather than refused, then checked by publish_interval."""
    return publish_interval(publish + publish % 2 if paired else publish, paired, name)


def publish_interval(publish, paired, name) -> int:
    """`publish`, the commits between two progress counts of a chain program (walk_chain's PUBLISH), once checked;
    `name` says where it came from (for the error). At least 1: below, nothing would be published before a chain's
    end, and the programs that wait on its counts would spin on a GPU until it ends (forever if they hold its SMs).
    Even for paired chains (commit_pairs.pair_prepare): each run of commits must start on a pair's first event
    (commit_run; walk_chain asserts it too, but only as a compile error)."""
    if publish < 1 or (paired and publish % 2):
        raise ValueError(f"{name} must be at least 1 (even for paired lists), got {publish}")
    return publish


def ready_marks_shape(schedule) -> int:
    """How many int32 the streamed preparation's marks take (state_pass's `ready`): one a list slot ([B, E]), then
    the count of chain programs that have ended (last_waits_for_prior_grid)."""
    batch = schedule.events.shape[0]
    return batch * schedule.max_events + 1


def check_ready(ready, schedule, name):
    """Raises unless `ready` holds the streamed preparation's marks and count (ready_marks_shape int32); `name` says
    who asks (event_prepare writes the marks, state_pass waits on them and counts its programs after them)."""
    if ready.dtype != torch.int32 or ready.numel() < ready_marks_shape(schedule):
        raise ValueError(f"{name}: ready needs {ready_marks_shape(schedule)} int32 (the marks and a count), got "
                         f"{ready.numel()} {ready.dtype}")


def progress_counts_shape(schedule, value_dim, segment) -> int:
    """How many progress counts state_pass(progress=...) publishes: one per (batch row x head pair, segment, value
    block of PROGRESS_BV columns); segment 0 (or not cut, see segmented_chains): one segment a head pair."""
    batch, heads, n_chunks = schedule.events.shape
    segments = cdiv(n_chunks, segment) if segment > 0 else 1
    return batch * heads * segments * cdiv(value_dim, PROGRESS_BV)


def segmented_chains(segment, n_chunks, key_dim, warm_up) -> bool:
    """Whether the chains are cut into segments of `segment` commits: asked for and shorter than the chunk count,
    and with segment_scan's maps (no warm-up) a key head no wider than SEGMENT_MAX_KEY_DIM."""
    return 0 < segment < n_chunks and (warm_up > 0 or key_dim <= SEGMENT_MAX_KEY_DIM)
