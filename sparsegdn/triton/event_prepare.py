"""Pass 3, every selected event in parallel: what the sequential pass needs of each commit.

Grid: one program per (event slot, batch row). Only selected chunks get

    w = Tinv (beta e^gamma K),   u = Tinv (beta V),   k_commit = K e^(gamma_L - gamma)

written into lists of E entries, so this memory scales with the budget, not with T, and the
sequential pass is left with two products per commit. Unselected chunks need w and u only for
their own outputs; pass 5 forms those products in registers instead. Tinv is read from pass 1, or,
when pass 1 does not store it (RECOMPUTE), solved here for the selected chunks only.

The program writes k_commit first, then w, and loads v only for u, so that no float32 copy of k or v stays
live through the solve. FOLD_SCALES (on by default here: SPARSEGDN_PREPARE_FOLD_SCALES=0 turns it off for this pass,
chunk_loads.FOLD_SCALES=1 turns it on for the output roles too) applies the row scales of beta e^gamma K and beta V
to Tinv's columns (where Tinv is solved here, bands 0 and 1 by default, it is rounded once with them, one rounding
fewer than the unfolded Tinv and scaled tile; a Tinv stored by pass 1 is rounded when stored and again here): 150
registers at K = V = 128 against 232 (compile_report, sm_90), and under MAXNREG (128 by default, with the fold only,
for 16-bit inputs and heads of at most 128: launch_options; SPARSEGDN_PREPARE_MAXNREG=0 lifts it) four programs an
SM instead of two, with 14 local-memory instructions. On the
H200 (2026-12-03, benchmark inputs, budget 0.29, band 1, `config_probe.py --timed`,
analysis/results/overlap/batch19) the pass took 0.51 ms at 128K against 0.68 unfolded and uncapped, the backend entry
4.39-4.42 against 4.54-4.55 ms (32K: 1.142-1.144 against 1.184-1.185; 8K: 0.332-0.333 against 0.340-0.343); folded
without the cap 4.43.
"""
import os

import torch
import triton
import triton.language as tl

from . import call_record, chunk_loads
from .band_solve import band_inverse, last_of, log_decay_between
from .chunk_loads import (CHUNK, INTERPRET, inverse_norm, load_gates, load_rows, load_rows_stored, load_tile, mma,
                          padded, round_to, solve_precision)
from .launch import Launcher
from .state_pass import check_ready, launch_dependents

NUM_WARPS = 4
FOLD_WARPS = 8
# The streamed preparation's persistent programs a multiprocessor (forward.STREAM_PREPARE): few enough that the chain
# programs and the lists that run beside it still find room. SPARSEGDN_STREAM_PROGRAMS sets it.
STREAM_PROGRAMS = int(os.environ.get("SPARSEGDN_STREAM_PROGRAMS", "1"))
if STREAM_PROGRAMS < 1:
    raise ValueError(f"SPARSEGDN_STREAM_PROGRAMS={STREAM_PROGRAMS}: at least 1 program a multiprocessor")
# Their register cap (0: none). Compiled for sm_90 (K = V = 128, bf16; no GPU run): uncapped 255 registers and 2
# local-memory instructions, 32,640 registers a program, so a multiprocessor (65,536) holds it and one chain program
# (190 registers, 24,320) but not two; at 128 (16,384 a program) the persistent loop spills (332 local-memory
# instructions) but two chain programs fit beside it by registers (shared memory: 24 KB + 2 x 106 KB is over the
# 227 KB; SPARSEGDN_CHAIN_STAGES=2 makes the chain programs smaller). 128 by default: the chain pass's 256 programs
# (HV 32, value blocks of 16) then have room on the GPU once their shared memory fits. SPARSEGDN_STREAM_MAXNREG sets it.
STREAM_MAXNREG = int(os.environ.get("SPARSEGDN_STREAM_MAXNREG", "128"))
if not (STREAM_MAXNREG == 0 or 24 <= STREAM_MAXNREG <= 255):
    raise ValueError(f"SPARSEGDN_STREAM_MAXNREG={STREAM_MAXNREG}: a register count from 24 to 255, or 0 for no cap")
FOLD_SCALES = tl.constexpr(chunk_loads.FOLD_SCALES.value or os.environ.get("SPARSEGDN_PREPARE_FOLD_SCALES", "1") == "1")
_MAXNREG = os.environ.get("SPARSEGDN_PREPARE_MAXNREG", "128")
if not (_MAXNREG.isdigit() and (int(_MAXNREG) == 0 or 24 <= int(_MAXNREG) <= 255)):
    raise ValueError(f"SPARSEGDN_PREPARE_MAXNREG={_MAXNREG!r}: a register count from 24 to 255, or 0 for no cap")
MAXNREG = int(_MAXNREG)


def launch_options(dtype: torch.dtype, key_dim: int, value_dim: int) -> dict:
    """The launch's register cap, where one applies: the folded pass (unfolded under 128 it spills 269 local-memory
    instructions, never timed), 16-bit inputs and heads of at most 128, on a GPU. Float32 inputs take three tf32
    products a product, more registers than the cap was measured with; at K or V = 256 ptxas refused the cap of 128
    (a product's accumulator needs 158: the H200's GPU matrix, 2026-12-03, batch 19 call 2); the interpreter has no
    registers."""
    if (MAXNREG and FOLD_SCALES.value and dtype != torch.float32 and max(padded(key_dim), padded(value_dim)) <= 128
            and not INTERPRET.value):
        return {"maxnreg": MAXNREG}
    return {}


@triton.jit
def event_prepare_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, event_chunks_ptr, w_ptr, u_ptr, k_commit_ptr,
                         T, NC, E, k_sb, k_st, k_sh, v_sb, v_st, v_sh, v_sd, g_sb, g_st, g_sh, beta_sb, beta_st, beta_sh,
                         H: tl.constexpr, HV: tl.constexpr, K, V,
                         BK: tl.constexpr, BV: tl.constexpr, NORMALIZE: tl.constexpr, RECOMPUTE: tl.constexpr,
                         BAND: tl.constexpr, PRECISION: tl.constexpr, FOLDED: tl.constexpr):
    prepare_slot(tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64), k_ptr, v_ptr, g_ptr, beta_ptr,
                 t_inv_ptr, event_chunks_ptr, w_ptr, u_ptr, k_commit_ptr, T, NC, E, k_sb, k_st, k_sh, v_sb, v_st, v_sh,
                 v_sd, g_sb, g_st, g_sh, beta_sb, beta_st, beta_sh, H, HV, K, V, BK, BV, NORMALIZE, RECOMPUTE, BAND,
                 PRECISION, FOLDED)


@triton.jit
def streamed_prepare_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, event_chunks_ptr, w_ptr, u_ptr, k_commit_ptr,
                            per_head_ptr, first_event_ptr, ready_ptr, ROWS,
                            T, NC, E, k_sb, k_st, k_sh, v_sb, v_st, v_sh, v_sd, g_sb, g_st, g_sh, beta_sb, beta_st,
                            beta_sh, H: tl.constexpr, HV: tl.constexpr, K, V,
                            BK: tl.constexpr, BV: tl.constexpr, NORMALIZE: tl.constexpr, RECOMPUTE: tl.constexpr,
                            BAND: tl.constexpr, PRECISION: tl.constexpr, FOLDED: tl.constexpr):
    """The events in rounds (streamed, see event_prepare): persistent programs take items t = pid, pid + P, ... of
    (round i, row) with the rows fastest, row = batch row x head pair; an item whose head pair has more than i events
    prepares that head pair's i-th event, then marks it ready (ready[slot] = 1, release). Every program first lets
    the next kernel start (its programmatic dependent: the chain pass, which waits on the marks)."""
    launch_dependents()
    for t in range(tl.program_id(0), ROWS * NC, tl.num_programs(0)):
        row = t % ROWS
        i = t // ROWS
        if i < tl.load(per_head_ptr + row):
            b = (row // HV).to(tl.int64)
            e = tl.load(first_event_ptr + row).to(tl.int64) + i
            prepare_slot(e, b, k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, event_chunks_ptr, w_ptr, u_ptr, k_commit_ptr,
                         T, NC, E, k_sb, k_st, k_sh, v_sb, v_st, v_sh, v_sd, g_sb, g_st, g_sh, beta_sb, beta_st,
                         beta_sh, H, HV, K, V, BK, BV, NORMALIZE, RECOMPUTE, BAND, PRECISION, FOLDED)
            tl.debug_barrier()      # every thread's stores before the mark
            tl.atomic_xchg(ready_ptr + b * E + e, 1, sem="release", scope="gpu")


@triton.jit
def prepare_slot(e, b, k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, event_chunks_ptr, w_ptr, u_ptr, k_commit_ptr,
                 T, NC, E, k_sb, k_st, k_sh, v_sb, v_st, v_sh, v_sd, g_sb, g_st, g_sh, beta_sb, beta_st, beta_sh,
                 H: tl.constexpr, HV: tl.constexpr, K, V, BK: tl.constexpr, BV: tl.constexpr, NORMALIZE: tl.constexpr,
                 RECOMPUTE: tl.constexpr, BAND: tl.constexpr, PRECISION: tl.constexpr, FOLDED: tl.constexpr):
    """w, u and k_commit of event slot e of batch row b (nothing for an empty slot).
    FOLDED (folded commits, see event_prepare): w_ptr takes -k_commit^T w [K, K] and u_ptr k_commit^T u [K, V] of
    each event, k_commit_ptr is not written."""
    flat = tl.load(event_chunks_ptr + b * E + e).to(tl.int64)
    if flat >= 0:
        hv = flat // NC
        c = flat % NC
        hk = hv // (HV // H)
        t0 = c * CHUNK
        dot_dtype = k_ptr.dtype.element_ty
        ck = tl.arange(0, BK)
        cv = tl.arange(0, BV)
        rows = tl.arange(0, CHUNK)
        slot = b * E + e
        k_raw = load_tile(k_ptr + b * k_sb + hk * k_sh, t0, T, k_st, K, CHUNK, BK)
        g = load_gates(g_ptr + b * g_sb + hv * g_sh, t0, T, g_st, CHUNK)
        beta = load_gates(beta_ptr + b * beta_sb + hv * beta_sh, t0, T, beta_st, CHUNK)
        k_scale = inverse_norm(k_raw, NORMALIZE)
        gamma = tl.cumsum(g, axis=0)
        if not FOLDED:  # k_commit first: stored before the solve, so that no float32 copy of k stays live through it
            k_commit = commit_keys(k_raw, k_scale, gamma)
            tl.store(k_commit_ptr + slot * CHUNK * K + rows[:, None] * K + ck[None, :], round_to(k_commit, dot_dtype),
                     mask=(ck < K)[None, :])
        if RECOMPUTE:
            t_inv = band_inverse(k_raw, k_scale, beta, gamma, BAND, PRECISION)
            if not FOLD_SCALES:
                t_inv = round_to(t_inv, dot_dtype)
        else:
            t_inv = tl.load(t_inv_ptr + ((b * HV + hv) * NC + c) * CHUNK * CHUNK + rows[:, None] * CHUNK
                            + rows[None, :])
        if FOLD_SCALES:      # the scales on Tinv's columns, k and v as loaded (chunk_loads.FOLD_SCALES)
            t_inv = t_inv.to(tl.float32)
            w = mma(round_to(t_inv * (beta * tl.exp(gamma) * k_scale)[None, :], dot_dtype), k_raw)
        else:
            w = mma(t_inv, round_to((beta * tl.exp(gamma) * k_scale)[:, None] * k_raw.to(tl.float32), dot_dtype))
        if FOLDED:      # k_commit formed after the solve (from k as loaded, live for w anyway), in the lists' dtype
            k_commit = round_to(commit_keys(k_raw, k_scale, gamma), dot_dtype)
            m = mma(tl.trans(k_commit), round_to(w, dot_dtype))
            tl.store(w_ptr + slot * K * K + ck[:, None] * K + ck[None, :], round_to(-m, dot_dtype),
                     mask=(ck < K)[:, None] & (ck < K)[None, :])
        else:
            tl.store(w_ptr + slot * CHUNK * K + rows[:, None] * K + ck[None, :], round_to(w, dot_dtype),
                     mask=(ck < K)[None, :])
        if FOLD_SCALES:
            v = load_rows_stored(v_ptr + b * v_sb + hv * v_sh, t0, T, v_st, v_sd, V, CHUNK, BV)
            u = mma(round_to(t_inv * beta[None, :], dot_dtype), v)
        else:
            v = load_rows(v_ptr + b * v_sb + hv * v_sh, t0, T, v_st, v_sd, V, CHUNK, BV)
            u = mma(t_inv, round_to((beta[:, None] * v), dot_dtype))
        if FOLDED:
            c = mma(tl.trans(k_commit), round_to(u, dot_dtype))
            tl.store(u_ptr + slot * K * V + ck[:, None] * V + cv[None, :], round_to(c, dot_dtype),
                     mask=(ck < K)[:, None] & (cv < V)[None, :])
        else:
            tl.store(u_ptr + slot * CHUNK * V + rows[:, None] * V + cv[None, :], round_to(u, dot_dtype),
                     mask=(cv < V)[None, :])


@triton.jit
def commit_keys(k_raw, k_scale, gamma):
    """float32 k_commit = k e^(gamma_L - gamma), k's rows scaled by k_scale (normalised where asked)."""
    return (k_scale * tl.exp(log_decay_between(last_of(gamma), gamma)))[:, None] * k_raw.to(tl.float32)


launch_event_prepare = Launcher(event_prepare_kernel)
launch_streamed_prepare = Launcher(streamed_prepare_kernel)


def event_prepare(k, v, g, beta, t_inv, event_chunks, *, normalize, num_value_heads, num_chunks, band, folded=False,
                  streamed=None):
    """Returns w, u, k_commit for the events in event_chunks [B,E], in k.dtype: w and k_commit [B,E,64,K], u
    [B,E,64,V]. t_inv: the stored inverses of pass 1, or None to solve them here.

    folded (folded commits, state_pass's FOLDED): instead the commit's two products folded into one, m = -k_commit^T w
    [B,E,K,K] and c = k_commit^T u [B,E,K,V], returned as (m, c, None): a commit is then S <- e^(gamma_L) S + m S + c
    for the decayed state S, one dependent product on the chain instead of two (16 KB more a event at K = V = 128).

    streamed (STREAM_PREPARE): (schedule, ready), ready int32 zeros (state_pass.ready_marks_shape: one a slot of the
    lists, [B * E], then the chain pass's count): the events are prepared by persistent programs in rounds (every
    head pair's first event, then every second, ...) and each marked in `ready` once stored, for the chain pass
    launched next as this launch's programmatic dependent to wait on (state_pass's `ready`): the long chains start
    while the events after their first ones are still prepared."""
    batch, tokens, key_heads, key_dim = k.shape
    value_dim = v.shape[-1]
    n_events = event_chunks.shape[1]
    rows = key_dim if folded else CHUNK.value
    w = call_record.empty(batch, n_events, rows, key_dim, device=k.device, dtype=k.dtype)
    u = call_record.empty(batch, n_events, rows, value_dim, device=k.device, dtype=k.dtype)
    k_commit = None if folded else call_record.empty(batch, n_events, rows, key_dim, device=k.device, dtype=k.dtype)
    options = fold_options() if folded else dict(num_warps=NUM_WARPS, **launch_options(k.dtype, key_dim, value_dim))
    lists = (k, v, g, beta, t_inv if t_inv is not None else w, event_chunks, w, u,
             k_commit if k_commit is not None else w)
    if streamed is not None:
        schedule, ready = streamed
        check_ready(ready, schedule, "event_prepare")
        options.pop("maxnreg", None)        # the streamed programs' own cap (STREAM_MAXNREG)
        if STREAM_MAXNREG and not INTERPRET.value:
            options["maxnreg"] = STREAM_MAXNREG
        head_rows = batch * num_value_heads
        launch = launch_streamed_prepare
        grid = (max(1, min(stream_programs(k.device), head_rows * num_chunks)),)
        lists = (*lists, schedule.per_head, schedule.first_event, ready, head_rows)
    else:
        launch, grid = launch_event_prepare, (n_events, batch)
    launch(
        grid, *lists, tokens,
        num_chunks, n_events, *k.stride()[:3], *v.stride(), *g.stride(), *beta.stride(), key_heads,
        num_value_heads, key_dim, value_dim, BK=padded(key_dim), BV=padded(value_dim), NORMALIZE=normalize,
        RECOMPUTE=t_inv is None, BAND=band, PRECISION=solve_precision(k.dtype), FOLDED=folded, **options)
    return w, u, k_commit


def stream_programs(device) -> int:
    """The streamed preparation's persistent programs: STREAM_PROGRAMS a multiprocessor (4 under the interpreter)."""
    if INTERPRET.value or device.type != "cuda":
        return 4
    return STREAM_PROGRAMS * torch.cuda.get_device_properties(device).multi_processor_count


def fold_options() -> dict:
    """The folded pass's launch: FOLD_WARPS warps and no register cap (its K x K product's float32 accumulator alone
    is 128 registers a thread at four warps, K = 128)."""
    return {"num_warps": FOLD_WARPS}
