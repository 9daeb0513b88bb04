"""Passes 4 and 5 in one launch: the commit chains and the outputs side by side.

Why: the shared budget gives a few head pairs nearly every chunk and the rest almost none (benchmark
inputs at 32K, budget 0.29: nine head pairs hold 4,200 of the 4,752 events). The state pass lasts as
long as its longest chain, a handful of programs walking ~NC commits while the rest of the GPU idles,
and only then does the output pass start. Here the output programs fill that idle GPU: an output chunk
needs only its own head pair's snapshot, so it waits for that one, not for every chain.

Grid: one program per chain block (value block x batch row x head pair, as state_pass.py; with
segments, x segment: each walks its segment from the entering state segment_scan.py computed before the
launch) and per output block (one chunk of one head pair, as chunk_output.py with GROUP 1; chunks
slowest, so early chunks first). A program takes a ticket
from a counter when it starts and plays the role of that ticket's number: chain programs hold the
first tickets. An output program waits only on chain programs, and those got their tickets earlier,
so they are already running and never wait themselves: the waits always end, whatever order the
hardware starts the programs in (a program's place in the grid does not decide its role).

The chain programs publish how many snapshots they have stored every PUBLISH commits (state_pass.publish;
an even number for paired chains); an output program spins on the counters of the chain (with segments:
of the segment) that stores its snapshot, just before its one product that needs it
(chunk_output.wait_for_snapshot). The kernel autotunes with the counters zeroed before every run
(reset_to_zero). Under the interpreter the programs run one after another in grid order, so every
wait finds its snapshot stored: the interpreter tests check the arithmetic, never the waiting (a wait
that is too long hangs them; one that is too short passes). The waiting is tested on a GPU
(tests/test_triton_gpu_matrix.py), with the snapshots filled with NaN before each launch (POISON) and a
progress count after every commit. The snapshot stores must stay plain global stores: bulk (TMA) stores
would need their own wait and a proxy fence before state_pass.publish.

Measured on the H200 (2026-12-01, analysis/results/overlap/, kernel_bench.notes.md): passes 4 + 5 at
32K, budget 0.29, 0.79 + 0.63 ms as two launches, 1.11 ms as one; at 128K 3.15 + 2.49 against 4.24.
"""
import os

import torch
import triton
import triton.language as tl

import triton.language.extra.cuda as cuda_extra

from . import call_record
from .chunk_loads import AUTOTUNE, INTERPRET, cdiv, length_bucket, padded, solve_precision
from .chunk_output import output_chunks, starts_from_zero, zero_start
from .launch import Launcher
from .state_pass import check_folded, segmented_chains, setting_interval, walk_chain

# Chain value blocks (BV of state_pass), output value blocks, warps, pipeline depth. One kernel holds both
# roles, so it has one register budget and one launch shape. On the H200 (2026-12-01, one launch at 32K /
# 128K): chain blocks of 16 columns with 3 stages 1.11 / 4.24 ms, with 2 stages 1.09 / 4.29, of 32 columns
# 1.23-1.64 / 4.65-4.81; all computed correctly (analysis/results/overlap/).
CONFIGS = [triton.Config({"STATE_BV": state_bv, "BV": 128}, num_warps=4, num_stages=stages)
           for state_bv, stages in ((16, 3), (16, 2), (32, 3))]
FALLBACK = triton.Config({"STATE_BV": 16, "BV": 16}, num_warps=4, num_stages=2)   # BV set by _prune
PUBLISH = 16        # commits between two progress counts of a one launch's chain program (the lists' route:
#                     state_pass.PROGRESS_PUBLISH; at 64 here the public call at 4K and 8K took 0.249 / 0.393 ms in
#                     batch 39's front-page run against 0.222 / 0.361 at 16 in batch 37's: its outputs wait on counts)
# Output programs in order of readiness (chunks sorted by how many commits their snapshot needs, one
# argsort per call, so that fewer programs wait holding an SM's slot), or chunk by chunk (the default:
# readiness order measured slower on the H200, 1.70 against 1.59 ms at 32K, 6.12 against 6.00 at 128K,
# analysis/results/overlap/batch2). SPARSEGDN_READY_ORDER=1 turns it on.
READY_ORDER = os.environ.get("SPARSEGDN_READY_ORDER", "0") == "1"
# Output programs poll their counters with plain volatile loads and acquire once (chunk_output.wait_for_snapshot),
# instead of acquire atomics on every poll: less contention with the chains' releases (helper-13's review).
# Off until measured on a GPU; SPARSEGDN_RELAXED_POLL=1 turns it on.
RELAXED_POLL = os.environ.get("SPARSEGDN_RELAXED_POLL", "0") == "1"
# Diagnostics only (benchmarks/config_probe.py's `chain-only`, timed, never checked): output programs return at
# once, so the launch times its chains alone in the launch's own shape and register budget; its o is garbage.
CHAIN_ONLY = False
# Diagnostics only (benchmarks/launch_timeline.py): every program records when it began and ended, on which
# multiprocessor and in which role, by ticket, into `last_timeline` (int64 [programs, 4]: begin ns, end ns, SM,
# 0 for a chain program or 1 for an output program; -1 past the grid). Off: the kernel compiles without it.
TIMELINE = False
last_timeline = None
# Tests only: snapshots and o filled with NaN before the launch, so an output that reads a snapshot before its
# chain stored it computes NaN, and a chunk no launch writes stays NaN (torch.empty would often hand back an
# earlier call's identical values).
POISON = False


def _prune(configs, named_args, **kwargs):
    """Blocks no wider than the (padded) value head, at least one config kept."""
    widest = padded(named_args["V"])
    kept = [config for config in configs
            if config.kwargs["BV"] <= widest and config.kwargs["STATE_BV"] <= widest]
    return kept or [triton.Config({**FALLBACK.kwargs, "BV": widest}, num_warps=FALLBACK.num_warps,
                                  num_stages=FALLBACK.num_stages)]


@triton.autotune(configs=CONFIGS if AUTOTUNE else CONFIGS[:1],
                 key=["K", "V", "H", "HV", "RECOMPUTE", "BAND", "READY", "PAIRED", "RELAXED_POLL", "CHAIN_ONLY",
                      "HAS_STARTS", "WARM_UP", "SKIP_OWN", "VECTORS", "FOLDED", "LENGTH_BUCKET"],
                 prune_configs_by={"early_config_prune": _prune}, reset_to_zero=["ticket_ptr"])
@triton.jit
def state_output_kernel(w_ptr, u_ptr, k_commit_ptr, event_decays_ptr, first_event_ptr, per_head_ptr,
                        log_decay_since_ptr, final_log_decay_ptr, initial_state_ptr, starts_ptr,
                        snapshot_ptr, final_state_ptr, flags_ptr, ticket_ptr, order_ptr, timeline_ptr,
                        q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, vectors_ptr, snapshot_of_chunk_ptr, o_ptr,
                        scale, T, NC,
                        LENGTH_BUCKET, E,
                        q_sb, q_st, q_sh, k_sb, k_st, k_sh, v_sb, v_st, v_sh, v_sd, g_sb, g_st, g_sh,
                        beta_sb, beta_st, beta_sh, o_sb, o_st, o_sh, B, SEGMENT,
                        H: tl.constexpr, HV: tl.constexpr, K, V, BK: tl.constexpr, HAS_INITIAL: tl.constexpr,
                        STORE_FINAL: tl.constexpr, NORMALIZE: tl.constexpr, RECOMPUTE: tl.constexpr,
                        BAND: tl.constexpr, PRECISION: tl.constexpr, PUBLISH_EVERY: tl.constexpr,
                        VP: tl.constexpr, READY: tl.constexpr, PAIRED: tl.constexpr, RELAXED_POLL: tl.constexpr,
                        CHAIN_ONLY: tl.constexpr, HAS_STARTS: tl.constexpr, WARM_UP: tl.constexpr,
                        ZERO_START: tl.constexpr, SKIP_OWN: tl.constexpr, VECTORS: tl.constexpr,
                        TIMELINE: tl.constexpr, FOLDED: tl.constexpr, STATE_BV: tl.constexpr, BV: tl.constexpr):
    # SKIP_OWN (split outputs, ZERO_START): the output programs of the chunks that start from a zero state return
    # at once (chunk_output.own_outputs writes them in a launch of its own); the others wait for their snapshots.
    tl.static_assert(not SKIP_OWN or ZERO_START)
    # ticket_ptr[0]: the ticket counter; ticket_ptr[1:]: progress [B * HV, segments, cdiv(V, STATE_BV)].
    progress_ptr = ticket_ptr + 1
    if TIMELINE:
        began = clock_ns()
    ticket = tl.atomic_add(ticket_ptr, 1).to(tl.int64)
    state_blocks = tl.cdiv(V, STATE_BV)
    if HAS_STARTS:                          # segments of SEGMENT commits a head pair, each its own program
        n_slots = tl.cdiv(NC, SEGMENT)
    else:                                   # whole chains (SEGMENT = NC)
        n_slots = 1
    n_chain = B * HV * n_slots * state_blocks
    if ticket < n_chain:
        row = ticket // state_blocks
        segment = 0                         # a constant without segments: the whole-chain code stays as it was
        if HAS_STARTS:
            segment = row % n_slots
            row = row // n_slots
        walk_chain(ticket % state_blocks, row, segment, w_ptr, u_ptr, k_commit_ptr, event_decays_ptr,
                   first_event_ptr, per_head_ptr, final_log_decay_ptr, initial_state_ptr, snapshot_ptr,
                   final_state_ptr, flags_ptr, starts_ptr, progress_ptr, NC, E, SEGMENT, HV, K, V, BK, STATE_BV,
                   HAS_INITIAL, STORE_FINAL, HAS_STARTS, PUBLISH_EVERY, PAIRED, WARM_UP, FOLDED, progress_ptr, False)
    elif not CHAIN_ONLY:
        pid = ticket - n_chain
        n_blocks = tl.cdiv(V, BV)
        i_v = pid % n_blocks                # value blocks fastest
        if READY:                           # then the chunks in order of readiness: order holds (b * HV + hv) * NC + c
            item = tl.load(order_ptr + pid // n_blocks)
            c = item % NC
            hv = (item // NC) % HV
            b = item // (NC * HV)
        else:                               # then head pairs, batch rows, chunks
            rest = pid // n_blocks
            hv = rest % HV
            b = (rest // HV) % B
            c = rest // (HV * B)
        if not SKIP_OWN or not starts_from_zero(snapshot_of_chunk_ptr, b * HV + hv, c, NC):
            output_chunks(b, c, hv, i_v, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, vectors_ptr, snapshot_ptr,
                          snapshot_of_chunk_ptr, log_decay_since_ptr, o_ptr, flags_ptr, progress_ptr, first_event_ptr,
                          scale, T, NC, E, q_sb, q_st, q_sh, k_sb, k_st, k_sh, v_sb, v_st, v_sh, v_sd, g_sb, g_st,
                          g_sh, beta_sb, beta_st, beta_sh, o_sb, o_st, o_sh, H, HV, K, V, BK, BV, NORMALIZE, RECOMPUTE,
                          BAND, PRECISION, 1, STATE_BV, VP // STATE_BV, RELAXED_POLL, SEGMENT, HAS_STARTS, ZERO_START,
                          VECTORS)
    if TIMELINE:     # by ticket: when this program began and ended (ns), its multiprocessor, its role (1: output)
        field = tl.arange(0, 4)
        ended = clock_ns()
        values = tl.where(field == 0, began, tl.where(field == 1, ended, tl.where(field == 2, sm_id().to(tl.int64),
                                                                                  (ticket >= n_chain).to(tl.int64))))
        tl.store(timeline_ptr + ticket * 4 + field, values)


launch_state_output = Launcher(state_output_kernel)


@triton.jit
def clock_ns():
    """The GPU's global nanosecond timer (a program counter stand-in, 0, under the interpreter)."""
    if INTERPRET:
        return tl.zeros([], dtype=tl.int64)
    return cuda_extra.globaltimer()


@triton.jit
def sm_id():
    """The multiprocessor this program runs on (0 under the interpreter)."""
    if INTERPRET:
        return tl.zeros([], dtype=tl.int32)
    return cuda_extra.smid()


def state_output(w, u, k_commit, q, k, v, g, beta, t_inv, schedule, initial_state, flags, *,
                 store_final, scale, normalize, out_dtype, band, paired=False, segment=0, warm_up=0.0,
                 skip_own=False, vectors=None, folded=False):
    """Passes 4 and 5 in one launch. Returns o [B,T,HV,V] in out_dtype and the final state float32
    [B,HV,K,V] or None, as state_pass and chunk_output together; the snapshots live only for the launch.
    paired: the lists were rewritten by commit_pairs.pair_prepare. segment > 0: each chain cut into runs of
    that many commits walked side by side from the states segment_scan.segment_starts computes first (as
    state_pass does; 0, or a key head wider than state_pass.SEGMENT_MAX_KEY_DIM, walks whole chains); with
    warm_up > 0 each segment walks its entering state from a warm-up instead (state_pass.warm_up_begin).
    skip_own (no initial state, chunk_output.SKIP_ZERO_STATE on): the chunks that start from a zero state are left
    unwritten in o, for chunk_output.own_outputs to write. vectors: pass 1's chunk vectors for the output programs
    to read (intra_chunk with store_vectors), or None to compute them there. folded: w and u are event_prepare's
    folded tiles (state_pass.state_pass says where they serve)."""
    if skip_own and not zero_start(initial_state is not None):
        raise ValueError("state_output(skip_own=True) leaves the zero-state chunks to chunk_output.own_outputs: it "
                         "needs them (no initial state, SKIP_ZERO_STATE on)")
    batch, tokens, key_heads, key_dim = q.shape
    value_heads, value_dim = v.shape[2], v.shape[3]
    n_chunks = schedule.events.shape[2]
    n_events = schedule.max_events
    starts = None
    segmented = segmented_chains(segment, n_chunks, key_dim, warm_up)
    if segmented and paired:
        raise ValueError("paired lists (commit_pairs.pair_prepare) need whole chains: segment must be 0")
    check_folded(folded, paired, segmented, warm_up)
    if segmented and not warm_up > 0:
        from .segment_scan import segment_starts
        starts = segment_starts(w, u, k_commit, schedule, initial_state, flags, segment=segment)
    elif not segmented:
        segment = max(n_chunks, 1)
    n_slots = cdiv(n_chunks, segment)
    snapshot_shape = (batch, n_events + value_heads, key_dim, value_dim)
    snapshots = (torch.full(snapshot_shape, float("nan"), device=w.device, dtype=w.dtype) if POISON
                 else call_record.empty(*snapshot_shape, device=w.device, dtype=w.dtype))
    final_state = (call_record.empty(batch, value_heads, key_dim, value_dim, device=w.device, dtype=torch.float32)
                   if store_final else snapshots)
    o = (torch.full((batch, tokens, value_heads, value_dim), float("nan"), device=q.device, dtype=out_dtype) if POISON
         else call_record.empty(batch, tokens, value_heads, value_dim, device=q.device, dtype=out_dtype))
    # The ticket counter and the progress counts of the narrowest chain blocks any config uses (the kernel's
    # configs as they are now: a probe may force others).
    narrowest = min(config.kwargs["STATE_BV"] for config in state_output_kernel.configs + [FALLBACK])
    counters = call_record.zeros(1 + batch * value_heads * n_slots * cdiv(value_dim, narrowest),
                                 dtype=torch.int32, device=w.device)

    order = ready_order(schedule) if READY_ORDER else counters
    timeline = schedule.per_head      # unread without the timeline; int64 either way, so autotuning keys alike
    if TIMELINE:
        global last_timeline
        narrowest_output = min([16] + [config.kwargs["BV"] for config in state_output_kernel.configs])
        most = batch * value_heads * (n_slots * cdiv(value_dim, narrowest)
                                      + n_chunks * cdiv(value_dim, narrowest_output))     # rows for any config's grid
        timeline = last_timeline = torch.full((most, 4), -1, dtype=torch.int64, device=w.device)

    def grid(meta):
        chains = batch * value_heads * n_slots * cdiv(value_dim, meta["STATE_BV"])
        outputs = batch * n_chunks * value_heads * cdiv(value_dim, meta["BV"])
        return (chains + outputs,)

    launch_state_output(
        grid, w, u, k_commit, schedule.event_decays, schedule.first_event, schedule.per_head,
        schedule.log_decay_since, schedule.final_log_decay,
        initial_state if initial_state is not None else snapshots, starts if starts is not None else snapshots,
        snapshots, final_state, flags, counters, order, timeline,
        q, k, v, g, beta, t_inv if t_inv is not None else o, vectors if vectors is not None else o,
        schedule.snapshot_of_chunk, o, scale, tokens,
        n_chunks, length_bucket(n_chunks), n_events, *q.stride()[:3], *k.stride()[:3], *v.stride(), *g.stride(),
        *beta.stride(), *o.stride()[:3], batch, segment, key_heads, value_heads, key_dim, value_dim, BK=padded(key_dim),
        HAS_INITIAL=initial_state is not None, STORE_FINAL=store_final, NORMALIZE=normalize,
        RECOMPUTE=t_inv is None, BAND=band, PRECISION=solve_precision(k.dtype),
        PUBLISH_EVERY=publish_every(paired), VP=padded(value_dim), READY=READY_ORDER, PAIRED=paired,
        RELAXED_POLL=RELAXED_POLL, CHAIN_ONLY=CHAIN_ONLY, HAS_STARTS=segmented,
        WARM_UP=float(warm_up) if segmented else 0.0,
        ZERO_START=zero_start(initial_state is not None), SKIP_OWN=skip_own, VECTORS=vectors is not None,
        TIMELINE=TIMELINE, FOLDED=folded)
    return o, (final_state if store_final else None)


def publish_every(paired):
    """Commits between two progress counts of the one launch's chain programs: PUBLISH, made even for paired chains
    and checked (state_pass.setting_interval)."""
    return setting_interval(PUBLISH, paired, "state_output.PUBLISH")


def ready_order(schedule):
    """int64 [B * HV * NC]: every (batch row, head pair, chunk) as (b * HV + hv) * NC + c, sorted by the
    number of commits its snapshot comes after (stable: chunk order among equals)."""
    batch, heads, n_chunks = schedule.events.shape
    rows = torch.arange(batch * heads, device=schedule.first_event.device).view(batch, heads)
    base = (rows // heads) * (schedule.max_events + heads) + schedule.first_event + rows % heads
    commits_before = schedule.snapshot_of_chunk - base.unsqueeze(-1)
    return torch.argsort(commits_before.flatten(), stable=True)
