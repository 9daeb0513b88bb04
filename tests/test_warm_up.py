"""Commit chains cut into segments that walk their entering state from a warm-up (forward.WARM_UP,
state_pass.warm_up_begin) instead of segment_scan's maps: the search for the warm-up's first event, and the
chain's results against the whole chain's (interpreter shapes; tests/test_triton_gpu_matrix.py runs it on a GPU).
"""
import math

import pytest
import torch
from gdn_inputs import random_events, random_inputs, rel_err

import sparsegdn

pytestmark = [pytest.mark.skipif(not sparsegdn.config.triton_available(),
                                 reason="needs triton with CUDA or TRITON_INTERPRET=1"),
              pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter shapes; the GPU matrix covers GPUs")]


def expected_begin(decays, begin, bound):
    """The latest j <= begin with sum over j .. begin - 1 of log(since) + log(chunk's own) <= -bound, else 0; an
    event's log sum below -(bound + 1) (a decay that underflowed to 0 or is NaN too) counts as -(bound + 1)."""
    total = 0.0
    for j in range(begin - 1, -1, -1):
        log_sum = sum(math.log(x) if x > 0 else -math.inf for x in decays[j])     # NaN (> 0 false): -inf
        total += max(log_sum, -(bound + 1.0))
        if total <= -bound:
            return j
    return 0


def warm_up_probe():
    """A kernel whose program i stores warm_up_begin(begins[i]) (a jit function sees module globals only)."""
    import triton
    import triton.language as tl
    from sparsegdn.triton.state_pass import warm_up_begin

    global warm_up_begin_kernel
    if "warm_up_begin_kernel" not in globals():
        globals()["warm_up_begin"] = warm_up_begin

        @triton.jit
        def warm_up_begin_kernel(event_decays_ptr, begins_ptr, out_ptr, first_slot, WARM_UP: tl.constexpr):
            i = tl.program_id(0)
            tl.store(out_ptr + i, warm_up_begin(tl.load(begins_ptr + i).to(tl.int64), first_slot, event_decays_ptr,
                                                WARM_UP))
    return warm_up_begin_kernel


def test_warm_up_begin_finds_the_latest_event_within_the_bound():
    """Over a chain longer than one step of the backward search (state_pass.WARM_UP_BLOCK), with decays that
    underflowed to 0 and one that is NaN, the search returns the event a brute-force sum over the logs finds."""
    probe = warm_up_probe()
    for seed in range(3):       # fixed seeds: a float32 sum that lands on the bound itself would be a coin toss
        check_warm_up_begin(probe, torch.Generator().manual_seed(seed))


def check_warm_up_begin(probe, gen):
    first_slot, n_events = 5, 300
    mild = torch.full((first_slot + n_events, 1), 0.4)
    mild[: first_slot + 150] = 0.01                              # the first 150 events decay little
    decays = torch.exp(-torch.rand(first_slot + n_events, 2, generator=gen) * mild)
    decays[first_slot + 160] = torch.tensor([0.0, 0.5])           # an underflowed decay: nothing gets past it
    decays[first_slot + 200, 1] = float("nan")
    begins = torch.tensor([0, 1, 7, 41, 127, 128, 129, 150, 151, 160, 161, 199, 200, 201, 256, 299, 300])
    for bound in (3.0, 20.0):
        out = torch.empty(len(begins), dtype=torch.int64)
        probe[(len(begins),)](decays, begins, out, first_slot, bound)
        chain = decays[first_slot:].tolist()
        want = [expected_begin(chain, int(begin), bound) for begin in begins]
        assert out.tolist() == want, (bound, gen.initial_seed(), out.tolist(), want)
        assert any(0 < j for j in want)                                      # the search cut somewhere
        assert any(j == 0 for begin, j in zip(begins.tolist(), want) if begin > 128)    # and ran back to the start


def no_maps(*args, **kwargs):
    raise AssertionError("segment_scan's maps used where the warm-up should walk the segments' entering states")


def chains(monkeypatch, warm_up, overlap, inputs, events, segment=2, band=1):
    """Outputs and final states of the whole chains and of segments with this warm-up, keyed by initial state
    (the maps made to fail: with a warm-up they must not run)."""
    from sparsegdn.triton import forward, segment_scan, state_output
    monkeypatch.setattr(segment_scan, "segment_starts", no_maps)
    monkeypatch.setattr(forward, "OVERLAP", overlap)
    monkeypatch.setattr(forward, "WARM_UP", warm_up)
    monkeypatch.setattr(state_output, "PUBLISH", 1)         # a count after every commit: many runs a segment
    q, k, v, g, beta, s0 = inputs
    out = {}
    for seg in (0, segment):
        monkeypatch.setattr(forward, "COMMIT_SEGMENT", seg)
        for initial in (None, s0):
            out[seg, initial is None] = sparsegdn.sparse_gated_delta_rule(
                q, k, v, g, beta, events=events, band=band, initial_state=initial, output_final_state=True,
                backend="triton")
    return out


def chain_inputs(tokens=640, fast=True):
    """float32 inputs whose head pairs decay from slowly to fast (a log decay of ~0.1 to ~10 a chunk), with
    events where every kind of chain shows: every chunk, none, and random ones."""
    inputs = random_inputs(2, tokens, 2, 4, 16, 16, dtype=torch.float32, initial_state=True)
    if fast:
        rate = torch.tensor([0.003, 0.03, 0.1, 0.3])
        inputs[3] = -rate * torch.rand(inputs[3].shape).mul(1.5).add(0.25)
    events = random_events(2, 4, sparsegdn.num_chunks(tokens), seed=7, p=0.7)
    events[0, 1] = True
    events[0, 3] = True
    events[1, 2] = False
    return inputs, events


@pytest.mark.parametrize("warm_up,overlap,band", [(1e6, True, 1), (30.0, True, 1), (30.0, False, 1), (30.0, True, 3),
                                                   (1e6, False, 3)],
                         ids=["never-cut-one-launch", "cut-at-e-30-one-launch", "cut-at-e-30-two-launches",
                              "cut-at-e-30-one-launch-band3", "never-cut-two-launches-band3"])
def test_warm_up_segments_equal_the_whole_chain(warm_up, overlap, band, monkeypatch):
    """Segments that walk their entering state from a warm-up compute what the whole chain computes: exactly
    where the warm-up always runs back to the chain's start (a bound no decay reaches), and to float32's rounding
    where it stops once the decay since reaches e^-30, with or without an initial state, at band 1 (where the
    bound is only measured) and band 3 (where it holds: the commits contract)."""
    inputs, events = chain_inputs()
    out = chains(monkeypatch, warm_up, overlap, inputs, events, band=band)
    for no_initial in (True, False):
        whole, cut = out[0, no_initial], out[2, no_initial]
        assert rel_err(cut[0], whole[0]) <= 1e-5, rel_err(cut[0], whole[0])
        assert rel_err(cut[1], whole[1]) <= 1e-5, rel_err(cut[1], whole[1])


def test_a_short_warm_up_leaves_out_what_came_before(monkeypatch):
    """With a bound of e^-1 the segments start late (one or two commits back for the fast head pairs): their
    entering states miss the older commits, and the outputs differ from the whole chain's by more than float32's
    rounding, so the tests above compare segments that did cut their warm-ups."""
    inputs, events = chain_inputs()
    out = chains(monkeypatch, 1.0, True, inputs, events)
    whole, cut = out[0, False], out[2, False]
    assert rel_err(cut[1], whole[1]) > 1e-4, rel_err(cut[1], whole[1])
    assert rel_err(cut[1], whole[1]) < 0.5


def test_warm_up_needs_normalised_keys(monkeypatch):
    """Without normalised keys the commits need not contract, so the warm-up's bound does not hold: those calls
    walk the segments from segment_scan's exact maps, equal to the whole chain however short the warm-up."""
    inputs, events = chain_inputs(tokens=400)
    from sparsegdn.triton import forward
    monkeypatch.setattr(forward, "WARM_UP", 1.0)
    q, k, v, g, beta, s0 = inputs
    out = {}
    for seg in (0, 2):
        monkeypatch.setattr(forward, "COMMIT_SEGMENT", seg)
        out[seg] = sparsegdn.sparse_gated_delta_rule(q * 0.3, k * 0.3, v, g, beta, events=events, band=1,
                                                     initial_state=s0, output_final_state=True, backend="triton",
                                                     use_qk_l2norm_in_kernel=False)
    assert rel_err(out[2][1], out[0][1]) <= 1e-5
    assert rel_err(out[2][0], out[0][0]) <= 1e-5
