"""Pass 1, every chunk in parallel: the band-projected intra-chunk inverse and the score statistics.

Used for bands 2 and 3 (block_solve.py does bands 0 and 1 on 16 x 16 blocks); correct for any band.

Grid: one program per (batch row, group of GROUP chunks, head pair), head pairs fastest, so the
value heads that read one key head run side by side and share its tile in L2. For chunk c of
head pair h:

    gamma   = cumsum of g inside the chunk
    A       = strict_lower( beta_i (k_i . k_j) exp(gamma_i - gamma_j) )          [64, 64]
    D       = blockdiag(I + A_aa)^-1 over the four 16 x 16 diagonal blocks, by doubling:
              (I + N)^-1 = (I - N)(I + N^2)(I + N^4)(I + N^8) with N = blockdiag(A), N^16 = 0
    Tinv    band 0: D;   band 1: D - D A_1 D  (A_1: the blocks next to the diagonal, so the
              adjacent blocks are -D_{i+1} A_{i+1,i} D_i and no far block enters);
              bands 2, 3: (I - M)(I + M^2) D with M = D A_off, projected on the band
    stats   = gamma_L, write_c = sum beta exp(gamma_L - gamma) ||k|| ||v||, read_c = sum exp(gamma)

The chunk works on whole 64 x 64 tiles, the shape the tensor cores take: K K^T is one product and
the blocks outside the band are masked, not skipped. Tinv is stored in the input dtype, as FLA does.
"""
import triton
import triton.language as tl

from .chunk_loads import (AUTOTUNE, INTERPRET, grouped_program, inverse_norm, load_gates, load_rows, load_tile, mma,
                          round_to, solve_outputs)

CHUNK = tl.constexpr(64)   # tokens per chunk (SPEC section 2)
BLOCK = tl.constexpr(16)   # rows of one block of the band solver (SPEC section 3)
CONFIGS = [triton.Config({"GROUP": 1}, num_warps=4, num_stages=1), triton.Config({"GROUP": 1}, num_warps=8, num_stages=1),
           triton.Config({"GROUP": 2}, num_warps=4, num_stages=2), triton.Config({"GROUP": 4}, num_warps=4, num_stages=2),
           triton.Config({"GROUP": 4}, num_warps=8, num_stages=2)]


@triton.jit
def _fdot(a, b, PRECISION: tl.constexpr):
    """float32 product of float32 tiles (tf32 on the GPU for bfloat16 inputs, exact for float32)."""
    if INTERPRET:
        return tl.dot(a, b)
    return tl.dot(a, b, input_precision=PRECISION)


@triton.autotune(configs=CONFIGS if AUTOTUNE else CONFIGS[:1], key=["K", "V", "BAND", "PRECISION"])
@triton.jit
def chunk_prepare_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, log_decay_ptr, write_ptr, read_ptr,
                         T, NC, H: tl.constexpr, HV: tl.constexpr, K, V,
                         BK: tl.constexpr, BV: tl.constexpr, BAND: tl.constexpr, NORMALIZE: tl.constexpr,
                         PRECISION: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    hv, group, b, hk = grouped_program(pid, NC, H, HV, GROUP)
    dot_dtype = k_ptr.dtype.element_ty
    rows = tl.arange(0, CHUNK)
    below = rows[:, None] > rows[None, :]
    distance = rows[:, None] // BLOCK - rows[None, :] // BLOCK          # block row - block column
    eye = tl.where(rows[:, None] == rows[None, :], 1.0, 0.0)

    for i in range(GROUP):   # a loop, so the pipeliner can fetch the next chunk during this one's products
        c = group * GROUP + i
        in_range = c < NC    # past NC every row is past T too: loads give zeros, stores are masked
        t0 = c * CHUNK
        k = load_tile(k_ptr + (b * T * H + hk) * K, t0, T, H * K, K, CHUNK, BK)
        v = load_rows(v_ptr + (b * T * HV + hv) * V, t0, T, HV * V, V, CHUNK, BV)
        g = load_gates(g_ptr + b * T * HV + hv, t0, T, HV, CHUNK)
        beta = load_gates(beta_ptr + b * T * HV + hv, t0, T, HV, CHUNK)
        k_scale = inverse_norm(k, NORMALIZE)
        kf = k.to(tl.float32)
        gamma = tl.cumsum(g, axis=0)
        gamma_last = tl.sum(g, axis=0)

        # Score statistics (sparsegdn.selection.score_events); read_c counts padded tokens too, as there.
        magnitude = tl.sqrt(tl.sum(kf * kf, axis=1)) * k_scale * tl.sqrt(tl.sum(v * v, axis=1))
        stat = (b * HV + hv) * NC + c
        tl.store(log_decay_ptr + stat, gamma_last, mask=in_range)
        tl.store(write_ptr + stat, tl.sum(beta * tl.exp(gamma_last - gamma) * magnitude, axis=0), mask=in_range)
        tl.store(read_ptr + stat, tl.sum(tl.exp(gamma), axis=0), mask=in_range)

        # Mask before exp: above the diagonal gamma_i - gamma_j >= 0 could overflow.
        decay = tl.exp(tl.where(below, gamma[:, None] - gamma[None, :], 0.0))
        scale = (beta * k_scale)[:, None] * k_scale[None, :]
        a = tl.where(below & (distance <= BAND), mma(k, tl.trans(k)) * scale * decay, 0.0)

        n = tl.where(distance == 0, a, 0.0)
        n2 = _fdot(n, n, PRECISION)
        n4 = _fdot(n2, n2, PRECISION)
        n8 = _fdot(n4, n4, PRECISION)
        d = _fdot(_fdot(_fdot(eye - n, eye + n2, PRECISION), eye + n4, PRECISION), eye + n8, PRECISION)
        if BAND == 0:
            t_inv = d
        elif BAND == 1:
            t_inv = d - _fdot(d, _fdot(tl.where(distance == 1, a, 0.0), d, PRECISION), PRECISION)
        else:
            m = _fdot(d, tl.where(distance > 0, a, 0.0), PRECISION)
            t_inv = _fdot(_fdot(eye - m, eye + _fdot(m, m, PRECISION), PRECISION), d, PRECISION)
            t_inv = tl.where(distance <= BAND, t_inv, 0.0)
        offsets = stat * CHUNK * CHUNK + rows[:, None] * CHUNK + rows[None, :]
        tl.store(t_inv_ptr + offsets, round_to(t_inv, dot_dtype), mask=in_range)


def chunk_prepare(k, v, g, beta, *, band, normalize, num_value_heads):
    """k [B,T,H,K], v [B,T,HV,V], g/beta [B,T,HV] contiguous.

    Returns t_inv [B,HV,NC,64,64] (k.dtype) and the per-chunk statistics gamma_L, write, read
    (float32 [B,HV,NC]).
    """
    batch, tokens, key_heads, key_dim = k.shape
    value_dim = v.shape[-1]
    n_chunks = triton.cdiv(tokens, 64)
    t_inv, stats, precision = solve_outputs(k, num_value_heads)
    grid = lambda meta: (batch * triton.cdiv(n_chunks, meta["GROUP"]) * num_value_heads,)  # noqa: E731
    chunk_prepare_kernel[grid](
        k, v, g, beta, t_inv, stats[0], stats[1], stats[2], tokens, n_chunks, key_heads, num_value_heads,
        key_dim, value_dim, BK=max(16, triton.next_power_of_2(key_dim)), BV=max(16, triton.next_power_of_2(value_dim)),
        BAND=band, NORMALIZE=normalize, PRECISION=precision)
    return t_inv, stats[0], stats[1], stats[2]
