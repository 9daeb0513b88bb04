"""Pass 1 for bands 0 and 1: the block-adjacent intra-chunk solver, and the score statistics.

Grid: one program per (batch row, chunk, head pair), head pairs fastest (the value heads of one key
head read its tile from L2 side by side). For chunk c of head pair h, with gamma the cumulative g
inside the chunk:

    A         = strict_lower( beta_i k_i . k_j exp(gamma_i - gamma_j) )       one 64 x 64 product
    A_aa      = the four 16 x 16 diagonal blocks of A,  A_a,a-1 the three blocks below them
    D_a       = (I + A_aa)^-1 = (I - N)(I + N^2)(I + N^4)(I + N^8),  N = A_aa,  N^16 = 0
    Tinv_aa   = D_a,   Tinv_a,a-1 = -D_a A_a,a-1 D_a-1  (band 1),   every other block zero
    stats     = gamma_L, write_c = sum beta exp(gamma_L - gamma) ||k|| ||v||, read_c = sum exp(gamma)

K K^T is one 64 x 64 tensor-core product; its blocks are picked out in registers, so k is read once.
The inverses are products of [4, 16, 16] batches written so that independent products sit side by
side (N^4 beside (I - N)(I + N^2), N^8 beside the next factor): the chain is four products deep, not
six. D_a-1 is D shifted by one block, not a second solve. The far blocks of Tinv are never formed.

The kernel also checks what it reads anyway: a g or beta that is not finite, or g > 0, raises a flag
(chunk_loads.FLAG_GATES) instead of a separate pass over the inputs.
"""
import triton
import triton.language as tl

from .chunk_loads import (AUTOTUNE, BLOCK, BLOCKS, CHUNK, FLAG_GATES, fdot, inverse_norm, load_gates, load_rows,
                          load_tile, mma, not_finite, padded, raise_flag, round_to, solve_outputs)

CONFIGS = [triton.Config({}, num_warps=w, num_stages=1) for w in (4, 8)]


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
def gate_stats(g, beta, magnitude, log_decay_ptr, write_ptr, read_ptr, flags_ptr, stat):
    """gamma (cumulative g) of one chunk; stores the score statistics; flags bad gates."""
    gamma = tl.cumsum(g, axis=0)
    gamma_last = tl.sum(g, axis=0)
    tl.store(log_decay_ptr + stat, gamma_last)
    tl.store(write_ptr + stat, tl.sum(beta * tl.exp(gamma_last - gamma) * magnitude, axis=0))
    tl.store(read_ptr + stat, tl.sum(tl.exp(gamma), axis=0))   # counts padded tokens too, as the reference
    bad = not_finite(g) | not_finite(beta) | (g > 0)
    raise_flag(flags_ptr, FLAG_GATES, tl.max(bad.to(tl.int32), axis=0))
    return gamma


@triton.jit
def decayed_kkt(k, k_scale, beta, gamma):
    """strict_lower(beta_i k_i . k_j exp(gamma_i - gamma_j)), float32 [64, 64], from raw k tiles."""
    rows = tl.arange(0, CHUNK)
    below = rows[:, None] > rows[None, :]
    log_decay = tl.where(below, gamma[:, None] - gamma[None, :], 0.0)     # masked before exp: no overflow
    scale = (beta * k_scale)[:, None] * k_scale[None, :]
    return tl.where(below, mma(k, tl.trans(k)) * scale * tl.exp(log_decay), 0.0)


@triton.autotune(configs=CONFIGS if AUTOTUNE else CONFIGS[:1], key=["K", "V", "BAND", "PRECISION"])
@triton.jit
def block_solve_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, log_decay_ptr, write_ptr, read_ptr, flags_ptr,
                       T, NC, k_sb, k_st, k_sh, v_sb, v_st, v_sh, g_sb, g_st, g_sh, beta_sb, beta_st, beta_sh,
                       H: tl.constexpr, HV: tl.constexpr, K, V, BK: tl.constexpr, BV: tl.constexpr,
                       BAND: tl.constexpr, NORMALIZE: tl.constexpr, PRECISION: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    hv = pid % HV
    c = (pid // HV) % NC
    b = pid // (HV * NC)
    hk = hv // (HV // H)
    t0 = c * CHUNK

    k = load_tile(k_ptr + b * k_sb + hk * k_sh, t0, T, k_st, K, CHUNK, BK)
    v = load_rows(v_ptr + b * v_sb + hv * v_sh, t0, T, v_st, V, CHUNK, BV)
    g = load_gates(g_ptr + b * g_sb + hv * g_sh, t0, T, g_st, CHUNK)
    beta = load_gates(beta_ptr + b * beta_sb + hv * beta_sh, t0, T, beta_st, CHUNK)
    k_scale = inverse_norm(k, NORMALIZE)
    kf = k.to(tl.float32)
    magnitude = tl.sqrt(tl.sum(kf * kf, axis=1)) * k_scale * tl.sqrt(tl.sum(v * v, axis=1))
    stat = (b * HV + hv) * NC + c
    gamma = gate_stats(g, beta, magnitude, log_decay_ptr, write_ptr, read_ptr, flags_ptr, stat)

    # [64, 64] -> [block row, row, block column, column]
    a = tl.reshape(decayed_kkt(k, k_scale, beta, gamma), (BLOCKS, BLOCK, BLOCKS, BLOCK))
    block_row = tl.arange(0, BLOCKS)[:, None, None, None]
    block_col = tl.arange(0, BLOCKS)[None, None, :, None]
    d = block_inverse(tl.sum(tl.where(block_col == block_row, a, 0.0), axis=2), PRECISION)   # [4, 16, 16]
    if BAND == 1:
        adjacent = tl.sum(tl.where(block_col == block_row - 1, a, 0.0), axis=2)             # A_a,a-1; 0 for a = 0
        blocks = tl.arange(0, BLOCKS)
        shift = (blocks[None, :] == blocks[:, None] - 1)[:, :, None, None]                 # [a, a'] a' = a - 1
        d_prev = tl.sum(tl.where(shift, d[None, :, :, :], 0.0), axis=1)
        off = -fdot(d, fdot(adjacent, d_prev, PRECISION), PRECISION)
        t_inv = tl.where(block_col == block_row, d[:, :, None, :],
                         tl.where(block_col == block_row - 1, off[:, :, None, :], 0.0))
    else:
        t_inv = tl.where(block_col == block_row, d[:, :, None, :], 0.0)
    rows = tl.arange(0, CHUNK)
    offsets = stat * CHUNK * CHUNK + rows[:, None] * CHUNK + rows[None, :]
    tl.store(t_inv_ptr + offsets, round_to(tl.reshape(t_inv, (CHUNK, CHUNK)), t_inv_ptr.dtype.element_ty))


def block_solve(k, v, g, beta, flags, *, band, normalize, num_value_heads, num_chunks):
    """As chunk_prepare, for band 0 or 1: t_inv [B,HV,NC,64,64] (k.dtype) and gamma_L, write, read."""
    batch, tokens, key_heads, key_dim = k.shape
    value_dim = v.shape[-1]
    t_inv, stats, precision = solve_outputs(k, num_value_heads, num_chunks)
    block_solve_kernel[(batch * num_chunks * num_value_heads,)](
        k, v, g, beta, t_inv, stats[0], stats[1], stats[2], flags, tokens, num_chunks,
        *k.stride()[:3], *v.stride()[:3], *g.stride(), *beta.stride(), key_heads, num_value_heads,
        key_dim, value_dim, BK=padded(key_dim), BV=padded(value_dim), BAND=band, NORMALIZE=normalize,
        PRECISION=precision)
    return t_inv, stats[0], stats[1], stats[2]
