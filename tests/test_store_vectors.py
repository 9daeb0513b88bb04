"""Pass 1's chunk vectors (forward.STORE_VECTORS: gamma and k's inverse norms stored by intra_chunk, read by the output
roles instead of computed there): the same values the roles compute, so the same outputs bit for bit, in the one
launch, the split outputs and the two-launch path (interpreter shapes)."""
import pytest
import torch
from gdn_inputs import random_events, random_inputs

import sparsegdn

pytestmark = [pytest.mark.skipif(not sparsegdn.config.triton_available(),
                                 reason="needs triton with CUDA or TRITON_INTERPRET=1"),
              pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter shapes; the GPU matrix covers GPUs")]


@pytest.mark.parametrize("design", ["one-launch", "split-outputs", "two-launches"])
def test_stored_vectors_give_the_computed_outputs(design, monkeypatch):
    """With and without the stored vectors: o and the final state equal bit for bit (the stored values are the ones
    the roles compute), with and without an initial state, normalised keys and raw ones, a ragged last chunk; the
    vectors were asked for and handed back (a spy on intra_chunk), and read (doubled norms move the outputs)."""
    from sparsegdn.triton import forward
    monkeypatch.setattr(forward, "SPLIT_OUTPUTS", design == "split-outputs")
    monkeypatch.setattr(forward, "OVERLAP", design != "two-launches")
    asked = []
    real = forward.intra_chunk
    perturb = None

    def recorded(*args, **kwargs):
        result = real(*args, **kwargs)
        asked.append((kwargs["store_vectors"], result[-1] is not None))
        if perturb == 0:                      # a stored vector changed: the outputs must move if the roles read it
            result[-1][:, :, :, 0] -= torch.linspace(0, 1, 64)          # gamma: a chunk's decays by up to e^-1 more
        elif perturb == 1:
            result[-1][:, :, :, 1] *= 1.5                               # k's inverse norms
        return result
    monkeypatch.setattr(forward, "intra_chunk", recorded)
    q, k, v, g, beta, s0 = random_inputs(1, 200, 2, 4, 16, 16, dtype=torch.float32, initial_state=True, seed=11)
    events = random_events(1, 4, sparsegdn.num_chunks(200), seed=5, p=0.5)
    events[0, :, :2] = False                  # chunks 0-2 start from a zero state (the split's own outputs) ...
    events[0, :, 2] = True                    # ... chunk 3 from a state (the one launch's output role)
    results = {}
    for initial in (None, s0):
        for normalize in (True, False):
            out = results[initial is None, normalize] = {}
            for stored in (False, True):
                monkeypatch.setattr(forward, "STORE_VECTORS", stored)
                out[stored] = sparsegdn.sparse_gated_delta_rule(
                    q, k, v, g, beta, events=events, band=1, initial_state=initial, output_final_state=True,
                    use_qk_l2norm_in_kernel=normalize, backend="triton")
            assert torch.equal(out[True][0], out[False][0])
            assert torch.equal(out[True][1], out[False][1])
            assert torch.isfinite(out[True][0]).all()
    assert asked == [(False, False), (True, True)] * 4
    unchanged = results[True, True][True][0]
    for perturb in (0, 1):                    # gamma, then k's inverse norms
        changed = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=1, initial_state=None,
                                                    output_final_state=True, backend="triton")[0]
        for tokens in (slice(0, 192), slice(192, 200)):        # zero-state chunks, then the chunk with a state
            for head in range(4):
                assert not torch.allclose(changed[0, tokens, head], unchanged[0, tokens, head], rtol=1e-2, atol=1e-3), \
                    (perturb, tokens, head)


def test_the_vectors_are_pass_ones_gamma_and_key_norms():
    """intra_chunk's stored vectors against torch: gamma = cumsum(g) within each chunk (flat past T) and
    rsqrt(|k|^2 + 1e-6) per token (per key head, repeated for each of its value heads: two key heads of two each)."""
    from sparsegdn.triton.intra_chunk import intra_chunk
    q, k, v, g, beta, _ = random_inputs(1, 100, 2, 4, 16, 16, dtype=torch.float32)
    flags = torch.zeros(3, dtype=torch.int32)
    vectors = intra_chunk(k, v, g, beta, flags, band=1, normalize=True, num_value_heads=4, num_chunks=2,
                          store_inverse=False, store_vectors=True)[-1]
    assert vectors.shape == (1, 4, 2, 2, 64)
    padded_g = torch.nn.functional.pad(g, (0, 0, 0, 28)).view(1, 2, 64, 4).permute(0, 3, 1, 2)
    torch.testing.assert_close(vectors[:, :, :, 0], padded_g.cumsum(-1), rtol=1e-6, atol=1e-6)
    padded_k = torch.nn.functional.pad(k, (0, 0, 0, 0, 0, 28)).view(1, 2, 64, 2, 16)
    norms = torch.rsqrt(padded_k.pow(2).sum(-1) + 1e-6).permute(0, 3, 1, 2)          # [1, H, NC, 64]
    torch.testing.assert_close(vectors[:, :, :, 1], norms.repeat_interleave(2, dim=1), rtol=1e-6, atol=1e-6)
