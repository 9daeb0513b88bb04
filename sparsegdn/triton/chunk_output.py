"""Pass 5, every chunk in parallel: the output of every token.

Grid: one program per (batch row, group of GROUP chunks, head pair), head pairs fastest (k shared in
L2 by the value heads of one key head; the snapshot of a run of skipped chunks stays in L2). A
program loops over its chunks so the compiler's pipeliner can fetch the next chunk's tiles while
this one's products run. The state entering chunk c is exp(d_c) * snapshot (Schedule), and with P
the decayed causal Q K^T, M = P Tinv and X = beta e^gamma K:

    o = scale [ (Q e^gamma) S + P (u - w S) ]
      = scale [ e^{d_c} (Q e^gamma - M X) snapshot + M (beta V) ]

Folding Tinv into M saves the w S product (64 x K x V) that the textbook form needs: the kernel
does five products, QK^T, P Tinv, M X, (.) snapshot and M (beta V). q and k stay raw dot operands;
their norms scale the products.
"""
import torch
import triton
import triton.language as tl

from .chunk_loads import AUTOTUNE, grouped_program, inverse_norm, load_gates, load_rows, load_tile, mma, round_to

CHUNK = tl.constexpr(64)
CONFIGS = [triton.Config({"GROUP": group}, num_warps=4, num_stages=stages)
           for group in (1, 4) for stages in (3, 2)] + [triton.Config({"GROUP": 2}, num_warps=4, num_stages=3)]


@triton.autotune(configs=CONFIGS if AUTOTUNE else CONFIGS[:1], key=["K", "V", "H", "HV"])
@triton.jit
def chunk_output_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, t_inv_ptr, snapshot_ptr, snapshot_of_chunk_ptr,
                        log_decay_since_ptr, o_ptr, scale, T, NC, H: tl.constexpr, HV: tl.constexpr, K, V,
                        BK: tl.constexpr, BV: tl.constexpr, NORMALIZE: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    hv, group, b, hk = grouped_program(pid, NC, H, HV, GROUP)
    row = b * HV + hv
    dot_dtype = k_ptr.dtype.element_ty
    rows = tl.arange(0, CHUNK)
    ck = tl.arange(0, BK)
    cv = tl.arange(0, BV)
    causal = rows[:, None] >= rows[None, :]

    for i in range(GROUP):
        c = group * GROUP + i
        in_range = c < NC          # past NC every row is past T too: loads give zeros, stores are masked
        t0 = c * CHUNK
        q = load_tile(q_ptr + (b * T * H + hk) * K, t0, T, H * K, K, CHUNK, BK)
        k = load_tile(k_ptr + (b * T * H + hk) * K, t0, T, H * K, K, CHUNK, BK)
        v = load_rows(v_ptr + (b * T * HV + hv) * V, t0, T, HV * V, V, CHUNK, BV)
        g = load_gates(g_ptr + b * T * HV + hv, t0, T, HV, CHUNK)
        beta = load_gates(beta_ptr + b * T * HV + hv, t0, T, HV, CHUNK)
        t_inv = tl.load(t_inv_ptr + (row * NC + c) * CHUNK * CHUNK + rows[:, None] * CHUNK + rows[None, :],
                        mask=in_range, other=0.0)
        snapshot_index = tl.load(snapshot_of_chunk_ptr + row * NC + c, mask=in_range, other=0).to(tl.int64)
        snapshot = tl.load(snapshot_ptr + snapshot_index * K * V + ck[:, None] * V + cv[None, :],
                           mask=(ck < K)[:, None] & (cv < V)[None, :] & in_range, other=0.0)
        decay_since = tl.exp(tl.load(log_decay_since_ptr + row * NC + c, mask=in_range, other=0.0))

        q_scale = inverse_norm(q, NORMALIZE)
        k_scale = inverse_norm(k, NORMALIZE)
        gamma = tl.cumsum(g, axis=0)
        # Mask before exp: above the diagonal gamma_i - gamma_j >= 0 could overflow.
        p = mma(q, tl.trans(k)) * (q_scale[:, None] * k_scale[None, :])
        p = tl.where(causal, p * tl.exp(tl.where(causal, gamma[:, None] - gamma[None, :], 0.0)), 0.0)
        m = round_to(mma(round_to(p, dot_dtype), t_inv), dot_dtype)
        x = round_to((beta * tl.exp(gamma) * k_scale)[:, None] * k.to(tl.float32), dot_dtype)
        left = ((q_scale * tl.exp(gamma))[:, None] * q.to(tl.float32) - mma(m, x)) * decay_since
        o = mma(round_to(left, dot_dtype), snapshot) + mma(m, round_to(beta[:, None] * v, dot_dtype))
        mask = ((t0 + rows) < T)[:, None] & (cv < V)[None, :]
        tl.store(o_ptr + (b * T * HV + hv) * V + (t0 + rows)[:, None] * (HV * V) + cv[None, :],
                 round_to(o * scale, o_ptr.dtype.element_ty), mask=mask)


def chunk_output(q, k, v, g, beta, t_inv, snapshots, schedule, *, scale, normalize, out_dtype):
    """Returns o [B,T,HV,V] in out_dtype."""
    batch, tokens, key_heads, key_dim = q.shape
    value_heads, value_dim = v.shape[2], v.shape[3]
    n_chunks = t_inv.shape[2]
    o = torch.empty(batch, tokens, value_heads, value_dim, device=q.device, dtype=out_dtype)
    grid = lambda meta: (batch * triton.cdiv(n_chunks, meta["GROUP"]) * value_heads,)  # noqa: E731
    chunk_output_kernel[grid](
        q, k, v, g, beta, t_inv, snapshots, schedule.snapshot_of_chunk, schedule.log_decay_since, o, scale,
        tokens, n_chunks, key_heads, value_heads, key_dim, value_dim,
        BK=max(16, triton.next_power_of_2(key_dim)), BV=max(16, triton.next_power_of_2(value_dim)),
        NORMALIZE=normalize)
    return o
