"""Selector policies and the shared budget (docs/CONTRACT.md section 4)."""
import math

import pytest
import torch
from gdn_inputs import random_inputs, rel_err

import sparsegdn
from sparsegdn import selection
from sparsegdn.api import prepare


@pytest.mark.parametrize("selector", ["score", "uniform", "random", "oracle"])
@pytest.mark.parametrize("budget", [0.01, 0.15, 0.29, 0.5, 0.77, 1.0])
def test_exact_event_count_per_batch_row(selector, budget):
    q, k, v, g, beta, _ = random_inputs(2, 300, 2, 4, dtype=torch.float32)
    n_chunks = 5
    _, _, info = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, budget=budget, selector=selector,
                                                   backend="torch")
    expected = max(1, math.ceil(budget * 4 * n_chunks - 1e-9))
    assert info.events.shape == (2, 4, n_chunks) and info.events.dtype == torch.bool
    assert info.events.sum(dim=(1, 2)).tolist() == [expected, expected]
    assert torch.equal(info.budget_per_head, info.events.sum(-1))
    assert info.scores.shape == (2, 4, n_chunks) and info.scores.is_floating_point()


def test_event_count_is_robust_to_float_noise():
    assert selection.event_count(0.07, 10, 10) == 7
    assert selection.event_count(0.29, 32, 64) == 594
    assert selection.event_count(1e-9, 32, 64) == 1
    assert selection.event_count(1.0, 32, 2048) == 32 * 2048


def test_uniform_gives_equal_counts_evenly_spaced():
    events = selection.uniform_events(1, 8, 40, 8 * 10 + 3)
    counts = events.sum(-1)[0].tolist()
    assert counts == [11, 11, 11, 10, 10, 10, 10, 10]
    chunks = events[0, 7].nonzero().flatten()
    assert torch.equal(chunks, torch.arange(2, 40, 4))


def _uniform_by_head(batch, heads, n_chunks, count):
    """uniform_events' rule written out one head pair at a time."""
    events = torch.zeros(batch, heads, n_chunks, dtype=torch.bool)
    base, extra = divmod(count, heads)
    for head in range(heads):
        m = base + (1 if head < extra else 0)
        for i in range(m):
            events[:, head, int((i + 0.5) * n_chunks / m)] = True
    return events


@pytest.mark.parametrize("batch,heads,n_chunks,count", [(1, 8, 40, 83), (2, 32, 2048, 594 * 32), (1, 32, 512, 5),
                                                        (3, 6, 7, 42), (1, 4, 9, 0), (2, 3, 1000, 1999)])
def test_uniform_events_follow_the_rule_for_every_head_pair(batch, heads, n_chunks, count):
    """All head pairs at once (no loop of launches) give the rule's chunks: counts that differ by at most one, the
    first head pairs taking the extra, chunk i of m at floor((i + 1/2) NC / m); head pairs with no event included."""
    events = selection.uniform_events(batch, heads, n_chunks, count)
    assert events.shape == (batch, heads, n_chunks) and events.dtype == torch.bool
    assert int(events[0].sum()) == count
    assert torch.equal(events, _uniform_by_head(batch, heads, n_chunks, count))


def test_random_is_seeded():
    q, k, v, g, beta, _ = random_inputs(1, 640, 2, 4, dtype=torch.float32)
    runs = [sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, selector="random", seed=s, backend="torch")[2].events
            for s in (1, 1, 2)]
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])


def test_score_shares_the_budget_unevenly_across_head_pairs():
    q, k, v, g, beta, _ = random_inputs(1, 1024, 2, 4, dtype=torch.float32, seed=4)
    g[..., :2] *= 0.01          # head pairs 0, 1 decay slowly: their commits live long
    g[..., 2:] = g[..., 2:] * 10 - 0.5   # head pairs 2, 3 forget within a chunk
    _, _, info = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, budget=0.29, backend="torch")
    per_head = info.budget_per_head[0].tolist()
    assert per_head[0] + per_head[1] > per_head[2] + per_head[3], per_head


def test_score_follows_the_written_magnitude():
    q, k, v, g, beta, _ = random_inputs(1, 640, 2, 2, dtype=torch.float32, seed=8)
    beta[:] = 0.02
    beta[0, 64 * 3:64 * 4, 1] = 0.95          # one strong burst in head pair 1, chunk 3
    _, _, info = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, budget=0.15, backend="torch")
    # three events: the burst, and each head pair's last chunk, which carries the final-state weight
    assert info.events.sum() == 3 and bool(info.events[0, 1, 3]) and bool(info.events[:, :, 9].all())
    others = torch.cat([info.scores[0, 1, :3], info.scores[0, 1, 4:9], info.scores[0, 0, :9]])
    assert info.scores[0, 1, 3] > 5 * others.max()


def test_oracle_ranks_by_true_commit_norm():
    q, k, v, g, beta, _ = random_inputs(1, 320, 2, 4, dtype=torch.float64, seed=2)
    _, _, info = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, selector="oracle", budget=0.3, backend="torch")
    chosen = info.scores[info.events]
    rejected = info.scores[~info.events]
    assert chosen.min() >= rejected.max()
    # the recorded norm is the norm of the chunk's commit minus its decay-only state, recomputed here
    from sparsegdn import reference
    qp, kp, vp, gp, bp = prepare(q, k, v, g, beta, True)
    all_events = torch.ones(1, 4, 5, dtype=torch.bool)
    states = []
    for c in range(6):
        ev = all_events.clone()
        ev[:, :, c:] = False
        states.append(reference.chunk_forward(qp[:, :64 * c or 1], kp[:, :64 * c or 1], vp[:, :64 * c or 1],
                                              gp[:, :64 * c or 1], bp[:, :64 * c or 1], all_events[:, :, :max(c, 1)],
                                              band=3, scale=0.25)[1] if c else torch.zeros(1, 4, 16, 16,
                                                                                          dtype=torch.float64))
    c = 2
    gamma_last = g[0, 64 * c:64 * (c + 1)].sum(0)              # [HV]
    decayed = gamma_last.exp()[None, :, None, None] * states[c]
    commit_norm = (states[c + 1] - decayed).flatten(-2).norm(dim=-1)
    assert torch.allclose(info.scores[:, :, c].double(), commit_norm, rtol=1e-6)


@pytest.mark.parametrize("family_seed", [0, 1, 2])
def test_score_beats_uniform_and_random_on_structured_inputs(family_seed):
    """The dynamic selector's reason to exist, measured: lower output error at the same budget."""
    q, k, v, g, beta, _ = random_inputs(1, 1536, 2, 8, key_dim=32, value_dim=32, dtype=torch.float32,
                                        seed=family_seed)
    g = g * torch.logspace(-2, 0.5, 8)      # head pairs from slow to fast decay
    v = v * torch.logspace(0, 1, 8).flip(0)[None, None, :, None]
    o_dense, _ = sparsegdn.dense_gated_delta_rule(q, k, v, g, beta, backend="torch")
    errors = {}
    for selector in ("score", "uniform", "random"):
        o, _, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, selector=selector, budget=0.29, band=3,
                                                    seed=family_seed, backend="torch")
        errors[selector] = rel_err(o, o_dense)
    assert errors["score"] < errors["uniform"] and errors["score"] < errors["random"], errors


BACKENDS = ["torch", pytest.param("triton", marks=pytest.mark.skipif(
    not sparsegdn.config.triton_available(), reason="needs CUDA or TRITON_INTERPRET=1"))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_events_of_a_batch_row_equal_that_row_run_alone(backend):
    """`random` draws its keys from the seed and the row's shape only: no row depends on the others."""
    q, k, v, g, beta, _ = random_inputs(3, 200, 1, 2, dtype=torch.float32, seed=5)
    o, _, info = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, selector="random", seed=7, budget=0.4,
                                                   backend=backend)
    for row in range(3):
        alone = slice(row, row + 1)
        o_row, _, info_row = sparsegdn.sparse_gated_delta_rule(
            q[alone], k[alone], v[alone], g[alone], beta[alone], selector="random", seed=7, budget=0.4,
            backend=backend)
        assert torch.equal(info.events[alone], info_row.events), f"row {row}: other rows changed its events"
        assert torch.equal(info.scores[alone], info_row.scores)
        assert rel_err(o[alone], o_row) <= 1e-6, f"row {row}: rel err {rel_err(o[alone], o_row):.2e}"
