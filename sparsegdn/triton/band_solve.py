"""The band-projected intra-chunk inverse Tinv, computed in registers (no kernel here: the passes that
need Tinv call these functions, or read it from the intra-chunk pass).

For one chunk, with gamma the cumulative g inside the chunk:

    A         = strict_lower( beta_i k_i . k_j exp(gamma_i - gamma_j) )       one 64 x 64 product
    A_aa      = the four 16 x 16 diagonal blocks of A,  A_a,a-1 the blocks below them
    D_a       = (I + A_aa)^-1 = (I - N)(I + N^2)(I + N^4)(I + N^8),  N = A_aa,  N^16 = 0

Bands 0 and 1 (the block-adjacent solver): Tinv_aa = D_a, Tinv_a,a-1 = -D_a A_a,a-1 D_a-1 (band 1),
every other block zero. K K^T is one tensor-core product whose blocks are picked out in registers;
the inverses are batched [4, 16, 16] products written so that independent products sit side by side
(the chain is four products deep, not six); D_a-1 is D shifted by one block, not a second solve; the
far blocks of Tinv are never formed.

Bands 2 and 3, on whole 64 x 64 tiles: with D = blockdiag(D_a) and M = D A_off (A_off the blocks
below the diagonal ones; M^4 = 0), Tinv = (I - M)(I + M^2) D, projected on the band.
"""
import os

import triton
import triton.language as tl

from .chunk_loads import BLOCK, BLOCKS, CHUNK, fdot, mma

# The decays of a chunk's products as row and column factors instead of the 64 x 64 grid: exp(gamma_i - gamma_j) =
# exp(gamma_i - m) exp(m - gamma_j), m = gamma[31], where every |gamma - m| < DECAY_SPREAD and |m| < DECAY_LEVEL
# (decayed_products; the grid elsewhere). Each factor then lies within e^80 of 1 (finite, normal), and on and below
# the diagonal their product is the decay, at most 1 up to the scan's rounding, which at |gamma| < ~1,100 stays
# ~1e-4 of a log unit (the grid caps the rounding-made positive exponents at 0: with g near -1e8 a token they reach
# thousands, so such chunks keep the grid). Above the diagonal the product may overflow to inf: the select that
# masks it drops it. Saves the grid's 32 exponentials a thread and its masks. Read at compile time;
# SPARSEGDN_DECAY_SCALES=1 turns it on (off: within 1% on the H200, kernel_bench.notes.md batch 17; through the GPU
# matrix in batch 18, where the two launches' output kernel kept the grid, chunk_output.output_chunks says why).
DECAY_SCALES = tl.constexpr(os.environ.get("SPARSEGDN_DECAY_SCALES", "0") == "1")
DECAY_SPREAD = tl.constexpr(80.0)
DECAY_LEVEL = tl.constexpr(1024.0)


@triton.jit
def causal_decay(gamma):
    """float32 [64, 64]: exp(gamma_i - gamma_j) on and below the diagonal, 0 above it. One grid serves both of
    the output role's masked products (K K^T strictly below the diagonal, Q K^T on and below it).
    gamma_i - gamma_j <= 0 there; the exponent is capped at 0 because the scan's float32 rounding can make it
    positive, by thousands where |gamma| is ~1e10 (g in range, but huge): exp would be inf (see log_decay_between)."""
    rows = tl.arange(0, CHUNK)
    causal = rows[:, None] >= rows[None, :]
    return tl.where(causal, tl.exp(log_decay_between(gamma[:, None], gamma[None, :], causal)), 0.0)


@triton.jit
def last_of(gamma):
    """The chunk's last cumulative log-decay, gamma[63], the value the differences above are taken from (as the
    torch backend's gamma[..., -1]); not tl.sum(g), whose tree order rounds differently from the scan's, by
    thousands where |gamma| is ~1e30, so that the last token's own weight exp(gamma_L - gamma_63) came out 0."""
    return tl.sum(tl.where(tl.arange(0, CHUNK) == CHUNK - 1, gamma, 0.0), axis=0)


@triton.jit
def log_decay_between(later, earlier, mask=True):
    """later - earlier for cumulative log-decays with `later` at or after `earlier` (0 where mask is false),
    capped at 0: the true value is never positive, and exp of a rounding-made positive one can overflow. A NaN
    (a cumulative sum past float32's range) stays NaN, on the GPU as under the interpreter, so that the overflow
    reaches the output and is reported (validation.ResultOverflowError)."""
    return tl.minimum(tl.where(mask, later - earlier, 0.0), 0.0, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def decayed_kkt(k, k_scale, beta, decay):
    """strict_lower(beta_i k_i . k_j exp(gamma_i - gamma_j)), float32 [64, 64], from a raw k tile and the
    chunk's causal_decay grid."""
    rows = tl.arange(0, CHUNK)
    below = rows[:, None] > rows[None, :]
    scale = (beta * k_scale)[:, None] * k_scale[None, :]
    return tl.where(below, mma(k, tl.trans(k)) * scale * decay, 0.0)


@triton.jit
def block_inverse(n, PRECISION: tl.constexpr):
    """(I + N)^-1 of each strictly lower [16, 16] block of a [4, 16, 16] batch, by doubling."""
    idx = tl.arange(0, BLOCK)
    eye = tl.where(idx[:, None] == idx[None, :], 1.0, 0.0)[None, :, :]
    n2 = fdot(n, n, PRECISION)
    n4 = fdot(n2, n2, PRECISION)                          # independent of the next line
    d = fdot(eye - n, eye + n2, PRECISION)
    n8 = fdot(n4, n4, PRECISION)                          # independent of the next line
    d = fdot(d, eye + n4, PRECISION)
    return fdot(d, eye + n8, PRECISION)


@triton.jit
def _adjacent_inverse(a, BAND: tl.constexpr, PRECISION: tl.constexpr):
    """Bands 0 and 1 from the blocks of A."""
    a = tl.reshape(a, (BLOCKS, BLOCK, BLOCKS, BLOCK))          # [block row, row, block column, column]
    block_row = tl.arange(0, BLOCKS)[:, None, None, None]
    block_col = tl.arange(0, BLOCKS)[None, None, :, None]
    d = block_inverse(tl.sum(tl.where(block_col == block_row, a, 0.0), axis=2), PRECISION)     # [4, 16, 16]
    if BAND == 1:
        adjacent = tl.sum(tl.where(block_col == block_row - 1, a, 0.0), axis=2)               # 0 for a = 0
        blocks = tl.arange(0, BLOCKS)
        shift = (blocks[None, :] == blocks[:, None] - 1)[:, :, None, None]                   # [a, a'], a' = a - 1
        d_prev = tl.sum(tl.where(shift, d[None, :, :, :], 0.0), axis=1)
        off = -fdot(d, fdot(adjacent, d_prev, PRECISION), PRECISION)
        t_inv = tl.where(block_col == block_row, d[:, :, None, :],
                         tl.where(block_col == block_row - 1, off[:, :, None, :], 0.0))
    else:
        t_inv = tl.where(block_col == block_row, d[:, :, None, :], 0.0)
    return tl.reshape(t_inv, (CHUNK, CHUNK))


@triton.jit
def _whole_tile_inverse(a, BAND: tl.constexpr, PRECISION: tl.constexpr):
    """Bands 2 and 3 on 64 x 64 tiles."""
    rows = tl.arange(0, CHUNK)
    distance = rows[:, None] // BLOCK - rows[None, :] // BLOCK          # block row - block column
    eye = tl.where(rows[:, None] == rows[None, :], 1.0, 0.0)
    n = tl.where(distance == 0, a, 0.0)
    n2 = fdot(n, n, PRECISION)
    n4 = fdot(n2, n2, PRECISION)
    d = fdot(eye - n, eye + n2, PRECISION)
    n8 = fdot(n4, n4, PRECISION)
    d = fdot(fdot(d, eye + n4, PRECISION), eye + n8, PRECISION)
    m = fdot(d, tl.where(distance > 0, a, 0.0), PRECISION)
    t_inv = fdot(fdot(eye - m, eye + fdot(m, m, PRECISION), PRECISION), d, PRECISION)
    return tl.where(distance <= BAND, t_inv, 0.0)


@triton.jit
def band_inverse(k, k_scale, beta, gamma, BAND: tl.constexpr, PRECISION: tl.constexpr):
    """float32 [64, 64] band-projected Tinv of one chunk, from its raw k tile [64, BK], the inverse norms
    of k, beta and gamma [64]."""
    return band_inverse_decayed(k, k_scale, beta, causal_decay(gamma), BAND, PRECISION)


@triton.jit
def band_inverse_decayed(k, k_scale, beta, decay, BAND: tl.constexpr, PRECISION: tl.constexpr):
    """band_inverse from the chunk's causal_decay grid (a caller that needs the grid anyway forms it once)."""
    return band_inverse_of(decayed_kkt(k, k_scale, beta, decay), BAND, PRECISION)


@triton.jit
def band_inverse_of(a, BAND: tl.constexpr, PRECISION: tl.constexpr):
    """The band-projected Tinv from A (strict_lower(beta_i k_i . k_j exp(gamma_i - gamma_j)), float32 [64, 64])."""
    if BAND <= 1:
        return _adjacent_inverse(a, BAND, PRECISION)
    return _whole_tile_inverse(a, BAND, PRECISION)


@triton.jit
def decayed_products(q, k, q_scale, k_scale, beta, gamma, SOLVE: tl.constexpr, BAND: tl.constexpr,
                     PRECISION: tl.constexpr):
    """(P, Tinv): P = the decayed causal Q K^T (float32 [64, 64], q and k raw tiles scaled by their inverse norms),
    and with SOLVE the band-projected Tinv (float32; P again without SOLVE). The decays come as row and column
    factors of the two products where the chunk's cumulative log decay spreads less than DECAY_SPREAD around its
    middle and its middle lies within DECAY_LEVEL of 0 (one uniform branch a chunk), else from causal_decay's grid,
    as without DECAY_SCALES."""
    rows = tl.arange(0, CHUNK)
    mid = tl.sum(tl.where(rows == CHUNK // 2 - 1, gamma, 0.0), axis=0)
    shifted = gamma - mid
    fits = (tl.max(tl.abs(shifted), axis=0) < DECAY_SPREAD) & (tl.abs(mid) < DECAY_LEVEL)    # NaN: the grid
    t_inv = 0.0
    if SOLVE:               # the solve first, then Q K^T: one 64 x 64 product live at a time
        kk = mma(k, tl.trans(k))
        if fits:
            a = tl.where(rows[:, None] > rows[None, :],
                         kk * ((beta * k_scale * tl.exp(shifted))[:, None] * (k_scale * tl.exp(-shifted))[None, :]),
                         0.0)
        else:
            a = tl.where(rows[:, None] > rows[None, :],
                         kk * ((beta * k_scale)[:, None] * k_scale[None, :]) * causal_decay(gamma), 0.0)
        t_inv = band_inverse_of(a, BAND, PRECISION)
    qk = mma(q, tl.trans(k))
    if fits:
        p = tl.where(rows[:, None] >= rows[None, :],
                     qk * ((q_scale * tl.exp(shifted))[:, None] * (k_scale * tl.exp(-shifted))[None, :]), 0.0)
    else:
        p = tl.where(rows[:, None] >= rows[None, :], qk * (q_scale[:, None] * k_scale[None, :]) * causal_decay(gamma),
                     0.0)
    if SOLVE:
        return p, t_inv
    return p, p
