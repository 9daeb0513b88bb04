"""Pass 1, every chunk in parallel: the score statistics, the gate checks, and Tinv where it is stored.

Grid: one program per (batch row, chunk, head pair), head pairs fastest (the value heads of one key
head read its tile from L2 side by side). For chunk c of head pair h, with gamma the cumulative g:

    stats   = gamma_L,  write_c = sum beta exp(gamma_L - gamma) ||k|| ||v||,  read_c = sum exp(gamma)
    Tinv    band-projected inverse (band_solve.py), stored in the input dtype when STORE_INVERSE
    gamma and k's inverse norms [64] each, stored in float32 when STORE_VECTORS, for the output roles to
            read instead of computing them (chunk_output.load_vectors; forward.STORE_VECTORS says why)

With STORE_INVERSE off the later passes recompute Tinv on chip where they need it (the selected
chunks in event_prepare, every chunk in chunk_output), and this pass only reads k, v, g and beta
once. A g or beta that is not finite or out of the contract's range raises FLAG_GATES: the kernel
reads them anyway.
"""
import os

import torch
import triton
import triton.language as tl

from .band_solve import band_inverse, last_of, log_decay_between
from . import call_record
from .chunk_loads import (AUTOTUNE, CHUNK, CHUNK_SIZE, FLAG_GATES, FLAG_WAIT, LOWEST_LOG_DECAY, WAIT_BOUND, any_beyond,
                          any_row_beyond, cdiv, inverse_norm, load_gates, load_rows, load_tile, not_finite, padded,
                          raise_flag, round_to, solve_precision)
from .launch import Launcher
from .state_pass import last_waits_for_prior_grid, launch_dependents

STATE_ROWS = tl.constexpr(16)      # rows of the initial state a tile of the early checks reads
SCAN_TILES = tl.constexpr(4)       # tiles of CHUNK tokens of q a program of early_scan reads
SCAN_WARPS = 4
CONFIGS = [triton.Config({}, num_warps=4, num_stages=1)]      # four warps (eight: an illegal address on the H200)
# Pass 1 beside the early scan: launched as the scan's programmatic dependent (the scan lets it start as soon as its
# own programs have all started), so that pass 1's programs take the multiprocessors the scan's leave free and the
# two streams of loads (q; k and v) overlap instead of following each other; pass 1's program that ends last waits
# for the scan to end (griddepcontrol.wait), so that the flags copied after pass 1 hold the scan's. Neither reads
# what the other writes (both raise flags by atomic maxima). Batch 48's timelines (H100, 8K tokens): the scan 19 us
# for q's 32 MB (1.7 TB/s: a short kernel's ramp and tail), pass 1 40 us after it. On: on an H100 (2026-12-07,
# analysis/results/overlap/batch49 call 1, kernel_bench's beside_only against select_before, one process, the public
# call at budget 0.29) 0.208 / 0.332 / 0.568 / 1.054 / 3.912 ms at 4K / 8K / 16K / 32K / 128K against 0.216 / 0.339 /
# 0.573 / 1.059 / 3.920 (-3.7 / -2.1 / -0.9 / -0.5 / -0.2%). SPARSEGDN_EARLY_BESIDE=0 turns it off.
EARLY_BESIDE = os.environ.get("SPARSEGDN_EARLY_BESIDE", "1") == "1"


@triton.jit
def load_chunk_gates(g_ptr, beta_ptr, b, hv, t0, T, g_sb, g_st, g_sh, beta_sb, beta_st, beta_sh):
    """g and beta [64] of one chunk (float32, zero past T) and gamma, the cumulative g."""
    g = load_gates(g_ptr + b * g_sb + hv * g_sh, t0, T, g_st, CHUNK)
    beta = load_gates(beta_ptr + b * beta_sb + hv * beta_sh, t0, T, beta_st, CHUNK)
    return g, beta, tl.cumsum(g, axis=0)


@triton.autotune(configs=CONFIGS if AUTOTUNE else CONFIGS[:1], key=["K", "V", "BAND", "PRECISION", "STORE_INVERSE",
                                                                          "STORE_VECTORS", "EARLY_CHECKS",
                                                                          "AFTER_SCAN"])
@triton.jit
def intra_chunk_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, log_decay_ptr, write_ptr, read_ptr, flags_ptr,
                       vectors_ptr, done_ptr,
                       T, NC, k_sb, k_st, k_sh, v_sb, v_st, v_sh, v_sd, g_sb, g_st, g_sh, beta_sb, beta_st, beta_sh,
                       H: tl.constexpr, HV: tl.constexpr, K, V, BK: tl.constexpr, BV: tl.constexpr,
                       BAND: tl.constexpr, NORMALIZE: tl.constexpr, PRECISION: tl.constexpr,
                       STORE_INVERSE: tl.constexpr, STORE_VECTORS: tl.constexpr, EARLY_CHECKS: tl.constexpr,
                       AFTER_SCAN: tl.constexpr):
    """AFTER_SCAN (EARLY_BESIDE): launched as early_scan's programmatic dependent; the program that ends last (each
    counts itself in done_ptr, an int32 zeroed by the call) waits for the scan to end."""
    pid = tl.program_id(0).to(tl.int64)
    hv = pid % HV
    c = (pid // HV) % NC
    b = pid // (HV * NC)
    hk = hv // (HV // H)
    t0 = c * CHUNK

    k = load_tile(k_ptr + b * k_sb + hk * k_sh, t0, T, k_st, K, CHUNK, BK)
    v = load_rows(v_ptr + b * v_sb + hv * v_sh, t0, T, v_st, v_sd, V, CHUNK, BV)
    g, beta, gamma = load_chunk_gates(g_ptr, beta_ptr, b, hv, t0, T, g_sb, g_st, g_sh, beta_sb, beta_st, beta_sh)
    k_scale = inverse_norm(k, NORMALIZE)
    kf = k.to(tl.float32)
    k_squares = tl.sum(kf * kf, axis=1)
    v_squares = tl.sum(v * v, axis=1)
    magnitude = tl.sqrt(k_squares) * k_scale * tl.sqrt(v_squares)
    gamma_last = last_of(gamma)
    stat = (b * HV + hv) * NC + c
    tl.store(log_decay_ptr + stat, gamma_last)
    tl.store(write_ptr + stat, tl.sum(beta * tl.exp(log_decay_between(gamma_last, gamma)) * magnitude, axis=0))
    tl.store(read_ptr + stat, tl.sum(tl.exp(gamma), axis=0))   # counts padded tokens too, as the reference
    bad = not_finite(g) | not_finite(beta) | (g > 0) | (g < LOWEST_LOG_DECAY) | (beta < 0) | (beta > 1)
    raise_flag(flags_ptr, FLAG_GATES, tl.max(bad.to(tl.int32), axis=0))
    if EARLY_CHECKS:    # k's and v's rows by the sums of squares above (q and the initial state: early_scan, launched
        # before); a decay beyond e^-WAIT_BOUND a token (inside the contract's range) can take a chunk's cumulative log
        # decay past float32's range: a NaN that only o's flag reports (band_solve.log_decay_between)
        wait = tl.maximum(tl.maximum(any_row_beyond(k_squares, WAIT_BOUND), any_row_beyond(v_squares, WAIT_BOUND)),
                          tl.max((g < -WAIT_BOUND).to(tl.int32), axis=0))
        raise_flag(flags_ptr, FLAG_WAIT, wait)
    if STORE_VECTORS:                   # [gamma, k's inverse norms] of the chunk, as the output roles compute them
        tokens = tl.arange(0, CHUNK)
        tl.store(vectors_ptr + stat * 2 * CHUNK + tokens, gamma)
        tl.store(vectors_ptr + stat * 2 * CHUNK + CHUNK + tokens, k_scale)

    if STORE_INVERSE:
        t_inv = band_inverse(k, k_scale, beta, gamma, BAND, PRECISION)
        rows = tl.arange(0, CHUNK)
        offsets = stat * CHUNK * CHUNK + rows[:, None] * CHUNK + rows[None, :]
        tl.store(t_inv_ptr + offsets, round_to(t_inv, t_inv_ptr.dtype.element_ty))
    if AFTER_SCAN:
        last_waits_for_prior_grid(done_ptr, tl.num_programs(0))


@triton.jit
def early_scan_kernel(q_ptr, state_ptr, flags_ptr, T, NB, NQ, q_sb, q_st, q_sh, H: tl.constexpr, K, V,
                      BK: tl.constexpr, BV: tl.constexpr, HAS_STATE: tl.constexpr, LET_DEPENDENT: tl.constexpr):
    """The early checks of q and the initial state (scan_program), one program each. LET_DEPENDENT (EARLY_BESIDE):
    pass 1, launched next as this kernel's programmatic dependent, may start once every program here has started."""
    if LET_DEPENDENT:
        launch_dependents()
    scan_program(tl.program_id(0).to(tl.int64), q_ptr, state_ptr, flags_ptr, T, NB, NQ, q_sb, q_st, q_sh, H, K, V,
                 BK, BV, HAS_STATE)


@triton.jit
def scan_program(pid, q_ptr, state_ptr, flags_ptr, T, NB, NQ, q_sb, q_st, q_sh, H: tl.constexpr, K, V,
                 BK: tl.constexpr, BV: tl.constexpr, HAS_STATE: tl.constexpr):
    """Program `pid` of the early checks of q and the initial state: raises flags[FLAG_WAIT] where a head vector of q
    (one token's) has a norm beyond WAIT_BOUND or an element of the initial state is beyond it (or either is not
    finite). The first NQ = B * NB * H programs read q, SCAN_TILES tiles of CHUNK tokens of one key head each (key
    heads fastest: side by side they read whole token rows; NB blocks of tokens a batch row); the B * HV after them
    one head pair's initial state each (float32 [K, V], contiguous). Run by early_scan_kernel, or by select_kernel's
    programs after its rows' (schedule.SCAN_BESIDE_SELECT)."""
    wait = tl.full([], 0, tl.int32)
    if pid < NQ:
        h = pid % H
        b = pid // (H * NB)
        t0 = ((pid // H) % NB) * (SCAN_TILES * CHUNK)
        base = q_ptr + b * q_sb + h * q_sh
        for tile in tl.static_range(SCAN_TILES):
            rows = load_tile(base, t0 + tile * CHUNK, T, q_st, K, CHUNK, BK).to(tl.float32)
            wait = tl.maximum(wait, any_row_beyond(tl.sum(rows * rows, axis=1), WAIT_BOUND))
    elif HAS_STATE:
        wait = state_beyond(state_ptr + (pid - NQ) * K * V, K, V, BV)
    raise_flag(flags_ptr, FLAG_WAIT, wait)


@triton.jit
def state_beyond(state_ptr, K, V, BV: tl.constexpr):
    """int32 scalar: any_beyond(WAIT_BOUND) over one head pair's initial state (float32 [K, V], contiguous), read
    STATE_ROWS rows at a time."""
    rows = tl.arange(0, STATE_ROWS)
    cols = tl.arange(0, BV)
    beyond = tl.full([], 0, tl.int32)
    for row0 in range(0, K, STATE_ROWS):
        mask = ((row0 + rows) < K)[:, None] & (cols < V)[None, :]
        tile = tl.load(state_ptr + (row0 + rows)[:, None] * V + cols[None, :], mask=mask, other=0.0)
        beyond = tl.maximum(beyond, any_beyond(tile, WAIT_BOUND))
    return beyond


launch_intra_chunk = Launcher(intra_chunk_kernel)
launch_early_scan = Launcher(early_scan_kernel)


def scan_grid(q, initial_state, flags, num_value_heads) -> tuple:
    """The early scan's programs, launch arguments and constants: (programs, (q, the state's pointer, flags, T, NB,
    NQ, q's three strides, H, K, V), {BK, BV, HAS_STATE}), as early_scan_kernel and select_kernel take them (the
    state's pointer is flags where no initial state is given: never read)."""
    batch, tokens, key_heads, key_dim = q.shape
    blocks = cdiv(tokens, SCAN_TILES.value * CHUNK_SIZE)
    q_programs = batch * blocks * key_heads
    state_programs = 0 if initial_state is None else batch * num_value_heads
    value_dim = 1 if initial_state is None else initial_state.shape[-1]
    arguments = (q, flags if initial_state is None else initial_state, flags, tokens, blocks, q_programs,
                 *q.stride()[:3], key_heads, key_dim, value_dim)
    return (q_programs + state_programs, arguments,
            dict(BK=padded(key_dim), BV=padded(value_dim), HAS_STATE=initial_state is not None))


def early_scan(q, initial_state, flags, num_value_heads, let_dependent=False):
    """Launches early_scan_kernel over q [B,T,H,K] (innermost dimension contiguous) and, where given, the initial
    state (float32 [B,HV,K,V], contiguous): flags[FLAG_WAIT] raised for a head vector of q or an element of the
    state beyond WAIT_BOUND (or not finite). Its own launch, streaming q once: loaded in pass 1 beside k and v, q
    cost about 2.2x its bytes there (kernel_bench.notes.md, batch 30). let_dependent: the next launch (pass 1,
    EARLY_BESIDE) may start beside it."""
    programs, arguments, constants = scan_grid(q, initial_state, flags, num_value_heads)
    launch_early_scan((programs,), *arguments, **constants, LET_DEPENDENT=let_dependent, num_warps=SCAN_WARPS)


def intra_chunk(k, v, g, beta, flags, *, band, normalize, num_value_heads, num_chunks, store_inverse,
                store_vectors=False, early=None, scan=True):
    """k [B,T,H,K], v [B,T,HV,V], g/beta [B,T,HV], each with its innermost dimension contiguous. `early`: None,
    or (q, initial_state or None) for the early checks (forward.early_checks): flags[FLAG_WAIT] is raised where a
    head vector of q, k or v has a norm beyond WAIT_BOUND or an element of the initial state (float32 [B,HV,K,V],
    contiguous) is beyond it, or either is not finite (chunk_loads.FLAG_WAIT). scan=False: this pass checks k, v and
    g only, and the caller scans q and the initial state later (schedule.SCAN_BESIDE_SELECT).

    Returns t_inv [B,HV,NC,64,64] in k.dtype (None unless store_inverse) and the per-chunk statistics
    gamma_L, write, read (float32 [B,HV,NC]); raises flags[FLAG_GATES] for bad g or beta; last, the chunk vectors
    float32 [B,HV,NC,2,64] (gamma, then k's inverse norms) with store_vectors, else None.
    """
    batch, tokens, key_heads, key_dim = k.shape
    value_dim = v.shape[-1]
    stats = call_record.empty(3, batch, num_value_heads, num_chunks, device=k.device, dtype=torch.float32)
    t_inv = (call_record.empty(batch, num_value_heads, num_chunks, CHUNK_SIZE, CHUNK_SIZE, device=k.device,
                               dtype=k.dtype)
             if store_inverse else stats)
    vectors = (call_record.empty(batch, num_value_heads, num_chunks, 2, CHUNK_SIZE, device=k.device,
                                 dtype=torch.float32)
               if store_vectors else stats)
    beside = early is not None and scan and EARLY_BESIDE
    done = call_record.zeros(1, dtype=torch.int32, device=k.device) if beside else flags
    if early is not None and scan:
        early_scan(*early, flags, num_value_heads, let_dependent=beside)
    launch_intra_chunk(
        (batch * num_chunks * num_value_heads,), k, v, g, beta, t_inv, stats[0], stats[1], stats[2], flags, vectors,
        done, tokens, num_chunks, *k.stride()[:3], *v.stride(), *g.stride(), *beta.stride(), key_heads,
        num_value_heads, key_dim, value_dim, BK=padded(key_dim), BV=padded(value_dim), BAND=band, NORMALIZE=normalize,
        PRECISION=solve_precision(k.dtype), STORE_INVERSE=store_inverse, STORE_VECTORS=store_vectors,
        EARLY_CHECKS=early is not None, AFTER_SCAN=beside,
        **({"launch_pdl": True} if beside else {}))
    return ((t_inv if store_inverse else None), stats[0], stats[1], stats[2],
            (vectors if store_vectors else None))
