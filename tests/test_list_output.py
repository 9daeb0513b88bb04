"""The output pass over chunk lists (sparsegdn/triton/list_output.py, Gluon, Hopper only): the lists it walks, the
shapes it refuses, and on a CPU machine the fallback to chunk_output, its interpreter-tested twin. Its GPU kernel is
checked against chunk_output and the torch backend in tests/test_triton_gpu_matrix.py."""
import pytest
import torch
from gdn_inputs import random_events, random_inputs

import sparsegdn
from sparsegdn.triton import list_output
from sparsegdn.triton.schedule import Schedule


def schedule_with(snapshot_of_chunk):
    """A Schedule holding only the snapshot indices chunk_lists reads (the other fields unused)."""
    return Schedule(*([None] * 4), snapshot_of_chunk, *([None] * 4))


def test_chunk_lists_put_zero_state_chunks_first_chunk_major():
    # B = 2, HV = 3, NC = 4; snapshot indices flat over rows as the schedule writes them: a head pair's chunks that
    # start from its first snapshot have no state (without an initial state)
    snapshot_of_chunk = torch.tensor([[[0, 0, 1, 2], [3, 3, 3, 3], [4, 5, 5, 6]],
                                      [[7, 8, 8, 8], [9, 9, 10, 10], [11, 11, 11, 12]]], dtype=torch.int32)
    tiles, own_count = list_output.chunk_lists(schedule_with(snapshot_of_chunk), zero_start=True)
    nc, hv = 4, 3

    def tile(b, h, c):
        return (b * hv + h) * nc + c
    own = [tile(b, h, c) for b in range(2) for c in range(nc) for h in range(hv)
           if snapshot_of_chunk[b, h, c] == snapshot_of_chunk[b, h, 0]]
    state = [tile(b, h, c) for b in range(2) for c in range(nc) for h in range(hv)
             if snapshot_of_chunk[b, h, c] != snapshot_of_chunk[b, h, 0]]
    assert own_count.tolist() == [len(own)] and len(own) == 13
    assert tiles.dtype == torch.int32 and tiles.tolist() == own + state
    # with an initial state every chunk has one: a single list in chunk-major order
    tiles, own_count = list_output.chunk_lists(schedule_with(snapshot_of_chunk), zero_start=False)
    assert own_count.tolist() == [0]
    assert tiles.tolist() == [tile(b, h, c) for b in range(2) for c in range(nc) for h in range(hv)]


@pytest.mark.skipif(not sparsegdn.config.triton_available(), reason="needs triton with CUDA or TRITON_INTERPRET=1")
@pytest.mark.parametrize("zero_start", [True, False], ids=["zero-start", "initial-state"])
@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 5, 700), (3, 7, 111)], ids=["tiny", "blocks", "ragged-blocks"])
def test_chunk_lists_made_by_kernels_match_the_torch_lists(shape, zero_start, monkeypatch):
    """make_chunk_lists (two kernels, so that a launch plan can replay them) against chunk_lists (torch's ops): the
    same tiles in the same order and the same count, over several blocks of LIST_BLOCK positions (shrunk here to 64
    so that the shapes span many), the last one ragged; snapshot indices of random schedules (a head pair's index
    rises by one at each of its commits)."""
    monkeypatch.setattr(list_output, "LIST_BLOCK", 64)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    batch, heads, n_chunks = shape
    generator = torch.Generator().manual_seed(sum(shape))
    commits = torch.rand(batch, heads, n_chunks, generator=generator) < 0.3
    commits[0, 0] = False                   # a head pair with no commit: every chunk from its first snapshot
    snapshot_of_chunk = (torch.cumsum(commits.int(), -1) - commits.int()
                         + torch.arange(batch * heads).view(batch, heads, 1) * (n_chunks + 1)).int().to(device)
    expected_tiles, expected_count = list_output.chunk_lists(schedule_with(snapshot_of_chunk), zero_start)
    tiles, own_count = list_output.make_chunk_lists(schedule_with(snapshot_of_chunk), zero_start)
    assert own_count.tolist() == expected_count.tolist()
    assert tiles.dtype == torch.int32 and torch.equal(tiles.cpu(), expected_tiles.cpu())


def test_eligible_names_what_it_refuses(monkeypatch):
    """Each condition refused on its own, the tensors' before the machine's (so a CPU machine checks them all)."""
    q = torch.zeros(1, 128, 2, 128, dtype=torch.bfloat16)
    v = torch.zeros(1, 128, 4, 128, dtype=torch.bfloat16)
    stored = torch.zeros(1)

    def reason(q=q, k=q, v=v, t_inv=stored, vectors=stored, dtype=torch.bfloat16, band=1):
        return list_output.eligible(q, k, v, t_inv, vectors, dtype, band)
    assert reason(vectors=None) == "the chunk vectors are not stored by pass 1"
    assert reason(t_inv=None, band=2) == reason(t_inv=None, band=3) == (
        "Tinv not stored by pass 1 for a band above 1 (solved here only for bands 0 and 1)")
    assert reason(t_inv=None, band=1) == reason(t_inv=None, band=0) == reason(band=3)    # solved or read: the machine
    monkeypatch.setenv("SPARSEGDN_SOLVE_PRECISION", "ieee")      # chunk_output would solve in float32: no twin
    assert reason(t_inv=None) == ("Tinv solved at a precision other than tf32 (SPARSEGDN_SOLVE_PRECISION; solved here "
                                  "in tf32 only)")
    assert reason() == reason(band=3)                                   # read, not solved: precision is not asked
    monkeypatch.delenv("SPARSEGDN_SOLVE_PRECISION")
    assert reason(q=q.float(), k=q.float(), v=v.float(), dtype=torch.float32).startswith("inputs other than")
    assert reason(dtype=torch.float16).startswith("inputs other than")
    assert reason(q=q[..., :64], k=q[..., :64]) == "head sizes other than 128"
    assert reason(v=v.transpose(1, 2).contiguous().transpose(1, 2)) == "q, k or v not contiguous"
    storage = torch.zeros(1 + q.numel(), dtype=torch.bfloat16)
    assert reason(k=storage[1:].view(q.shape)) == "q, k or v not 16-byte aligned (TMA reads them)"
    ragged_q = torch.zeros(2, 100, 2, 128, dtype=torch.bfloat16)
    ragged_v = torch.zeros(2, 100, 4, 128, dtype=torch.bfloat16)
    assert reason(q=ragged_q, k=ragged_q, v=ragged_v) == "batch rows with a ragged last chunk"
    assert reason(q=ragged_q[:1], k=ragged_q[:1], v=ragged_v[:1]) not in (None, "batch rows with a ragged last chunk")
    monkeypatch.setattr(list_output, "FOLD_SCALES", True)
    assert reason() == "FOLD_SCALES rounds M differently"
    monkeypatch.setattr(list_output, "FOLD_SCALES", False)
    last = reason()             # every tensor condition met: the machine's word
    assert last in (list_output.GLUON_PROBLEM, "the interpreter runs no Gluon kernel", "not an sm_90 (Hopper) device")
    assert last is not None


@pytest.mark.skipif(not sparsegdn.config.triton_available(), reason="needs triton with CUDA or TRITON_INTERPRET=1")
@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter shapes; the GPU matrix covers GPUs")
def test_switch_falls_back_to_chunk_output_off_hopper(monkeypatch):
    """LIST_OUTPUTS on where the kernel cannot run (the interpreter): the two-launch path's outputs bit for bit, and
    the list launches never tried (a spy)."""
    from sparsegdn.triton import forward
    monkeypatch.setattr(forward, "OVERLAP", False)
    monkeypatch.setattr(forward, "STORE_INVERSE", True)
    monkeypatch.setattr(forward, "STORE_VECTORS", True)
    called = []
    monkeypatch.setattr(list_output, "ListCall", lambda *args, **kwargs: called.append(1))
    q, k, v, g, beta, _ = random_inputs(1, 200, 2, 4, 16, 16, dtype=torch.float32, seed=3)
    events = random_events(1, 4, sparsegdn.num_chunks(200), seed=2, p=0.5)
    out = {}
    for switch in (False, True):
        monkeypatch.setattr(list_output, "LIST_OUTPUTS", switch)
        out[switch] = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=1,
                                                        output_final_state=True, backend="triton")
    assert not called
    assert torch.equal(out[True][0], out[False][0]) and torch.equal(out[True][1], out[False][1])


def test_lists_by_default_needs_twice_the_head_chunks_in_fewer_rows(monkeypatch):
    """forward.lists_by_default: calls of fewer head-pair rows (batch rows x value heads) than LISTS_MIN_ROWS take the
    lists from twice LISTS_FROM head chunks (batch 49: at 16 rows the lists lost by 20-31% at 2,048 head chunks and
    won at 4,096); from LISTS_MIN_ROWS rows on, from LISTS_FROM. The defaults' shapes: B 1, HV 16 at 8K tokens keeps
    the one launch and takes the lists at 16K; B 2, HV 16 and B 1, HV 32 take them from 8K and 4K."""
    from sparsegdn.triton import forward
    monkeypatch.setattr(list_output, "eligible_inputs", lambda *args: None)        # served
    for name in ("OVERLAP", "COMMIT_SEGMENT", "PAIRED", "LISTS_FROM", "LISTS_MIN_ROW_CHUNKS", "LISTS_MIN_ROWS"):
        monkeypatch.setattr(forward, name, getattr(forward, name))    # put back after the test
    monkeypatch.setattr(forward, "OVERLAP", True)
    monkeypatch.setattr(forward, "COMMIT_SEGMENT", 0)
    monkeypatch.setattr(forward, "PAIRED", False)
    monkeypatch.setattr(forward, "LISTS_FROM", 2048)
    monkeypatch.setattr(forward, "LISTS_MIN_ROW_CHUNKS", 64)
    monkeypatch.setattr(forward, "LISTS_MIN_ROWS", 32)

    def takes(batch, value_heads, tokens):
        q, k = (torch.empty(batch, tokens, 16, 128, dtype=torch.bfloat16) for _ in range(2))
        v = torch.empty(batch, tokens, value_heads, 128, dtype=torch.bfloat16)
        return forward.lists_by_default(q, k, v, 1, torch.bfloat16, 0.29)
    assert [takes(1, 16, 8192), takes(1, 16, 16384), takes(2, 16, 8192), takes(1, 32, 4096), takes(1, 32, 4032),
            takes(1, 48, 4096), takes(1, 16, 4096)] == [False, True, True, True, False, True, False]
    monkeypatch.setattr(forward, "LISTS_MIN_ROWS", 16)       # 16 rows are enough: 2,048 head chunks do
    assert takes(1, 16, 8192) and not takes(1, 8, 16384)


def test_lists_by_default_from_lists_from_head_chunks(monkeypatch):
    """forward.lists_by_default: the lists beside the chains from LISTS_FROM head chunks (batch rows x value heads x
    chunks) on, in rows of at least LISTS_MIN_ROW_CHUNKS chunks, where the selection keeps at most LISTS_MAX_BUDGET
    of the events and list_output can serve the inputs (asked with Tinv solved for bands 0 and 1, stored above, as
    store_inverse decides); never with LISTS_FROM 0, given events, the one launch switched off, the one launch's
    segments (COMMIT_SEGMENT) or paired chains; the lists' own segments (LISTS_SEGMENT) do not change the decision;
    and where list_output refuses the inputs (here the interpreter or a CPU, whichever runs this test)."""
    from sparsegdn.triton import forward
    q, k, v = (torch.zeros(2, 130, heads, 128, dtype=torch.bfloat16) for heads in (2, 2, 6))
    head_chunks = 2 * 6 * 3
    for name, value in (("OVERLAP", True), ("COMMIT_SEGMENT", 0), ("PAIRED", False), ("STORE_INVERSE", None),
                        ("LISTS_FROM", 1), ("LISTS_MIN_ROW_CHUNKS", 3), ("LISTS_SEGMENT", 0), ("LISTS_MIN_ROWS", 12)):
        monkeypatch.setattr(forward, name, value)
    assert list_output.eligible_inputs(q, k, v, True, torch.bfloat16, 1) is not None    # this machine: refused
    assert not forward.lists_by_default(q, k, v, 1, torch.bfloat16, 0.29)
    asked = []
    monkeypatch.setattr(list_output, "eligible_inputs", lambda *args: asked.append(args[3:]))   # None: served
    for threshold, expected in ((head_chunks, True), (head_chunks + 1, False), (1, True), (0, False)):
        monkeypatch.setattr(forward, "LISTS_FROM", threshold)
        assert forward.lists_by_default(q, k, v, 1, torch.bfloat16, 0.29) is expected, threshold
    assert asked == [(True, torch.bfloat16, 1)] * 2
    asked.clear()
    monkeypatch.setattr(forward, "LISTS_FROM", head_chunks)
    assert forward.lists_by_default(q, k, v, 3, torch.bfloat16, 0.29) and asked == [(False, torch.bfloat16, 3)]
    for kept, expected in ((forward.LISTS_MAX_BUDGET, True), (forward.LISTS_MAX_BUDGET + 0.01, False), (1.0, False),
                           (None, False)):      # the share of events the selection keeps; None: events given
        assert forward.lists_by_default(q, k, v, 1, torch.bfloat16, kept) is expected, kept
    monkeypatch.setattr(forward, "LISTS_MIN_ROW_CHUNKS", 4)         # rows of 3 chunks: too short
    assert not forward.lists_by_default(q, k, v, 1, torch.bfloat16, 0.29)
    monkeypatch.setattr(forward, "LISTS_MIN_ROW_CHUNKS", 3)
    for name, value in (("OVERLAP", False), ("COMMIT_SEGMENT", 64), ("PAIRED", True)):
        before = getattr(forward, name)
        monkeypatch.setattr(forward, name, value)
        assert not forward.lists_by_default(q, k, v, 1, torch.bfloat16, 0.29), name
        monkeypatch.setattr(forward, name, before)
    monkeypatch.setattr(forward, "LISTS_SEGMENT", 64)      # segments beside the lists: the same decision
    assert forward.lists_by_default(q, k, v, 1, torch.bfloat16, 0.29)
    monkeypatch.setattr(forward, "COMMIT_SEGMENT", 64)
    assert not forward.lists_by_default(q, k, v, 1, torch.bfloat16, 0.29)
    monkeypatch.setattr(forward, "COMMIT_SEGMENT", 0)
    for name, value in (("OVERLAP", False), ("PAIRED", True), ("LISTS_FROM", 0)):     # the other conditions hold
        before = getattr(forward, name)
        monkeypatch.setattr(forward, name, value)
        assert not forward.lists_by_default(q, k, v, 1, torch.bfloat16, 0.29), name
        monkeypatch.setattr(forward, name, before)
    assert not forward.lists_by_default(q, k, v, 1, torch.bfloat16, None)
    monkeypatch.setattr(forward, "LISTS_SEGMENT", 0)
    monkeypatch.setattr(list_output, "LIST_OUTPUTS", True)      # the two-launch switch alone: the lists still taken
    assert forward.lists_by_default(q, k, v, 1, torch.bfloat16, 0.29)


def test_selected_share_is_known_where_the_call_selects():
    """forward.selected_share: 1 for `all`, the budget where the call selects (no events given), None for given
    events whatever the selector (the API hands `random` and `oracle` selections over as given events, and a caller's
    own events, dense ones too, may come with any selector named)."""
    from sparsegdn.triton.forward import selected_share
    events = torch.ones(1, 2, 3, dtype=torch.bool)
    assert selected_share(None, 0.29, "score") == 0.29 and selected_share(None, 0.29, "uniform") == 0.29
    assert selected_share(events, 0.29, "all") == 1.0 and selected_share(None, 0.29, "all") == 1.0
    for selector in ("score", "uniform", "random", "oracle"):
        assert selected_share(events, 0.15, selector) is None, selector


@pytest.mark.skipif(not sparsegdn.config.triton_available(), reason="needs triton with CUDA or TRITON_INTERPRET=1")
@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter shapes; the GPU matrix covers GPUs")
def test_a_call_taking_the_lists_runs_the_two_launches(monkeypatch):
    """Where forward.lists_by_default says yes (made to here: the interpreter never takes the lists), the forward
    runs the two launches with the vectors stored: pass 1 asked to store them, the one launch not run, and the outputs
    (chunk_output's, since `eligible` still refuses the interpreter at the ListCall) within the one launch's."""
    from sparsegdn.triton import forward
    q, k, v, g, beta, _ = random_inputs(1, 200, 2, 4, 16, 16, dtype=torch.float32, seed=4)
    events = random_events(1, 4, sparsegdn.num_chunks(200), seed=5, p=0.5)
    options = dict(events=events, band=1, output_final_state=True, backend="triton")
    reference = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, **options)
    stored, one_launch = [], []
    real_intra, real_state_output = forward.intra_chunk, forward.state_output
    monkeypatch.setattr(forward, "intra_chunk", lambda *a, **kw: stored.append(kw["store_vectors"])
                        or real_intra(*a, **kw))
    monkeypatch.setattr(forward, "state_output", lambda *a, **kw: one_launch.append(1) or real_state_output(*a, **kw))
    monkeypatch.setattr(forward, "lists_by_default", lambda *args: True)
    out = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, **options)
    assert stored == [True] and not one_launch
    assert torch.allclose(out[0], reference[0], rtol=1e-4, atol=1e-5)
    assert torch.allclose(out[1], reference[1], rtol=1e-4, atol=1e-5)
