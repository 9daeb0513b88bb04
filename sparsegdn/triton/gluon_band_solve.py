"""Bands 0 and 1 of the intra-chunk inverse Tinv in Gluon (Hopper), for the kernels written in Triton's Gluon dialect
(list_output.py; benchmarks/gluon_probe.py): band_solve's block-adjacent solver with its batching and roundings.

From A = strict_lower(beta_i k_i . k_j exp(gamma_i - gamma_j)) (float32 [64, 64], one tensor-core product), with
N the four 16 x 16 diagonal blocks of A and A_b,b-1 the blocks below them:

    D_b            = (I + N_b)^-1 = (I - N)(I + N^2)(I + N^4)(I + N^8)       four blocks at once
    Tinv_b,b-1     = -D_b (A_b,b-1 D_b-1)                                    band 1

as band_solve.block_inverse and _adjacent_inverse do: the same tf32 products in the same order, so the same Tinv.
Each product is one [4, 16, 16] batch of mma_v2 (tf32 operands, float32 sums) with one warp a block; the blocks
move between warps through a float32 [64, 64] scratch in shared memory seen as sixteen [16, 16] slots, and Tinv
is written in the element type into a [64, 64] buffer for the kernel's wgmma (band_zero_blocks writes its other
blocks once).

Measured on the H200 (2026-12-04, benchmarks/gluon_probe.py --output-pass --on-chip-only, benchmark inputs, the
selection at budget 0.29; analysis/results/overlap/batch23): the Gluon output lists solving band 1 this way took
1.87 ms at 128K (0.495 at 32K) against 1.27 reading a stored Tinv, 2.99 solving block row by block row (one
16 x 16 product at a time on all four warps) and the Triton output pass's own on-chip solve 2.45; outputs equal
within the same 1.4e-5 as reading Tinv. compile_report (sm_90): the probe's zero-state list kernel 2,208
instructions a warp against 1,432 reading Tinv and 3,496 block row by block row, 32 HMMA, no local memory; the
product's list_output_kernel (with its masks and flag) 2,440 against 1,680, and its list with a state 3,160 with
36 local-memory instructions at 255 registers.
"""
import os

try:                        # Triton 3.6's Gluon; list_output.eligible reports its absence
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import mma_v2
    GLUON_PROBLEM = None
except ImportError as error:                # pragma: no cover - depends on the installed Triton
    GLUON_PROBLEM = f"Gluon unavailable ({error})"


def _swizzle_setting(setting: str) -> bool:
    """SPARSEGDN_SOLVE_SWIZZLE: "1" (the default) or "0"; anything else is refused at import (of sparsegdn too)."""
    if setting not in ("0", "1"):
        raise ValueError(f"SPARSEGDN_SOLVE_SWIZZLE={setting!r}: 1 (the scratch's views swizzled) or 0 (plain)")
    return setting == "1"


# The scratch's views in shared memory. Plain, its accesses conflict on the banks: a warp's 8 rows x 32 B of the
# [64, 64] view (A's store, the blocks' loads) fall on the same eight banks (8-way), rows of the [16, 16] slots 4-way.
# ncu on the H200 (batch 37, 128K): 34% of the zero-state list's shared-load wavefronts and 47% of its stores were
# conflicts. Swizzled, a row's 16-byte groups are XORed with (row mod 8) in the square and with (row / 2 mod 4) in the
# slots' views (the flat one and four_slots' must agree: the same vec, per_phase and max_phase, and a period that
# divides a slot's 16 rows). Then those accesses need no more wavefronts than their bytes do, by the layouts'
# arithmetic (the slots' tf32 B operand stays 2-way). Measured on an H100 (batch 37, swizzle.sh, 128K): the
# zero-state list's conflicts -51% on loads (17.4 M -> 8.5 M) and -45% on stores (24.3 M -> 13.4 M); the public call
# 0.4-0.6% faster at 32K and 0.4-0.8% at 128K in every round. Compiled, it tips list_output's list with a state into
# spilling (37 local-memory instructions against 2; kernel_bench.notes.md, batch 37: the next batch's change).
# SPARSEGDN_SOLVE_SWIZZLE=0 (read at import) keeps them plain, to measure one against the other; the arithmetic is
# the same either way (the GPU case: Tinv equal to band_solve's bit for bit).
SOLVE_SWIZZLE = _swizzle_setting(os.environ.get("SPARSEGDN_SOLVE_SWIZZLE", "1"))

if GLUON_PROBLEM is None:
    if SOLVE_SWIZZLE:
        SQUARE = gl.constexpr(gl.SwizzledSharedLayout(4, 1, 8, order=[1, 0]))          # [64, 64]: A
        FLAT = gl.constexpr(gl.SwizzledSharedLayout(4, 2, 4, order=[1, 0]))            # [256, 16]: the slots
        SLOTS = gl.constexpr(gl.SwizzledSharedLayout(4, 2, 4, order=[2, 1, 0]))        # [4, 16, 16]: four slots
    else:
        SQUARE = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
        FLAT = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
        SLOTS = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, order=[2, 1, 0]))

    @gluon.jit
    def tf32_batch(x, y, mma3: gl.constexpr):
        """x @ y for float32 [4, 16, 16] batches in the mma_v2 layout mma3 (tf32 operands, float32 sums: band_solve's
        fdot at its default precision)."""
        a = gl.convert_layout(x, gl.DotOperandLayout(operand_index=0, parent=mma3, k_width=1))
        b = gl.convert_layout(y, gl.DotOperandLayout(operand_index=1, parent=mma3, k_width=1))
        return mma_v2(a, b, gl.zeros([4, 16, 16], gl.float32, layout=mma3), input_precision="tf32")

    @gluon.jit
    def four_slots(scratch, first):
        """Slots first to first + 3 of a float32 [64, 64] scratch seen as sixteen [16, 16] slots, as a [4, 16, 16]
        view (through a row of a flat view: a slice's offset must be a multiple of its length). The flat view's
        layout is of rank 1 (one less than its shape's, as a stage index allows: index() then gives a [256] row)."""
        lines = scratch._reinterpret(gl.float32, [16, 256], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
        return lines.index(first)._reinterpret(gl.float32, [4, 16, 16], SLOTS)

    @gluon.jit
    def band_zero_blocks(t_smem, BAND: gl.constexpr, num_warps: gl.constexpr):
        """Zeros in the blocks of a [64, 64] Tinv buffer outside band BAND (0 or 1): band_inverse_batched writes
        only the others."""
        copy: gl.constexpr = gl.BlockedLayout([1, 2], [8, 4], [2, num_warps // 2], [1, 0])
        zero = gl.zeros([16, 16], t_smem.dtype, layout=copy)
        for row in gl.static_range(4):
            for col in gl.static_range(4):
                if col > row or col < row - BAND:
                    t_smem.slice(16 * row, 16, 0).slice(16 * col, 16, 1).store(zero)
        gl.thread_barrier()

    @gluon.jit
    def band_inverse_batched(a, scratch, t_smem, BAND: gl.constexpr, num_warps: gl.constexpr):
        """Tinv's bands 0 to BAND (0 or 1) of A (float32 [64, 64] in any layout, strictly lower) into t_smem
        ([64, 64] in t_smem's element type; its other blocks left as they are, band_zero_blocks). `scratch` (float32
        [64, 64] shared memory, overwritten) holds A, then the blocks as slots: 0 zero, 1-3 the blocks below the
        diagonal ones, 4-7 the diagonal ones; D goes to slots 1-4 (so that slots 0-3 are D one block on) and to
        8-11, the band-1 blocks to 12-15, from where they are copied into t_smem. Four warps, one a block."""
        gl.static_assert(num_warps == 4, "one warp a 16 x 16 block")
        mma3: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[num_warps, 1, 1],
                                                       instr_shape=[1, 16, 8])
        copy: gl.constexpr = gl.BlockedLayout([1, 2], [8, 4], [2, num_warps // 2], [1, 0])
        flat = scratch._reinterpret(gl.float32, [256, 16], FLAT)          # slot s: rows 16 s to 16 s + 15
        square = scratch._reinterpret(gl.float32, [64, 64], SQUARE)
        gl.thread_barrier()                                     # earlier readers of scratch are done
        square.store(a)
        gl.thread_barrier()
        diag0 = square.slice(0, 16, 0).slice(0, 16, 1).load(copy)
        diag1 = square.slice(16, 16, 0).slice(16, 16, 1).load(copy)
        diag2 = square.slice(32, 16, 0).slice(32, 16, 1).load(copy)
        diag3 = square.slice(48, 16, 0).slice(48, 16, 1).load(copy)
        if BAND == 1:
            below1 = square.slice(16, 16, 0).slice(0, 16, 1).load(copy)
            below2 = square.slice(32, 16, 0).slice(16, 16, 1).load(copy)
            below3 = square.slice(48, 16, 0).slice(32, 16, 1).load(copy)
        gl.thread_barrier()                                     # A is read: its memory holds the slots
        if BAND == 1:
            flat.slice(0, 16, 0).store(gl.zeros([16, 16], gl.float32, layout=copy))
            flat.slice(16, 16, 0).store(below1)
            flat.slice(32, 16, 0).store(below2)
            flat.slice(48, 16, 0).store(below3)
        flat.slice(64, 16, 0).store(diag0)
        flat.slice(80, 16, 0).store(diag1)
        flat.slice(96, 16, 0).store(diag2)
        flat.slice(112, 16, 0).store(diag3)
        gl.thread_barrier()
        n = four_slots(scratch, 4).load(mma3)
        ii = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(2, mma3)))
        jj = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(1, mma3)))
        eye = gl.where(ii[None, :, None] == jj[None, None, :], 1.0, 0.0)
        n2 = tf32_batch(n, n, mma3)
        n4 = tf32_batch(n2, n2, mma3)                           # independent of the next line
        d = tf32_batch(eye - n, eye + n2, mma3)
        n8 = tf32_batch(n4, n4, mma3)                           # independent of the next line
        d = tf32_batch(d, eye + n4, mma3)
        d = tf32_batch(d, eye + n8, mma3)
        if BAND == 1:
            below = four_slots(scratch, 0).load(gl.DotOperandLayout(operand_index=0, parent=mma3, k_width=1))
            gl.thread_barrier()                                 # slots 0-7 are read
            four_slots(scratch, 1).store(d)
            four_slots(scratch, 8).store(d)
            gl.thread_barrier()
            d_prev = four_slots(scratch, 0).load(gl.DotOperandLayout(operand_index=1, parent=mma3, k_width=1))
            product = mma_v2(below, d_prev, gl.zeros([4, 16, 16], gl.float32, layout=mma3), input_precision="tf32")
            four_slots(scratch, 12).store(-tf32_batch(d, product, mma3))        # band_solve's -fdot (its -0 too)
        else:
            four_slots(scratch, 8).store(d)
        gl.thread_barrier()
        for blk in gl.static_range(4):
            row = t_smem.slice(16 * blk, 16, 0)
            row.slice(16 * blk, 16, 1).store(flat.slice(16 * (8 + blk), 16, 0).load(copy).to(t_smem.dtype))
            if BAND == 1 and blk > 0:
                row.slice(16 * (blk - 1), 16, 1).store(flat.slice(16 * (12 + blk), 16, 0).load(copy)
                                                       .to(t_smem.dtype))
