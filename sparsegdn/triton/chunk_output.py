"""Pass 5, every chunk in parallel: the output of every token.

Grid: one program per (batch row, group of GROUP chunks, head pair, block of BV value columns), value
blocks fastest, then head pairs (k, q and Tinv shared in L2 by the programs of one chunk; the
snapshot of a run of skipped chunks stays in L2). A program loops over its chunks so the compiler's
pipeliner can fetch the next chunk's tiles while this one's products run. The state entering chunk c
is exp(d_c) * snapshot (Schedule), and with P the decayed causal Q K^T, M = P Tinv and X = beta e^gamma K:

    o = scale [ (Q e^gamma) S + P (u - w S) ]
      = scale [ e^{d_c} (Q e^gamma - M X) snapshot + M (beta V) ]

Folding Tinv into M saves the w S product (64 x K x V) that the textbook form needs: the kernel
does five products, QK^T, P Tinv, M X, (.) snapshot and M (beta V); with BV < V the first three are
repeated by each value block (more programs, smaller tiles: the autotuner weighs the two). q and k
stay raw dot operands; their norms scale the products. Tinv is read from pass 1, or, when pass 1
does not store it (RECOMPUTE), solved here on chip from the k tile already loaded. A chunk whose
entering state is zero (no initial state, no commit of its head pair yet: SKIP_ZERO_STATE) forms only
its own part, o = scale M (beta V): QK^T, P Tinv and M (beta V) beside the solve. A non-finite output
raises FLAG_OUTPUT.
"""
import os

import torch
import triton
import triton.language as tl

from .band_solve import DECAY_SCALES, band_inverse_decayed, causal_decay, decayed_products
from .chunk_loads import (AUTOTUNE, CHUNK, FLAG_OUTPUT, FOLD_SCALES, any_not_finite, cdiv, inverse_norm,
                          load_gates, load_rows, load_rows_stored, load_tile, mma, mma_into, padded, raise_flag,
                          length_bucket, round_to, rows_left, solve_precision)
from .launch import Launcher
from .state_pass import progress_row

# Only configs that computed correctly on the H200 when forced one at a time (2026-11-30,
# benchmarks/config_probe.py, head size 128); an autotuning run over more of them ended in an illegal address.
# Chunks that start from a zero state (no initial state, no commit of their head pair yet: on the benchmark's
# inputs at budget 0.29, two thirds of all chunks, the fast-decaying head pairs' before their one late commit)
# skip the state's part of the output: two products, the snapshot's read and the wait for it.
# SPARSEGDN_SKIP_ZERO_STATE=0 computes it anyway (to measure what the skip gives).
SKIP_ZERO_STATE = os.environ.get("SPARSEGDN_SKIP_ZERO_STATE", "1") == "1"
CONFIGS = [triton.Config({"GROUP": group, "BV": bv}, num_warps=4, num_stages=stages)
           for group, bv, stages in ((1, 128, 2), (4, 128, 3), (2, 64, 3))]


def _prune(configs, named_args, **kwargs):
    """Value blocks no wider than the (padded) value head, at least one config kept."""
    widest = padded(named_args["V"])
    kept = [config for config in configs if config.kwargs["BV"] <= widest]
    return kept or [triton.Config({"GROUP": 1, "BV": widest}, num_warps=4, num_stages=2)]


@triton.jit
def wait_for_snapshot(progress_ptr, first_event_ptr, snapshot_index, b, hv, row, E, V, NC, SEGMENT,
                      HV: tl.constexpr, STATE_BV: tl.constexpr, STATE_BLOCKS: tl.constexpr, RELAXED_POLL: tl.constexpr,
                      SEGMENTED: tl.constexpr):
    """Spin until every value block of head pair `row`'s chain has stored the snapshot at `snapshot_index`
    (progress counts the snapshots each block stored, published with release semantics by
    state_pass.publish, one count per segment of SEGMENT commits: the snapshot after commit j is stored by
    the segment holding commit j, the first one by segment 0; whole chains, SEGMENTED false: one count a row);
    the barrier after it orders every thread's snapshot loads after the acquire.
    RELAXED_POLL: poll with plain volatile loads (no acquire atomics contending with the chains' releases)
    and acquire once when the counts suffice (counts only grow, so that acquire reads one of them)."""
    needed = snapshot_index - (b * (E + HV) + tl.load(first_event_ptr + row).to(tl.int64) + hv) + 1
    blocks = tl.arange(0, STATE_BLOCKS)
    segment = 0
    if SEGMENTED:                                 # the segment that stores snapshot needed - 1
        segment = tl.maximum(needed - 2, 0) // SEGMENT
    counters = progress_ptr + progress_row(row, segment, NC, SEGMENT, SEGMENTED) * tl.cdiv(V, STATE_BV) + blocks
    live = blocks < tl.cdiv(V, STATE_BV)
    stored = fewest_stored(counters, live, needed, RELAXED_POLL)
    while stored < needed:
        stored = fewest_stored(counters, live, needed, RELAXED_POLL)
    if RELAXED_POLL:
        tl.atomic_add(counters, 0, mask=live, sem="acquire", scope="gpu")
    tl.debug_barrier()


@triton.jit
def fewest_stored(counters, live, needed, RELAXED_POLL: tl.constexpr):
    """The smallest progress count over the live counters (`needed` stands in for the others): read with
    plain volatile loads (RELAXED_POLL) or with acquire atomics."""
    if RELAXED_POLL:
        counts = tl.load(counters, mask=live, other=needed, volatile=True)
    else:
        counts = tl.where(live, tl.atomic_add(counters, 0, mask=live, sem="acquire", scope="gpu"), needed)
    return tl.min(counts, axis=0)


@triton.jit
def output_chunks(b, group, hv, i_v, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, vectors_ptr, snapshot_ptr,
                  snapshot_of_chunk_ptr, log_decay_since_ptr, o_ptr, flags_ptr, progress_ptr, first_event_ptr,
                  scale, T, NC, E, q_sb, q_st, q_sh, k_sb, k_st, k_sh, v_sb, v_st, v_sh, v_sd, g_sb, g_st, g_sh,
                  beta_sb, beta_st, beta_sh, o_sb, o_st, o_sh, H: tl.constexpr, HV: tl.constexpr, K, V,
                  BK: tl.constexpr, BV: tl.constexpr, NORMALIZE: tl.constexpr, RECOMPUTE: tl.constexpr,
                  BAND: tl.constexpr, PRECISION: tl.constexpr, GROUP: tl.constexpr, STATE_BV: tl.constexpr,
                  STATE_BLOCKS: tl.constexpr, RELAXED_POLL: tl.constexpr, SEGMENT, SEGMENTED: tl.constexpr,
                  ZERO_START: tl.constexpr, VECTORS: tl.constexpr):
    """The outputs of value block i_v of head pair hv for the GROUP chunks of `group` (the output pass's
    program). STATE_BLOCKS > 0 (overlapped passes): each chunk first waits for its snapshot, one chunk per
    program (with more, the pipeliner could fetch the next chunk's snapshot before its wait). ZERO_START: every
    head pair's snapshot 0 is zero (no initial state), so the chunks that start from it skip the state's part.
    VECTORS: gamma and k's inverse norms read from pass 1 (load_vectors), not computed from g and k."""
    tl.static_assert(STATE_BLOCKS == 0 or GROUP == 1)
    hk = hv // (HV // H)
    row = b * HV + hv
    dot_dtype = k_ptr.dtype.element_ty
    rows = tl.arange(0, CHUNK)
    ck = tl.arange(0, BK)
    cv = i_v * BV + tl.arange(0, BV)
    causal = rows[:, None] >= rows[None, :]
    bad = tl.program_id(0) * 0        # int32 scalar: any non-finite output seen

    for i in range(GROUP):
        c = tl.minimum(group * GROUP + i, NC - 1)     # a group past NC redoes the last chunk: same values
        t0 = c * CHUNK
        if VECTORS:     # issued first: the decays need gamma first
            gamma, k_scale = load_vectors(vectors_ptr, row * NC + c)
        q = load_tile(q_ptr + b * q_sb + hk * q_sh, t0, T, q_st, K, CHUNK, BK)
        k = load_tile(k_ptr + b * k_sb + hk * k_sh, t0, T, k_st, K, CHUNK, BK)
        v_block = v_ptr + b * v_sb + hv * v_sh + i_v * BV * v_sd
        if FOLD_SCALES:
            v = load_rows_stored(v_block, t0, T, v_st, v_sd, V - i_v * BV, CHUNK, BV)
        else:
            v = load_rows(v_block, t0, T, v_st, v_sd, V - i_v * BV, CHUNK, BV)
        if not VECTORS:
            g = load_gates(g_ptr + b * g_sb + hv * g_sh, t0, T, g_st, CHUNK)
        beta = load_gates(beta_ptr + b * beta_sb + hv * beta_sh, t0, T, beta_st, CHUNK)
        if not RECOMPUTE:
            t_inv = tl.load(t_inv_ptr + (row * NC + c) * CHUNK * CHUNK + rows[:, None] * CHUNK + rows[None, :])
        snapshot_index = tl.load(snapshot_of_chunk_ptr + row * NC + c).to(tl.int64)
        # Without an initial state, a chunk whose head pair has not committed yet starts from snapshot 0, the
        # head pair's first (the one chunk 0 starts from), which is zero: its output is the chunk's own part
        # alone, and it neither waits for a chain nor reads a snapshot.
        if ZERO_START:
            has_state = snapshot_index != tl.load(snapshot_of_chunk_ptr + row * NC).to(tl.int64)
        else:
            has_state = snapshot_index >= 0
        snapshot_block = snapshot_ptr + snapshot_index * K * V           # 64-bit base, 32-bit offsets in the block
        snapshot_offsets = ck[:, None] * V + cv[None, :]
        snapshot_mask = (ck < K)[:, None] & (cv < V)[None, :]
        if STATE_BLOCKS == 0:     # stored by an earlier launch: loaded early, its latency behind the products
            snapshot = tl.load(snapshot_block + snapshot_offsets, mask=snapshot_mask & has_state, other=0.0)
        decay_since = tl.exp(tl.load(log_decay_since_ptr + row * NC + c))

        q_scale = inverse_norm(q, NORMALIZE)
        if not VECTORS:
            k_scale = inverse_norm(k, NORMALIZE)
            gamma = tl.cumsum(g, axis=0)
        # The decays as row and column factors where they fit: in the one launch only (STATE_BLOCKS > 0). In the two
        # launches' output kernel, whose chunk loop the pipeliner schedules, Triton 3.6 fails to compile them
        # (TritonGPUPipeline, H200 2026-12-03, analysis/results/overlap/batch18).
        if DECAY_SCALES and STATE_BLOCKS > 0:
            p, solved = decayed_products(q, k, q_scale, k_scale, beta, gamma, RECOMPUTE, BAND, PRECISION)
            if RECOMPUTE:
                t_inv = round_to(solved, dot_dtype)
        else:
            decay = causal_decay(gamma)                   # one grid for K K^T (in the solve) and Q K^T
            if RECOMPUTE:
                t_inv = round_to(band_inverse_decayed(k, k_scale, beta, decay, BAND, PRECISION), dot_dtype)
            p = tl.where(causal, mma(q, tl.trans(k)) * (q_scale[:, None] * k_scale[None, :]) * decay, 0.0)
        if FOLD_SCALES:          # m X and m (beta V) as (m diag(x scales)) K and (m diag(beta)) V (chunk_loads)
            m = mma(round_to(p, dot_dtype), t_inv)
            m_values = round_to(m * beta[None, :], dot_dtype)
            values = v
        else:
            m = round_to(mma(round_to(p, dot_dtype), t_inv), dot_dtype)
            m_values = m
            values = round_to(beta[:, None] * v, dot_dtype)
        if has_state:
            if FOLD_SCALES:
                m_write = round_to(m * (beta * tl.exp(gamma) * k_scale)[None, :], dot_dtype)
                left = ((q_scale * tl.exp(gamma))[:, None] * q.to(tl.float32) - mma(m_write, k)) * decay_since
            else:
                x = round_to((beta * tl.exp(gamma) * k_scale)[:, None] * k.to(tl.float32), dot_dtype)
                left = ((q_scale * tl.exp(gamma))[:, None] * q.to(tl.float32) - mma(m, x)) * decay_since
            if STATE_BLOCKS > 0:      # stored by this launch's chain programs: wait (after the products), read past L1
                wait_for_snapshot(progress_ptr, first_event_ptr, snapshot_index, b, hv, row, E, V, NC, SEGMENT, HV,
                                  STATE_BV, STATE_BLOCKS, RELAXED_POLL, SEGMENTED)
                snapshot = tl.load(snapshot_block + snapshot_offsets, mask=snapshot_mask, other=0.0,
                                   cache_modifier=".cg")
            o = mma_into(mma(round_to(left, dot_dtype), snapshot), m_values, values)
        else:
            o = mma(m_values, values)
        o = o * scale
        mask = (rows < rows_left(t0, T, CHUNK))[:, None] & (cv < V)[None, :]
        stored = round_to(o, o_ptr.dtype.element_ty)      # checked as stored: float16 can overflow here
        tl.store(o_ptr + b * o_sb + hv * o_sh + t0 * o_st + (rows[:, None] * o_st + cv[None, :]), stored, mask=mask)
        bad = tl.maximum(bad, any_not_finite(stored))      # rows past T and columns past V hold zeros
    raise_flag(flags_ptr, FLAG_OUTPUT, bad)


@triton.jit
def own_output(b, c, hv, i_v, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, vectors_ptr, o_ptr, flags_ptr, scale,
               T, NC,
               q_sb, q_st, q_sh, k_sb, k_st, k_sh, v_sb, v_st, v_sh, v_sd, g_sb, g_st, g_sh, beta_sb, beta_st, beta_sh,
               o_sb, o_st, o_sh, H: tl.constexpr, HV: tl.constexpr, K, V, BK: tl.constexpr, BV: tl.constexpr,
               NORMALIZE: tl.constexpr, RECOMPUTE: tl.constexpr, BAND: tl.constexpr, PRECISION: tl.constexpr,
               VECTORS: tl.constexpr):
    """The output of value block i_v of chunk c of head pair hv when the chunk's entering state is zero: its own
    part alone, o = scale M (beta V) with M = P Tinv, Tinv solved on chip (RECOMPUTE) or read from pass 1 (the split
    outputs' own launch, own_output_kernel). Output_chunks' zero-state branch in an order that keeps fewer tiles
    live: the solve from k and the gates first, then q and Q K^T, then v last, and with beta folded into M's
    columns as under FOLD_SCALES (M (beta V) = (M diag(beta)) V: v goes to the product as loaded; the default
    output role rounds beta V instead). VECTORS: gamma and k's inverse norms read from pass 1 (load_vectors)."""
    hk = hv // (HV // H)
    dot_dtype = k_ptr.dtype.element_ty
    rows = tl.arange(0, CHUNK)
    cv = i_v * BV + tl.arange(0, BV)
    t0 = c * CHUNK
    if VECTORS:         # issued first: the solve needs gamma first (ncu, 2026-12-03: their loads were waited for)
        gamma, k_scale = load_vectors(vectors_ptr, (b * HV + hv) * NC + c)
    beta = load_gates(beta_ptr + b * beta_sb + hv * beta_sh, t0, T, beta_st, CHUNK)
    k = load_tile(k_ptr + b * k_sb + hk * k_sh, t0, T, k_st, K, CHUNK, BK)
    if not VECTORS:
        gamma = tl.cumsum(load_gates(g_ptr + b * g_sb + hv * g_sh, t0, T, g_st, CHUNK), axis=0)
        k_scale = inverse_norm(k, NORMALIZE)
    if not RECOMPUTE:
        t_inv = tl.load(t_inv_ptr + ((b * HV + hv) * NC + c) * CHUNK * CHUNK + rows[:, None] * CHUNK + rows[None, :])
    if DECAY_SCALES:                                      # the decays as row and column factors where they fit
        q = load_tile(q_ptr + b * q_sb + hk * q_sh, t0, T, q_st, K, CHUNK, BK)
        q_scale = inverse_norm(q, NORMALIZE)
        p, solved = decayed_products(q, k, q_scale, k_scale, beta, gamma, RECOMPUTE, BAND, PRECISION)
        if RECOMPUTE:
            t_inv = round_to(solved, dot_dtype)
    else:
        decay = causal_decay(gamma)
        if RECOMPUTE:
            t_inv = round_to(band_inverse_decayed(k, k_scale, beta, decay, BAND, PRECISION), dot_dtype)
        q = load_tile(q_ptr + b * q_sb + hk * q_sh, t0, T, q_st, K, CHUNK, BK)
        q_scale = inverse_norm(q, NORMALIZE)
        p = tl.where(rows[:, None] >= rows[None, :],
                     mma(q, tl.trans(k)) * (q_scale[:, None] * k_scale[None, :]) * decay, 0.0)
    m = round_to(mma(round_to(p, dot_dtype), t_inv) * beta[None, :], dot_dtype)
    v = load_rows_stored(v_ptr + b * v_sb + hv * v_sh + i_v * BV * v_sd, t0, T, v_st, v_sd, V - i_v * BV, CHUNK, BV)
    o = mma(m, v.to(dot_dtype)) * scale
    mask = (rows < rows_left(t0, T, CHUNK))[:, None] & (cv < V)[None, :]
    stored = round_to(o, o_ptr.dtype.element_ty)      # checked as stored: float16 can overflow here
    tl.store(o_ptr + b * o_sb + hv * o_sh + t0 * o_st + (rows[:, None] * o_st + cv[None, :]), stored, mask=mask)
    raise_flag(flags_ptr, FLAG_OUTPUT, any_not_finite(stored))


@triton.jit
def load_vectors(vectors_ptr, chunk_row):
    """gamma (the cumulative g) and k's inverse norms [64] of one chunk of one head pair (chunk_row = (b * HV + hv)
    * NC + c), as pass 1 stored them (intra_chunk, STORE_VECTORS): the values this role would compute."""
    tokens = tl.arange(0, CHUNK)
    base = vectors_ptr + chunk_row * 2 * CHUNK
    return tl.load(base + tokens), tl.load(base + CHUNK + tokens)


@triton.jit
def starts_from_zero(snapshot_of_chunk_ptr, row, c, NC):
    """Whether chunk c of head pair `row` starts from the head pair's snapshot 0 (zero without an initial state):
    no commit of its head pair comes before it."""
    return tl.load(snapshot_of_chunk_ptr + row * NC + c) == tl.load(snapshot_of_chunk_ptr + row * NC)


@triton.autotune(configs=CONFIGS if AUTOTUNE else CONFIGS[:1],
                 key=["K", "V", "H", "HV", "RECOMPUTE", "BAND", "VECTORS", "LENGTH_BUCKET"],
                 prune_configs_by={"early_config_prune": _prune})
@triton.jit
def chunk_output_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, vectors_ptr, snapshot_ptr,
                        snapshot_of_chunk_ptr,
                        log_decay_since_ptr, o_ptr, flags_ptr, scale, T, NC, LENGTH_BUCKET,
                        q_sb, q_st, q_sh, k_sb, k_st, k_sh, v_sb, v_st, v_sh, v_sd, g_sb, g_st, g_sh,
                        beta_sb, beta_st, beta_sh, o_sb, o_st, o_sh,
                        H: tl.constexpr, HV: tl.constexpr, K, V, BK: tl.constexpr, BV: tl.constexpr,
                        NORMALIZE: tl.constexpr, RECOMPUTE: tl.constexpr, BAND: tl.constexpr,
                        PRECISION: tl.constexpr, GROUP: tl.constexpr, ZERO_START: tl.constexpr,
                        VECTORS: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    n_blocks = tl.cdiv(V, BV)
    i_v = pid % n_blocks
    rest = pid // n_blocks
    n_groups = tl.cdiv(NC, GROUP)
    hv = rest % HV
    group = (rest // HV) % n_groups
    b = rest // (HV * n_groups)
    output_chunks(b, group, hv, i_v, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, vectors_ptr, snapshot_ptr,
                  snapshot_of_chunk_ptr, log_decay_since_ptr, o_ptr, flags_ptr, flags_ptr, flags_ptr, scale, T, NC,
                  0, q_sb, q_st, q_sh, k_sb, k_st, k_sh, v_sb, v_st, v_sh, v_sd, g_sb, g_st, g_sh, beta_sb, beta_st,
                  beta_sh, o_sb, o_st, o_sh, H, HV, K, V, BK, BV, NORMALIZE, RECOMPUTE, BAND, PRECISION, GROUP,
                  16, 0, False, NC, False, ZERO_START, VECTORS)


launch_chunk_output = Launcher(chunk_output_kernel)


def zero_start(has_initial: bool) -> bool:
    """Whether the output programs may skip the state's part of the chunks that start from a zero snapshot 0:
    without an initial state, unless SKIP_ZERO_STATE is off."""
    return SKIP_ZERO_STATE and not has_initial


def chunk_output(q, k, v, g, beta, t_inv, snapshots, schedule, flags, *, scale, normalize, out_dtype, band,
                 has_initial, vectors=None):
    """Returns o [B,T,HV,V] in out_dtype (contiguous); raises flags[FLAG_OUTPUT] for a non-finite o.
    t_inv: the stored inverses of pass 1, or None to solve them here. vectors: pass 1's chunk vectors (gamma and k's
    inverse norms, intra_chunk with store_vectors), or None to compute them here. has_initial: the chain started from an
    initial state (else snapshot 0 of every head pair is zero)."""
    batch, tokens, key_heads, key_dim = q.shape
    value_heads, value_dim = v.shape[2], v.shape[3]
    n_chunks = schedule.events.shape[2]
    o = torch.empty(batch, tokens, value_heads, value_dim, device=q.device, dtype=out_dtype)
    grid = lambda meta: (batch * cdiv(n_chunks, meta["GROUP"]) * value_heads  # noqa: E731
                         * cdiv(value_dim, meta["BV"]),)
    launch_chunk_output(
        grid, q, k, v, g, beta, t_inv if t_inv is not None else o, vectors if vectors is not None else o, snapshots,
        schedule.snapshot_of_chunk, schedule.log_decay_since, o, flags, scale, tokens, n_chunks, length_bucket(n_chunks),
        *q.stride()[:3],
        *k.stride()[:3],
        *v.stride(), *g.stride(), *beta.stride(), *o.stride()[:3], key_heads, value_heads, key_dim, value_dim,
        BK=padded(key_dim), NORMALIZE=normalize, RECOMPUTE=t_inv is None, BAND=band,
        PRECISION=solve_precision(k.dtype), ZERO_START=zero_start(has_initial), VECTORS=vectors is not None)
    return o


# The own outputs' kernel (split outputs): ~200 registers at 4 warps, 159-168 without spills under maxnreg 168
# (compile_report, sm_90): three programs an SM. On the H200 (2026-12-03, 128K tokens, benchmark inputs) the
# zero-state chunks alone took 1.31 ms at three programs an SM against 1.76 at two (measured as the first split
# design's launch with its chains returning at once, analysis/results/overlap/batch17 call 2; ncu at 32K: the
# schedulers issuing in 49% of their cycles against 37%). The config without the cap is tried too.
OWN_CONFIGS = [triton.Config({"BV": 128}, num_warps=4, num_stages=1, maxnreg=maxnreg) for maxnreg in (168, None)]


def _prune_own(configs, named_args, **kwargs):
    """Value blocks no wider than the (padded) value head, at least one config kept."""
    widest = padded(named_args["V"])
    return ([config for config in configs if config.kwargs["BV"] <= widest]
            or [triton.Config({"BV": widest}, num_warps=4, num_stages=1, maxnreg=168)])


@triton.autotune(configs=OWN_CONFIGS if AUTOTUNE else OWN_CONFIGS[:1],
                 key=["K", "V", "H", "HV", "RECOMPUTE", "BAND", "VECTORS", "LENGTH_BUCKET"],
                 prune_configs_by={"early_config_prune": _prune_own})
@triton.jit
def own_output_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, vectors_ptr, snapshot_of_chunk_ptr, o_ptr,
                      flags_ptr, scale,
                      T, NC, B,
                      LENGTH_BUCKET, q_sb, q_st, q_sh, k_sb, k_st, k_sh, v_sb, v_st, v_sh, v_sd, g_sb, g_st, g_sh,
                      beta_sb, beta_st, beta_sh, o_sb, o_st, o_sh, H: tl.constexpr, HV: tl.constexpr, K, V,
                      BK: tl.constexpr, BV: tl.constexpr, NORMALIZE: tl.constexpr, RECOMPUTE: tl.constexpr,
                      BAND: tl.constexpr, PRECISION: tl.constexpr, VECTORS: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    n_blocks = tl.cdiv(V, BV)
    i_v = pid % n_blocks                # value blocks fastest, then head pairs, batch rows, chunks
    rest = pid // n_blocks
    hv = rest % HV
    b = (rest // HV) % B
    c = rest // (HV * B)
    if starts_from_zero(snapshot_of_chunk_ptr, b * HV + hv, c, NC):
        own_output(b, c, hv, i_v, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, vectors_ptr, o_ptr, flags_ptr,
                   scale, T, NC, q_sb, q_st, q_sh, k_sb, k_st, k_sh, v_sb, v_st, v_sh, v_sd, g_sb, g_st, g_sh, beta_sb,
                   beta_st, beta_sh, o_sb, o_st, o_sh, H, HV, K, V, BK, BV, NORMALIZE, RECOMPUTE, BAND, PRECISION,
                   VECTORS)


launch_own_output = Launcher(own_output_kernel)


def own_outputs(q, k, v, g, beta, t_inv, schedule, flags, o, *, scale, normalize, band, vectors=None):
    """Writes into o [B,T,HV,V] the outputs of the chunks that start from a zero state (no initial state: before
    their head pair's first commit), the chunk's own part alone (own_output); the other chunks of o are left as they
    are (state_output with skip_own writes them). t_inv: pass 1's stored inverses, or None to solve them here;
    vectors: pass 1's chunk vectors, or None to compute them here.
    Raises flags[FLAG_OUTPUT] for a non-finite output."""
    batch, tokens, key_heads, key_dim = q.shape
    value_heads, value_dim = v.shape[2], v.shape[3]
    n_chunks = schedule.events.shape[2]
    grid = lambda meta: (batch * n_chunks * value_heads * cdiv(value_dim, meta["BV"]),)  # noqa: E731
    launch_own_output(
        grid, q, k, v, g, beta, t_inv if t_inv is not None else o, vectors if vectors is not None else o,
        schedule.snapshot_of_chunk, o, flags, scale, tokens,
        n_chunks, batch,
        length_bucket(n_chunks),
        *q.stride()[:3], *k.stride()[:3], *v.stride(), *g.stride(), *beta.stride(), *o.stride()[:3], key_heads,
        value_heads, key_dim, value_dim, BK=padded(key_dim), NORMALIZE=normalize, RECOMPUTE=t_inv is None, BAND=band,
        PRECISION=solve_precision(k.dtype), VECTORS=vectors is not None)
