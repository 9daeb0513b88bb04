"""Pass 1 for bands 0 and 1: the block-adjacent solver on 16 x 16 blocks, four at a time.

Grid: one program per (batch row, chunk, head pair), head pairs fastest. The chunk's four 16-token
blocks are one batch of [4, 16, .] tiles, and a second batch holds each block's predecessor (block
a - 1; zero for a = 0), loaded again from L2 rather than shifted in registers:

    A_aa      = strict_lower( beta_a (K_a K_a^T) * exp(gamma_a - gamma_a) )     diagonal blocks
    A_a,a-1   = beta_a (K_a K_{a-1}^T) * exp(gamma_a - gamma_{a-1})              adjacent blocks
    D_a       = (I + A_aa)^-1 = (I - A)(I + A^2)(I + A^4)(I + A^8)  (A^16 = 0), also D_{a-1}
    Tinv_aa   = D_a,   Tinv_a,a-1 = -D_a A_a,a-1 D_{a-1}  (band 1),   every other block zero
    stats     = gamma_L, write_c, read_c of the score (as chunk_prepare)

The three far blocks of K K^T and of Tinv are never computed. Products are 16 x 16 tiles batched by
four, so a program holds a quarter of the whole-tile solve's float32 state, and more programs share
an SM: the solve's chain of dependent products is latency, and occupancy is what hides it.
"""
import triton
import triton.language as tl

from .chunk_loads import AUTOTUNE, INTERPRET, NORM_EPS, mma, round_to, solve_outputs

CHUNK = tl.constexpr(64)
BLOCK = tl.constexpr(16)
BLOCKS = tl.constexpr(4)
CONFIGS = [triton.Config({}, num_warps=w, num_stages=1) for w in (4, 2, 8)]


@triton.jit
def _fdot(a, b, PRECISION: tl.constexpr):
    """Batched float32 product [4,16,16] x [4,16,16] (tf32 on the GPU for bfloat16 inputs)."""
    if INTERPRET:
        return tl.dot(a, b)
    return tl.dot(a, b, input_precision=PRECISION)


@triton.jit
def _inverse(a, PRECISION: tl.constexpr):
    """(I + A)^-1 of each strictly lower [16, 16] block of a [4, 16, 16] batch, by doubling."""
    idx = tl.arange(0, BLOCK)
    eye = tl.where(idx[:, None] == idx[None, :], 1.0, 0.0)[None, :, :]
    a2 = _fdot(a, a, PRECISION)
    a4 = _fdot(a2, a2, PRECISION)
    a8 = _fdot(a4, a4, PRECISION)
    return _fdot(_fdot(_fdot(eye - a, eye + a2, PRECISION), eye + a4, PRECISION), eye + a8, PRECISION)


@triton.jit
def _load_blocks(k_base, v_base, g_base, beta_base, c, shift, T, H: tl.constexpr, HV: tl.constexpr, K, V,
                 BK: tl.constexpr, BV: tl.constexpr, NORMALIZE: tl.constexpr):
    """Blocks a - shift of chunk c as [4, 16, .] tiles (zero outside the chunk or past T): raw k, the
    inverse norms of k, gamma (cumulative g from the chunk start), beta and ||k|| ||v|| per token."""
    blocks = tl.arange(0, BLOCKS)
    idx = tl.arange(0, BLOCK)
    ck = tl.arange(0, BK)
    cv = tl.arange(0, BV)
    rows = c * CHUNK + (blocks[:, None] - shift) * BLOCK + idx[None, :]            # [4, 16] token index
    valid = (rows >= c * CHUNK) & (rows < T)
    rows = rows.to(tl.int64)
    k = tl.load(k_base + rows[:, :, None] * (H * K) + ck[None, None, :],
                mask=valid[:, :, None] & (ck < K)[None, None, :], other=0.0)
    v = tl.load(v_base + rows[:, :, None] * (HV * V) + cv[None, None, :],
                mask=valid[:, :, None] & (cv < V)[None, None, :], other=0.0).to(tl.float32)
    g = tl.load(g_base + rows * HV, mask=valid, other=0.0).to(tl.float32)
    beta = tl.load(beta_base + rows * HV, mask=valid, other=0.0).to(tl.float32)
    kf = k.to(tl.float32)
    k_square = tl.sum(kf * kf, axis=2)
    if NORMALIZE:
        k_scale = tl.rsqrt(k_square + NORM_EPS)
    else:
        k_scale = k_square * 0.0 + 1.0
    magnitude = tl.sqrt(k_square) * k_scale * tl.sqrt(tl.sum(v * v, axis=2))
    return k, k_scale, g, beta, magnitude


@triton.jit
def _diagonal_a(k, k_scale, beta, gamma):
    """strict_lower(beta_i k_i . k_j exp(gamma_i - gamma_j)) of each block, float32 [4, 16, 16]."""
    idx = tl.arange(0, BLOCK)
    below = (idx[:, None] > idx[None, :])[None, :, :]
    products = mma(k, tl.permute(k, (0, 2, 1)))
    log_decay = tl.where(below, gamma[:, :, None] - gamma[:, None, :], 0.0)   # masked before exp
    scale = (beta * k_scale)[:, :, None] * k_scale[:, None, :]
    return tl.where(below, products * scale * tl.exp(log_decay), 0.0)


@triton.jit
def _store_blocks(t_inv_chunk, offset: tl.constexpr, x):
    """Write x[a] at block (a, a + offset) of the 64 x 64 tile, for the a where that block exists."""
    blocks = tl.arange(0, BLOCKS)
    idx = tl.arange(0, BLOCK)
    col_block = blocks + offset
    pointers = (t_inv_chunk + (blocks[:, None, None] * BLOCK + idx[None, :, None]) * CHUNK
                + col_block[:, None, None] * BLOCK + idx[None, None, :])
    exists = ((col_block >= 0) & (col_block < BLOCKS))[:, None, None]
    tl.store(pointers, round_to(x, t_inv_chunk.dtype.element_ty), mask=exists & (idx[None, :, None] >= 0))


@triton.autotune(configs=CONFIGS if AUTOTUNE else CONFIGS[:1], key=["K", "V", "BAND", "PRECISION"])
@triton.jit
def block_solve_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, log_decay_ptr, write_ptr, read_ptr,
                       T, NC, H: tl.constexpr, HV: tl.constexpr, K, V,
                       BK: tl.constexpr, BV: tl.constexpr, BAND: tl.constexpr, NORMALIZE: tl.constexpr,
                       PRECISION: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    hv = pid % HV
    c = (pid // HV) % NC
    b = pid // (HV * NC)
    hk = hv // (HV // H)
    k_base = k_ptr + (b * T * H + hk) * K
    v_base = v_ptr + (b * T * HV + hv) * V
    g_base = g_ptr + b * T * HV + hv
    beta_base = beta_ptr + b * T * HV + hv

    k, k_scale, g, beta, magnitude = _load_blocks(k_base, v_base, g_base, beta_base, c, 0, T, H, HV, K, V, BK, BV,
                                                  NORMALIZE)
    block_sum = tl.sum(g, axis=1)                                   # [4]
    block_start = tl.cumsum(block_sum, axis=0) - block_sum          # gamma before each block
    gamma = tl.cumsum(g, axis=1) + block_start[:, None]             # [4, 16]
    gamma_last = tl.sum(block_sum, axis=0)

    # Score statistics (sparsegdn.selection.score_events); read_c counts padded tokens too, as there.
    stat = (b * HV + hv) * NC + c
    tl.store(log_decay_ptr + stat, gamma_last)
    tl.store(write_ptr + stat, tl.sum(tl.sum(beta * tl.exp(gamma_last - gamma) * magnitude, axis=1), axis=0))
    tl.store(read_ptr + stat, tl.sum(tl.sum(tl.exp(gamma), axis=1), axis=0))

    t_inv_chunk = t_inv_ptr + stat * CHUNK * CHUNK
    d = _inverse(_diagonal_a(k, k_scale, beta, gamma), PRECISION)
    zero = d * 0.0
    _store_blocks(t_inv_chunk, 0, d)
    if BAND == 1:
        # The same quantities for each block's predecessor (all zero for block 0).
        k_prev, k_scale_prev, g_prev, beta_prev, _ = _load_blocks(k_base, v_base, g_base, beta_base, c, 1, T, H, HV,
                                                                  K, V, BK, BV, NORMALIZE)
        prev_sum = tl.sum(g_prev, axis=1)
        gamma_prev = tl.cumsum(g_prev, axis=1) + (block_start - prev_sum)[:, None]
        d_prev = _inverse(_diagonal_a(k_prev, k_scale_prev, beta_prev, gamma_prev), PRECISION)
        # Every token of block a comes after every token of block a - 1: the decay exponent is <= 0.
        scale = (beta * k_scale)[:, :, None] * k_scale_prev[:, None, :]
        a_adjacent = mma(k, tl.permute(k_prev, (0, 2, 1))) * scale * tl.exp(gamma[:, :, None] - gamma_prev[:, None, :])
        _store_blocks(t_inv_chunk, -1, -_fdot(d, _fdot(a_adjacent, d_prev, PRECISION), PRECISION))
    else:
        _store_blocks(t_inv_chunk, -1, zero)
    _store_blocks(t_inv_chunk, -3, zero)
    _store_blocks(t_inv_chunk, -2, zero)
    _store_blocks(t_inv_chunk, 1, zero)
    _store_blocks(t_inv_chunk, 2, zero)
    _store_blocks(t_inv_chunk, 3, zero)


def block_solve(k, v, g, beta, *, band, normalize, num_value_heads):
    """As chunk_prepare, for band 0 or 1: t_inv [B,HV,NC,64,64] (k.dtype) and gamma_L, write, read."""
    batch, tokens, key_heads, key_dim = k.shape
    value_dim = v.shape[-1]
    n_chunks = triton.cdiv(tokens, 64)
    t_inv, stats, precision = solve_outputs(k, num_value_heads)
    block_solve_kernel[(batch * n_chunks * num_value_heads,)](
        k, v, g, beta, t_inv, stats[0], stats[1], stats[2], tokens, n_chunks, key_heads, num_value_heads,
        key_dim, value_dim, BK=max(16, triton.next_power_of_2(key_dim)), BV=max(16, triton.next_power_of_2(value_dim)),
        BAND=band, NORMALIZE=normalize, PRECISION=precision)
    return t_inv, stats[0], stats[1], stats[2]
