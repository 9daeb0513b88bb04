"""Pass 1 for bands 2 and 3: the intra-chunk inverse on whole 64 x 64 tiles, and the score statistics.

block_solve.py does bands 0 and 1 on 16 x 16 blocks; this one is correct for any band. Grid: one
program per (batch row, group of GROUP chunks, head pair), head pairs fastest. For chunk c of head
pair h:

    A       = strict_lower( beta_i (k_i . k_j) exp(gamma_i - gamma_j) )          [64, 64]
    D       = blockdiag(I + A_aa)^-1 over the four 16 x 16 diagonal blocks, by doubling:
              (I + N)^-1 = (I - N)(I + N^2)(I + N^4)(I + N^8) with N = blockdiag(A), N^16 = 0
    Tinv    = (I - M)(I + M^2) D with M = D A_off (A_off: the blocks below the diagonal blocks;
              M is strictly block-lower with four block rows, so M^4 = 0), projected on the band
    stats   = gamma_L, write_c, read_c of the score, as block_solve

Tinv is stored in the input dtype, as FLA stores its inverse.
"""
import triton
import triton.language as tl

from .block_solve import decayed_kkt, gate_stats
from .chunk_loads import (AUTOTUNE, BLOCK, CHUNK, fdot, grouped_program, inverse_norm, load_gates, load_rows,
                          load_tile, padded, round_to, solve_outputs)

CONFIGS = [triton.Config({"GROUP": 1}, num_warps=4, num_stages=1), triton.Config({"GROUP": 1}, num_warps=8, num_stages=1),
           triton.Config({"GROUP": 2}, num_warps=4, num_stages=2)]


@triton.autotune(configs=CONFIGS if AUTOTUNE else CONFIGS[:1], key=["K", "V", "BAND", "PRECISION"])
@triton.jit
def chunk_prepare_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, log_decay_ptr, write_ptr, read_ptr, flags_ptr,
                         T, NC, k_sb, k_st, k_sh, v_sb, v_st, v_sh, g_sb, g_st, g_sh, beta_sb, beta_st, beta_sh,
                         H: tl.constexpr, HV: tl.constexpr, K, V, BK: tl.constexpr, BV: tl.constexpr,
                         BAND: tl.constexpr, NORMALIZE: tl.constexpr, PRECISION: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    hv, group, b, hk = grouped_program(pid, NC, H, HV, GROUP)
    rows = tl.arange(0, CHUNK)
    distance = rows[:, None] // BLOCK - rows[None, :] // BLOCK          # block row - block column
    eye = tl.where(rows[:, None] == rows[None, :], 1.0, 0.0)

    for i in range(GROUP):   # a loop, so the pipeliner can fetch the next chunk during this one's products
        c = tl.minimum(group * GROUP + i, NC - 1)   # a group past NC redoes the last chunk: same values
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

        a = decayed_kkt(k, k_scale, beta, gamma)
        n = tl.where(distance == 0, a, 0.0)
        n2 = fdot(n, n, PRECISION)
        n4 = fdot(n2, n2, PRECISION)
        d = fdot(eye - n, eye + n2, PRECISION)
        n8 = fdot(n4, n4, PRECISION)
        d = fdot(fdot(d, eye + n4, PRECISION), eye + n8, PRECISION)
        m = fdot(d, tl.where(distance > 0, a, 0.0), PRECISION)
        t_inv = fdot(fdot(eye - m, eye + fdot(m, m, PRECISION), PRECISION), d, PRECISION)
        t_inv = tl.where(distance <= BAND, t_inv, 0.0)
        offsets = stat * CHUNK * CHUNK + rows[:, None] * CHUNK + rows[None, :]
        tl.store(t_inv_ptr + offsets, round_to(t_inv, t_inv_ptr.dtype.element_ty))


def chunk_prepare(k, v, g, beta, flags, *, band, normalize, num_value_heads, num_chunks):
    """k [B,T,H,K], v [B,T,HV,V], g/beta [B,T,HV], each with its innermost dimension contiguous.

    Returns t_inv [B,HV,NC,64,64] (k.dtype) and the per-chunk statistics gamma_L, write, read
    (float32 [B,HV,NC]); raises flags[FLAG_GATES] for bad g or beta.
    """
    batch, tokens, key_heads, key_dim = k.shape
    value_dim = v.shape[-1]
    t_inv, stats, precision = solve_outputs(k, num_value_heads, num_chunks)
    grid = lambda meta: (batch * triton.cdiv(num_chunks, meta["GROUP"]) * num_value_heads,)  # noqa: E731
    chunk_prepare_kernel[grid](
        k, v, g, beta, t_inv, stats[0], stats[1], stats[2], flags, tokens, num_chunks,
        *k.stride()[:3], *v.stride()[:3], *g.stride(), *beta.stride(), key_heads, num_value_heads,
        key_dim, value_dim, BK=padded(key_dim), BV=padded(value_dim), BAND=band, NORMALIZE=normalize,
        PRECISION=precision)
    return t_inv, stats[0], stats[1], stats[2]
