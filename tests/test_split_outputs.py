"""The outputs split over two launches by whether a chunk starts from a zero state (forward.SPLIT_OUTPUTS): the one
launch with the commit chains and the chunks with a state (state_output with skip_own), then the zero-state chunks'
own outputs (chunk_output.own_outputs). Interpreter shapes; tests/test_triton_gpu_matrix.py runs it on a GPU."""
import pytest
import torch
from gdn_inputs import random_events, random_inputs, rel_err

import sparsegdn

pytestmark = [pytest.mark.skipif(not sparsegdn.config.triton_available(),
                                 reason="needs triton with CUDA or TRITON_INTERPRET=1"),
              pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter shapes; the GPU matrix covers GPUs")]


def skewed_events(batch, heads, n_chunks, seed):
    """Random events with head pairs that never commit, commit late, and commit from their first chunk."""
    events = random_events(batch, heads, n_chunks, seed=seed, p=0.4)
    events[0, 0, : n_chunks // 2] = False
    events[0, 1] = False
    events[-1, heads - 1, 0] = True
    return events


def run(monkeypatch, split, inputs, events, band, initial=False, **switches):
    """The Triton backend's (o, final state, info) with SPLIT_OUTPUTS set to `split`, o filled with NaN before the
    launches; info.own_calls counts the calls of chunk_output.own_outputs (the split's second launch)."""
    from sparsegdn.triton import forward, state_output
    calls = []

    def own_outputs(*args, **kwargs):
        calls.append(1)
        return chunk_own_outputs(*args, **kwargs)
    chunk_own_outputs = forward.own_outputs
    monkeypatch.setattr(forward, "own_outputs", own_outputs)
    monkeypatch.setattr(forward, "SPLIT_OUTPUTS", split)
    monkeypatch.setattr(state_output, "POISON", True)       # a chunk that no launch writes stays NaN
    for name, value in switches.items():
        monkeypatch.setattr(forward, name, value)
    q, k, v, g, beta, s0 = inputs
    out = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=band,
                                            initial_state=s0 if initial else None, output_final_state=True,
                                            backend="triton")
    monkeypatch.undo()
    return out[0], out[1], len(calls)


@pytest.mark.parametrize("band,dtype", [(1, torch.float32), (3, torch.float32), (0, torch.bfloat16)])
def test_split_outputs_equal_the_one_launch(band, dtype, monkeypatch):
    """Without an initial state, every chunk is written by one of the two launches (o starts as NaN), with what the
    one launch computes (the same chains: the final states equal) and what the torch backend computes; B = 2, a
    ragged last chunk, two value heads a key head, head sizes apart."""
    inputs = random_inputs(2, 600, 2, 4, 32, 16, dtype=dtype, initial_state=True)
    events = skewed_events(2, 4, sparsegdn.num_chunks(600), seed=band)
    q, k, v, g, beta, _ = inputs
    ref = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=band, output_final_state=True,
                                            backend="torch")
    split = run(monkeypatch, True, inputs, events, band)
    whole = run(monkeypatch, False, inputs, events, band)
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    assert (split[2], whole[2]) == (1, 0)                  # the split did run its second launch
    assert torch.isfinite(split[0]).all(), "a chunk neither launch wrote"
    assert torch.equal(split[1], whole[1])
    assert rel_err(split[0], whole[0]) <= tolerance, rel_err(split[0], whole[0])
    assert rel_err(split[0], ref[0]) <= 2 * tolerance, rel_err(split[0], ref[0])
    assert rel_err(split[1], ref[1]) <= 2 * tolerance, rel_err(split[1], ref[1])


def test_split_outputs_with_warm_up_segments(monkeypatch):
    """The one launch's chains cut into warm-up segments (forward.COMMIT_SEGMENT, WARM_UP) with a bound no decay
    reaches: the outputs and final states of the whole chains in one launch."""
    inputs = random_inputs(1, 640, 1, 2, 16, 16, dtype=torch.float32, initial_state=True)
    events = skewed_events(1, 2, sparsegdn.num_chunks(640), seed=5)
    events[0, 0, 5:] = True
    split = run(monkeypatch, True, inputs, events, 1, COMMIT_SEGMENT=2, WARM_UP=1e6)
    whole = run(monkeypatch, False, inputs, events, 1, COMMIT_SEGMENT=0, WARM_UP=0.0)
    assert split[2] == 1 and torch.isfinite(split[0]).all()
    assert rel_err(split[0], whole[0]) <= 1e-5 and rel_err(split[1], whole[1]) <= 1e-5


def test_an_initial_state_keeps_the_one_launch(monkeypatch):
    """With an initial state no chunk starts from zero: the call takes the one launch (the same values), and the
    one launch refuses to leave chunks to own_outputs in such a call."""
    from sparsegdn.triton import state_output
    inputs = random_inputs(1, 300, 1, 2, 16, 16, dtype=torch.float32, initial_state=True)
    events = skewed_events(1, 2, sparsegdn.num_chunks(300), seed=3)
    split = run(monkeypatch, True, inputs, events, 1, initial=True)
    whole = run(monkeypatch, False, inputs, events, 1, initial=True)
    assert split[2] == 0                                    # no zero-state chunk: the one launch alone
    assert torch.equal(split[0], whole[0]) and torch.equal(split[1], whole[1])
    with pytest.raises(ValueError, match="needs them"):
        state_output.state_output(*[None] * 10, inputs[5], None, store_final=True, scale=1.0, normalize=True,
                                  out_dtype=torch.float32, band=1, skip_own=True)
