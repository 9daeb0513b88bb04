"""Probes for the output role written in Gluon (Triton's explicit-layout dialect) and, beside them, the same work in
Triton: measurements for the next design (the product's path grown from them is sparsegdn/triton/list_output.py).

    python benchmarks/gluon_probe.py [--tokens 32768 131072]      # GPU: a chunk's own output, every form, timed
    python benchmarks/gluon_probe.py --output-pass                 # GPU: the whole output pass over chunk lists
    python benchmarks/gluon_probe.py --output-pass --on-chip-only  # GPU: reading Tinv against solving it in Gluon
    python benchmarks/gluon_probe.py --compile                     # anywhere: every kernel compiled for sm_90
    python benchmarks/gluon_probe.py --list-caps                   # anywhere: the lists under register caps
    TRITON_INTERPRET=1 python benchmarks/gluon_probe.py --interpret-check   # CPU: the Triton twins against torch

1. A chunk's own output, o = scale M V with M = (P Tinv) diag(beta) and P the decayed causal Q K^T, from pass 1's
   stored Tinv and vectors (gamma, k's inverse norms), against the Triton kernel that computes the same
   (`chunk_output.own_output_kernel` with `t_inv` and `vectors`): in Gluon one chunk a program
   (`own_output_gluon_kernel`), in Gluon persistent with TMA and 1-3 shared-memory stages (`own_output_tma_kernel`),
   and in Triton persistent over `tl.range(num_stages=...)` with pointer or TMA-descriptor loads (the twins).
2. `--output-pass`: the product's output pass (`chunk_output`: stored Tinv, vectors and snapshots, the benchmark's
   selection at budget 0.29, random snapshots) against the same products and roundings over two chunk lists (the
   zero-state chunks, then those with a state), persistent, in Triton (`output_list_kernel`) and in Gluon
   (`output_list_gluon_kernel`); with band 1's Tinv solved on chip, block row by block row in
   `output_list_gluon_kernel` (RECOMPUTE) and batched in the product's own list kernel
   (`list_output.list_output_kernel`, launched through its ListCall: `product_output_lists`), which grew from this
   probe's batched form and replaced it (the rows `gluon_on_chip_batched_*` and `*_batched_solve` time it).
Gluon kernels do not run under TRITON_INTERPRET: their outputs are checked on the GPU against the Triton kernels'
and torch's; `--interpret-check` checks the Triton twins on the CPU, the list twin bit for bit against the product's
output pass. Shapes: the kernel benchmark's (B = 1, H = 16, HV = 32, K = V = 128, bf16); T a multiple of 64; no
masks for a ragged T and no non-finite flag (the product's list_output has both).
Measured on the H200 (batch 22, analysis/results/overlap/batch22, kernel_bench.notes.md): one chunk a program in
Gluon 1.14-1.18x the Triton kernel's time; persistent with two TMA stages 0.74-0.76x; the whole output pass in Gluon
0.64x chunk_output's (1.29 against 2.01 ms at 128K), the Triton twin with TMA descriptors 0.85x; with band 1's Tinv
solved in the Gluon kernels (RECOMPUTE) 6.38 ms by whole-tile tf32 products, 2.99 block row by block row
(`band1_inverse`), against the product's on-chip pass 2.44 (kernel_bench.notes.md, batch 22); batched as band_solve
batches it (then the probe kernel's BATCHED form, the product's gluon_band_solve) 1.87 ms, 0.495 at 32K (batch 23,
`--output-pass --on-chip-only`, analysis/results/overlap/batch23).
"""
import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.tools.tensor_descriptor import TensorDescriptor as TritonDescriptor

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import kernel_bench                                             # noqa: E402
from sparsegdn.config import CHUNK_SIZE as CHUNK               # noqa: E402
from sparsegdn.triton import list_output                      # noqa: E402  (the product's list kernel)
from sparsegdn.triton.chunk_loads import mma, mma_into, round_to  # noqa: E402  (the interpreter's bf16 products)
from sparsegdn.reference import relative_error                # noqa: E402

H, HV, DIM = kernel_bench.H, kernel_bench.HV, kernel_bench.K    # the kernel benchmark's heads (K = V)
CHUNK_TOKENS = gl.constexpr(CHUNK)                              # the chunk inside the kernel


@gluon.jit
def own_output_gluon_kernel(q_ptr, k_ptr, v_ptr, beta_ptr, t_inv_ptr, vectors_ptr, o_ptr, scale, NC,
                            H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr, V: gl.constexpr,
                            num_warps: gl.constexpr):
    """One program per (chunk, head pair), batch row 0: the chunk's own output (zero entering state)."""
    CHUNK: gl.constexpr = CHUNK_TOKENS
    pid = gl.program_id(0).to(gl.int64)
    hv = pid % HV
    c = pid // HV
    hk = hv // (HV // H)
    t0 = c * CHUNK
    chunk_row = hv * NC + c

    # global -> registers -> shared memory (the products' operands)
    load: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    rows = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, load))
    cols = gl.arange(0, K, layout=gl.SliceLayout(0, load))
    cols64 = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, load))
    q = gl.load(q_ptr + (t0 + rows)[:, None] * (H * K) + hk * K + cols[None, :])
    k = gl.load(k_ptr + (t0 + rows)[:, None] * (H * K) + hk * K + cols[None, :])
    v = gl.load(v_ptr + (t0 + rows)[:, None] * (HV * V) + hv * V + cols[None, :])
    t_inv = gl.load(t_inv_ptr + chunk_row * CHUNK * CHUNK + rows[:, None] * CHUNK + cols64[None, :])
    wide: gl.constexpr = gl.NVMMASharedLayout.get_default_for([CHUNK, K], gl.bfloat16)
    square: gl.constexpr = gl.NVMMASharedLayout.get_default_for([CHUNK, CHUNK], gl.bfloat16)
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [CHUNK, K], wide, q)
    k_smem = gl.allocate_shared_memory(gl.bfloat16, [CHUNK, K], wide, k)
    v_smem = gl.allocate_shared_memory(gl.bfloat16, [CHUNK, V], wide, v)
    t_smem = gl.allocate_shared_memory(gl.bfloat16, [CHUNK, CHUNK], square, t_inv)
    fence_async_shared()
    qf = q.to(gl.float32)
    q_scale = gl.rsqrt(gl.sum(qf * qf, axis=1) + 1e-6)            # q's inverse norms, rows of the load layout

    # P = causal(Q K^T * q_scale_i * k_scale_j * exp(gamma_i - gamma_j)), in the accumulator's registers
    acc64: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                    instr_shape=[16, CHUNK, 16])
    s = warpgroup_mma(q_smem, k_smem.permute((1, 0)), gl.zeros([CHUNK, CHUNK], gl.float32, layout=acc64),
                      use_acc=False, is_async=True)
    i = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc64))
    j = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, acc64))
    gamma_i = gl.load(vectors_ptr + chunk_row * 2 * CHUNK + i)
    gamma_j = gl.load(vectors_ptr + chunk_row * 2 * CHUNK + j)
    k_scale_j = gl.load(vectors_ptr + chunk_row * 2 * CHUNK + CHUNK + j)
    beta_j = gl.load(beta_ptr + (t0 + j) * HV + hv).to(gl.float32)
    q_scale_i = gl.convert_layout(q_scale, gl.SliceLayout(1, acc64))
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    causal = i[:, None] >= j[None, :]
    decay = gl.exp(gl.minimum(gl.where(causal, gamma_i[:, None] - gamma_j[None, :], 0.0), 0.0))
    p = gl.where(causal, s * (q_scale_i[:, None] * k_scale_j[None, :]) * decay, 0.0)

    # M = (P Tinv) diag(beta): P as the left operand in registers, Tinv from shared memory
    p_op = gl.convert_layout(p.to(gl.bfloat16), gl.DotOperandLayout(operand_index=0, parent=acc64, k_width=2))
    m = warpgroup_mma(p_op, t_smem, gl.zeros([CHUNK, CHUNK], gl.float32, layout=acc64), use_acc=False,
                      is_async=True)
    m = warpgroup_mma_wait(num_outstanding=0, deps=(m,))
    m = m * beta_j[None, :]

    # o = scale M V
    acc_o: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                    instr_shape=[16, V, 16])
    m_op = gl.convert_layout(m.to(gl.bfloat16), gl.DotOperandLayout(operand_index=0, parent=acc_o, k_width=2))
    o = warpgroup_mma(m_op, v_smem, gl.zeros([CHUNK, V], gl.float32, layout=acc_o), use_acc=False, is_async=True)
    o = warpgroup_mma_wait(num_outstanding=0, deps=(o,))
    out_rows = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc_o))
    out_cols = gl.arange(0, V, layout=gl.SliceLayout(0, acc_o))
    gl.store(o_ptr + (t0 + out_rows)[:, None] * (HV * V) + hv * V + out_cols[None, :], (o * scale).to(gl.bfloat16))


@gluon.jit
def own_output_tma_kernel(q_desc, k_desc, v_desc, t_desc, o_desc, beta_ptr, vectors_ptr, scale, NC, n_tiles,
                          H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr, V: gl.constexpr,
                          STAGES: gl.constexpr, num_warps: gl.constexpr):
    """The same output as own_output_gluon_kernel, persistent: each program walks tiles (chunk, head pair) pid,
    pid + programs, ..., its q, k, v and Tinv brought by TMA into one of STAGES shared-memory stages, the loads of
    the tile STAGES - 1 ahead issued before this tile's products (STAGES = 1: no prefetch, the overlap only between
    programs). o leaves through TMA from the tile's q buffer (q is used up by then)."""
    CHUNK: gl.constexpr = CHUNK_TOKENS
    q_bufs = gl.allocate_shared_memory(gl.bfloat16, [STAGES, CHUNK, K], q_desc.layout)
    k_bufs = gl.allocate_shared_memory(gl.bfloat16, [STAGES, CHUNK, K], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(gl.bfloat16, [STAGES, CHUNK, V], v_desc.layout)
    t_bufs = gl.allocate_shared_memory(gl.bfloat16, [STAGES, CHUNK, CHUNK], t_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for st in gl.static_range(STAGES):
        mbarrier.init(bars.index(st), count=1)
    TILE_BYTES: gl.constexpr = 2 * CHUNK * (2 * K + V + CHUNK)
    pid = gl.program_id(0)
    programs = gl.num_programs(0)
    my_tiles = (n_tiles - pid + programs - 1) // programs

    for first in gl.static_range(STAGES - 1):                   # the prologue: the first STAGES - 1 tiles
        tile = pid + first * programs
        hv = tile % HV
        c = tile // HV
        bar = bars.index(first)
        mbarrier.expect(bar, TILE_BYTES, pred=first < my_tiles)
        tma.async_copy_global_to_shared(q_desc, [c * CHUNK, (hv // (HV // H)) * K], bar, q_bufs.index(first),
                                        pred=first < my_tiles)
        tma.async_copy_global_to_shared(k_desc, [c * CHUNK, (hv // (HV // H)) * K], bar, k_bufs.index(first),
                                        pred=first < my_tiles)
        tma.async_copy_global_to_shared(v_desc, [c * CHUNK, hv * V], bar, v_bufs.index(first), pred=first < my_tiles)
        tma.async_copy_global_to_shared(t_desc, [(hv * NC + c) * CHUNK, 0], bar, t_bufs.index(first),
                                        pred=first < my_tiles)

    acc64: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                    instr_shape=[16, CHUNK, 16])
    acc_o: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                    instr_shape=[16, V, 16])
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    i = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc64))
    j = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, acc64))
    causal = i[:, None] >= j[None, :]
    for n in range(my_tiles):
        tile = pid + n * programs
        hv = tile % HV
        c = tile // HV
        chunk_row = hv * NC + c
        # the tile STAGES - 1 ahead goes to the stage the previous tile used (its products and o's store done)
        ahead = n + STAGES - 1
        stage_ahead = ahead % STAGES
        gl.thread_barrier()
        tma.store_wait(0)
        if ahead < my_tiles:
            tile_a = pid + ahead * programs
            hv_a = tile_a % HV
            c_a = tile_a // HV
            bar_a = bars.index(stage_ahead)
            mbarrier.expect(bar_a, TILE_BYTES)
            tma.async_copy_global_to_shared(q_desc, [c_a * CHUNK, (hv_a // (HV // H)) * K], bar_a,
                                            q_bufs.index(stage_ahead))
            tma.async_copy_global_to_shared(k_desc, [c_a * CHUNK, (hv_a // (HV // H)) * K], bar_a,
                                            k_bufs.index(stage_ahead))
            tma.async_copy_global_to_shared(v_desc, [c_a * CHUNK, hv_a * V], bar_a, v_bufs.index(stage_ahead))
            tma.async_copy_global_to_shared(t_desc, [(hv_a * NC + c_a) * CHUNK, 0], bar_a, t_bufs.index(stage_ahead))
        # this tile's vectors while its loads land
        gamma_i = gl.load(vectors_ptr + chunk_row * 2 * CHUNK + i)
        gamma_j = gl.load(vectors_ptr + chunk_row * 2 * CHUNK + j)
        k_scale_j = gl.load(vectors_ptr + chunk_row * 2 * CHUNK + CHUNK + j)
        beta_j = gl.load(beta_ptr + (c * CHUNK + j) * HV + hv).to(gl.float32)
        stage = n % STAGES
        mbarrier.wait(bars.index(stage), (n // STAGES) & 1)
        q_smem = q_bufs.index(stage)
        s = warpgroup_mma(q_smem, k_bufs.index(stage).permute((1, 0)),
                          gl.zeros([CHUNK, CHUNK], gl.float32, layout=acc64), use_acc=False, is_async=True)
        qf = q_smem.load(rows_layout).to(gl.float32)
        q_scale = gl.convert_layout(gl.rsqrt(gl.sum(qf * qf, axis=1) + 1e-6), gl.SliceLayout(1, acc64))
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        decay = gl.exp(gl.minimum(gl.where(causal, gamma_i[:, None] - gamma_j[None, :], 0.0), 0.0))
        p = gl.where(causal, s * (q_scale[:, None] * k_scale_j[None, :]) * decay, 0.0)
        p_op = gl.convert_layout(p.to(gl.bfloat16), gl.DotOperandLayout(operand_index=0, parent=acc64, k_width=2))
        m = warpgroup_mma(p_op, t_bufs.index(stage), gl.zeros([CHUNK, CHUNK], gl.float32, layout=acc64),
                          use_acc=False, is_async=True)
        m = warpgroup_mma_wait(num_outstanding=0, deps=(m,))
        m = m * beta_j[None, :]
        m_op = gl.convert_layout(m.to(gl.bfloat16), gl.DotOperandLayout(operand_index=0, parent=acc_o, k_width=2))
        o = warpgroup_mma(m_op, v_bufs.index(stage), gl.zeros([CHUNK, V], gl.float32, layout=acc_o),
                          use_acc=False, is_async=True)
        o = warpgroup_mma_wait(num_outstanding=0, deps=(o,))
        gl.thread_barrier()                                     # every warp's read of q done
        q_smem.store((o * scale).to(gl.bfloat16))               # q is used up: o leaves from its buffer
        fence_async_shared()
        gl.thread_barrier()                                     # every warp's part of o in shared memory
        tma.async_copy_shared_to_global(o_desc, [c * CHUNK, hv * V], q_smem)
    tma.store_wait(0)
    for st in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(st))


@gluon.jit
def output_list_gluon_kernel(q_desc, k_desc, v_desc, t_desc, s_desc, o_desc, tiles_ptr, n_tiles, beta_ptr,
                             vectors_ptr, snapshot_of_chunk_ptr, log_decay_since_ptr, scale, NC,
                             H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr, V: gl.constexpr,
                             STAGES: gl.constexpr, HAS_STATE: gl.constexpr, num_warps: gl.constexpr,
                             RECOMPUTE: gl.constexpr = False):
    """output_list_kernel in Gluon (the same products and roundings): persistent over a chunk list, q, k, v, Tinv
    (and the snapshot, HAS_STATE) brought by TMA into STAGES stages, the next tiles' loads issued before this
    tile's products. X = round(beta e^gamma k_scale K) and round(beta V) are written over k and v in shared memory
    (k and v are used up by then); o leaves through TMA from q's buffer. RECOMPUTE: Tinv is not loaded but solved
    here, band 1, block row by block row (band1_inverse), into the stage's Tinv buffer for the product. The batched
    solve (one warp a 16 x 16 block, as band_solve batches it) is not here: the product's list kernel
    (list_output.list_output_kernel with SOLVE) is that form, and the probe times it (product_output_lists)."""
    CHUNK: gl.constexpr = CHUNK_TOKENS
    q_bufs = gl.allocate_shared_memory(gl.bfloat16, [STAGES, CHUNK, K], q_desc.layout)
    k_bufs = gl.allocate_shared_memory(gl.bfloat16, [STAGES, CHUNK, K], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(gl.bfloat16, [STAGES, CHUNK, V], v_desc.layout)
    t_bufs = gl.allocate_shared_memory(gl.bfloat16, [STAGES, CHUNK, CHUNK], t_desc.layout)
    INVERSE_BYTES: gl.constexpr = 0 if RECOMPUTE else 2 * CHUNK * CHUNK
    if HAS_STATE:
        s_bufs = gl.allocate_shared_memory(gl.bfloat16, [STAGES, K, V], s_desc.layout)
        TILE_BYTES: gl.constexpr = 2 * CHUNK * (2 * K + V) + INVERSE_BYTES + 2 * K * V
    else:
        s_bufs = t_bufs                                         # unused
        TILE_BYTES: gl.constexpr = 2 * CHUNK * (2 * K + V) + INVERSE_BYTES
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])
    if RECOMPUTE and HAS_STATE:
        solve_scratch = gl.allocate_shared_memory(gl.float32, [CHUNK, CHUNK], plain)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for st in gl.static_range(STAGES):
        mbarrier.init(bars.index(st), count=1)
    pid = gl.program_id(0)
    programs = gl.num_programs(0)
    my_tiles = (n_tiles - pid + programs - 1) // programs

    for first in gl.static_range(STAGES - 1):                   # the prologue: the first STAGES - 1 tiles
        issue_tile_loads(q_desc, k_desc, v_desc, t_desc, s_desc, q_bufs, k_bufs, v_bufs, t_bufs, s_bufs, bars,
                         tiles_ptr, snapshot_of_chunk_ptr, pid + first * programs, first, first < my_tiles, NC, H,
                         HV, K, V, TILE_BYTES, HAS_STATE, RECOMPUTE)

    acc64: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                    instr_shape=[16, CHUNK, 16])
    acc_o: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                    instr_shape=[16, V, 16])
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    i = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc64))
    j = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, acc64))
    r = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, rows_layout))
    causal = i[:, None] >= j[None, :]
    for n in range(my_tiles):
        tile = gl.load(tiles_ptr + pid + n * programs)
        hv = tile // NC
        c = tile % NC
        ahead = n + STAGES - 1
        gl.thread_barrier()
        tma.store_wait(0)
        issue_tile_loads(q_desc, k_desc, v_desc, t_desc, s_desc, q_bufs, k_bufs, v_bufs, t_bufs, s_bufs, bars,
                         tiles_ptr, snapshot_of_chunk_ptr, pid + ahead * programs, ahead % STAGES, ahead < my_tiles,
                         NC, H, HV, K, V, TILE_BYTES, HAS_STATE, RECOMPUTE)
        base = tile.to(gl.int64) * 2 * CHUNK
        gamma_i = gl.load(vectors_ptr + base + i)
        gamma_j = gl.load(vectors_ptr + base + j)
        k_scale_j = gl.load(vectors_ptr + base + CHUNK + j)
        beta_r = gl.load(beta_ptr + (c * CHUNK + r) * HV + hv).to(gl.float32)
        stage = n % STAGES
        mbarrier.wait(bars.index(stage), (n // STAGES) & 1)
        q_smem = q_bufs.index(stage)
        k_smem = k_bufs.index(stage)
        v_smem = v_bufs.index(stage)
        s = warpgroup_mma(q_smem, k_smem.permute((1, 0)), gl.zeros([CHUNK, CHUNK], gl.float32, layout=acc64),
                          use_acc=False, is_async=True)
        qf = q_smem.load(rows_layout).to(gl.float32)
        q_scale = gl.rsqrt(gl.sum(qf * qf, axis=1) + 1e-6)     # rows of the load layout
        values = (beta_r[:, None] * v_smem.load(rows_layout).to(gl.float32)).to(gl.bfloat16)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        decay = gl.exp(gl.minimum(gl.where(causal, gamma_i[:, None] - gamma_j[None, :], 0.0), 0.0))
        if RECOMPUTE:           # Tinv from the k tile already here: A = decayed beta K K^T below the diagonal
            kk = warpgroup_mma(k_smem, k_smem.permute((1, 0)), gl.zeros([CHUNK, CHUNK], gl.float32, layout=acc64),
                               use_acc=False, is_async=True)
            kk = warpgroup_mma_wait(num_outstanding=0, deps=(kk,))
            beta_i = gl.load(beta_ptr + (c * CHUNK + i) * HV + hv).to(gl.float32)
            k_scale_i = gl.load(vectors_ptr + base + CHUNK + i)
            a = gl.where(i[:, None] > j[None, :], kk * ((beta_i * k_scale_i)[:, None] * k_scale_j[None, :]) * decay,
                         0.0)
            if HAS_STATE:       # q is read again by the state's part: a scratch of its own
                scratch = solve_scratch
            else:               # q is used up (its scale taken, Q K^T done): its 16 KB hold the solve
                scratch = q_smem._reinterpret(gl.float32, [CHUNK, CHUNK], plain)
            band1_inverse(a, scratch, num_warps)
            t_bufs.index(stage).store(scratch.load(rows_layout).to(gl.bfloat16))
            fence_async_shared()
            gl.thread_barrier()
        q_scale_i = gl.convert_layout(q_scale, gl.SliceLayout(1, acc64))
        p = gl.where(causal, s * (q_scale_i[:, None] * k_scale_j[None, :]) * decay, 0.0)
        p_op = gl.convert_layout(p.to(gl.bfloat16), gl.DotOperandLayout(operand_index=0, parent=acc64, k_width=2))
        m = warpgroup_mma(p_op, t_bufs.index(stage), gl.zeros([CHUNK, CHUNK], gl.float32, layout=acc64),
                          use_acc=False, is_async=True)
        gl.thread_barrier()                                     # every warp's read of v done
        v_smem.store(values)                                    # round(beta V) over v
        if HAS_STATE:
            gamma_r = gl.load(vectors_ptr + base + r)
            k_scale_r = gl.load(vectors_ptr + base + CHUNK + r)
            x = ((beta_r * gl.exp(gamma_r) * k_scale_r)[:, None] * k_smem.load(rows_layout).to(gl.float32))
            gl.thread_barrier()                                 # every warp's read of k done (the QK^T product too)
            k_smem.store(x.to(gl.bfloat16))                     # X over k
        fence_async_shared()
        gl.thread_barrier()
        m = warpgroup_mma_wait(num_outstanding=0, deps=(m,))
        m_op = gl.convert_layout(m.to(gl.bfloat16), gl.DotOperandLayout(operand_index=0, parent=acc_o, k_width=2))
        if HAS_STATE:
            mx = warpgroup_mma(m_op, k_smem, gl.zeros([CHUNK, K], gl.float32, layout=acc_o), use_acc=False,
                               is_async=True)
            mx = warpgroup_mma_wait(num_outstanding=0, deps=(mx,))
            decay_since = gl.exp(gl.load(log_decay_since_ptr + tile))
            gamma_o = gl.load(vectors_ptr + base + gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc_o)))
            q_rows = gl.convert_layout(q_scale, gl.SliceLayout(1, acc_o)) * gl.exp(gamma_o)
            qo = q_smem.load(acc_o).to(gl.float32)
            left = (q_rows[:, None] * qo - mx) * decay_since
            left_op = gl.convert_layout(left.to(gl.bfloat16),
                                        gl.DotOperandLayout(operand_index=0, parent=acc_o, k_width=2))
            o = warpgroup_mma(left_op, s_bufs.index(stage), gl.zeros([CHUNK, V], gl.float32, layout=acc_o),
                              use_acc=False, is_async=True)
            o = warpgroup_mma(m_op, v_smem, o, is_async=True)
        else:
            o = warpgroup_mma(m_op, v_smem, gl.zeros([CHUNK, V], gl.float32, layout=acc_o), use_acc=False,
                              is_async=True)
        o = warpgroup_mma_wait(num_outstanding=0, deps=(o,))
        gl.thread_barrier()                                     # every warp's read of q done
        q_smem.store((o * scale).to(gl.bfloat16))               # q is used up: o leaves from its buffer
        fence_async_shared()
        gl.thread_barrier()
        tma.async_copy_shared_to_global(o_desc, [c * CHUNK, hv * V], q_smem)
    tma.store_wait(0)
    for st in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(st))


@gluon.jit
def tf32_block(x, y, mma2: gl.constexpr):
    """x @ y for float32 [16, 16] blocks in registers (mma_v2, tf32 operands, float32 sums): fdot's precision."""
    a = gl.convert_layout(x, gl.DotOperandLayout(operand_index=0, parent=mma2, k_width=1))
    b = gl.convert_layout(y, gl.DotOperandLayout(operand_index=1, parent=mma2, k_width=1))
    return mma_v2(a, b, gl.zeros([16, 16], gl.float32, layout=mma2), input_precision="tf32")


@gluon.jit
def band1_inverse(a, scratch, num_warps: gl.constexpr):
    """band_solve's band-1 Tinv of A (float32 [64, 64], strictly lower), block row by block row through `scratch`
    (float32 [64, 64] shared memory, overwritten with Tinv): D_b = (I + A_bb)^-1 by doubling and the block below
    the diagonal -D_b (A_b,b-1 D_b-1), each a 16 x 16 product as band_solve's [4, 16, 16] batches."""
    mma2: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, 8])
    gl.thread_barrier()                                         # earlier readers of scratch are done
    scratch.store(a)
    gl.thread_barrier()
    ii = gl.arange(0, 16, layout=gl.SliceLayout(1, mma2))
    jj = gl.arange(0, 16, layout=gl.SliceLayout(0, mma2))
    eye = gl.where(ii[:, None] == jj[None, :], 1.0, 0.0)
    zero = gl.zeros([16, 16], gl.float32, layout=mma2)
    d_prev = zero
    for blk in gl.static_range(4):
        row = scratch.slice(16 * blk, 16, 0)
        n = row.slice(16 * blk, 16, 1).load(mma2)
        n2 = tf32_block(n, n, mma2)
        n4 = tf32_block(n2, n2, mma2)
        d = tf32_block(eye - n, eye + n2, mma2)
        n8 = tf32_block(n4, n4, mma2)
        d = tf32_block(d, eye + n4, mma2)
        d = tf32_block(d, eye + n8, mma2)
        off = zero
        if blk > 0:
            off = zero - tf32_block(d, tf32_block(row.slice(16 * (blk - 1), 16, 1).load(mma2), d_prev, mma2), mma2)
        gl.thread_barrier()                                     # this block row's reads are done
        for col in gl.static_range(4):
            if col == blk:
                row.slice(16 * col, 16, 1).store(d)
            elif col == blk - 1:
                row.slice(16 * col, 16, 1).store(off)
            else:
                row.slice(16 * col, 16, 1).store(zero)
        d_prev = d
    gl.thread_barrier()


@gluon.jit
def issue_tile_loads(q_desc, k_desc, v_desc, t_desc, s_desc, q_bufs, k_bufs, v_bufs, t_bufs, s_bufs, bars, tiles_ptr,
                     snapshot_of_chunk_ptr, position, stage, live, NC, H: gl.constexpr, HV: gl.constexpr,
                     K: gl.constexpr, V: gl.constexpr, TILE_BYTES: gl.constexpr, HAS_STATE: gl.constexpr,
                     RECOMPUTE: gl.constexpr):
    """The TMA loads of the list's tile at `position` into `stage` (nothing where live is false)."""
    CHUNK: gl.constexpr = CHUNK_TOKENS
    tile = gl.load(tiles_ptr + position, mask=live, other=0)
    hv = tile // NC
    c = tile % NC
    head = (hv // (HV // H)) * K
    bar = bars.index(stage)
    mbarrier.expect(bar, TILE_BYTES, pred=live)
    tma.async_copy_global_to_shared(q_desc, [c * CHUNK, head], bar, q_bufs.index(stage), pred=live)
    tma.async_copy_global_to_shared(k_desc, [c * CHUNK, head], bar, k_bufs.index(stage), pred=live)
    tma.async_copy_global_to_shared(v_desc, [c * CHUNK, hv * V], bar, v_bufs.index(stage), pred=live)
    if not RECOMPUTE:
        tma.async_copy_global_to_shared(t_desc, [tile * CHUNK, 0], bar, t_bufs.index(stage), pred=live)
    if HAS_STATE:
        snapshot = gl.load(snapshot_of_chunk_ptr + tile, mask=live, other=0)
        tma.async_copy_global_to_shared(s_desc, [snapshot * K, 0], bar, s_bufs.index(stage), pred=live)


def gluon_list_descriptors(q, k, v, t_inv, snapshots, o):
    """output_list_descriptors for the Gluon kernel (its own descriptor class, with the shared layouts)."""
    tokens = q.shape[1]
    wide = gl.NVMMASharedLayout.get_default_for([CHUNK, DIM], gl.bfloat16)
    square = gl.NVMMASharedLayout.get_default_for([CHUNK, CHUNK], gl.bfloat16)
    state = gl.NVMMASharedLayout.get_default_for([DIM, DIM], gl.bfloat16)
    return (TensorDescriptor.from_tensor(q.view(tokens, H * DIM), [CHUNK, DIM], wide),
            TensorDescriptor.from_tensor(k.view(tokens, H * DIM), [CHUNK, DIM], wide),
            TensorDescriptor.from_tensor(v.view(tokens, HV * DIM), [CHUNK, DIM], wide),
            TensorDescriptor.from_tensor(t_inv.view(-1, CHUNK), [CHUNK, CHUNK], square),
            TensorDescriptor.from_tensor(snapshots.view(-1, DIM), [DIM, DIM], state),
            TensorDescriptor.from_tensor(o.view(tokens, HV * DIM), [CHUNK, DIM], wide))


def gluon_output_lists(descriptors, lists, beta, vectors, schedule, scale, n_chunks, *, variants, sms,
                       recompute=False):
    """The output pass in Gluon: one persistent launch a list (variants: (stages, programs an SM) for each);
    recompute: band 1's Tinv solved in the kernel, block row by block row, instead of read (solved batched:
    product_output_lists)."""
    for has_state, (tiles, (stages, per_sm)) in enumerate(zip(lists, variants)):
        n_tiles = tiles.numel()
        if n_tiles:
            output_list_gluon_kernel[(min(n_tiles, per_sm * sms),)](
                *descriptors, tiles, n_tiles, beta, vectors, schedule.snapshot_of_chunk, schedule.log_decay_since,
                scale, n_chunks, H, HV, DIM, DIM, stages, bool(has_state), num_warps=4, RECOMPUTE=recompute)


def product_output_lists(call, snapshots, variants, lists=(0, 1)):
    """The product's list kernel (list_output.list_output_kernel) over `call`'s lists (a list_output.ListCall), each
    launched as ListCall launches it but at the probe's (stages, programs an SM): variants[0] for the zero-state list,
    variants[1] for the other; `lists`: which of the two run (0, 1). ListCall's own launches (own, with_state) take
    only list_output's OWN_LAUNCH and STATE_LAUNCH, hence its _launch here."""
    for has_state in lists:
        if call.claim:           # a ListCall's claim counters serve one call: zeroed as a new call's are
            call.claims.zero_()
        call._launch(snapshots if has_state else None, bool(has_state), variants[has_state])


def own_output_gluon(q, k, v, beta, t_inv, vectors, o, scale):
    n_chunks = q.shape[1] // CHUNK
    own_output_gluon_kernel[(n_chunks * HV,)](q, k, v, beta, t_inv, vectors, o, scale, n_chunks, H, HV, DIM, DIM,
                                             num_warps=4)


def tma_descriptors(q, k, v, t_inv, o):
    """2-D TMA descriptors of the benchmark's tensors (batch row 0): tokens x (heads x dim), and Tinv's rows."""
    wide = gl.NVMMASharedLayout.get_default_for([CHUNK, DIM], gl.bfloat16)
    square = gl.NVMMASharedLayout.get_default_for([CHUNK, CHUNK], gl.bfloat16)
    tokens = q.shape[1]
    return (TensorDescriptor.from_tensor(q.view(tokens, H * DIM), [CHUNK, DIM], wide),
            TensorDescriptor.from_tensor(k.view(tokens, H * DIM), [CHUNK, DIM], wide),
            TensorDescriptor.from_tensor(v.view(tokens, HV * DIM), [CHUNK, DIM], wide),
            TensorDescriptor.from_tensor(t_inv.view(-1, CHUNK), [CHUNK, CHUNK], square),
            TensorDescriptor.from_tensor(o.view(tokens, HV * DIM), [CHUNK, DIM], wide))


def own_output_tma(q, k, v, beta, t_inv, vectors, o, scale, *, stages, per_sm, sms, descriptors=None):
    n_chunks = q.shape[1] // CHUNK
    n_tiles = n_chunks * HV
    descriptors = descriptors or tma_descriptors(q, k, v, t_inv, o)
    return own_output_tma_kernel[(min(n_tiles, per_sm * sms),)](*descriptors, beta, vectors, scale, n_chunks, n_tiles,
                                                                H, HV, DIM, DIM, stages, num_warps=4)


@triton.jit
def own_output_tile(q, k, v, t_inv, gamma, k_scale, beta, scale, CHUNK: tl.constexpr):
    """A chunk's own output from its loaded tiles (Triton): the same products and roundings as the Gluon kernels."""
    rows = tl.arange(0, CHUNK)
    causal = rows[:, None] >= rows[None, :]
    s = mma(q, tl.trans(k))
    qf = q.to(tl.float32)
    q_scale = tl.rsqrt(tl.sum(qf * qf, axis=1) + 1e-6)
    decay = tl.exp(tl.minimum(tl.where(causal, gamma[:, None] - gamma[None, :], 0.0), 0.0))
    p = tl.where(causal, s * (q_scale[:, None] * k_scale[None, :]) * decay, 0.0)
    m = mma(round_to(p, tl.bfloat16), t_inv) * beta[None, :]
    return round_to(mma(round_to(m, tl.bfloat16), v) * scale, tl.bfloat16)


@triton.jit
def own_output_persistent_kernel(q_ptr, k_ptr, v_ptr, beta_ptr, t_inv_ptr, vectors_ptr, o_ptr, scale, NC, n_tiles,
                                 H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                                 CHUNK: tl.constexpr, STAGES: tl.constexpr):
    """The Triton twin, persistent: tiles pid, pid + programs, ... in a loop that Triton's pipeliner may prefetch
    (tl.range's num_stages), loads through pointers (cp.async when pipelined)."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    rows = tl.arange(0, CHUNK)
    cols = tl.arange(0, K)
    for tile in tl.range(pid, n_tiles, programs, num_stages=STAGES):
        hv = tile % HV
        c = tile // HV
        t0 = c * CHUNK
        chunk_row = (hv * NC + c).to(tl.int64)
        head = (hv // (HV // H)) * K
        q = tl.load(q_ptr + (t0 + rows)[:, None] * (H * K) + head + cols[None, :])
        k = tl.load(k_ptr + (t0 + rows)[:, None] * (H * K) + head + cols[None, :])
        v = tl.load(v_ptr + (t0 + rows)[:, None] * (HV * V) + hv * V + cols[None, :])
        t_inv = tl.load(t_inv_ptr + chunk_row * CHUNK * CHUNK + rows[:, None] * CHUNK + rows[None, :])
        gamma = tl.load(vectors_ptr + chunk_row * 2 * CHUNK + rows)
        k_scale = tl.load(vectors_ptr + chunk_row * 2 * CHUNK + CHUNK + rows)
        beta = tl.load(beta_ptr + (t0 + rows) * HV + hv).to(tl.float32)
        o = own_output_tile(q, k, v, t_inv, gamma, k_scale, beta, scale, CHUNK)
        tl.store(o_ptr + (t0 + rows)[:, None] * (HV * V) + hv * V + cols[None, :], o)


@triton.jit
def own_output_descriptor_kernel(q_desc, k_desc, v_desc, t_desc, o_desc, beta_ptr, vectors_ptr, scale, NC, n_tiles,
                                 H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                                 CHUNK: tl.constexpr, STAGES: tl.constexpr):
    """The Triton twin, persistent, its tiles through TMA descriptors (Triton's own TMA lowering and pipelining)."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    rows = tl.arange(0, CHUNK)
    for tile in tl.range(pid, n_tiles, programs, num_stages=STAGES):
        hv = tile % HV
        c = tile // HV
        chunk_row = (hv * NC + c).to(tl.int64)
        head = (hv // (HV // H)) * K
        q = q_desc.load([c * CHUNK, head])
        k = k_desc.load([c * CHUNK, head])
        v = v_desc.load([c * CHUNK, hv * V])
        t_inv = t_desc.load([(hv * NC + c) * CHUNK, 0])
        gamma = tl.load(vectors_ptr + chunk_row * 2 * CHUNK + rows)
        k_scale = tl.load(vectors_ptr + chunk_row * 2 * CHUNK + CHUNK + rows)
        beta = tl.load(beta_ptr + (c * CHUNK + rows) * HV + hv).to(tl.float32)
        o_desc.store([c * CHUNK, hv * V], own_output_tile(q, k, v, t_inv, gamma, k_scale, beta, scale, CHUNK))


def own_output_twin(q, k, v, beta, t_inv, vectors, o, scale, *, stages, per_sm, sms, descriptors=False):
    """The Triton twins: persistent over per_sm x sms programs (pointers, or TMA descriptors)."""
    n_chunks = q.shape[1] // CHUNK
    n_tiles = n_chunks * HV
    grid = (min(n_tiles, per_sm * sms),)
    if not descriptors:
        return own_output_persistent_kernel[grid](q, k, v, beta, t_inv, vectors, o, scale, n_chunks, n_tiles, H, HV,
                                                  DIM, DIM, CHUNK, stages, num_warps=4)
    tokens = q.shape[1]
    wide, square = [CHUNK, DIM], [CHUNK, CHUNK]
    tiles = (TritonDescriptor.from_tensor(q.view(tokens, H * DIM), wide),
             TritonDescriptor.from_tensor(k.view(tokens, H * DIM), wide),
             TritonDescriptor.from_tensor(v.view(tokens, HV * DIM), wide),
             TritonDescriptor.from_tensor(t_inv.view(-1, CHUNK), square),
             TritonDescriptor.from_tensor(o.view(tokens, HV * DIM), wide))
    return own_output_descriptor_kernel[grid](*tiles, beta, vectors, scale, n_chunks, n_tiles, H, HV, DIM, DIM,
                                              CHUNK, stages, num_warps=4)


TWIN_VARIANTS = (("pointers", 2, 2), ("pointers", 3, 2), ("pointers", 2, 3), ("descriptors", 2, 2),
                 ("descriptors", 3, 1))                         # (loads, stages, programs an SM)


@triton.jit
def output_list_kernel(q_desc, k_desc, v_desc, t_desc, s_desc, o_desc, tiles_ptr, n_tiles, beta_ptr, vectors_ptr,
                       snapshot_of_chunk_ptr, log_decay_since_ptr, scale, NC,
                       H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, CHUNK: tl.constexpr,
                       STAGES: tl.constexpr, HAS_STATE: tl.constexpr):
    """Every output of the chunks in a list (batch row 0, tile = hv * NC + c), persistent, tiles through TMA
    descriptors: the product's output pass (chunk_output.output_chunks with stored Tinv, vectors and snapshots,
    FOLD_SCALES off: the same products and roundings) for the zero-state chunks (HAS_STATE false: o = scale M (beta
    V)) or for the chunks with a state (o = scale [e^d (Q e^gamma - M X) S + M (beta V)], S the chunk's snapshot)."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    rows = tl.arange(0, CHUNK)
    causal = rows[:, None] >= rows[None, :]
    for n in tl.range(pid, n_tiles, programs, num_stages=STAGES):
        tile = tl.load(tiles_ptr + n)
        hv = tile // NC
        c = tile % NC
        head = (hv // (HV // H)) * K
        q = q_desc.load([c * CHUNK, head])
        k = k_desc.load([c * CHUNK, head])
        v = v_desc.load([c * CHUNK, hv * V])
        t_inv = t_desc.load([tile * CHUNK, 0])
        gamma = tl.load(vectors_ptr + tile.to(tl.int64) * 2 * CHUNK + rows)
        k_scale = tl.load(vectors_ptr + tile.to(tl.int64) * 2 * CHUNK + CHUNK + rows)
        beta = tl.load(beta_ptr + (c * CHUNK + rows) * HV + hv).to(tl.float32)
        qf = q.to(tl.float32)
        q_scale = tl.rsqrt(tl.sum(qf * qf, axis=1) + 1e-6)
        decay = tl.where(causal, tl.exp(tl.minimum(tl.where(causal, gamma[:, None] - gamma[None, :], 0.0), 0.0)), 0.0)
        p = tl.where(causal, mma(q, tl.trans(k)) * (q_scale[:, None] * k_scale[None, :]) * decay, 0.0)
        m = round_to(mma(round_to(p, tl.bfloat16), t_inv), tl.bfloat16)
        values = round_to(beta[:, None] * v.to(tl.float32), tl.bfloat16)
        if HAS_STATE:
            snapshot = s_desc.load([tl.load(snapshot_of_chunk_ptr + tile) * K, 0])
            decay_since = tl.exp(tl.load(log_decay_since_ptr + tile))
            x = round_to((beta * tl.exp(gamma) * k_scale)[:, None] * k.to(tl.float32), tl.bfloat16)
            left = ((q_scale * tl.exp(gamma))[:, None] * qf - mma(m, x)) * decay_since
            o = mma_into(mma(round_to(left, tl.bfloat16), snapshot), m, values)
        else:
            o = mma(m, values)
        o_desc.store([c * CHUNK, hv * V], round_to(o * scale, tl.bfloat16))


def output_list_descriptors(q, k, v, t_inv, snapshots, o):
    """TMA descriptors of q, k, v, Tinv, the snapshots (rows of K) and o, batch row 0."""
    tokens = q.shape[1]
    wide, square = [CHUNK, DIM], [CHUNK, CHUNK]
    return (TritonDescriptor.from_tensor(q.view(tokens, H * DIM), wide),
            TritonDescriptor.from_tensor(k.view(tokens, H * DIM), wide),
            TritonDescriptor.from_tensor(v.view(tokens, HV * DIM), wide),
            TritonDescriptor.from_tensor(t_inv.view(-1, CHUNK), square),
            TritonDescriptor.from_tensor(snapshots.view(-1, DIM), [DIM, DIM]),
            TritonDescriptor.from_tensor(o.view(tokens, HV * DIM), wide))


def output_lists(descriptors, lists, beta, vectors, schedule, scale, n_chunks, *, stages, per_sm, sms, warps=4):
    """The output pass as two persistent launches over the chunk lists (zero-state chunks, chunks with a state:
    int32 tiles hv * NC + c, chunk-major so that the two value heads of a key head run side by side)."""
    for has_state, tiles in enumerate(lists):
        n_tiles = tiles.numel()
        if n_tiles:
            output_list_kernel[(min(n_tiles, per_sm * sms),)](
                *descriptors, tiles, n_tiles, beta, vectors, schedule.snapshot_of_chunk, schedule.log_decay_since,
                scale, n_chunks, H, HV, DIM, DIM, CHUNK, stages, bool(has_state), num_warps=warps)


def chunk_lists(schedule):
    """(zero-state tiles, tiles with a state) of batch row 0 from the schedule, chunk-major."""
    first = schedule.snapshot_of_chunk[0, :, :1]
    has_state = (schedule.snapshot_of_chunk[0] != first)              # [HV, NC]
    heads, n_chunks = has_state.shape
    tile = (torch.arange(heads, device=has_state.device)[:, None] * n_chunks
            + torch.arange(n_chunks, device=has_state.device)[None, :])
    by_chunk, state_by_chunk = tile.T.reshape(-1), has_state.T.reshape(-1)
    return (by_chunk[~state_by_chunk].int().contiguous(), by_chunk[state_by_chunk].int().contiguous())

TMA_VARIANTS = ((1, 4), (2, 2), (3, 1), (2, 1))                # (stages, programs an SM): shared memory allows these


def compile_stand_ins():
    """Empty CPU tensors of two chunks, the shapes the kernels are compiled for: q, v, beta, Tinv, vectors."""
    return (torch.empty(1, 128, H, DIM, dtype=torch.bfloat16), torch.empty(1, 128, HV, DIM, dtype=torch.bfloat16),
            torch.empty(1, 128, HV, dtype=torch.bfloat16), torch.empty(1, HV, 2, CHUNK, CHUNK, dtype=torch.bfloat16),
            torch.empty(1, HV, 2, 2, CHUNK))


def compile_only():
    """The Gluon kernel compiled for sm_90 through compile_report's compile-only driver: its machine code's size."""
    import compile_report
    from triton.runtime.driver import driver
    driver.set_active(compile_report.CompileOnlyDriver())
    q, v, beta, t_inv, vectors = compile_stand_ins()
    compiled = own_output_gluon_kernel.warmup(q, q, v, beta, t_inv, vectors, v, 0.1, 2, H, HV, DIM, DIM,
                                              num_warps=4, grid=(1,))
    reports = [compile_report.kernel_report("own_output_gluon_kernel", {"num_warps": 4}, compiled)]
    o = torch.empty(1, 128, HV, DIM, dtype=torch.bfloat16)
    for stages, _ in TMA_VARIANTS[:3]:
        compiled = own_output_tma_kernel.warmup(*tma_descriptors(q, q, v, t_inv, o), beta, vectors, 0.1, 2, 2 * HV,
                                                H, HV, DIM, DIM, stages, num_warps=4, grid=(1,))
        reports.append(compile_report.kernel_report(f"own_output_tma_kernel stages {stages}",
                                                    {"num_warps": 4, "STAGES": stages}, compiled))
    n_chunks, n_tiles = 2, 2 * HV
    for loads, stages, _ in TWIN_VARIANTS[:2] + TWIN_VARIANTS[3:4]:
        if loads == "pointers":
            compiled = own_output_persistent_kernel.warmup(q, q, v, beta, t_inv, vectors, o, 0.1, n_chunks, n_tiles,
                                                           H, HV, DIM, DIM, CHUNK, stages, num_warps=4, grid=(1,))
        else:
            wide, square = [CHUNK, DIM], [CHUNK, CHUNK]
            tiles = (TritonDescriptor.from_tensor(q.view(128, H * DIM), wide),
                     TritonDescriptor.from_tensor(q.view(128, H * DIM), wide),
                     TritonDescriptor.from_tensor(v.view(128, HV * DIM), wide),
                     TritonDescriptor.from_tensor(t_inv.view(-1, CHUNK), square),
                     TritonDescriptor.from_tensor(o.view(128, HV * DIM), wide))
            compiled = own_output_descriptor_kernel.warmup(*tiles, beta, vectors, 0.1, n_chunks, n_tiles, H, HV, DIM,
                                                           DIM, CHUNK, stages, num_warps=4, grid=(1,))
        reports.append(compile_report.kernel_report(f"twin {loads} stages {stages}", {"num_warps": 4,
                                                    "num_stages": stages}, compiled))
    snapshots = torch.empty(1, 4, DIM, DIM, dtype=torch.bfloat16)
    schedule_int = torch.empty(1, HV, 2, dtype=torch.int32)
    for (own, state) in LIST_VARIANTS[:1]:
        for has_state, (stages, _, _) in enumerate((own, state)):
            compiled = output_list_kernel.warmup(*output_list_descriptors(q, q, v, t_inv, snapshots, o), schedule_int,
                                                 4, beta, vectors, schedule_int, vectors, 0.1, 2, H, HV, DIM, DIM,
                                                 CHUNK, stages, bool(has_state), num_warps=4, grid=(1,))
            reports.append(compile_report.kernel_report(f"output list stages {stages} state {bool(has_state)}",
                                                        {"num_warps": 4, "num_stages": stages}, compiled))
    # the batched on-chip solve is the product's list kernel with SOLVE: list_output_compile compiles it
    forms = ((False, 2, False), (True, 1, False), (True, 2, False), (False, 2, True), (True, 1, True))
    for has_state, stages, recompute in forms:
        compiled = output_list_gluon_kernel.warmup(*gluon_list_descriptors(q, q, v, t_inv, snapshots, o), schedule_int,
                                                   4, beta, vectors, schedule_int, vectors, 0.1, 2, H, HV, DIM, DIM,
                                                   stages, has_state, num_warps=4, RECOMPUTE=recompute, grid=(1,))
        solve = " on-chip Tinv by block rows" if recompute else ""
        reports.append(compile_report.kernel_report(f"gluon output list stages {stages} state {has_state}" + solve,
                                                    {"num_warps": 4, "STAGES": stages}, compiled))
    reports += list_output_compile(q, v, t_inv, snapshots, beta, vectors, schedule_int)
    for report in reports:
        print(json.dumps(report))
    return reports


def list_output_compile(q, v, t_inv, snapshots, beta, vectors, ints):
    """The product's list kernel (sparsegdn.triton.list_output) as it launches each list, bf16 and fp16."""
    import compile_report
    reports = []
    flags = torch.empty(3, dtype=torch.int32)
    for dtype, element in ((torch.bfloat16, gl.bfloat16), (torch.float16, gl.float16)):
        descriptors = list_descriptors(q, v, t_inv, snapshots, dtype, element)
        for has_state, (stages, _) in ((False, list_output.OWN_LAUNCH), (True, list_output.STATE_LAUNCH)):
            forms = [(False, 1, False, False, False), (True, 1, False, False, False), (True, 0, False, False, False),
                     (False, 1, True, False, False), (True, 1, True, False, False), (False, 1, False, True, False),
                     (True, 1, False, True, False)]
            if has_state:           # waiting on the chains' progress (OVERLAP_LISTS): whole chains and segments
                forms += [(False, 1, False, True, True), (True, 1, False, True, True)]
            for solve, band, claim, dependent, segmented in forms:
                wait = dependent and has_state
                compiled = compile_list_kernel(descriptors, beta.to(dtype), vectors, ints, flags, q.shape[1], stages,
                                               has_state, solve, band, claim, dependent, segmented)
                form = ((f" solving band {band}" if solve else "") + (" claims" if claim else "")
                        + (" ahead" if list_output.claims_ahead(claim, stages, has_state, cut=True) else "")
                        + (" dependent" if dependent else "") + (" waiting" if wait else "")
                        + (" segmented" if segmented else ""))
                reports.append(compile_report.kernel_report(
                    f"list_output_kernel {str(dtype).split('.')[-1]} state {has_state}{form}",
                    {"num_warps": 4, "STAGES": stages}, compiled))
    return reports


def compile_list_kernel(descriptors, beta, vectors, ints, flags, tokens, stages, has_state, solve, band, claim,
                        dependent, segmented, **options):
    """list_output's kernel compiled (not launched) for one list and form, on stand-in tensors (`ints` for every
    integer tensor): solving Tinv's `band` or reading it, claiming chunks, launched as the chain pass's dependent
    (the list with a state then waiting on its progress, in segments or whole chains). `options`: launch options
    such as maxnreg. The zero-state list's claims at two stages come two tiles ahead where a long call's launch takes
    them so beside its cut chains (list_output.claims_ahead with cut, the default route's since batch 42; the reports'
    names then say "ahead")."""
    if list_output.claims_ahead(claim, stages, has_state, cut=True):
        options = {"AHEAD": True, **options}
    return list_output.list_output_kernel.warmup(
        *descriptors, ints, ints, ints.numel(), beta, *beta.stride(), vectors, ints, vectors, flags, 0.1, tokens,
        ints.shape[-1], H, HV, DIM, DIM, True, stages, has_state, 0, solve, band, flags, claim, ints, ints, 4,
        2 if segmented else 1, dependent and has_state, segmented, dependent, num_warps=4, launch_pdl=dependent,
        grid=(1,), **options)


def list_descriptors(q, v, t_inv, snapshots, dtype, element):
    """The TMA descriptors list_output's kernel takes (q, k, v, Tinv, snapshots, o), of stand-in tensors in `dtype`."""
    wide = gl.NVMMASharedLayout.get_default_for([CHUNK, DIM], element)
    square = gl.NVMMASharedLayout.get_default_for([CHUNK, CHUNK], element)
    state = gl.NVMMASharedLayout.get_default_for([DIM, DIM], element)
    q_, v_, t_, s_ = (x.to(dtype) for x in (q, v, t_inv, snapshots))
    return (TensorDescriptor.from_tensor(q_.view(-1, H * DIM), [CHUNK, DIM], wide),
            TensorDescriptor.from_tensor(q_.view(-1, H * DIM), [CHUNK, DIM], wide),
            TensorDescriptor.from_tensor(v_.view(-1, HV * DIM), [CHUNK, DIM], wide),
            TensorDescriptor.from_tensor(t_.view(-1, CHUNK), [CHUNK, CHUNK], square),
            TensorDescriptor.from_tensor(s_.view(-1, DIM), [DIM, DIM], state),
            TensorDescriptor.from_tensor(v_.view(-1, HV * DIM), [CHUNK, DIM], wide))


def list_caps_compile():
    """list_output's kernel as long calls launch it (bf16, band 1 solved, claims, beside the chains: the list with a
    state waiting) compiled for sm_90 at the stages and register caps batch 35 timed (list_output.LIST_MAXNREG): the
    zero-state list at two and one stages, the list with a state at one, each uncapped, at 168 and at 128; then the
    zero-state list with fixed shares, launched alone, unpaired and in its PAIR form, at one and two stages. The
    launch forms' rows say where their spills are (compile_report.local_ops_by_line): in the tile loop or before it."""
    import compile_report
    from triton.runtime.driver import driver
    driver.set_active(compile_report.CompileOnlyDriver())
    q, v, beta, t_inv, vectors = compile_stand_ins()
    snapshots = torch.empty(1, 4, DIM, DIM, dtype=torch.bfloat16)
    ints = torch.empty(1, HV, 2, dtype=torch.int32)
    flags = torch.empty(3, dtype=torch.int32)
    descriptors = list_descriptors(q, v, t_inv, snapshots, torch.bfloat16, gl.bfloat16)
    reports = []
    for has_state, stages in ((False, 2), (False, 1), (True, 1)):
        for cap in (None, 168, 128):
            compiled = compile_list_kernel(descriptors, beta, vectors, ints, flags, q.shape[1], stages, has_state,
                                           True, 1, True, True, False, **({} if cap is None else {"maxnreg": cap}))
            reports.append(compile_report.kernel_report(
                f"list_output_kernel state {has_state} stages {stages} cap {cap}"
                + (" ahead" if list_output.claims_ahead(True, stages, has_state, cut=True) else ""), {"num_warps": 4},
                compiled))
            reports[-1].update(compile_report.local_ops_by_line(compiled.asm["cubin"]))
    for stages in (1, 2):           # measure_pairs' forms: fixed shares, alone, unpaired and PAIR
        for pair in (False, True):
            compiled = compile_list_kernel(descriptors, beta, vectors, ints, flags, q.shape[1], stages, False, True,
                                           1, False, False, False, PAIR=pair)
            reports.append(compile_report.kernel_report(
                f"list_output_kernel fixed shares{' PAIR' if pair else ''} stages {stages}", {"num_warps": 4},
                compiled))
    for report in reports:
        print(json.dumps(report))
    return reports


def expected_chunk(q, k, v, beta, t_inv, vectors, scale, c, hv):
    """One chunk's own output in torch (float32, P and M rounded to bf16 as the kernels round them)."""
    sl = slice(c * CHUNK, (c + 1) * CHUNK)
    gamma, k_scale = vectors[0, hv, c, 0], vectors[0, hv, c, 1]
    qc, kc = q[0, sl, hv // (HV // H)].float(), k[0, sl, hv // (HV // H)].float()
    q_scale = torch.rsqrt((qc * qc).sum(-1) + 1e-6)
    decay = torch.exp(torch.clamp(gamma[:, None] - gamma[None, :], max=0.0)).tril()
    p = (qc @ kc.T * q_scale[:, None] * k_scale[None, :] * decay).bfloat16().float()
    m = (p @ t_inv[0, hv, c].float() * beta[0, sl, hv].float()[None, :]).bfloat16().float()
    return m @ v[0, sl, hv].float() * scale


def interpret_check(tokens=256, seed=0):
    """The Triton twins against torch on the CPU (run with TRITON_INTERPRET=1): random tiles, stored Tinv and
    vectors of the right form (gamma a decreasing cumulative sum, k's inverse norms)."""
    generator = torch.Generator().manual_seed(seed)
    n_chunks = tokens // CHUNK
    q = torch.randn(1, tokens, H, DIM, generator=generator).bfloat16()
    k = torch.randn(1, tokens, H, DIM, generator=generator).bfloat16()
    v = torch.randn(1, tokens, HV, DIM, generator=generator).bfloat16()
    beta = torch.rand(1, tokens, HV, generator=generator).bfloat16()
    t_inv = (torch.eye(CHUNK) + 0.1 * torch.randn(1, HV, n_chunks, CHUNK, CHUNK, generator=generator).tril(-1))
    t_inv = t_inv.bfloat16().contiguous()
    gamma = -torch.rand(1, HV, n_chunks, CHUNK, generator=generator).cumsum(-1) * 0.1
    k_scale = torch.rand(1, HV, n_chunks, CHUNK, generator=generator) + 0.05
    vectors = torch.stack((gamma, k_scale), dim=3).contiguous()
    scale = DIM ** -0.5
    rows = []
    for loads, stages, per_sm in TWIN_VARIANTS:
        o = torch.zeros_like(v)
        own_output_twin(q, k, v, beta, t_inv, vectors, o, scale, stages=stages, per_sm=per_sm, sms=3,
                        descriptors=loads == "descriptors")
        worst = max(relative_error(o[0, c * CHUNK:(c + 1) * CHUNK, hv].float(),
                                   expected_chunk(q, k, v, beta, t_inv, vectors, scale, c, hv))
                    for c in range(n_chunks) for hv in range(HV))
        rows.append({"loads": loads, "stages": stages, "per_sm": per_sm, "worst_rel_vs_torch": worst})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def measure(tokens_list):
    from sparsegdn.triton import chunk_loads
    from sparsegdn.triton.chunk_output import own_outputs
    from sparsegdn.triton.intra_chunk import intra_chunk

    rows = []
    for tokens in tokens_list:
        q, k, v, g, beta = kernel_bench.make_inputs(tokens)
        n_chunks = tokens // CHUNK
        flags = torch.zeros(chunk_loads.NUM_FLAGS, dtype=torch.int32, device="cuda")
        t_inv, _, _, _, vectors = intra_chunk(k, v, g, beta, flags, band=1, normalize=True, num_value_heads=HV,
                                              num_chunks=n_chunks, store_inverse=True, store_vectors=True)
        schedule = type("Schedule", (), {})()          # every chunk starts from snapshot 0: all outputs are own ones
        schedule.events = torch.zeros(1, HV, n_chunks, dtype=torch.bool, device="cuda")
        schedule.snapshot_of_chunk = torch.zeros(1, HV, n_chunks, dtype=torch.int64, device="cuda")
        scale = DIM ** -0.5
        o_triton = torch.empty_like(v)
        o_gluon = torch.empty_like(v)

        def run_triton():
            own_outputs(q, k, v, g, beta, t_inv, schedule, flags, o_triton, scale=scale, normalize=True, band=1,
                        vectors=vectors)

        def run_gluon():
            own_output_gluon(q, k, v, beta, t_inv, vectors, o_gluon, scale)

        run_triton()
        run_gluon()
        torch.cuda.synchronize()
        difference = relative_error(o_gluon, o_triton)
        # a torch check of a few chunks and head pairs, from the same stored Tinv and vectors
        worst = 0.0
        for c, hv in ((0, 0), (n_chunks // 2, 7), (n_chunks - 1, HV - 1)):
            sl = slice(c * CHUNK, (c + 1) * CHUNK)
            expected = expected_chunk(q, k, v, beta, t_inv, vectors, scale, c, hv)
            worst = max(worst, relative_error(o_gluon[0, sl, hv].float(), expected))
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count
        tma_runs = {}
        for stages, per_sm in TMA_VARIANTS:
            o_tma = torch.empty_like(v)
            descriptors = tma_descriptors(q, k, v, t_inv, o_tma)
            run = (lambda s=stages, p=per_sm, d=descriptors, out=o_tma:
                   own_output_tma(q, k, v, beta, t_inv, vectors, out, scale, stages=s, per_sm=p, sms=sms,
                                  descriptors=d))
            run()
            torch.cuda.synchronize()
            tma_runs[f"tma_stages{stages}_per_sm{per_sm}"] = (run, relative_error(o_tma, o_triton))
        for loads, stages, per_sm in TWIN_VARIANTS:
            o_twin = torch.empty_like(v)
            run = (lambda s=stages, p=per_sm, d=loads == "descriptors", out=o_twin:
                   own_output_twin(q, k, v, beta, t_inv, vectors, out, scale, stages=s, per_sm=p, sms=sms,
                                   descriptors=d))
            run()
            torch.cuda.synchronize()
            tma_runs[f"twin_{loads}_stages{stages}_per_sm{per_sm}"] = (run, relative_error(o_twin, o_triton))
        timings = {"triton_own_ms": [], "gluon_own_ms": [], **{name + "_ms": [] for name in tma_runs}}
        for _ in range(2):                                  # two rounds, interleaved
            timings["triton_own_ms"].append(triton.testing.do_bench(run_triton))
            timings["gluon_own_ms"].append(triton.testing.do_bench(run_gluon))
            for name, (run, _) in tma_runs.items():
                timings[name + "_ms"].append(triton.testing.do_bench(run))
        row = {"T": tokens, "programs": n_chunks * HV, "sms": sms, **timings, "gluon_vs_triton_rel": difference,
               "gluon_vs_torch_rel_worst": worst,
               **{name + "_vs_triton_rel": error for name, (_, error) in tma_runs.items()}}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


# (stages, programs an SM, warps) for the zero-state list, then for the list with a state. The state's kernel
# holds more tiles: 255 registers at 4 warps with 26-33 local-memory instructions (compile_report, sm_90).
LIST_VARIANTS = (((2, 2, 4), (2, 1, 4)), ((2, 2, 4), (1, 2, 4)), ((2, 2, 4), (1, 1, 8)), ((2, 2, 4), (2, 1, 8)),
                 ((3, 1, 4), (2, 1, 4)))


GLUON_LIST_VARIANTS = (((2, 2), (1, 2)), ((2, 2), (2, 1)))     # (stages, programs an SM): own list, state list


def schedule_of(q, k, v, g, beta, flags, n_chunks, budget=0.29):
    """Pass 1 (stored Tinv and vectors) and the product's selection at `budget`, band 1, `score`."""
    from sparsegdn.triton.intra_chunk import intra_chunk
    from sparsegdn.triton.schedule import build_schedule, select_events
    from sparsegdn.triton.score_scan import score_scan

    t_inv, log_decay, write, read, vectors = intra_chunk(k, v, g, beta, flags, band=1, normalize=True,
                                                         num_value_heads=HV, num_chunks=n_chunks,
                                                         store_inverse=True, store_vectors=True)
    events, count = select_events(score_scan(log_decay, write, read), budget=budget, selector="score")
    return t_inv, vectors, build_schedule(events, log_decay, max_events=count)


def interpret_output_pass_check(tokens=256, seed=0):
    """The list twin against the product's output pass, both under the interpreter (TRITON_INTERPRET=1), on the
    benchmark's kind of inputs at a short length: the same products and roundings, so nearly equal outputs."""
    from sparsegdn.triton import chunk_loads
    from sparsegdn.triton.chunk_output import chunk_output

    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(1, tokens, H, DIM, generator=generator).bfloat16()
    k = torch.randn(1, tokens, H, DIM, generator=generator).bfloat16()
    v = torch.randn(1, tokens, HV, DIM, generator=generator).bfloat16()
    speed = torch.linspace(-2.0, 6.0, HV)
    g = torch.nn.functional.logsigmoid(torch.randn(1, tokens, HV, generator=generator) + speed)
    beta = torch.rand(1, tokens, HV, generator=generator).mul(0.9).add(0.05).bfloat16()
    n_chunks = tokens // CHUNK
    flags = torch.zeros(chunk_loads.NUM_FLAGS, dtype=torch.int32)
    t_inv, vectors, schedule = schedule_of(q, k, v, g, beta, flags, n_chunks, budget=0.5)
    snapshots = (0.05 * torch.randn(1, schedule.max_events + HV, DIM, DIM, generator=generator)).bfloat16()
    scale = DIM ** -0.5
    expected = chunk_output(q, k, v, g, beta, t_inv, snapshots, schedule, flags, scale=scale, normalize=True,
                            out_dtype=torch.bfloat16, band=1, has_initial=False, vectors=vectors)
    lists = chunk_lists(schedule)
    o = torch.full_like(v, float("nan"))
    output_lists(output_list_descriptors(q, k, v, t_inv, snapshots, o), lists, beta, vectors, schedule, scale,
                 n_chunks, stages=2, per_sm=2, sms=3)
    row = {"tokens": tokens, "zero_state_chunks": lists[0].numel(), "chunks_with_state": lists[1].numel(),
           "rel_vs_product": relative_error(o, expected)}
    print(json.dumps(row), flush=True)
    return row


def measure_output_pass(tokens_list, on_chip_only=False):
    """The product's output pass (chunk_output: every chunk, stored Tinv, vectors and snapshots, autotuned) against
    the persistent descriptor twin over the two chunk lists, on the benchmark's inputs and selection (budget 0.29);
    the snapshots are random (the chain pass is not run: only the outputs' work is timed). on_chip_only: the
    product's pass and the Gluon lists, each reading Tinv and solving it (block rows in the probe's kernel, batched
    in the product's list kernel), nothing else."""
    from sparsegdn.triton import chunk_loads
    from sparsegdn.triton.chunk_output import chunk_output

    rows = []
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for tokens in tokens_list:
        q, k, v, g, beta = kernel_bench.make_inputs(tokens)
        n_chunks = tokens // CHUNK
        flags = torch.zeros(chunk_loads.NUM_FLAGS, dtype=torch.int32, device="cuda")
        t_inv, vectors, schedule = schedule_of(q, k, v, g, beta, flags, n_chunks)
        generator = torch.Generator(device="cuda").manual_seed(1)
        snapshots = (0.05 * torch.randn(1, schedule.max_events + HV, DIM, DIM, device="cuda",
                                        generator=generator)).bfloat16()
        scale = DIM ** -0.5
        lists = chunk_lists(schedule)

        def run_product():
            return chunk_output(q, k, v, g, beta, t_inv, snapshots, schedule, flags, scale=scale, normalize=True,
                                out_dtype=torch.bfloat16, band=1, has_initial=False, vectors=vectors)

        o_product = run_product()
        o_twin = torch.empty_like(v)
        descriptors = output_list_descriptors(q, k, v, t_inv, snapshots, o_twin)
        runs = {}
        for own, state in () if on_chip_only else LIST_VARIANTS:
            def run(own=own, state=state):
                output_lists(descriptors, lists[:1], beta, vectors, schedule, scale, n_chunks, stages=own[0],
                             per_sm=own[1], sms=sms, warps=own[2])
                output_lists(descriptors, (lists[0][:0], lists[1]), beta, vectors, schedule, scale, n_chunks,
                             stages=state[0], per_sm=state[1], sms=sms, warps=state[2])
            o_twin.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            runs["twin_own{}x{}w{}_state{}x{}w{}".format(*own, *state)] = (run, relative_error(o_twin, o_product))
        gluon_descriptors = gluon_list_descriptors(q, k, v, t_inv, snapshots, o_twin)
        for variants in GLUON_LIST_VARIANTS[:1] if on_chip_only else GLUON_LIST_VARIANTS:
            def run(variants=variants):
                gluon_output_lists(gluon_descriptors, lists, beta, vectors, schedule, scale, n_chunks,
                                   variants=variants, sms=sms)
            o_twin.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            runs["gluon_own{}x{}_state{}x{}".format(*variants[0], *variants[1])] = (run, relative_error(o_twin,
                                                                                                        o_product))
        # band 1's Tinv on chip: the product's output pass solving it (t_inv None) against the Gluon lists solving
        # it, block row by block row (the probe's kernel) and batched (the product's list kernel, over the same
        # lists: zero_start splits them as chunk_lists does; its o is its own)
        def run_product_on_chip():
            return chunk_output(q, k, v, g, beta, None, snapshots, schedule, flags, scale=scale, normalize=True,
                                out_dtype=torch.bfloat16, band=1, has_initial=False, vectors=vectors)
        o_on_chip = run_product_on_chip()
        runs["product_on_chip"] = (run_product_on_chip, relative_error(o_on_chip, o_product))
        solving = list_output.ListCall(q, k, v, beta, None, vectors, schedule, flags, scale=scale, normalize=True,
                                       out_dtype=torch.bfloat16, zero_start=True, band=1)

        def run_rows_on_chip():
            gluon_output_lists(gluon_descriptors, lists, beta, vectors, schedule, scale, n_chunks,
                               variants=GLUON_LIST_VARIANTS[0], sms=sms, recompute=True)

        def run_batched_on_chip():
            product_output_lists(solving, snapshots, GLUON_LIST_VARIANTS[0])
        for form, run, o_lists in (("rows", run_rows_on_chip, o_twin), ("batched", run_batched_on_chip, solving.o)):
            o_lists.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            runs[f"gluon_on_chip_{form}_own2x2_state1x2"] = (run, relative_error(o_lists, o_on_chip))
        parts = {}                                     # each list alone, to see which one the pass waits for
        for has_state, variant in [] if on_chip_only else ([(0, LIST_VARIANTS[0][0])] +
                                                           [(1, state) for _, state in LIST_VARIANTS]):
            def part(has_state=has_state, variant=variant):
                chosen = (lists[0], lists[1][:0]) if has_state == 0 else (lists[0][:0], lists[1])
                output_lists(descriptors, chosen, beta, vectors, schedule, scale, n_chunks, stages=variant[0],
                             per_sm=variant[1], sms=sms, warps=variant[2])
            parts[("state" if has_state else "own") + "_list_{}x{}w{}".format(*variant)] = part
        for has_state, variant in [(0, GLUON_LIST_VARIANTS[0][0])] + [(1, v[1]) for v in GLUON_LIST_VARIANTS]:
            def part(has_state=has_state, variant=variant):
                chosen = (lists[0], lists[1][:0]) if has_state == 0 else (lists[0][:0], lists[1])
                gluon_output_lists(gluon_descriptors, chosen, beta, vectors, schedule, scale, n_chunks,
                                   variants=(variant, variant), sms=sms)

            def solved(has_state=has_state, variant=variant):          # the product's list kernel, Tinv solved
                product_output_lists(solving, snapshots, (variant, variant), lists=(has_state,))
            name = ("gluon_state" if has_state else "gluon_own") + "_list_{}x{}".format(*variant)
            parts[name] = part
            parts[name + "_batched_solve"] = solved
        timings = {"product_output_pass_ms": [], **{name + "_ms": [] for name in runs},
                   **{name + "_ms": [] for name in parts}}
        for _ in range(2):
            timings["product_output_pass_ms"].append(triton.testing.do_bench(run_product))
            for name, (run, _) in runs.items():
                timings[name + "_ms"].append(triton.testing.do_bench(run))
            for name, part in parts.items():
                timings[name + "_ms"].append(triton.testing.do_bench(part))
        row = {"T": tokens, "zero_state_chunks": lists[0].numel(), "chunks_with_state": lists[1].numel(),
               "events": schedule.max_events, **timings, "flags": flags.tolist(),
               **{name + "_vs_product_rel": error for name, (_, error) in runs.items()}}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


PAIR_VARIANTS = ((False, 2, 2), (False, 1, 2), (True, 1, 2), (True, 2, 1))    # (PAIR, stages, programs an SM)


def measure_pairs(tokens_list, rounds=3):
    """list_output's zero-state list over every chunk, one value head a position against its PAIR form (both value
    heads of a key head a position: q and k loaded once), on the benchmark's inputs (B = 1, H = 16, HV = 32, bf16,
    band 1 solved on chip, fixed shares): do_bench medians of `rounds` interleaved rounds a variant, and whether o is
    equal bit for bit to the unpaired kernel's. Also how many of the real zero-state list's chunks (budget 0.29's
    selection) have their key head's other value head in it too: what pairing could take of that list."""
    from sparsegdn.triton import chunk_loads

    rows = []
    for tokens in tokens_list:
        q, k, v, g, beta = kernel_bench.make_inputs(tokens)
        n_chunks = tokens // CHUNK
        flags = torch.zeros(chunk_loads.NUM_FLAGS, dtype=torch.int32, device="cuda")
        _, vectors, schedule = schedule_of(q, k, v, g, beta, flags, n_chunks)
        call = list_output.ListCall(q, k, v, beta, None, vectors, schedule, flags, scale=DIM ** -0.5, normalize=True,
                                    out_dtype=torch.bfloat16, zero_start=True, band=1, claim=False)
        zero = schedule.snapshot_of_chunk == schedule.snapshot_of_chunk[..., :1]
        both = zero[:, 0::2] & zero[:, 1::2]
        runs, outputs = {}, {}
        for pair, stages, per_sm in PAIR_VARIANTS:
            lists = list_output.every_chunk_list(schedule, pair)

            def run(lists=lists, pair=pair, launch=(stages, per_sm)):
                call.own_over(*lists, launch, pair=pair)
            name = f"{'pair' if pair else 'single'}_{stages}x{per_sm}"
            call.o.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            outputs[name] = call.o.clone()
            runs[name] = run
        reference = outputs["single_2x2"]
        times = {name: [] for name in runs}
        for _ in range(rounds):
            for name, run in runs.items():
                times[name].append(triton.testing.do_bench(run))
        row = {"T": tokens, "chunks": int(zero.numel()), "zero_state_chunks": int(zero.sum()),
               "zero_state_chunks_paired": int(2 * both.sum()), "flags": flags.tolist(),
               **{name + "_ms": values for name, values in times.items()},
               **{name + "_equal": bool(torch.equal(o, reference)) for name, o in outputs.items()},
               **{name + "_finite": bool(torch.isfinite(o).all()) for name, o in outputs.items()}}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[32768, 131072])
    parser.add_argument("--compile", action="store_true", help="compile the Gluon kernel for sm_90 only (no GPU)")
    parser.add_argument("--list-caps", action="store_true",
                        help="compile list_output's kernel for sm_90 at batch 35's stages and register caps (no GPU)")
    parser.add_argument("--output-pass", action="store_true",
                        help="the whole output pass: the product's against the persistent twin over chunk lists")
    parser.add_argument("--on-chip-only", action="store_true",
                        help="with --output-pass: only the product's pass and the Gluon lists reading or solving Tinv")
    parser.add_argument("--interpret-check", action="store_true",
                        help="the Triton twins against torch on the CPU (with TRITON_INTERPRET=1)")
    parser.add_argument("--pairs", action="store_true",
                        help="the zero-state list over every chunk, one value head a position against two (PAIR)")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    if args.pairs:
        result = measure_pairs(args.tokens)
    elif args.interpret_check:
        result = [*interpret_check(), interpret_output_pass_check()]
    elif args.list_caps:
        result = list_caps_compile()
    elif args.output_pass:
        result = measure_output_pass(args.tokens, args.on_chip_only)
    else:
        result = compile_only() if args.compile else measure(args.tokens)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
