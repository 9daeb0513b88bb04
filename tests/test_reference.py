"""The chunked torch reference against the independent token-by-token recurrence (docs/CONTRACT.md sections 1-3)."""
import pytest
import torch
from gdn_inputs import random_events, random_inputs, rel_err

import sparsegdn
from sparsegdn import reference
from sparsegdn.recurrence import token_recurrence

SHAPES = [  # (B, T, H, HV)
    (1, 64, 2, 2),      # one full chunk, no GVA
    (2, 150, 2, 4),     # ragged T, B > 1, HV = 2H
    (1, 37, 1, 4),      # T < 64, HV = 4H
    (1, 200, 2, 8),     # HV = 4H, four chunks
]


@pytest.mark.parametrize("batch,tokens,key_heads,value_heads", SHAPES)
@pytest.mark.parametrize("initial_state", [False, True])
def test_dense_matches_token_recurrence_float64(batch, tokens, key_heads, value_heads, initial_state):
    q, k, v, g, beta, s0 = random_inputs(batch, tokens, key_heads, value_heads, initial_state=initial_state)
    o, state = sparsegdn.dense_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True,
                                                backend="torch")
    o_ref, state_ref = token_recurrence(q, k, v, g, beta, initial_state=s0)
    assert o.dtype == torch.float64 and state.dtype == torch.float32
    assert rel_err(o, o_ref) <= 1e-10, rel_err(o, o_ref)
    assert rel_err(state, state_ref) <= 1e-6, rel_err(state, state_ref)   # float32 by contract


@pytest.mark.parametrize("batch,tokens,key_heads,value_heads", SHAPES)
@pytest.mark.parametrize("dtype,tolerance", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_sparse_random_masks_match_token_recurrence(batch, tokens, key_heads, value_heads, dtype, tolerance):
    q, k, v, g, beta, s0 = random_inputs(batch, tokens, key_heads, value_heads, dtype=dtype, initial_state=True)
    events = random_events(batch, value_heads, sparsegdn.num_chunks(tokens), seed=tokens)
    o, state, info = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=3, initial_state=s0,
                                                       output_final_state=True, backend="torch")
    o_ref, state_ref = token_recurrence(q, k, v, g, beta, events, initial_state=s0)
    assert torch.equal(info.events, events)
    assert rel_err(o, o_ref) <= tolerance, rel_err(o, o_ref)
    assert rel_err(state, state_ref) <= max(tolerance, 1e-6), rel_err(state, state_ref)


def test_skipping_events_changes_the_result():
    """Guards against a mask that is silently ignored."""
    q, k, v, g, beta, _ = random_inputs(1, 256, 2, 4, seed=3)
    o_all, _ = sparsegdn.dense_gated_delta_rule(q, k, v, g, beta, backend="torch")
    events = torch.zeros(1, 4, 4, dtype=torch.bool)
    events[:, :, 2] = True
    o, _, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=3, backend="torch")
    o_ref, _ = token_recurrence(q, k, v, g, beta, events)
    assert rel_err(o, o_all) > 1e-3
    assert rel_err(o, o_ref) <= 1e-10
    # the first chunk's outputs never depend on any commit
    assert rel_err(o[:, :64], o_all[:, :64]) <= 1e-12


def test_band3_with_every_event_is_the_dense_operator():
    q, k, v, g, beta, s0 = random_inputs(2, 130, 2, 4, initial_state=True)
    o_dense, s_dense = sparsegdn.dense_gated_delta_rule(q, k, v, g, beta, initial_state=s0,
                                                        output_final_state=True, backend="torch")
    o, s, info = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, selector="all", band=3, initial_state=s0,
                                                   output_final_state=True, backend="torch")
    assert bool(info.events.all())
    assert rel_err(o, o_dense) <= 1e-12 and rel_err(s, s_dense) <= 1e-7


def test_without_qk_normalisation_and_with_scale():
    q, k, v, g, beta, _ = random_inputs(1, 90, 2, 4)
    k = k * 0.3  # keep the unnormalised recurrence stable
    o, _ = sparsegdn.dense_gated_delta_rule(q, k, v, g, beta, scale=0.7, use_qk_l2norm_in_kernel=False,
                                            backend="torch")
    o_ref, _ = token_recurrence(q, k, v, g, beta, scale=0.7, use_qk_l2norm=False)
    assert rel_err(o, o_ref) <= 1e-10


def test_bfloat16_inputs_keep_dtypes_and_stay_close():
    q, k, v, g, beta, s0 = random_inputs(1, 128, 2, 4, dtype=torch.bfloat16, initial_state=True)
    o, s, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True,
                                                backend="torch")
    assert o.dtype == torch.bfloat16 and s.dtype == torch.float32 and g.dtype == torch.float32
    events = torch.ones(1, 4, 2, dtype=torch.bool)
    o_dense, _, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=3, initial_state=s0,
                                                      backend="torch")
    o_ref, _ = token_recurrence(q, k, v, g, beta, initial_state=s0)
    assert rel_err(o_dense, o_ref) <= 1e-2


# ---- bands 0-2 against an explicit block construction ------------------------------------------------

def explicit_banded_inverse(a: torch.Tensor, band: int) -> torch.Tensor:
    """(I + A)^-1 of one strictly lower 64x64 chunk matrix, built 16x16 block by block.

    Block forward substitution: X_ii = D_i = (I + A_ii)^-1 and
    X_ij = -D_i sum_{j<=m<i} A_im X_mj, then the blocks farther than `band` from the diagonal are dropped.
    """
    n, size = 4, 16
    blk = lambda m, i, j: m[i * size:(i + 1) * size, j * size:(j + 1) * size]  # noqa: E731
    eye = torch.eye(size, dtype=a.dtype)
    diag = [torch.linalg.inv(eye + blk(a, i, i)) for i in range(n)]
    x = torch.zeros_like(a)
    for i in range(n):
        blk(x, i, i).copy_(diag[i])
        for j in range(i - 1, -1, -1):
            acc = sum(blk(a, i, m) @ blk(x, m, j) for m in range(j, i))
            blk(x, i, j).copy_(-diag[i] @ acc)
    for i in range(n):
        for j in range(n):
            if i - j > band:
                blk(x, i, j).zero_()
    return x


def explicit_banded_forward(q, k, v, g, beta, band, scale):
    """The docs/CONTRACT.md section 3 formulas, one head pair and one chunk at a time (no GVA, all events)."""
    _, tokens, heads, key_dim = q.shape
    q, k = reference.l2norm(q), reference.l2norm(k)
    o = torch.zeros_like(v)
    for h in range(heads):
        state = torch.zeros(key_dim, v.shape[-1], dtype=q.dtype)
        for start in range(0, tokens, 64):
            sl = slice(start, min(start + 64, tokens))
            length = sl.stop - sl.start
            kc, vc, qc = k[0, sl, h], v[0, sl, h], q[0, sl, h]
            pad = lambda x: torch.cat([x, x.new_zeros((64 - length,) + x.shape[1:])])  # noqa: E731
            kc, vc, qc, bc = pad(kc), pad(vc), pad(qc), pad(beta[0, sl, h])
            gamma = pad(g[0, sl, h]).cumsum(0)
            diff = gamma[:, None] - gamma[None, :]
            a = torch.tril(bc[:, None] * (kc @ kc.T) * torch.where(diff <= 0, diff.exp(), 0 * diff), -1)
            t_inv = explicit_banded_inverse(a, band)
            w = t_inv @ ((bc * gamma.exp())[:, None] * kc)
            u = t_inv @ (bc[:, None] * vc)
            v_new = u - w @ state
            local = torch.tril((qc @ kc.T) * torch.where(diff <= 0, diff.exp(), 0 * diff))
            out = scale * ((qc * gamma.exp()[:, None]) @ state + local @ v_new)
            o[0, sl, h] = out[:length]
            state = gamma[-1].exp() * state + (kc * (gamma[-1] - gamma).exp()[:, None]).T @ v_new
    return o


@pytest.mark.parametrize("band", [0, 1, 2, 3])
def test_bands_match_explicit_block_construction(band):
    q, k, v, g, beta, _ = random_inputs(1, 150, 2, 2, key_dim=16, value_dim=8)
    events = torch.ones(1, 2, 3, dtype=torch.bool)
    o, _, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=band, backend="torch")
    o_explicit = explicit_banded_forward(q, k, v, g, beta, band, scale=16 ** -0.5)
    assert rel_err(o, o_explicit) <= 1e-10, rel_err(o, o_explicit)


def test_narrower_bands_drift_further_from_exact():
    q, k, v, g, beta, _ = random_inputs(1, 256, 2, 4, seed=11)
    k = k.clone()
    k[:, :, :, 0] += 3.0   # correlated keys make the far blocks of the inverse matter
    o_exact, _ = sparsegdn.dense_gated_delta_rule(q, k, v, g * 0.05, beta, backend="torch")
    errors = []
    for band in (0, 1, 2, 3):
        o, _, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g * 0.05, beta, selector="all", band=band,
                                                    backend="torch")
        errors.append(rel_err(o, o_exact))
    assert errors[3] <= 1e-12
    assert errors[0] > errors[1] > errors[2] > errors[3], errors


def test_adjacent_block_formula():
    """Band 1's off-diagonal blocks equal -D_{i+1} A_{i+1,i} D_i (no far block is needed)."""
    gen = torch.Generator().manual_seed(5)
    k = reference.l2norm(torch.randn(64, 16, generator=gen, dtype=torch.float64))
    beta = torch.rand(64, generator=gen, dtype=torch.float64)
    a = torch.tril(beta[:, None] * (k @ k.T), -1)
    eye = torch.eye(64, dtype=torch.float64)
    exact = torch.linalg.inv(eye + a)
    for i in range(3):
        rows, cols = slice(16 * (i + 1), 16 * (i + 2)), slice(16 * i, 16 * (i + 1))
        d_next = torch.linalg.inv(torch.eye(16, dtype=torch.float64) + a[rows, rows])
        d_this = torch.linalg.inv(torch.eye(16, dtype=torch.float64) + a[cols, cols])
        assert torch.allclose(exact[rows, cols], -d_next @ a[rows, cols] @ d_this, atol=1e-12)
