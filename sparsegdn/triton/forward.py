"""SparseGDN forward on the GPU: five passes, see each kernel's file.

    stage (config.STAGES)  kernels                               work
    1 intra_solve    intra_chunk (parallel, all chunks)     score statistics, gate checks, [Tinv]
    2 selection      score_scan + select_kernel + schedule  event scores, events, event lists, decays
    3 event_prepare  event_prepare (parallel, events)       w, u, k_commit of the selected chunks only
                                                            (or their folded products, FOLD_COMMITS)
    4 state_pass     state_pass (sequential, events)        commits and snapshots
    5 output         chunk_output (parallel, all chunks)    every token's output
    4 + 5            state_output (both, one launch)        the default (OVERLAP), timed as state_pass
    4 beside 5       state_pass + list_output (Gluon lists)  the default for long calls (LISTS_FROM, see there)
    3 beside 4       event_prepare streamed + state_pass     beside the lists, STREAM_PREPARE (off, see there)

Tinv (band_solve.py) is either solved once in pass 1 and stored (read back by passes 3 and 5), or
solved on chip where it is used (the selected chunks in pass 3, every chunk in pass 5), trading the
store and two reads of 8 KB per chunk and head pair for a second solve of the selected chunks.
store_inverse(band) picks the design by band: on chip for bands 0 and 1, stored from STORED_FROM_BAND (2) on;
SPARSEGDN_STORE_INVERSE=0/1 forces one design for every band (to measure both; STORE_INVERSE holds it, None
when unset). Bands 2 and 3 invert whole 64 x 64 tiles (band_solve._whole_tile_inverse): on chip a selected chunk's
is solved twice, in its event's preparation (pass 3) and in its output (pass 5). On the H200 (2026-12-02, benchmarks/kernel_bench.py --designs on_chip
stored, one process; analysis/results/overlap/batch12) dense semantics (budget 1, band 3, `all`) took 0.643 /
2.212 / 8.982 ms through the public call at 8K / 32K / 128K stored against 0.812 / 2.805 / 11.438 on chip (FLA:
0.666 / 2.062 / 8.274); at budget 0.29, band 1 the two designs were level (1.248 against 1.253 ms at 32K, 4.790
against 4.782 at 128K) and on chip keeps the smaller peak extra memory at 128K (2,514 MB against 3,026; FLA's:
7,714), so it stays band 1's design. Band 2 shares band 3's whole-tile solve but was not timed.

OVERLAP runs passes 4 and 5 as one launch (state_output.py): output programs start while the long
commit chains still run, each waiting for its own snapshot. Its time is counted as the state_pass
stage; the output stage then reads about zero. Long calls whose selection keeps at most half of the events
(LISTS_FROM, LISTS_MAX_BUDGET) take the lists beside the chain pass instead, where list_output can run them.
Without OVERLAP, list_output.LIST_OUTPUTS writes the
outputs over chunk lists in Gluon (Hopper), after the chain pass or, with list_output.OVERLAP_LISTS, beside
it: the chain pass then publishes progress counts (state_pass's progress) that the list with a state waits
on, the way the one launch's output programs wait. SPARSEGDN_OVERLAP=0/1 overrides it. With segments
(COMMIT_SEGMENT > 0) the one launch walks every segment of every chain side by side, from the entering
states segment_scan.py computes first, and each output waits on its snapshot's segment (not yet on a GPU).

PAIRED (off by default: slower on the H200) walks each chain two commits at a time
(commit_pairs.py): half the dependent steps, after a pass that rewrites the second event of each pair.

COMMIT_SEGMENT > 0 cuts each head pair's commit chain into segments of that many commits run side by
side (segment_maps.py, segment_scan.py, then state_pass.py or state_output.py per segment): the
sequential pass is as long as its longest head pair, and the shared budget can give one head pair nearly
every chunk. 0 (the default: on the H200 the segmented pass with float32 maps, in two launches, was
slower, see the kernel notes) walks each chain whole; SPARSEGDN_COMMIT_SEGMENT sets it, and
segment_maps.DELTA_MAPS the maps' form. WARM_UP > 0 replaces the maps by a warm-up: each segment walks its
entering state from zero over the commits before it, back to where the decay since reaches exp(-WARM_UP)
(state_pass.warm_up_begin). On the H200 (2026-12-03, segments of 128, WARM_UP 20) that cut the chain walk inside
the one launch from 2.77 to 0.83 ms at 128K but left the launch as long (3.48 against 3.36 ms: its output work
bounds it), so it stays off until the outputs get cheaper.

The host's work of a call (its Python, allocations and launches) is done once per key: later calls of the key
are launched from the plan the first complete call recorded (call_plans.py, on by default; SPARSEGDN_CALL_PLANS=0
turns it off), with this call's pointers and fresh buffers. graphs.CUDA_GRAPH (off by default: slower than the
plans for the `score` selector at 4K and 8K; `uniform`, which no plan serves, is launched; SPARSEGDN_CUDA_GRAPH=1)
replays short calls (at most graphs.MAX_TOKENS tokens) from a CUDA graph captured once per shape, with the
inputs copied in.

Inputs are read in place through their strides (no copies of model views; v in any layout, since
transformers' Qwen3.5 hands it over with the tokens innermost); the kernels check what they
read anyway and raise flags (chunk_loads.FLAG_*) instead of separate passes over the inputs, so the
caller decides when to read them back (one sync for the public call, none inside a model).

Memory beyond the output: Tinv (8 KB per chunk and head pair, half the size of v at V = 128) and,
proportional to the budget, the w / u / k_commit lists (or the folded m / c) and one snapshot per commit.
"""
import re

import torch

from ..config import STAGES, num_chunks
from . import call_plans, call_record
import os

from .chunk_loads import NUM_FLAGS, cdiv, rows_view, tile_view
from .chunk_output import chunk_output, own_outputs
from . import chunk_output as chunk_output_module
from . import graphs
from . import list_output as list_output_module
from . import schedule as schedule_module
from . import state_output as state_output_module
from . import state_pass as state_pass_module
from . import segment_maps as segment_maps_module
from .commit_pairs import pair_prepare
from . import event_prepare as event_prepare_module
from .event_prepare import event_prepare
from .schedule import build_schedule, select_events
from . import intra_chunk as intra_chunk_module
from .intra_chunk import intra_chunk
from .score_scan import score_scan
from .state_output import state_output
from .state_pass import state_pass

DOT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_STORE_SETTING = os.environ.get("SPARSEGDN_STORE_INVERSE", "")
if _STORE_SETTING not in ("", "0", "1"):
    raise ValueError(f"SPARSEGDN_STORE_INVERSE={_STORE_SETTING!r}: 0 (on chip), 1 (stored) or unset (by band)")
STORE_INVERSE = {"0": False, "1": True}.get(_STORE_SETTING)     # None: by band (store_inverse)
STORED_FROM_BAND = 2
COMMIT_SEGMENT = int(os.environ.get("SPARSEGDN_COMMIT_SEGMENT", "0"))
# With COMMIT_SEGMENT > 0: each segment walks its entering state from a warm-up over the commits before it, back
# to where the decay since reaches exp(-WARM_UP) (state_pass.warm_up_begin: FlashQLA's context parallelism, its
# decay join, in the event chain), instead of segment_scan's exact maps; 0 uses the maps. Only with normalised
# keys (use_qk_l2norm_in_kernel): unnormalised ones use the maps. The left-out history is bounded by exp(-WARM_UP)
# for band 3, whose commits contract; for bands 0-2 only measured (state_pass.warm_up_begin says why). A head pair
# whose whole chain decays less than that walks it from the start in every segment (exact, and no shorter).
# SPARSEGDN_WARM_UP sets it (a finite number >= 0).
WARM_UP = float(os.environ.get("SPARSEGDN_WARM_UP", "0"))
if not 0 <= WARM_UP < float("inf"):
    raise ValueError(f"SPARSEGDN_WARM_UP={os.environ.get('SPARSEGDN_WARM_UP')!r}: a finite log decay >= 0 (0: off)")
OVERLAP = os.environ.get("SPARSEGDN_OVERLAP", "1") == "1"
# With OVERLAP and no initial state: the outputs split over two launches by whether the chunk starts from a zero
# state. The one launch (state_output with skip_own) runs the commit chains and the outputs of the chunks with a
# state; then chunk_output.own_outputs writes the zero-state chunks (their own part alone, no wait: a kernel of
# its own at fewer registers, three programs an SM instead of two). Off: on the H200 (2026-12-03, benchmark inputs,
# budget 0.29, band 1; analysis/results/overlap/batch17) with warm-up segments of 256 the backend entry took 4.30
# against 4.51 ms at 128K and 2.20 against 2.28 at 64K, but 0.684 against 0.621 at 16K; without the warm-up it
# lost at every length (5.07 ms at 128K). SPARSEGDN_SPLIT_OUTPUTS=1 turns it on.
SPLIT_OUTPUTS = os.environ.get("SPARSEGDN_SPLIT_OUTPUTS", "0") == "1"
# Pass 1 stores each chunk's gamma (the cumulative g) and k's inverse norms (float32, 512 B a chunk and head pair:
# 34 MB at 128K tokens, HV 32), which it computes anyway, and the output roles read them instead of loading g and
# forming the cumsum and k's norms themselves (chunk_output.load_vectors): the same values, fewer instructions in
# the roles that bound the launch (compile_report, sm_90, band 1, K = V = 128: the split's own outputs 2,992
# instructions a warp against 3,320; the one launch 5,216 against 5,424 and no spills against 66 local-memory
# instructions). Off: on the H200 (2026-12-03, benchmark inputs, budget 0.29, band 1; analysis/results/overlap/batch18)
# the one launch alone did not move (4.52 ms at 128K, 1.17 at 32K); with SPLIT_OUTPUTS and warm-up segments the entry
# took 4.12-4.16 ms at 128K (segments of 256) against the default's 4.52 and 1.09-1.10 at 32K (segments of 128) against
# 1.17-1.18, but that arrangement loses at 8K and rests on the approximate warm-up. SPARSEGDN_STORE_VECTORS=1 turns it on.
STORE_VECTORS = os.environ.get("SPARSEGDN_STORE_VECTORS", "0") == "1"
# Commits two at a time on the chain (commit_pairs.py): half the dependent steps, one more product per pair.
# Off: correct on the H200 since its mending but slower (2026-12-01, sources c0d514b73af1, config_probe --timed:
# backend entry at 32K 2.13 ms in one launch against 1.43 single; analysis/results/overlap/batch6).
# SPARSEGDN_PAIRED=1 turns it on (whole chains only, not with COMMIT_SEGMENT; not for float32 lists on a GPU,
# whose paired chain needs more shared memory than an SM has: benchmarks/pair_check.py at K = V = 128).
PAIRED = os.environ.get("SPARSEGDN_PAIRED", "0") == "1"
# From LISTS_FROM head chunks on (batch rows x value heads x chunks of 64 tokens), a call that list_output can serve
# (list_output.eligible_inputs: an sm_90 device, 16-bit inputs, K = V = 128, q, k and v contiguous, ...) runs the two
# launches with the Gluon output lists beside the chain pass instead of the one launch: the vectors stored, Tinv by
# band (solved in the lists at bands 0 and 1), list_output's OVERLAP_LISTS with CLAIM. On the H200 (2026-12-04,
# benchmarks/kernel_bench.py --configs 0.29/1/score --designs by_band lists_overlap, one process; budget 0.29, band
# 1, H 16, HV 32; analysis/results/overlap/batch25 call 3) the public call took, one launch against the lists:
# 0.268 / 0.296 ms at 4K, 0.528 / 0.485 at 8K, 0.716 / 0.711 at 16K, 1.385 / 1.276 at 32K, 2.518 / 2.305 at 64K and
# 4.724 / 4.216 at 128K; the backend entry 0.195 / 0.234, 0.334 / 0.384, 0.608 / 0.556, 1.149 / 1.043, 2.226 / 2.012
# and 4.409 / 3.949. The lists won the entry from 16K tokens on then, and 8,192 head chunks (16K tokens at 32 value
# heads) was the default until batch 48: on an H100 (2026-12-07, analysis/results/overlap/batch48 call 1, one process,
# kernel_bench --designs by_band one_launch lists_any_length, medians of five interleaved rounds) the lists, with
# everything they gained since (claims, the reordered solve, chains cut in half beside them), took the public call at
# budget 0.29 0.218 / 0.344 / 0.454 ms at 4K / 8K / 12K against the one launch's 0.232 / 0.383 / 0.531 (-6.0 / -10.2 /
# -14.5%), and at budgets 0.5 and 0.15 -5.7 / -3.8% at 4K, -10.0 / -8.1% at 8K, -12.8 / -13.8% at 12K. So 2,048 head
# chunks (4K tokens at 32 value heads) is the default; shorter calls (not timed) keep the one launch. Only where the
# selection keeps at most LISTS_MAX_BUDGET of the
# events: with every event kept the lists lost to the one launch (backend entry, the one launch in a second process
# of the same build, batch 25 calls 6-8: budget 1, band 1 at 16K / 32K / 64K / 128K 1.016 / 1.977 / 3.891 / 7.785 ms
# against 0.987 / 1.931 / 3.818 / 7.695; dense semantics, band 3 and `all`, 1.113 / 2.190 / 4.332 / 8.557 against
# 1.066 / 2.110 / 4.182 / 8.398), at budget 0.5 they won (32K 1.319 against 1.383, 64K 2.579 against 2.706), at 0.15
# by 21-22%. Given events keep the one launch (their share is on the device; so do the `random` and `oracle`
# selectors, whose events the API selects before the call and hands over as given events). Only where each batch row
# has at least LISTS_MIN_ROW_CHUNKS chunks: 4K tokens, where the lists won by 3.8-6.0% in batch 48; under it they lost
# (call 4: +2.6% / +11% at 3K for budgets 0.29 / 0.15, +20-53% at 1K-2K). Batch 49 timed other shapes
# (LISTS_MIN_ROWS). Not with COMMIT_SEGMENT (the other routes'; the lists cut their chains by LISTS_SEGMENT, below) or
# PAIRED: paired chains were never run with progress counts. The one
# launch's own switches (SPLIT_OUTPUTS, state_output's READY_ORDER, RELAXED_POLL, CHAIN_ONLY, TIMELINE) do nothing in a
# call that takes the lists.
# SPARSEGDN_OVERLAP=0 leaves the choice to the two-launch switches (list_output.LIST_OUTPUTS and the rest).
# SPARSEGDN_LISTS_FROM sets the head chunks (0: never); the budget and row conditions are constants.
# Folded commits (event_prepare's folded, state_pass.commit_folded): pass 3 forms each event's m = -k_commit^T w
# [K, K] and c = k_commit^T u [K, V] in place of w, u and k_commit, and a commit is S e^(gamma_L) + m S + c: one
# product waits on the state instead of two with a rounding and a shared-memory round trip between them (the chain
# is a latency-bound walk; the same arithmetic, rounded at other points). 16 KB more a selected event at K = V = 128.
# Not for paired chains or segment_scan's maps (they read the unfolded lists): there the lists stay unfolded.
# Off: it lost on the H200 (batch 26, budget 0.29: the entry 5.07 against 3.93 ms at 128K beside the lists, the
# preparation 1.50 against 0.51 ms and the chains slower too). SPARSEGDN_FOLD_COMMITS=1 turns it on.
FOLD_COMMITS = os.environ.get("SPARSEGDN_FOLD_COMMITS", "0") == "1"
# Streamed preparation (event_prepare's streamed, state_pass's ready), where the chains run beside the Gluon lists
# (whole unpaired chains): pass 3 prepares the events in rounds (every head pair's first event, then its second, ...)
# in persistent programs that let the chain pass start at once as their programmatic dependent; each chain waits
# before every run of commits for its events' marks. Pass 3 took 0.51 ms at 128K (budget 0.29, batch 26) before the
# chains could start. Off: it lost on the H200 (batch 28, budget 0.29, chain blocks of 16: the entry 1.65 against
# 1.04 ms at 32K, 6.40 against 3.94 at 128K; pass 3 itself 2.6 against 0.7 ms under the stage hook). Its GPU cases
# passed. SPARSEGDN_STREAM_PREPARE=1 turns it on.
STREAM_PREPARE = os.environ.get("SPARSEGDN_STREAM_PREPARE", "0") == "1"
_LISTS_SETTING = os.environ.get("SPARSEGDN_LISTS_FROM", "2048")
if not re.fullmatch(r"[0-9]+", _LISTS_SETTING):
    raise ValueError(f"SPARSEGDN_LISTS_FROM={_LISTS_SETTING!r}: a count of head chunks >= 0 (0: never)")
LISTS_FROM = int(_LISTS_SETTING)
LISTS_MAX_BUDGET = 0.5
LISTS_MIN_ROW_CHUNKS = 64       # 4K tokens a batch row
# Calls of fewer head-pair rows (batch rows x value heads) than LISTS_MIN_ROWS need twice LISTS_FROM head chunks. On an
# H100 (2026-12-07, analysis/results/overlap/batch49 calls 2-3, benchmarks/route_shapes.py, the public call at budget
# 0.29) the lists lost at B 1, HV 16, 8K tokens (16 rows, 2,048 head chunks: 0.361 against the one launch's 0.275 ms,
# +31%; +20.5% in call 2) and won from 16K there (-12.9 / -23.8 / -30.3% at 16K / 32K / 128K); with 32 rows they won at
# 2,048 head chunks (B 1, HV 32, 4K: -5.5%) and at 4,096 (B 2, HV 16, 8K: -8.8%); with more they won by 11-15% at 4K.
# Fewer than 16 rows were not timed.
LISTS_MIN_ROWS = 32
# Segments beside the lists: a call that takes the lists (lists_by_default) cuts its chains into segments of
# lists_segment commits, walked side by side, every segment publishing its progress; each segment's entering state comes
# from a warm-up (WARM_UP where set, else LISTS_WARM_UP) for normalised keys, from segment_scan's maps otherwise.
# COMMIT_SEGMENT stays every other route's (the one launch, the two launches, the lists by switch): calls that
# lists_by_default does not send to the lists (short ones, a model's strided v, given events) are not cut by this.
# Default "half": segments of half the call's chunk count (lists_segment), so that a chain holding more than half its
# row's chunks is cut in two, for normalised keys only (unnormalised keys keep whole chains: segment_scan's maps lost
# 4x in batch 16). A count of commits (SPARSEGDN_LISTS_SEGMENT=<n>) cuts every key's chains; 0 keeps whole chains.
# History: batch 24 (chain blocks of 16) and batch 30 (H100, segments of 128-1,024 at 128K: 4.27 / 4.24 / 4.11 / 4.06
# against 4.06 ms) found fixed segments never faster than whole chains; batch 40 (H100) found the fastest segment at
# half the chunk count (256 at 32K, 1,024 at 128K), and batch 42 (H100, analysis/results/overlap/batch42 call 1, three
# alternating rounds, budget 0.29, band 1) timed "half" with list_output's claims ahead at 1.059 / 2.024 / 3.945 ms
# at 32K / 64K / 128K against whole chains' 1.103 / 2.096 / 4.066 (-4.0 / -3.4 / -3.0%), the best or within 0.2% of
# the best fixed segment at each length (at 32K "half" is 256: 1.058; 512 at 64K 2.021; 1,024 at 128K 3.942).
# The warm-up of 20 leaves out history weighted by at most e^-20 for band 3 (for bands 0-2 measured only: WARM_UP's
# comment); the rounding of the walk it takes moves o (band 1, relative to whole chains)
# by 1.6e-3 at 32K (segments of 256) and 1.6-2.1e-3 at 128K (segments of 1,024 to 256), and at 32K not at all against
# the torch backend (4.155e-3 either way: batch 29, H100, benchmarks/warm_up_error.py --route lists).
_LISTS_SEGMENT_SETTING = os.environ.get("SPARSEGDN_LISTS_SEGMENT", "half")
if not re.fullmatch(r"[0-9]+|half", _LISTS_SEGMENT_SETTING):
    raise ValueError(f"SPARSEGDN_LISTS_SEGMENT={_LISTS_SEGMENT_SETTING!r}: commits a segment, >= 0 (0: whole chains), "
                     "or half (half the call's chunk count, normalised keys only)")
LISTS_SEGMENT: int | str = _LISTS_SEGMENT_SETTING if _LISTS_SEGMENT_SETTING == "half" else int(_LISTS_SEGMENT_SETTING)
LISTS_WARM_UP = 20.0    # the warm-up of every measurement beside the lists, where SPARSEGDN_WARM_UP leaves it 0
# Early checks: a scan of q and the initial state launched before pass 1 (intra_chunk.early_scan) and pass 1 on the
# k, v and g it loads anyway check them (head vectors' norms and the state's elements finite and within
# chunk_loads.WAIT_BOUND, besides g and beta as always);
# the flags are copied to the host right behind it (validation.copy_early), and the public
# call waits for that copy instead of its last kernel: it returns while the later passes run, so the next call's
# host work (its Python up to its first launch) overlaps them instead of leaving the GPU idle. Why: the public
# call's one sync, after every kernel, cost +33% / +29% / +20% / +8.8% / +6.3% / +7.2% over its kernels at 4K-128K
# (H200, batch 28, the front page's run). Costs: q read once more (at 128K tokens, H 16, K 128: 512 MiB), a launch,
# and one small copy between pass 1 and pass 2. Only for calls whose caller reads the flags back (a DeferredChecks
# caller syncs no call) and whose checks can clear them: normalised keys, a scale of at most 1, o in bfloat16,
# float32 or float64 (chunk_loads.WAIT_BOUND says why, and where an overflow of o still goes unreported). A call the
# early checks do not clear waits for every flag, as without them.
# Timed in batch 30 (off then; H100, analysis/results/overlap/batch30) with q loaded in pass 1 (no scan), the wait moved
# as designed (the public call at its own entry's time) but pass 1 carrying q cost about twice q's bytes (entry +17 to
# +372 us at 4K-128K): the public call -5% at 4K, level at 16K, +1% to +6% from 32K. With the scan and pass 1 comparing
# every element of k and v (batch 31, H200) the entry grew +40 / +94 / +305 us at 4K / 32K / 128K, by its size pass 1's
# tile compares rather than q's bytes (dense semantics, the same q, grew +631 us at 128K); the public call -3% to -11%
# at 4K-16K, +3% to +5% from 32K. Now pass 1 compares the rows' sums of squares it forms anyway (the bound is on head
# vectors' norms). On since batch 32 (H100, analysis/results/overlap/batch32): the entry grew +60 / +189 us at 32K /
# 128K and the public call against the waiting one's was -3% / -24% / -19% / -8% / -1% / -1% at 4K-128K (budget 0.29)
# and -20% to +0.5% for dense semantics. SPARSEGDN_EARLY_CHECKS=0 turns it off.
EARLY_CHECKS = os.environ.get("SPARSEGDN_EARLY_CHECKS", "1") == "1"
EARLY_DTYPES = (torch.bfloat16, torch.float32, torch.float64)   # o's dtypes (v's) whose range WAIT_BOUND keeps
EARLY_MAX_SCALE = 1.0       # q k^T's scale: the bound on o takes it as at most 1 (the default is K^-0.5)


def early_checks(v, normalize: bool, scale: float, deferred: bool) -> bool:
    """Whether this call runs the early checks (EARLY_CHECKS): its flags read back by the call (not deferred),
    normalised keys, a scale of at most EARLY_MAX_SCALE, and o (v's dtype) in one of EARLY_DTYPES."""
    return EARLY_CHECKS and not deferred and normalize and scale <= EARLY_MAX_SCALE and v.dtype in EARLY_DTYPES


def sparse_gdn_forward(q, k, v, g, beta, **options):
    """See sparsegdn.triton. Returns (o, final_state, events, scores, budget_per_head, flags int32 [NUM_FLAGS]).
    `replayable=False` keeps the call off the CUDA graphs (graphs.py: a caller that defers its value checks).
    `call_key`: a key of the call's tensors' layouts and options made by the caller (sparsegdn.api.checked_key),
    which then finds the call's plan instead of graphs.call_key.

    Kernels launch on the device of the inputs, not the current device (a model split over several
    GPUs calls the core with each layer's tensors on that layer's GPU).
    """
    replayable = options.pop("replayable", True)      # False: the caller defers its checks (graphs.py)
    call_key = options.pop("call_key", None)          # the public call's key (sparsegdn.api.checked_key), or None
    options["early"] = early_checks(v, options["use_qk_l2norm_in_kernel"], options["scale"], deferred=not replayable)
    if v.is_cuda:
        tensors = dict(q=q, k=k, v=v, g=g, beta=beta, initial_state=options.pop("initial_state"))
        index = v.get_device()
        if index == torch.cuda.current_device():    # switched only when needed (its Python is part of every call)
            return _on_device(tensors, options, replayable, call_key)
        with torch.cuda.device(index):
            return _on_device(tensors, options, replayable, call_key)
    return _forward(q, k, v, g, beta, **options)


def _on_device(tensors, options, replayable, call_key):
    """sparse_gdn_forward on the inputs' device, the current one: replayed from a graph, from a plan, or launched."""
    if graphs.wanted(tensors, events=options["events"], selector=options["selector"],
                     stage_hook=options.get("stage_hook"), deferred=not replayable):
        return graphs.replay(_forward, tensors, dict(options, early=False), design=design_switches())
    if call_plans.wanted(events=options["events"], stage_hook=options.get("stage_hook")):
        return call_plans.call(_forward, tensors, options, design=design_switches(), key=call_key)
    return _forward(**tensors, **options)


def design_switches() -> tuple:
    """The switches the forward reads when it runs (this module's, state_output's, state_pass's, segment_maps',
    chunk_output's, schedule's, intra_chunk's and the solve precision's override, chunk_loads.solve_precision):
    a CUDA graph captured under some values must not be replayed under others."""
    return (STORE_INVERSE, COMMIT_SEGMENT, WARM_UP, OVERLAP, SPLIT_OUTPUTS, STORE_VECTORS, PAIRED, FOLD_COMMITS,
            STREAM_PREPARE, event_prepare_module.STREAM_PROGRAMS, event_prepare_module.STREAM_MAXNREG,
            state_pass_module.FOLD_MAX_KEY_DIM, state_pass_module.STREAMED_STAGES, state_pass_module.PROGRESS_STAGES,
            state_pass_module.PROGRESS_BV, state_pass_module.PROGRESS_WARPS, state_pass_module.TRANSPOSED,
            state_pass_module.CHAIN_MAXNREG,
            state_pass_module.TMA_SNAPSHOTS, bool(state_pass_module.PUBLISH_IN_LOOP),
            state_pass_module.PROGRESS_PUBLISH,
            state_output_module.READY_ORDER,
            state_output_module.RELAXED_POLL, state_output_module.CHAIN_ONLY, state_output_module.POISON,
            state_output_module.PUBLISH, state_output_module.TIMELINE, state_pass_module.POISON,
            segment_maps_module.DELTA_MAPS, chunk_output_module.SKIP_ZERO_STATE, schedule_module.SELECT_KERNEL,
            schedule_module.SELECT_STEP_BITS, schedule_module.SELECT_THREAD_KEYS, schedule_module.SCHEDULE_LOAD,
            schedule_module.SCAN_BESIDE_SELECT,
            intra_chunk_module.EARLY_BESIDE,
            list_output_module.LIST_OUTPUTS, list_output_module.OVERLAP_LISTS, list_output_module.CLAIM,
            list_output_module.CLAIM_AHEAD, list_output_module.SIDE_STREAM, list_output_module.OWN_LAUNCH,
            list_output_module.STATE_LAUNCH, list_output_module.LIST_MAXNREG, LISTS_FROM, LISTS_MAX_BUDGET,
            LISTS_MIN_ROW_CHUNKS, LISTS_MIN_ROWS, LISTS_SEGMENT, LISTS_WARM_UP, EARLY_CHECKS,
            os.environ.get("SPARSEGDN_SOLVE_PRECISION"))


def selected_share(events, budget, selector) -> float | None:
    """The share of the events a call keeps where the host knows it: 1 for `all`, the budget where the call selects
    by it (no events given), else None (given events, the `random` and `oracle` selectors' included: the API hands
    those over as given events, and a caller's own events may be any share; theirs is on the device)."""
    if selector == "all":
        return 1.0
    return budget if events is None else None


def lists_by_default(q, k, v, band: int, dtype, kept) -> bool:
    """Whether this call runs the Gluon lists beside the chain pass by LISTS_FROM (twice it for fewer head-pair rows
    than LISTS_MIN_ROWS) and the conditions beside it: q, k
    and v as pass 1 reads them, dtype the one its lists are written in, kept the call's selected_share. False wherever
    the switches were set otherwise (the one launch's COMMIT_SEGMENT, PAIRED)."""
    if LISTS_FROM <= 0 or not OVERLAP or COMMIT_SEGMENT or PAIRED:
        return False
    if kept is None or kept > LISTS_MAX_BUDGET:
        return False
    batch, tokens, value_heads = v.shape[:3]
    n_chunks = num_chunks(tokens)
    needed = LISTS_FROM * (2 if batch * value_heads < LISTS_MIN_ROWS else 1)
    if n_chunks < LISTS_MIN_ROW_CHUNKS or batch * value_heads * n_chunks < needed:
        return False
    return list_output_module.eligible_inputs(q, k, v, not store_inverse(band), dtype, band) is None


def lists_segment(n_chunks: int, normalize: bool = True) -> int:
    """Commits a segment beside the lists for a call of n_chunks chunks a batch row (LISTS_SEGMENT; 0: whole chains):
    "half" is cdiv(n_chunks, 2), which cuts only the chains of more commits than that, in two, and only for normalised
    keys (`normalize`: their segments start from warm-ups; unnormalised keys' would need segment_scan's maps)."""
    if LISTS_SEGMENT == "half":
        return cdiv(n_chunks, 2) if normalize else 0
    return LISTS_SEGMENT


def chain_segments(by_lists: bool, normalize: bool, n_chunks: int) -> tuple[int, float]:
    """(commits a segment, warm-up) of the chains of a call of n_chunks chunks a batch row: lists_segment beside the
    lists (by_lists: the call took them by lists_by_default, which COMMIT_SEGMENT refuses) with WARM_UP, or
    LISTS_WARM_UP where WARM_UP is 0; COMMIT_SEGMENT and WARM_UP otherwise.
    The warm-up only for normalised keys (0: segment_scan's maps)."""
    segment = lists_segment(n_chunks, normalize) if by_lists else 0
    if segment:
        return segment, (WARM_UP or LISTS_WARM_UP) if normalize else 0.0
    return COMMIT_SEGMENT, WARM_UP if normalize else 0.0


def folded_commits(paired: bool, n_chunks: int, key_dim: int, warm_up: float, dtype=torch.bfloat16,
                   on_gpu=True, segment: int | None = None) -> bool:
    """Whether this call's events are prepared folded (FOLD_COMMITS): not for paired chains or chains cut into
    segments whose entering states come from segment_scan's maps (warm-up segments walk folded lists), and on a GPU
    only for 16-bit lists of keys up to state_pass.FOLD_MAX_KEY_DIM (a stage of the chain's pipeline holds a K x K
    tile: 32 KB at K = 128 in bfloat16, 128 KB at K = 256, 64 KB for float32 at 128). `segment`: the call's
    (chain_segments), COMMIT_SEGMENT where not given."""
    segment = COMMIT_SEGMENT if segment is None else segment
    maps = state_pass_module.segmented_chains(segment, n_chunks, key_dim, warm_up) and not warm_up > 0
    fits = not on_gpu or (dtype != torch.float32 and key_dim <= state_pass_module.FOLD_MAX_KEY_DIM)
    return FOLD_COMMITS and not paired and not maps and fits


def check_progress_layout():
    """Raises unless the Gluon lists wait on the progress counts' layout the chain pass publishes (state_pass's
    PROGRESS_BV, which list_output took at import): a lists kernel waiting on other counts could spin forever."""
    if list_output_module.PROGRESS_COLUMNS.value != state_pass_module.PROGRESS_BV:
        raise RuntimeError(f"the lists wait on counts of {list_output_module.PROGRESS_COLUMNS.value} value columns, "
                           f"the chain pass publishes them every {state_pass_module.PROGRESS_BV}: set "
                           "SPARSEGDN_CHAIN_BV before the import, not state_pass.PROGRESS_BV after it")


def streams_preparation(lists, segment: int, paired: bool) -> bool:
    """Whether pass 3 is streamed (STREAM_PREPARE): only where the chains publish progress for lists beside them
    (`lists` a list_output.ListCall with overlap), walked whole (segment 0) and one commit at a time."""
    return STREAM_PREPARE and lists is not None and lists.overlap and segment == 0 and not paired


def store_inverse(band: int) -> bool:
    """Whether pass 1 stores Tinv for this band (the module's docstring says why), or STORE_INVERSE where set."""
    return band >= STORED_FROM_BAND if STORE_INVERSE is None else STORE_INVERSE


def _forward(q, k, v, g, beta, *, events, budget, selector, band, scale, initial_state,
             output_final_state, use_qk_l2norm_in_kernel, stage_hook=None, early=False):
    out_dtype = v.dtype
    dtype = v.dtype if v.dtype in DOT_DTYPES else torch.float32
    q, k = (rows_view(x.to(dtype)) for x in (q, k))
    v = tile_view(v.to(dtype))  # read through all four strides: a model's v comes with the tokens innermost
    g, beta = rows_view(g), rows_view(beta)          # read in their own dtype, converted in registers
    if initial_state is not None:
        initial_state = initial_state.float().contiguous()
    value_heads = v.shape[2]
    n_chunks = num_chunks(v.shape[1])
    hook = stage_hook or (lambda name: None)
    flags = call_record.zeros(NUM_FLAGS, dtype=torch.int32, device=v.device)
    by_lists = lists_by_default(q, k, v, band, dtype, selected_share(events, budget, selector))    # not the one launch

    scan_in_selection = early and events is None and schedule_module.SCAN_BESIDE_SELECT     # the scan after pass 1
    t_inv, chunk_log_decay, write, read, vectors = intra_chunk(
        k, v, g, beta, flags, band=band, normalize=use_qk_l2norm_in_kernel, num_value_heads=value_heads,
        num_chunks=n_chunks, store_inverse=store_inverse(band), store_vectors=STORE_VECTORS or by_lists,
        early=(q, initial_state) if early else None, scan=not scan_in_selection)
    if early and not scan_in_selection:     # the flags as pass 1 leaves them, on their way to the host (early_checks)
        call_record.copy_early(flags)
    hook(STAGES[0])
    scores = score_scan(chunk_log_decay, write, read)
    if events is None:
        events, count = select_events(scores, budget=budget, selector=selector,
                                      early_scan=(q, initial_state, flags, value_heads) if scan_in_selection else None)
        if scan_in_selection:   # the flags as the scan and pass 1 leave them
            call_record.copy_early(flags)
        schedule = build_schedule(events, chunk_log_decay, max_events=count)
    else:
        schedule = build_schedule(events.to(torch.bool), chunk_log_decay)
    hook(STAGES[1])
    chain_segment, warm_up = chain_segments(by_lists, use_qk_l2norm_in_kernel, n_chunks)
    paired = PAIRED and chain_segment == 0 and not (k.is_cuda and k.dtype == torch.float32)   # see PAIRED
    folded = folded_commits(paired, n_chunks, k.shape[-1], warm_up, k.dtype, k.is_cuda, segment=chain_segment)
    segmented = state_pass_module.segmented_chains(chain_segment, n_chunks, k.shape[-1], warm_up)
    one_launch = OVERLAP and not by_lists
    # The two launches' lists, progress counts and streamed marks are made before pass 3: no kernel may come between
    # a streamed preparation and the chain pass it lets start early (STREAM_PREPARE).
    overlap_lists = list_output_module.OVERLAP_LISTS or by_lists
    lists_wanted = not one_launch and (list_output_module.LIST_OUTPUTS or by_lists) \
        and list_output_module.eligible(q, k, v, t_inv, vectors, k.dtype, band) is None

    def make_lists():
        return list_output_module.ListCall(q, k, v, beta, t_inv, vectors, schedule, flags, scale=scale,
                                           normalize=use_qk_l2norm_in_kernel, out_dtype=out_dtype,
                                           zero_start=chunk_output_module.zero_start(initial_state is not None),
                                           band=band, overlap=overlap_lists, claim=list_output_module.CLAIM or by_lists,
                                           cut=overlap_lists and segmented)
    # lists after the chain pass (not overlapped) are made after pass 3, as before: with SIDE_STREAM their stream
    # waits for what the call's stream holds when they are made
    lists = make_lists() if lists_wanted and overlap_lists else None
    progress, segment, ready = None, 0, None
    if lists is not None and lists.overlap:     # the lists wait on the chains' progress counts
        check_progress_layout()
        if segmented:
            segment = chain_segment
        progress = call_record.zeros(state_pass_module.progress_counts_shape(schedule, v.shape[-1], segment),
                                     dtype=torch.int32, device=v.device)
        if streams_preparation(lists, segment, paired):
            ready = call_record.zeros(state_pass_module.ready_marks_shape(schedule), dtype=torch.int32,
                                      device=v.device)
    w, u, k_commit = event_prepare(k, v, g, beta, t_inv, schedule.event_chunks, normalize=use_qk_l2norm_in_kernel,
                                   num_value_heads=value_heads, num_chunks=n_chunks, band=band, folded=folded,
                                   streamed=(schedule, ready) if ready is not None else None)
    if paired:
        pair_prepare(w, u, k_commit, schedule)
    if lists_wanted and lists is None:
        lists = make_lists()
    hook(STAGES[2])
    split = SPLIT_OUTPUTS and chunk_output_module.zero_start(initial_state is not None)
    if one_launch:
        o, final_state = state_output(w, u, k_commit, q, k, v, g, beta, t_inv, schedule, initial_state, flags,
                                      store_final=output_final_state, scale=scale, normalize=use_qk_l2norm_in_kernel,
                                      out_dtype=out_dtype, band=band, paired=paired, segment=chain_segment,
                                      warm_up=warm_up, skip_own=split, vectors=vectors, folded=folded)
        hook(STAGES[3])
        if split:           # the zero-state chunks the one launch left
            own_outputs(q, k, v, g, beta, t_inv, schedule, flags, o, scale=scale, normalize=use_qk_l2norm_in_kernel,
                        band=band, vectors=vectors)
        hook(STAGES[4])
        return o, final_state, schedule.events, scores, schedule.per_head, flags
    snapshots, final_state = state_pass(w, u, k_commit, schedule, initial_state, flags,
                                        store_final=output_final_state, segment=chain_segment, paired=paired,
                                        warm_up=warm_up, progress=progress,
                                        publish=state_pass_module.progress_publish(paired) if progress is not None
                                        else 1, folded=folded, ready=ready)
    if lists is not None:   # the zero-state chunks beside the chain pass (list_output.SIDE_STREAM)
        lists.own()
    del w, u, k_commit    # not needed past the recurrence (freed here unless a plan's recording holds them)
    hook(STAGES[3])
    if lists is not None:
        o = lists.with_state(snapshots, progress, segment)
    else:
        o = chunk_output(q, k, v, g, beta, t_inv, snapshots, schedule, flags, scale=scale,
                         normalize=use_qk_l2norm_in_kernel, out_dtype=out_dtype, band=band,
                         has_initial=initial_state is not None, vectors=vectors)
    hook(STAGES[4])
    return o, final_state, schedule.events, scores, schedule.per_head, flags
