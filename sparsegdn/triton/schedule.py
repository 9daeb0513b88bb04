"""Selection and the work lists of the sparse passes.

The `score` selection is one launch of select_kernel (the count highest scores over all head pairs of a batch
row, ties in index order; torch's top-k with SPARSEGDN_SELECT_KERNEL=0); the lists come from one small kernel,
one program per (batch row, head pair), with no host sync on the `score`, `uniform` and `all` paths (their event
count per batch row is known on the host).

Layout of the lists, per batch row:
- events are numbered in (head pair, chunk) order; head pair h owns slots
  first_event[h] .. first_event[h] + per_head[h] - 1 of the row's E;
- head pair h owns snapshots first_event[h] + h .. first_event[h] + h + per_head[h] of the row's
  E + HV: snapshot 0 is the state entering chunk 0, snapshot j the state right after its j-th commit;
- log_decay_since[c] is the sum of g from the snapshot chunk c starts from to the start of c: a
  segmented scan that restarts at each commit, so it stays a short float32 sum however long T is;
- event_decays[slot] holds each event's exp(log_decay_since) and exp(gamma_L) of its chunk, by slot, for
  the commit chain (whose loads then depend on no other load).
"""
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .. import selection
from . import call_record, intra_chunk
from .chunk_loads import padded
from .launch import Launcher

NUM_WARPS = 4


@dataclass
class Schedule:
    events: torch.Tensor              # bool [B,HV,NC]
    per_head: torch.Tensor            # int64 [B,HV]: events of each head pair
    event_chunks: torch.Tensor        # int32 [B,E]: flat index h * NC + c of each event, -1 past the row's count
    first_event: torch.Tensor         # int32 [B,HV]
    snapshot_of_chunk: torch.Tensor   # int32 [B,HV,NC]: the snapshot a chunk starts from (flat over rows)
    log_decay_since: torch.Tensor     # float32 [B,HV,NC]: sum of g from that snapshot to the chunk
    final_log_decay: torch.Tensor     # float32 [B,HV]: sum of g after the last commit
    max_events: int                   # E, the longest row's count
    # float32 [B,E,2]: each event's exp(log_decay_since) and exp(gamma_L) of its chunk (1, 1 past the row's
    # count), so that the commit chain reads its decays by slot, not through event_chunks (a load that
    # depends on a load kept Triton's pipeliner to one event ahead: state_pass.event_slot).
    event_decays: torch.Tensor


def select_events(scores, *, budget, selector, early_scan=None):
    """bool [B,HV,NC] and the per-row count for the `score`, `uniform` and `all` selectors. `score`: the
    `count` highest scores of each batch row over all its head pairs; with SELECT_KERNEL one launch of
    select_kernel for rows of at most SELECT_RESIDENT scores (longer rows: sparsegdn.selection.top_events, a stable
    sort), both taking ties at the threshold in (head pair, chunk) order; else torch's top-k (ties in an order of
    its own). `early_scan`: None, or (q, initial_state or None, flags, value heads) for the early checks' scan
    (SCAN_BESIDE_SELECT), run by select_kernel's launch where the selection takes it, else launched on its own
    (intra_chunk.early_scan) before the selection."""
    batch, heads, n_chunks = scores.shape
    n = heads * n_chunks
    kernel = selector == "score" and SELECT_KERNEL and padded(n) <= SELECT_RESIDENT
    if early_scan is not None and not kernel:
        intra_chunk.early_scan(*early_scan)
    if selector == "all":
        return call_record.full(*scores.shape, value=True, dtype=torch.bool, device=scores.device), heads * n_chunks
    count = selection.event_count(budget, heads, n_chunks)
    if selector == "uniform":
        return selection.uniform_events(batch, heads, n_chunks, count, device=scores.device), count
    if not SELECT_KERNEL:       # torch's top-k: a few launches and host ops more; ties in its own order
        flat = scores.flatten(1)
        events = torch.zeros_like(flat, dtype=torch.bool)
        events.scatter_(1, flat.topk(count, dim=1, sorted=False).indices, True)
        return events.view_as(scores), count
    if padded(n) > SELECT_RESIDENT:     # too long to hold in registers: the same events by a stable sort
        return selection.top_events(scores, count), count
    events = call_record.empty(*scores.shape, dtype=torch.bool, device=scores.device)
    block = padded(n)
    programs, scan_arguments, constants = (no_scan(scores) if early_scan is None
                                           else intra_chunk.scan_grid(*early_scan))
    launch_select((batch + programs,), scores, events.view(torch.uint8), n, count, batch, *scan_arguments,
                  BLOCK=block, STEP_BITS=SELECT_STEP_BITS, SCAN=early_scan is not None, **constants,
                  num_warps=resident_warps(block))
    return events, count


def no_scan(scores) -> tuple:
    """select_kernel's scan arguments where its launch runs no scan programs, shaped as intra_chunk.scan_grid's:
    (0 programs, placeholders the kernel never reads, constants)."""
    return 0, (scores, scores, scores, 1, 1, 0, 0, 0, 0, 1, 1, 1), dict(BK=16, BV=16, HAS_STATE=False)


def resident_warps(block: int) -> int:
    """Warps of select_kernel: SELECT_THREAD_KEYS keys a thread (64), at least 4 warps and at most 32. compile_report
    (sm_90, analysis/results/overlap/batch9/compile_select.txt): 127 registers and no local memory with 8 warps at 16K
    keys; at 64K keys 1,024 threads leave 64 registers each and it spills, 246 local-memory instructions (16 warps with
    128 keys a thread: 300). On the H200 it took 0.085 ms of device time at 128K tokens, where the selection stage
    stayed level with torch's top-k (0.109 against 0.105 ms)."""
    return min(32, max(4, block // (32 * SELECT_THREAD_KEYS)))


# The `score` selection in one launch of select_kernel, and the schedule's lists written whole by its kernel (no
# fills before it): on the GPU, torch's top-k, its scatter and the lists' two fills are five launches and their
# host work in a call that the host bounds above 8K tokens (kernel_bench.notes.md, 2026-12-01 evening). On: on the
# H200 (2026-12-02, analysis/results/overlap/batch9, config_probe --timed, backend entry) 0.275 against 0.289 ms at
# 4K, 0.625 / 0.661 at 16K, 1.186 / 1.241 at 32K, 2.298 / 2.330 at 64K, level at 128K (4.52); the kernel 0.022 ms at
# 32K against top-k's 0.068, 0.085 at 128K. SPARSEGDN_SELECT_KERNEL=0 goes back to torch's top-k.
SELECT_KERNEL = os.environ.get("SPARSEGDN_SELECT_KERNEL", "1") == "1"
# Rows of at most this many scores (the kernel benchmark's at 128K tokens: 32 head pairs x 2,048 chunks) are held in
# registers by select_kernel, loaded once. A kernel that read a longer row from L2 on each of the search's 33 passes
# took the selection stage from 0.097 to 0.386 ms at 128K on the H200 (2026-12-02, analysis/results/overlap/batch9),
# so longer rows (more head pairs or tokens) are sorted by torch instead (selection.top_events, the same events).
SELECT_RESIDENT = 1 << 16
# select_kernel's search, bits of the threshold a step: 1 (32 steps of one count each, the default) or 2 (16 steps of
# three counts in one reduction). The search is a chain of dependent reductions over the whole row in one program, so
# half the steps were to cost less than three comparisons each. They did not: on an H100 (2026-12-07,
# analysis/results/overlap/batch49 call 1, one profiled call each) the kernel took 11.9 us at 8K tokens against 9.3
# and 127.4 at 128K against 85.1 (the row's keys spill there: 337 local-memory instructions against 247), and the
# public call with it alone (kernel_bench's search_only, which also has SCHEDULE_LOAD) was 3.961 ms at 128K against
# beside_only's 3.912. Kept as a setting for later forms; SPARSEGDN_SELECT_STEP_BITS sets it.
# 8 (a byte a step: four steps, each a 256-bin histogram of the next byte, radix_threshold) and 4 (eight steps of 16-bin
# histograms): four or eight rounds through shared memory instead of 32, at the histograms' cost. compile_report
# (sm_90): with 8 keys a thread (SELECT_THREAD_KEYS) no local memory at 8K tokens (2,576 and 2,080 instructions, the
# steps unrolled, against the bit-a-step loop's 376), but at 128K (64 keys a thread at 32 warps) 4,031 and 4,095
# local-memory instructions against 247: for short rows only. Off: on an H100 (2026-12-07, analysis/results/overlap/
# batch51 call 3, kernel_bench's select_radix / select_nibble against by_band, one process, budget 0.29) select_kernel
# took 13.0 / 9.2 us at 8K against 9.4 (one profiled call each) and the public call 0.326 / 0.321 ms against 0.322 at
# 8K, 0.564 / 0.555 against 0.554 at 16K, 1.053 / 1.041 against 1.033 at 32K: no form faster by 0.5% anywhere.
_STEP_SETTING = os.environ.get("SPARSEGDN_SELECT_STEP_BITS", "1")
if _STEP_SETTING not in ("1", "2", "4", "8"):
    raise ValueError(f"SPARSEGDN_SELECT_STEP_BITS={_STEP_SETTING!r}: 1, 2, 4 or 8 bits of the threshold a search "
                     f"step")
SELECT_STEP_BITS = int(_STEP_SETTING)
# Keys a thread of select_kernel holds (resident_warps): 64, the fewest warps that keep a row in registers (4 warps at
# 4K-8K tokens, 32 at 128K). The search is a chain of 32 dependent steps in one program, and with 4 warps each
# scheduler has one warp to issue from, so every step waits on its own latencies (9.3 us at 8K, batch 49). Fewer keys
# a thread (more warps, up to 32) give each scheduler warps to switch between and each thread less to count, at the
# cost of a reduction over more warps a step. 64: with 8 keys a thread (kernel_bench's select_wide; H100, batch 51 call
# 3) select_kernel took 11.6 us at 8K against 9.4 (the wider reductions cost more than the latencies they hide) and the
# public call 0.324 / 0.555 / 1.035 ms at 8K / 16K / 32K against 0.322 / 0.554 / 1.033 (at 4K 0.417 against 0.432, a
# length that process's host bounded: 0.217 on a normal one). SPARSEGDN_SELECT_THREAD_KEYS
# sets it (a power of two, 1 to 64).
_THREAD_KEYS_SETTING = os.environ.get("SPARSEGDN_SELECT_THREAD_KEYS", "64")
if _THREAD_KEYS_SETTING not in tuple(str(1 << i) for i in range(7)):
    raise ValueError(f"SPARSEGDN_SELECT_THREAD_KEYS={_THREAD_KEYS_SETTING!r}: keys a thread of select_kernel, a power "
                     f"of two from 1 to 64")
SELECT_THREAD_KEYS = int(_THREAD_KEYS_SETTING)
# schedule_kernel's count of the events before a head pair's own: the earlier head pairs' rows of the event mask read
# in loads of about SCHEDULE_LOAD events (several rows a load, schedule_rows), or one row a load with 0, where the last
# head pair of a row waits on HV - 1 loads one after the other. On an H100 (2026-12-07, analysis/results/overlap/batch49
# call 1, one profiled call each, budget 0.29) loads of 4,096 took the kernel from 10.3 to 2.7 us at 8K tokens (all 32
# rows in one load) and from 15.0 to 11.3 us at 128K (two rows a load). SPARSEGDN_SCHEDULE_LOAD sets it (events a
# load, >= 0; 0: a row a load).
_LOAD_SETTING = os.environ.get("SPARSEGDN_SCHEDULE_LOAD", "4096")
if not _LOAD_SETTING.isdigit():
    raise ValueError(f"SPARSEGDN_SCHEDULE_LOAD={_LOAD_SETTING!r}: events a load of schedule_kernel, >= 0 (0: a row)")
SCHEDULE_LOAD = int(_LOAD_SETTING)
# The early checks' scan of q and the initial state (intra_chunk.scan_program) run by select_kernel's launch, its
# programs after the rows' searches, instead of beside pass 1 (intra_chunk.EARLY_BESIDE), where the call selects by
# select_kernel (else on its own launch before the selection); the early flags are then copied after the selection.
# Why: select_kernel is one program a batch row (85 us at 128K tokens on an H100, 9.3 at 8K: batch 49's timelines),
# the GPU nearly idle, while the scan and pass 1 beside each other both stream from memory (beside, the scan saved
# 0.2% at 128K). Off: on an H100 (2026-12-07, analysis/results/overlap/batch50 call 1, kernel_bench's scan_in_selection
# against by_band, one process, the public call at budget 0.29) 0.543 / 1.033 / 3.910 ms at 16K / 32K / 128K against
# 0.554 / 1.033 / 3.882 (-2.0 / 0.0 / +0.7%; that process's host was slow: 0.39-0.61 ms at 4K-8K for either). In
# select_kernel's launch shape (32 warps, one program an SM at 128K) the scan took ~200 us, as long as on its own,
# and the launch 285 us: the row's search was not hidden under it. SPARSEGDN_SCAN_BESIDE_SELECT=1 turns it on.
SCAN_BESIDE_SELECT = os.environ.get("SPARSEGDN_SCAN_BESIDE_SELECT", "0") == "1"


def schedule_rows(heads: int, n_chunks: int) -> int:
    """Head pairs' rows of the event mask a load of schedule_kernel: SCHEDULE_LOAD events' worth (a power of two, at
    most the head pairs' own), at least one."""
    if SCHEDULE_LOAD <= 0:
        return 1
    return min(triton.next_power_of_2(heads), max(1, SCHEDULE_LOAD // padded(n_chunks)))


@triton.jit
def order_key32(x):
    """int32 keys in the order of the float32 values x (a negative float's magnitude bits flipped; -0 as +0),
    NaN above every number, as torch's sorts order them. Every key is above -2^31 (-inf's is -2^31 + 2^23 - 1)."""
    bits = tl.where(x == x, (x + 0.0).to(tl.int32, bitcast=True), 0x7FC00000)     # every NaN as +NaN
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _add3(a0, a1, a2, b0, b1, b2):
    return a0 + b0, a1 + b1, a2 + b2


@triton.jit
def select_kernel(scores_ptr, events_ptr, n, count, ROWS, q_ptr, state_ptr, flags_ptr, T, NB, NQ, q_sb, q_st, q_sh,
                  H: tl.constexpr, K, V, BLOCK: tl.constexpr, STEP_BITS: tl.constexpr, SCAN: tl.constexpr,
                  BK: tl.constexpr, BV: tl.constexpr, HAS_STATE: tl.constexpr):
    """Programs 0 .. ROWS - 1: select_row, one batch row each. SCAN (SCAN_BESIDE_SELECT): the programs after them
    are the early checks' scan of q and the initial state (intra_chunk.scan_program, its arguments after
    flags_ptr), which runs beside the rows' searches instead of in a launch of its own."""
    pid = tl.program_id(0).to(tl.int64)
    if SCAN and pid >= ROWS:
        intra_chunk.scan_program(pid - ROWS, q_ptr, state_ptr, flags_ptr, T, NB, NQ, q_sb, q_st, q_sh, H, K, V, BK,
                                 BV, HAS_STATE)
    else:
        select_row(pid, scores_ptr, events_ptr, n, count, BLOCK, STEP_BITS)


@triton.jit
def select_row(row, scores_ptr, events_ptr, n, count, BLOCK: tl.constexpr, STEP_BITS: tl.constexpr):
    """Events of one batch row: its `count` highest of n <= BLOCK scores, held in registers (loaded once). The
    threshold, the count-th highest key, by a search over the 2^32 keys that keeps the bracket [low, high): at least
    `count` keys >= low, fewer >= high. STEP_BITS 1: 32 steps, each one comparison a key and one sum over the
    program; 2: 16 steps, each three comparisons a key and their three counts in one reduction (half the rounds
    through shared memory, three times the comparisons); 4 and 8: eight or four steps, a digit of the threshold each,
    from the highest: a histogram of that digit over the keys that hold the digits found so far, and the highest
    digit whose keys at and above it reach the count still wanted (radix_threshold). SELECT_STEP_BITS says which. Then
    every score above the threshold and the first ties at it, in index order, until `count`."""
    tl.static_assert(STEP_BITS == 1 or STEP_BITS == 2 or STEP_BITS == 4 or STEP_BITS == 8)
    offsets = tl.arange(0, BLOCK)
    valid = offsets < n
    key = order_key32(tl.load(scores_ptr + row * n + offsets, mask=valid, other=0.0))
    low = tl.full([], -(1 << 31), tl.int64)          # at least `count` keys >= low (every key is)
    high = tl.full([], 1 << 31, tl.int64)            # fewer than `count` keys >= high (none is)
    if STEP_BITS >= 4:
        low = radix_threshold(key, valid, count, STEP_BITS)
    elif STEP_BITS == 1:
        for _ in range(32):
            middle = (low + high) >> 1               # in [-2^31, 2^31): an int32 (the floor, as in numpy)
            enough = tl.sum(((key >= middle.to(tl.int32)) & valid).to(tl.int32), axis=0) >= count
            low = tl.where(enough, middle, low)
            high = tl.where(enough, high, middle)
    else:
        for _ in range(16):                          # high - low: 2^32, 2^30, ..., 4, then 1
            quarter = (high - low) >> 2
            first, second, third = low + quarter, low + 2 * quarter, low + 3 * quarter     # each an int32
            at_first, at_second, at_third = tl.reduce(
                (((key >= first.to(tl.int32)) & valid).to(tl.int32),
                 ((key >= second.to(tl.int32)) & valid).to(tl.int32),
                 ((key >= third.to(tl.int32)) & valid).to(tl.int32)), 0, _add3)
            low, high = (tl.where(at_third >= count, third,
                                  tl.where(at_second >= count, second, tl.where(at_first >= count, first, low))),
                         tl.where(at_third >= count, high,
                                  tl.where(at_second >= count, third, tl.where(at_first >= count, second, first))))
    threshold = low.to(tl.int32)
    above = (key > threshold) & valid
    tie = (key == threshold) & valid
    ties_wanted = count - tl.sum(above.to(tl.int32), axis=0)                # >= 1 keys equal to the threshold
    keep = above | (tie & (tl.cumsum(tie.to(tl.int32), axis=0) <= ties_wanted))
    tl.store(events_ptr + row * n + offsets, keep.to(tl.uint8), mask=valid)


launch_select = Launcher(select_kernel)


@triton.jit
def radix_threshold(key, valid, count, BITS: tl.constexpr):
    """The count-th highest of the valid int32 keys (1 <= count <= their number), BITS bits a step from the highest:
    each step histograms those bits of the keys whose higher bits are the threshold's found so far (2^BITS bins),
    takes the highest digit whose keys at or above it number at least the count still wanted, and leaves out the keys
    above it. The keys are searched as unsigned (their sign bit flipped), so that their digits order as the keys do."""
    unsigned = key.to(tl.uint32, bitcast=True) ^ 0x80000000
    prefix = tl.full([], 0, tl.uint32)
    wanted = count + 0                                  # keys at or above the threshold still to be counted
    digits = tl.arange(0, 1 << BITS)
    for step in tl.static_range(32 // BITS):
        shift = 32 - BITS * (step + 1)
        if step == 0:
            holds = valid
        else:                                           # the keys whose higher bits are the prefix's
            holds = valid & ((unsigned >> (shift + BITS)) == (prefix >> (shift + BITS)))
        counts = tl.histogram(((unsigned >> shift) & ((1 << BITS) - 1)).to(tl.int32), 1 << BITS, mask=holds)
        at_or_above = tl.sum(counts, axis=0) - tl.cumsum(counts, axis=0) + counts
        digit = tl.max(tl.where(at_or_above >= wanted, digits, 0), axis=0)
        wanted -= tl.sum(tl.where(digits > digit, counts, 0), axis=0)
        prefix = prefix | (digit.to(tl.uint32) << shift)
    return (prefix ^ 0x80000000).to(tl.int32, bitcast=True).to(tl.int64)


@triton.jit
def _restart_sum(flag_a, sum_a, flag_b, sum_b):
    # Segmented sum: a set flag on the right restarts the running sum there.
    return flag_a | flag_b, tl.where(flag_b != 0, sum_b, sum_a + sum_b)


@triton.jit
def schedule_kernel(events_ptr, chunk_log_decay_ptr, event_chunks_ptr, per_head_ptr, first_event_ptr,
                    snapshot_of_chunk_ptr, log_decay_since_ptr, final_log_decay_ptr, event_decays_ptr, NC, E,
                    HV, BLOCK_NC: tl.constexpr, WRITE_TAIL: tl.constexpr, ROWS: tl.constexpr):
    # HV is a runtime value: a constant HV = 1 folds the loop below away and broke Triton 3.6's
    # coalescing pass on the GPU (an LLVM assertion while compiling).
    row = tl.program_id(0).to(tl.int64)
    b = row // HV
    hv = row % HV
    c = tl.arange(0, BLOCK_NC)
    valid = c < NC
    selected = tl.load(events_ptr + row * NC + c, mask=valid, other=0).to(tl.int32)
    count = tl.sum(selected, axis=0)
    first = count * 0
    rows = tl.arange(0, ROWS)
    for h0 in range(0, hv, ROWS):    # events of the head pairs before this one in the row, ROWS of them a load
        earlier = ((h0 + rows) < hv)[:, None] & valid[None, :]
        first += tl.sum(tl.sum(tl.load(events_ptr + (b * HV + h0 + rows[:, None]) * NC + c[None, :], mask=earlier,
                                       other=0).to(tl.int32), axis=1), axis=0)
    commits_before = tl.cumsum(selected, axis=0) - selected
    tl.store(event_chunks_ptr + b * E + first + commits_before, (hv * NC + c).to(tl.int32), mask=valid & (selected > 0))
    tl.store(snapshot_of_chunk_ptr + row * NC + c, (b * (E + HV) + first + hv + commits_before).to(tl.int32), mask=valid)

    has_prev = valid & (c >= 1)
    prev_selected = tl.load(events_ptr + row * NC + c - 1, mask=has_prev, other=0).to(tl.int32)
    prev_decay = tl.load(chunk_log_decay_ptr + row * NC + c - 1, mask=has_prev, other=0.0)
    _, since = tl.associative_scan((prev_selected, tl.where(prev_selected != 0, 0.0, prev_decay)), 0, _restart_sum)
    tl.store(log_decay_since_ptr + row * NC + c, since, mask=valid)
    last_commit = tl.max(tl.where(selected > 0, c, -1), axis=0)
    decay = tl.load(chunk_log_decay_ptr + row * NC + c, mask=valid, other=0.0)
    slot = b * E + first + commits_before
    tl.store(event_decays_ptr + slot * 2, tl.exp(since), mask=valid & (selected > 0))
    tl.store(event_decays_ptr + slot * 2 + 1, tl.exp(decay), mask=valid & (selected > 0))
    tl.store(final_log_decay_ptr + row, tl.sum(tl.where(valid & (c > last_commit), decay, 0.0), axis=0))
    tl.store(per_head_ptr + row, count.to(tl.int64))
    tl.store(first_event_ptr + row, first)
    if WRITE_TAIL and hv == HV - 1:     # the slots past the row's last event (fewer events than the longest row)
        for start in range(first + count, E, BLOCK_NC):
            empty = start + c
            past = empty < E
            tl.store(event_chunks_ptr + b * E + empty, tl.full([BLOCK_NC], -1, tl.int32), mask=past)
            tl.store(event_decays_ptr + (b * E + empty) * 2, tl.full([BLOCK_NC], 1.0, tl.float32), mask=past)
            tl.store(event_decays_ptr + (b * E + empty) * 2 + 1, tl.full([BLOCK_NC], 1.0, tl.float32), mask=past)


launch_schedule = Launcher(schedule_kernel)


def build_schedule(events, chunk_log_decay, max_events=None):
    """events bool [B,HV,NC], chunk_log_decay float32 [B,HV,NC] (gamma_L of every chunk)."""
    batch, heads, n_chunks = events.shape
    device = events.device
    events = events.contiguous()
    if max_events is None:     # caller-given events: one sync to size the lists
        max_events = max(1, int(events.flatten(1).sum(1).max().item()))
    if SELECT_KERNEL:          # the kernel writes every slot, the ones past a row's events too
        event_chunks = call_record.empty(batch, max_events, dtype=torch.int32, device=device)
        event_decays = call_record.empty(batch, max_events, 2, dtype=torch.float32, device=device)
    else:
        event_chunks = torch.full((batch, max_events), -1, dtype=torch.int32, device=device)
        event_decays = torch.ones(batch, max_events, 2, dtype=torch.float32, device=device)
    per_head = call_record.empty(batch, heads, dtype=torch.int64, device=device)
    first_event = call_record.empty(batch, heads, dtype=torch.int32, device=device)
    snapshot_of_chunk = call_record.empty(batch, heads, n_chunks, dtype=torch.int32, device=device)
    log_decay_since = call_record.empty(batch, heads, n_chunks, dtype=torch.float32, device=device)
    final_log_decay = call_record.empty(batch, heads, dtype=torch.float32, device=device)
    launch_schedule(
        (batch * heads,), events.view(torch.uint8), chunk_log_decay, event_chunks, per_head, first_event,
        snapshot_of_chunk, log_decay_since, final_log_decay, event_decays, n_chunks, max_events, heads,
        BLOCK_NC=padded(n_chunks), WRITE_TAIL=SELECT_KERNEL, ROWS=schedule_rows(heads, n_chunks), num_warps=NUM_WARPS)
    return Schedule(events, per_head, event_chunks, first_event, snapshot_of_chunk, log_decay_since,
                    final_log_decay, max_events, event_decays)
