"""The output roles' decays as row and column factors (band_solve.DECAY_SCALES, decayed_products) where a chunk's
cumulative log decay spreads less than band_solve.DECAY_SPREAD around its middle, the 64 x 64 grid elsewhere:
the same outputs as the grid (interpreter shapes; the switch is read at compile time on a GPU)."""
import pytest
import torch
import triton.language as tl
from gdn_inputs import random_events, random_inputs, rel_err

import sparsegdn

pytestmark = [pytest.mark.skipif(not sparsegdn.config.triton_available(),
                                 reason="needs triton with CUDA or TRITON_INTERPRET=1"),
              pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter shapes; the GPU matrix covers GPUs")]


def mixed_speed_inputs():
    """float32 inputs, four head pairs: one decaying slowly (a chunk's spread ~0.3 around its middle: the factors),
    one at exactly 2.2 a token (a spread of 68-70: the factors, near their bound of 80), one fast (2-6 a token: the
    grid), one with a first token of -5,000 in every chunk and slow decays after it (a small spread at a level past
    DECAY_LEVEL: the grid); events that leave zero-state chunks."""
    inputs = random_inputs(1, 320, 1, 4, 16, 16, dtype=torch.float32, initial_state=True)
    g = -torch.tensor([0.01, 0.0, 4.0, 0.01]) * torch.rand(inputs[3].shape).add(0.5)
    g[..., 1] = -2.2
    g[0, ::64, 3] = -5000.0
    inputs[3] = g
    events = random_events(1, 4, sparsegdn.num_chunks(320), seed=3, p=0.5)
    events[0, :, :2] = False
    return inputs, events


@pytest.mark.parametrize("split", [False, True], ids=["one-launch", "split-outputs"])
def test_decay_factors_give_the_grids_outputs(split, monkeypatch):
    """Both output roles (the one launch's, the split's own outputs) with and without the factors: equal to float32's
    rounding (not bit for bit: the factors round otherwise), and to the torch backend; with and without an initial
    state."""
    from sparsegdn.triton import chunk_output, forward
    monkeypatch.setattr(forward, "SPLIT_OUTPUTS", split)
    (q, k, v, g, beta, s0), events = mixed_speed_inputs()
    gamma = g[0, :64].cumsum(0)
    spread = (gamma - gamma[31]).abs().max(0).values
    assert spread[0] < 1 and 60 < spread[1] < 80 and spread[2] > 100 and spread[3] < 1 and gamma[31, 3] < -1024
    out = {}
    for scales in (False, True):
        monkeypatch.setattr(chunk_output, "DECAY_SCALES", tl.constexpr(scales))
        for initial in (None, s0):
            out[scales, initial is None] = sparsegdn.sparse_gated_delta_rule(
                q, k, v, g, beta, events=events, band=1, initial_state=initial, output_final_state=True,
                backend="triton")
    for no_initial in (True, False):
        ref = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=1,
                                                initial_state=None if no_initial else s0, output_final_state=True,
                                                backend="torch")
        grid, factors = out[False, no_initial], out[True, no_initial]
        assert not torch.equal(factors[0], grid[0])                   # the switch took: other roundings
        assert rel_err(factors[0], grid[0]) <= 1e-5, rel_err(factors[0], grid[0])
        assert torch.equal(factors[1], grid[1])                       # the chains do not use the output roles
        assert rel_err(factors[0], ref[0]) <= 2e-3, rel_err(factors[0], ref[0])
