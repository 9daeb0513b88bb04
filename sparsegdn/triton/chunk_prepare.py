"""Pass 1, every chunk in parallel: the band-projected intra-chunk inverse and the score statistics.

For chunk c of head pair h (grid: one program per (batch row, chunk, head pair), head pairs
fastest so the two value heads that read one key head run side by side and share it in L2):

    gamma   = cumsum of g inside the chunk, 16 tokens at a time
    A_ab    = beta_a (K_a K_b^T) * exp(gamma_a - gamma_b)     only for blocks with 0 <= a - b <= band
    D_a     = (I + A_aa)^-1                                   (unit lower triangular, 16 x 16)
    Tinv    = D on the diagonal; below it the block forward substitution
              Tinv_ab = -D_a sum_{b <= m < a} A_am Tinv_mb, only for a - b <= band
    stats   = gamma_L, write_c = sum beta exp(gamma_L - gamma) ||k|| ||v||, read_c = sum exp(gamma)

With band 1 the three far blocks of K K^T and of Tinv are never computed (written as zeros so the
later kernels can read Tinv as one 64 x 64 tile). Tinv is stored in the input dtype, as FLA does.
"""
import triton
import triton.language as tl

from .chunk_loads import l2_normalize, load_gates, load_rows, mma, round_to

CHUNK = tl.constexpr(64)   # tokens per chunk (SPEC section 2)
BLOCK = tl.constexpr(16)   # rows of one block of the band solver (SPEC section 3)
NUM_WARPS = 4


@triton.jit
def _load_block(k_base, v_base, g_base, beta_base, row0, T, key_stride, value_stride, gate_stride,
                K, V, BK: tl.constexpr, BV: tl.constexpr, NORMALIZE: tl.constexpr):
    """One 16-token block: normalised k [16, BK], g, beta and ||k|| ||v|| [16]."""
    k = l2_normalize(load_rows(k_base, row0, T, key_stride, K, BLOCK, BK), NORMALIZE)
    v = load_rows(v_base, row0, T, value_stride, V, BLOCK, BV)
    g = load_gates(g_base, row0, T, gate_stride, BLOCK)
    beta = load_gates(beta_base, row0, T, gate_stride, BLOCK)
    magnitude = tl.sqrt(tl.sum(k * k, axis=1)) * tl.sqrt(tl.sum(v * v, axis=1))
    return k, g, beta, magnitude


@triton.jit
def _a_block(k_row, k_col, beta_row, gamma_row, gamma_col, DIAGONAL: tl.constexpr):
    """beta_i (k_i . k_j) exp(gamma_i - gamma_j), float32 [16, 16]; strictly lower on the diagonal."""
    products = mma(k_row, tl.trans(k_col))
    log_decay = gamma_row[:, None] - gamma_col[None, :]
    if DIAGONAL:
        idx = tl.arange(0, BLOCK)
        below = idx[:, None] > idx[None, :]
        # Above the diagonal gamma_i - gamma_j >= 0 could overflow exp: mask before it.
        return tl.where(below, beta_row[:, None] * products * tl.exp(tl.where(below, log_decay, 0.0)), 0.0)
    return beta_row[:, None] * products * tl.exp(log_decay)


@triton.jit
def _unit_lower_inverse(a, PRECISION: tl.constexpr):
    """(I + A)^-1 for strictly lower A [16, 16]: (I - A)(I + A^2)(I + A^4)(I + A^8), exact as A^16 = 0."""
    idx = tl.arange(0, BLOCK)
    eye = tl.where(idx[:, None] == idx[None, :], 1.0, 0.0)
    a2 = tl.dot(a, a, input_precision=PRECISION)
    a4 = tl.dot(a2, a2, input_precision=PRECISION)
    a8 = tl.dot(a4, a4, input_precision=PRECISION)
    inverse = tl.dot(eye - a, eye + a2, input_precision=PRECISION)
    inverse = tl.dot(inverse, eye + a4, input_precision=PRECISION)
    return tl.dot(inverse, eye + a8, input_precision=PRECISION)


@triton.jit
def _store_block(t_inv_chunk, row_block: tl.constexpr, col_block: tl.constexpr, x):
    idx = tl.arange(0, BLOCK)
    block_start = t_inv_chunk + row_block * BLOCK * CHUNK + col_block * BLOCK
    tl.store(block_start + idx[:, None] * CHUNK + idx[None, :], round_to(x, t_inv_chunk.dtype.element_ty))


@triton.jit
def chunk_prepare_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, log_decay_ptr, write_ptr, read_ptr,
                         T, NC, H: tl.constexpr, HV: tl.constexpr, K, V,
                         BK: tl.constexpr, BV: tl.constexpr, BAND: tl.constexpr, NORMALIZE: tl.constexpr,
                         PRECISION: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    hv = pid % HV
    c = (pid // HV) % NC
    b = pid // (HV * NC)
    hk = hv // (HV // H)
    t0 = c * CHUNK
    k_base = k_ptr + (b * T * H + hk) * K
    v_base = v_ptr + (b * T * HV + hv) * V
    g_base = g_ptr + b * T * HV + hv
    beta_base = beta_ptr + b * T * HV + hv
    dot_dtype = k_ptr.dtype.element_ty

    k0, g0, beta0, m0 = _load_block(k_base, v_base, g_base, beta_base, t0, T, H * K, HV * V, HV, K, V, BK, BV, NORMALIZE)
    k1, g1, beta1, m1 = _load_block(k_base, v_base, g_base, beta_base, t0 + 16, T, H * K, HV * V, HV, K, V, BK, BV, NORMALIZE)
    k2, g2, beta2, m2 = _load_block(k_base, v_base, g_base, beta_base, t0 + 32, T, H * K, HV * V, HV, K, V, BK, BV, NORMALIZE)
    k3, g3, beta3, m3 = _load_block(k_base, v_base, g_base, beta_base, t0 + 48, T, H * K, HV * V, HV, K, V, BK, BV, NORMALIZE)
    gamma0 = tl.cumsum(g0, axis=0)
    gamma1 = tl.cumsum(g1, axis=0) + tl.sum(g0, axis=0)
    gamma2 = tl.cumsum(g2, axis=0) + tl.sum(g0, axis=0) + tl.sum(g1, axis=0)
    gamma3 = tl.cumsum(g3, axis=0) + tl.sum(g0, axis=0) + tl.sum(g1, axis=0) + tl.sum(g2, axis=0)
    gamma_last = tl.sum(g0, axis=0) + tl.sum(g1, axis=0) + tl.sum(g2, axis=0) + tl.sum(g3, axis=0)

    # Score statistics (sparsegdn.selection.score_events); read_c counts padded tokens too, as there.
    write = (tl.sum(beta0 * tl.exp(gamma_last - gamma0) * m0, axis=0) + tl.sum(beta1 * tl.exp(gamma_last - gamma1) * m1, axis=0)
             + tl.sum(beta2 * tl.exp(gamma_last - gamma2) * m2, axis=0) + tl.sum(beta3 * tl.exp(gamma_last - gamma3) * m3, axis=0))
    read = (tl.sum(tl.exp(gamma0), axis=0) + tl.sum(tl.exp(gamma1), axis=0)
            + tl.sum(tl.exp(gamma2), axis=0) + tl.sum(tl.exp(gamma3), axis=0))
    stat = (b * HV + hv) * NC + c
    tl.store(log_decay_ptr + stat, gamma_last)
    tl.store(write_ptr + stat, write)
    tl.store(read_ptr + stat, read)

    k0 = round_to(k0, dot_dtype)
    k1 = round_to(k1, dot_dtype)
    k2 = round_to(k2, dot_dtype)
    k3 = round_to(k3, dot_dtype)
    t_inv_chunk = t_inv_ptr + ((b * HV + hv) * NC + c) * CHUNK * CHUNK
    zero = tl.zeros([BLOCK, BLOCK], dtype=tl.float32)

    d0 = _unit_lower_inverse(_a_block(k0, k0, beta0, gamma0, gamma0, True), PRECISION)
    d1 = _unit_lower_inverse(_a_block(k1, k1, beta1, gamma1, gamma1, True), PRECISION)
    d2 = _unit_lower_inverse(_a_block(k2, k2, beta2, gamma2, gamma2, True), PRECISION)
    d3 = _unit_lower_inverse(_a_block(k3, k3, beta3, gamma3, gamma3, True), PRECISION)
    t10 = zero
    t21 = zero
    t32 = zero
    t20 = zero
    t31 = zero
    t30 = zero
    if BAND >= 1:
        a10 = _a_block(k1, k0, beta1, gamma1, gamma0, False)
        a21 = _a_block(k2, k1, beta2, gamma2, gamma1, False)
        a32 = _a_block(k3, k2, beta3, gamma3, gamma2, False)
        t10 = -tl.dot(d1, tl.dot(a10, d0, input_precision=PRECISION), input_precision=PRECISION)
        t21 = -tl.dot(d2, tl.dot(a21, d1, input_precision=PRECISION), input_precision=PRECISION)
        t32 = -tl.dot(d3, tl.dot(a32, d2, input_precision=PRECISION), input_precision=PRECISION)
        if BAND >= 2:
            a20 = _a_block(k2, k0, beta2, gamma2, gamma0, False)
            a31 = _a_block(k3, k1, beta3, gamma3, gamma1, False)
            t20 = -tl.dot(d2, tl.dot(a20, d0, input_precision=PRECISION) + tl.dot(a21, t10, input_precision=PRECISION),
                          input_precision=PRECISION)
            t31 = -tl.dot(d3, tl.dot(a31, d1, input_precision=PRECISION) + tl.dot(a32, t21, input_precision=PRECISION),
                          input_precision=PRECISION)
            if BAND >= 3:
                a30 = _a_block(k3, k0, beta3, gamma3, gamma0, False)
                t30 = -tl.dot(d3, tl.dot(a30, d0, input_precision=PRECISION) + tl.dot(a31, t10, input_precision=PRECISION)
                              + tl.dot(a32, t20, input_precision=PRECISION), input_precision=PRECISION)
    _store_block(t_inv_chunk, 0, 0, d0)
    _store_block(t_inv_chunk, 0, 1, zero)
    _store_block(t_inv_chunk, 0, 2, zero)
    _store_block(t_inv_chunk, 0, 3, zero)
    _store_block(t_inv_chunk, 1, 0, t10)
    _store_block(t_inv_chunk, 1, 1, d1)
    _store_block(t_inv_chunk, 1, 2, zero)
    _store_block(t_inv_chunk, 1, 3, zero)
    _store_block(t_inv_chunk, 2, 0, t20)
    _store_block(t_inv_chunk, 2, 1, t21)
    _store_block(t_inv_chunk, 2, 2, d2)
    _store_block(t_inv_chunk, 2, 3, zero)
    _store_block(t_inv_chunk, 3, 0, t30)
    _store_block(t_inv_chunk, 3, 1, t31)
    _store_block(t_inv_chunk, 3, 2, t32)
    _store_block(t_inv_chunk, 3, 3, d3)


def chunk_prepare(k, v, g, beta, *, band, normalize, num_value_heads):
    """k [B,T,H,K], v [B,T,HV,V], g/beta [B,T,HV] contiguous.

    Returns t_inv [B,HV,NC,64,64] (k.dtype) and the per-chunk statistics gamma_L, write, read
    (float32 [B,HV,NC]).
    """
    import torch

    batch, tokens, key_heads, key_dim = k.shape
    value_dim = v.shape[-1]
    n_chunks = triton.cdiv(tokens, 64)
    t_inv = torch.empty(batch, num_value_heads, n_chunks, 64, 64, device=k.device, dtype=k.dtype)
    stats = torch.empty(3, batch, num_value_heads, n_chunks, device=k.device, dtype=torch.float32)
    precision = "ieee" if k.dtype == torch.float32 else "tf32"
    grid = (batch * n_chunks * num_value_heads,)
    chunk_prepare_kernel[grid](
        k, v, g, beta, t_inv, stats[0], stats[1], stats[2], tokens, n_chunks, key_heads, num_value_heads,
        key_dim, value_dim, BK=max(16, triton.next_power_of_2(key_dim)), BV=max(16, triton.next_power_of_2(value_dim)),
        BAND=band, NORMALIZE=normalize, PRECISION=precision, num_warps=NUM_WARPS)
    return t_inv, stats[0], stats[1], stats[2]
