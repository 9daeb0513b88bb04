"""The CPU fast path (sparsegdn.event_forward) against the chunked reference and the token recurrence.

The fast path steps the recurrence over committed events only and batches everything else; it must
compute what the reference computes, to rounding, for every band, event mask and shape.
"""
import pytest
import torch
from gdn_inputs import random_events, random_inputs, rel_err

import sparsegdn
from sparsegdn import event_forward, reference
from sparsegdn.api import prepare
from sparsegdn.event_forward import event_chunk_forward
from sparsegdn.recurrence import token_recurrence

SHAPES = [  # (B, T, H, HV)
    (1, 64, 2, 2),      # one full chunk, no GVA
    (2, 150, 2, 4),     # ragged T, B > 1, HV = 2H
    (1, 37, 1, 4),      # T < 64, HV = 4H
    (2, 330, 2, 8),     # HV = 4H, six chunks, ragged
]
MASKS = ["random", "none", "all"]
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}


def make_events(kind, batch, value_heads, n_chunks, seed):
    if kind == "random":
        return random_events(batch, value_heads, n_chunks, seed=seed)
    return torch.full((batch, value_heads, n_chunks), kind == "all")


def both_paths(q, k, v, g, beta, events, band, initial_state, scale=0.3):
    """(fast, reference) results on the same prepared inputs, commit norms included."""
    prepared = prepare(q, k, v, g, beta, True)
    fast = event_chunk_forward(*prepared, events, band=band, scale=scale, initial_state=initial_state,
                               record_commit_norms=True)
    ref = reference.chunk_forward(*prepared, events, band=band, scale=scale, initial_state=initial_state,
                                  record_commit_norms=True)
    return fast, ref


def assert_same(fast, ref, tolerance):
    for name, a, b in zip(("o", "final state", "commit norms"), fast, ref):
        assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape, a.dtype, b.dtype)
        if not b.any():   # nothing committed and no initial state: the state stays exactly zero
            assert not a.any(), f"{name}: expected zeros, got norm {a.norm():.2e}"
            continue
        assert rel_err(a, b) <= tolerance, f"{name}: relative error {rel_err(a, b):.2e} > {tolerance:.0e}"


@pytest.mark.parametrize("batch,tokens,key_heads,value_heads", SHAPES)
@pytest.mark.parametrize("band", [0, 1, 2, 3])
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_matches_reference_for_every_band_and_mask(batch, tokens, key_heads, value_heads, band, mask, dtype):
    initial_state = tokens % 2 == 0
    q, k, v, g, beta, s0 = random_inputs(batch, tokens, key_heads, value_heads, dtype=dtype,
                                         initial_state=initial_state)
    events = make_events(mask, batch, value_heads, sparsegdn.num_chunks(tokens), seed=tokens + band)
    fast, ref = both_paths(q, k, v, g, beta, events, band, s0)
    assert_same(fast, ref, TOLERANCE[dtype])


@pytest.mark.parametrize("band", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_wide_heads_match_reference(band, dtype):
    """K + V > 64: the exact solve goes through the inverse and one product instead of a wide
    triangular solve."""
    q, k, v, g, beta, s0 = random_inputs(2, 300, 2, 4, key_dim=48, value_dim=40, dtype=dtype,
                                         initial_state=True)
    fast, ref = both_paths(q, k, v, g, beta, random_events(2, 4, 5, seed=band), band, s0)
    assert_same(fast, ref, TOLERANCE[dtype])


@pytest.mark.parametrize("slab_values", [1, 16384, 24576])   # 1, 2 and 3 chunks per slab
@pytest.mark.parametrize("band", [1, 3])
@pytest.mark.parametrize("mask", MASKS)
def test_slabs_hand_the_snapshot_on(monkeypatch, slab_values, band, mask):
    """Slabs smaller than the sequence: each enters with the last snapshot and the decay since it,
    including slabs where a head pair commits nothing."""
    monkeypatch.setattr(event_forward, "SLAB_VALUES", slab_values)
    q, k, v, g, beta, s0 = random_inputs(2, 700, 1, 2, initial_state=True)
    events = make_events(mask, 2, 2, 11, seed=slab_values)
    if mask == "random":
        events[0, 0] = False
        events[0, 0, 9] = True       # one head pair commits once, late: many slabs of decay only
    fast, ref = both_paths(q, k, v, g, beta, events, band, s0)
    assert_same(fast, ref, 1e-10)


@pytest.mark.parametrize("batch,tokens,key_heads,value_heads", SHAPES)
@pytest.mark.parametrize("mask", MASKS)
def test_band3_matches_token_recurrence(batch, tokens, key_heads, value_heads, mask):
    q, k, v, g, beta, s0 = random_inputs(batch, tokens, key_heads, value_heads, initial_state=True)
    events = make_events(mask, batch, value_heads, sparsegdn.num_chunks(tokens), seed=tokens)
    o, state, _ = event_chunk_forward(*prepare(q, k, v, g, beta, True), events, band=3, scale=16 ** -0.5,
                                      initial_state=s0)
    o_ref, state_ref = token_recurrence(q, k, v, g, beta, events, initial_state=s0)
    assert rel_err(o, o_ref) <= 1e-10, rel_err(o, o_ref)
    assert rel_err(state, state_ref) <= 1e-10, rel_err(state, state_ref)


@pytest.mark.parametrize("selector", ["score", "uniform", "random", "oracle", "all"])
@pytest.mark.parametrize("band", [1, 3])
def test_the_public_torch_path_is_the_reference(selector, band):
    """sparse_gated_delta_rule(backend="torch") runs event_forward; the reference's stage functions
    on the same events give the same outputs and final state."""
    q, k, v, g, beta, s0 = random_inputs(2, 200, 2, 4, initial_state=True)
    o, state, info = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, budget=0.4, selector=selector, band=band,
                                                       initial_state=s0, output_final_state=True, backend="torch")
    o_ref, state_ref, _ = reference.chunk_forward(*prepare(q, k, v, g, beta, True), info.events, band=band,
                                                  scale=16 ** -0.5, initial_state=s0)
    assert rel_err(o, o_ref) <= 1e-10, rel_err(o, o_ref)
    assert rel_err(state, state_ref.float()) <= 1e-6, rel_err(state, state_ref)


def test_the_dense_torch_core_is_the_exact_operator():
    """dense_gated_delta_rule(backend="torch") runs event_forward with every event and band 3: the
    token-by-token recurrence of the dense operator, to rounding."""
    q, k, v, g, beta, s0 = random_inputs(2, 200, 2, 4, initial_state=True)
    o_dense, s_dense = sparsegdn.dense_gated_delta_rule(q, k, v, g, beta, initial_state=s0,
                                                        output_final_state=True, backend="torch")
    o_ref, s_ref = token_recurrence(q, k, v, g, beta, torch.ones(2, 4, 4, dtype=torch.bool), initial_state=s0)
    assert rel_err(o_dense, o_ref) <= 1e-10 and rel_err(s_dense, s_ref.float()) <= 1e-6


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_strong_decay_matches_reference(dtype):
    """Log decays of -5 to -20 per token: chunk decays far below e^-80, where the fast path floors
    exp (kept out of the subnormal range) and the reference does not."""
    q, k, v, g, beta, s0 = random_inputs(1, 260, 2, 4, dtype=dtype, initial_state=True)
    g = g * 60.0 - 5.0
    events = random_events(1, 4, 5, seed=2)
    fast, ref = both_paths(q, k, v, g, beta, events, 1, s0)
    assert_same(fast, ref, TOLERANCE[dtype])


def test_without_qk_normalisation_and_with_a_scale():
    q, k, v, g, beta, s0 = random_inputs(2, 190, 2, 8, initial_state=True)
    prepared = prepare(q, k * 0.3, v, g, beta, False)
    events = random_events(2, 8, 3, seed=4)
    fast = event_chunk_forward(*prepared, events, band=2, scale=0.7, initial_state=s0)
    ref = reference.chunk_forward(*prepared, events, band=2, scale=0.7, initial_state=s0)
    assert rel_err(fast[0], ref[0]) <= 1e-10 and rel_err(fast[1], ref[1]) <= 1e-10


@pytest.mark.parametrize("slab_values", [1, 1 << 19])
def test_recurrence_steps_once_per_event(monkeypatch, slab_values):
    """The sequential work follows the events: one head-pair step per selected event, none per
    skipped chunk, however unevenly the events fall on head pairs and slabs."""
    monkeypatch.setattr(event_forward, "SLAB_VALUES", slab_values)
    steps = []
    commit = event_forward._commit

    def counting_commit(snapshot, *args, **kwargs):
        steps.append(snapshot.shape[0])
        return commit(snapshot, *args, **kwargs)

    monkeypatch.setattr(event_forward, "_commit", counting_commit)
    q, k, v, g, beta, _ = random_inputs(2, 640, 2, 4, dtype=torch.float32)
    events = random_events(2, 4, 10, seed=7, p=0.3)
    events[1, 2] = True                     # one head pair commits every chunk
    events[0, 1] = False                    # one never does
    event_chunk_forward(*prepare(q, k, v, g, beta, True), events, band=1, scale=0.25)
    assert sum(steps) == int(events.sum())
    if slab_values > 1:                      # one slab: a step per commit rank
        assert len(steps) == int(events.sum(-1).max())


def test_inputs_are_left_unchanged():
    """The fast path works in place on its own temporaries only."""
    q, k, v, g, beta, s0 = random_inputs(1, 130, 2, 4, dtype=torch.float32, initial_state=True)
    prepared = prepare(q, k, v, g, beta, True)
    copies = [x.clone() for x in (*prepared, s0)]
    event_chunk_forward(*prepared, random_events(1, 4, 3), band=1, scale=0.25, initial_state=s0,
                        record_commit_norms=True)
    for before, after in zip(copies, (*prepared, s0)):
        assert torch.equal(before, after)
