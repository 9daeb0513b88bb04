"""Streamed preparation (forward.STREAM_PREPARE): pass 3 prepares the events in rounds in persistent programs and marks
each slot ready once stored; the publishing chain pass, launched as its programmatic dependent, waits for the marks
of every run of commits before walking it. Interpreter shapes (TRITON_INTERPRET=1: the kernels run one after the
other, so every mark is set before the chains look); the GPU matrix runs the overlap itself."""
import pytest
import torch
from gdn_inputs import random_events, random_inputs, same_columns, scheduled_events

import sparsegdn

pytestmark = pytest.mark.skipif(not sparsegdn.config.triton_available(),
                                reason="needs triton with CUDA or TRITON_INTERPRET=1")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
small_shapes = pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter shapes; the GPU matrix covers GPUs")


def _prepared(batch=2, value_heads=2, key_dim=16, value_dim=32, n_chunks=9, seed=3):
    events = random_events(batch, value_heads, n_chunks, seed=seed, p=0.6)
    events[0, 0] = True                 # a full chain
    events[1, 1] = False                # an empty one
    return scheduled_events(batch, value_heads, key_dim, value_dim, 64 * n_chunks - 5, events, seed=seed,
                            device=DEVICE)


@small_shapes
def test_streamed_preparation_writes_the_same_lists_and_marks_every_event():
    from sparsegdn.triton.event_prepare import event_prepare
    (k, v, g, beta, t_inv, s0, flags, schedule), options = _prepared()
    from sparsegdn.triton.state_pass import ready_marks_shape
    plain = event_prepare(k, v, g, beta, t_inv, schedule.event_chunks, **options)
    batch, n_events = schedule.event_chunks.shape
    ready = torch.zeros(ready_marks_shape(schedule), dtype=torch.int32, device=DEVICE)
    assert ready.numel() == batch * n_events + 1
    streamed = event_prepare(k, v, g, beta, t_inv, schedule.event_chunks, streamed=(schedule, ready), **options)
    filled = (schedule.event_chunks >= 0).flatten()
    assert int(filled.sum()) == int(schedule.per_head.sum()) > 0
    assert torch.equal(ready[:-1].bool(), filled), "a mark is missing or set on a padding slot"
    assert ready[-1] == 0, "the chain programs' count is the chain pass's"
    for ours, theirs in zip(streamed, plain):
        assert torch.equal(ours.flatten(0, 1)[filled], theirs.flatten(0, 1)[filled])
    with pytest.raises(ValueError, match="ready needs"):
        event_prepare(k, v, g, beta, t_inv, schedule.event_chunks, streamed=(schedule, ready[:-2]), **options)


@small_shapes
def test_chains_waiting_on_the_marks_walk_the_same_chains():
    """The publishing chain pass with `ready` (waits before each run of commits) stores the same snapshots, final
    state and progress counts as without; it refuses `ready` where no run of commits could wait (no progress counts,
    segments)."""
    from sparsegdn.triton import state_pass
    from sparsegdn.triton.event_prepare import event_prepare
    (k, v, g, beta, t_inv, s0, flags, schedule), options = _prepared()
    batch = schedule.event_chunks.shape[0]
    ready = torch.zeros(state_pass.ready_marks_shape(schedule), dtype=torch.int32, device=DEVICE)
    w, u, k_commit = event_prepare(k, v, g, beta, t_inv, schedule.event_chunks, streamed=(schedule, ready), **options)
    shape = state_pass.progress_counts_shape(schedule, v.shape[-1], 0)
    runs = {}
    for marks in (None, ready):
        progress = torch.zeros(shape, dtype=torch.int32, device=DEVICE)
        snapshots, final = state_pass.state_pass(w, u, k_commit, schedule, s0, flags, store_final=True,
                                                 progress=progress, publish=2, ready=marks)
        runs[marks is None] = snapshots, final, progress
    # every chain program counted itself once at its end (the last one waits for the preparation on a GPU)
    assert int(ready[-1]) == batch * v.shape[2] * -(-v.shape[-1] // state_pass.PROGRESS_BV)
    for b in range(batch):
        used = int(schedule.per_head[b].sum()) + v.shape[2]
        assert torch.equal(runs[True][0][b, :used], runs[False][0][b, :used])
    assert torch.equal(runs[True][1], runs[False][1]) and torch.equal(runs[True][2], runs[False][2])
    with pytest.raises(ValueError, match="streamed events"):
        state_pass.state_pass(w, u, k_commit, schedule, s0, flags, store_final=True, ready=ready)
    with pytest.raises(ValueError, match="streamed events"):
        state_pass.state_pass(w, u, k_commit, schedule, s0, flags, store_final=True, segment=3,
                              progress=torch.zeros(shape * 3, dtype=torch.int32, device=DEVICE), ready=ready)
    with pytest.raises(ValueError, match="ready needs"):       # no room for the count
        state_pass.state_pass(w, u, k_commit, schedule, s0, flags, store_final=True,
                              progress=torch.zeros(shape, dtype=torch.int32, device=DEVICE), ready=ready[:-1])


def test_streamed_preparation_is_taken_only_beside_the_lists(monkeypatch):
    """STREAM_PREPARE needs the chains' progress counts (the lists beside them, whole unpaired chains): forward's
    decision, then calls of the one launch and of the two launches without the lists, which prepare as before (here
    on the CPU, where the lists never run; the GPU matrix takes the lists' route)."""
    from types import SimpleNamespace
    from sparsegdn.triton import forward as forward_module
    beside, after = SimpleNamespace(overlap=True), SimpleNamespace(overlap=False)
    monkeypatch.setattr(forward_module, "STREAM_PREPARE", False)
    assert not forward_module.streams_preparation(beside, 0, False)
    monkeypatch.setattr(forward_module, "STREAM_PREPARE", True)
    assert forward_module.streams_preparation(beside, 0, False)
    assert not any(forward_module.streams_preparation(*case) for case in (
        (None, 0, False), (after, 0, False), (beside, 64, False), (beside, 0, True)))
    if torch.cuda.is_available():
        pytest.skip("the interpreter's route; the GPU matrix checks the lists' route")
    from sparsegdn.triton import event_prepare as event_prepare_module
    forward = forward_module
    seen, real = [], event_prepare_module.event_prepare

    def spy(*args, **kwargs):
        seen.append(kwargs.get("streamed"))
        return real(*args, **kwargs)
    monkeypatch.setattr(forward, "event_prepare", spy)
    q, k, v, g, beta, _ = random_inputs(1, 200, 1, 2, 16, 16, dtype=torch.float32, seed=1)
    for overlap in (True, False):
        monkeypatch.setattr(forward, "OVERLAP", overlap)
        sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, budget=0.5, backend="triton")
    assert seen == [None, None]


class _ListsStandIn:
    """list_output.ListCall as forward uses it (the Gluon lists cannot run in the interpreter): its outputs zeros,
    its calls recorded."""

    made = []

    def __init__(self, q, k, v, *args, out_dtype, overlap, cut=False, **options):
        self.overlap, self.shape, self.dtype, self.calls = overlap, (*v.shape[:3], v.shape[-1]), out_dtype, []
        self.cut = cut          # the chains beside it walk segments (list_output.claims_ahead's "cut")
        _ListsStandIn.made.append(self)

    def own(self):
        self.calls.append("own")

    def with_state(self, snapshots, progress=None, segment=0):
        self.calls.append(("with_state", progress is not None, segment))
        return torch.zeros(self.shape, dtype=self.dtype)


@small_shapes
@pytest.mark.parametrize("stream", [False, True], ids=["after-prepare", "streamed"])
def test_the_default_lists_route_runs_its_chains_on_the_cpu(stream, monkeypatch):
    """forward's route where the Gluon lists run beside the chain pass (lists_by_default, taken on an H200 for long
    calls), with the lists stood in for and their machine's conditions met (list_output.eligible, asked again after
    pass 1): the lists are made before pass 3 with progress counts, pass 3 is streamed where STREAM_PREPARE says so,
    and the chain pass that publishes (and, streamed, waits on the marks) leaves the final state as the two launches'
    state pass does (bit for bit on a GPU, within rounding in the interpreter: gdn_inputs.same_columns), publishing
    every state_pass.PROGRESS_PUBLISH commits (the one launch's chains: state_output.PUBLISH). After pass 3 its chains
    are cut as the default cuts them (forward.lists_segment: half the call's 9 chunks, normalised keys, warm-ups of
    LISTS_WARM_UP), so the two launches walk the same segments here (COMMIT_SEGMENT, WARM_UP), and the lists are told
    so (`cut`: claims ahead); a streamed pass 3 is for whole chains only (forward.streams_preparation), so that case
    sets LISTS_SEGMENT 0."""
    from sparsegdn.triton import event_prepare as event_prepare_module
    from sparsegdn.triton import forward, list_output, state_output, state_pass
    # value heads of 64: two of the default's chain blocks of 32 (state_pass.PROGRESS_BV), each publishing its counts
    q, k, v, g, beta, s0 = random_inputs(1, 64 * 9 - 3, 1, 2, 16, 64, dtype=torch.float32, seed=7, initial_state=True)
    options = dict(initial_state=s0, output_final_state=True, budget=0.5, backend="triton")
    monkeypatch.setattr(forward, "LISTS_SEGMENT", 0 if stream else "half")    # "half": the default, whatever the env
    segment = forward.lists_segment(9)
    assert segment == (0 if stream else 5)
    monkeypatch.setattr(forward, "OVERLAP", False)           # the two launches: the state pass without the lists
    monkeypatch.setattr(forward, "COMMIT_SEGMENT", segment)
    monkeypatch.setattr(forward, "WARM_UP", forward.LISTS_WARM_UP if segment else 0.0)
    _, plain, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, **options)
    monkeypatch.setattr(forward, "COMMIT_SEGMENT", 0)
    monkeypatch.setattr(forward, "WARM_UP", 0.0)

    streamed, real_prepare = [], event_prepare_module.event_prepare

    def spy(*args, **kwargs):
        streamed.append(kwargs.get("streamed") is not None)
        return real_prepare(*args, **kwargs)
    monkeypatch.setattr(forward, "OVERLAP", True)
    monkeypatch.setattr(forward, "STREAM_PREPARE", stream)
    monkeypatch.setattr(forward, "lists_by_default", lambda *args, **kwargs: True)
    monkeypatch.setattr(forward, "event_prepare", spy)
    monkeypatch.setattr(list_output, "eligible", lambda *args, **kwargs: None)      # as on an H200
    monkeypatch.setattr(list_output, "ListCall", _ListsStandIn)
    monkeypatch.setattr(state_pass, "PROGRESS_PUBLISH", 3)     # the lists' route's interval, not the one launch's
    published, real_state_pass = [], state_pass.state_pass

    def chains(*args, **kwargs):
        published.append(kwargs["publish"])
        return real_state_pass(*args, **kwargs)
    monkeypatch.setattr(forward, "state_pass", chains)
    _ListsStandIn.made = []
    o, state, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, **options)
    (lists,) = _ListsStandIn.made
    assert lists.overlap and lists.calls == ["own", ("with_state", True, segment)], lists.calls
    assert lists.cut == (segment > 0)
    assert streamed == [stream]
    assert published == [3] and state_output.PUBLISH != 3
    same_columns(state, plain)
    assert not o.any()


@small_shapes
def test_the_default_lists_route_walks_warm_up_segments_where_asked(monkeypatch):
    """forward.LISTS_SEGMENT: lists_by_default's own decision (no stand-in for it) takes the call to the lists, the
    chain pass walks segments of LISTS_SEGMENT commits beside them from warm-ups of LISTS_WARM_UP (WARM_UP left 0),
    publishing every segment's progress (with_state gets the segment length), and leaves the final state as the two
    launches' state pass does (gdn_inputs.same_columns) with the same segments and warm-up; LISTS_SEGMENT 0 walks
    whole chains; a call that keeps the one launch (LISTS_FROM 0 here; short calls, a model's strided v) is not cut
    by it."""
    from sparsegdn.triton import forward, list_output
    q, k, v, g, beta, s0 = random_inputs(1, 64 * 9 - 3, 1, 2, 16, 64, dtype=torch.float32, seed=8, initial_state=True)
    options = dict(initial_state=s0, output_final_state=True, budget=0.5, backend="triton",
                   use_qk_l2norm_in_kernel=True)
    for name, value in (("COMMIT_SEGMENT", 2), ("WARM_UP", forward.LISTS_WARM_UP), ("LISTS_FROM", 1),
                        ("LISTS_MIN_ROW_CHUNKS", 1), ("STREAM_PREPARE", False), ("OVERLAP", False)):
        monkeypatch.setattr(forward, name, value)
    _, plain, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, **options)     # two launches, segments of 2
    monkeypatch.setattr(forward, "COMMIT_SEGMENT", 0)
    _, whole, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, **options)     # two launches, whole chains
    for name, value in (("OVERLAP", True), ("WARM_UP", 0.0)):
        monkeypatch.setattr(forward, name, value)
    monkeypatch.setattr(list_output, "eligible_inputs", lambda *args, **kwargs: None)    # as on an H200
    monkeypatch.setattr(list_output, "eligible", lambda *args, **kwargs: None)
    published = []

    class Lists(_ListsStandIn):
        def with_state(self, snapshots, progress=None, segment=0):
            published.append(progress.clone())
            return super().with_state(snapshots, progress, segment)
    monkeypatch.setattr(list_output, "ListCall", Lists)
    launches = []
    real_state_output = forward.state_output
    monkeypatch.setattr(forward, "state_output", lambda *a, **kw: launches.append(kw["segment"])
                        or real_state_output(*a, **kw))
    walks = []
    real_state_pass = forward.state_pass
    monkeypatch.setattr(forward, "state_pass", lambda *a, **kw: walks.append((kw["segment"], kw["warm_up"]))
                        or real_state_pass(*a, **kw))
    # segments of 9 or more commits cut no chain of the call's 9 chunks (state_pass.segmented_chains): whole chains,
    # and the lists are not told they are cut
    for lists_segment, lists_from in ((0, 1), (2, 0), (2, 1), (9, 1)):
        monkeypatch.setattr(forward, "LISTS_SEGMENT", lists_segment)
        monkeypatch.setattr(forward, "LISTS_FROM", lists_from)
        _ListsStandIn.made, launches[:], published[:], walks[:] = [], [], [], []
        o, state, info = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, **options)
        if not lists_from:
            assert launches == [0] and not _ListsStandIn.made      # the one launch, whole chains
            continue
        (lists,) = _ListsStandIn.made
        assert not launches                                          # the chain pass, not the one launch
        cut = 0 < lists_segment < 9
        assert walks == [(lists_segment, forward.LISTS_WARM_UP if lists_segment else 0.0)], walks
        assert lists.overlap and lists.calls == ["own", ("with_state", True, lists_segment if cut else 0)], lists.calls
        assert lists.cut == cut
        same_columns(state, plain if cut else whole)
        assert not o.any()
        if not cut:
            continue
        # counts [head pair, segment slot (9 chunks / 2), value block of 32]: each of a chain's segments of 2 commits
        # publishes, in both blocks, its end + 1; slots past the chain's last segment stay 0
        (counts,) = published
        commits = [int(n) for n in info.events[0].sum(-1)]
        assert min(commits) > 0 and counts.numel() == 2 * 5 * 2
        expected = torch.tensor([[min(2 * (j + 1), n) + 1 if 2 * j < n else 0 for j in range(5)] for n in commits],
                                dtype=counts.dtype)
        assert torch.equal(counts.view(2, 5, 2), expected[..., None].expand(2, 5, 2)), (counts, commits)


def test_chain_segments_by_route(monkeypatch):
    """forward.chain_segments: LISTS_SEGMENT with WARM_UP (LISTS_WARM_UP where WARM_UP is 0) beside the lists,
    COMMIT_SEGMENT and WARM_UP elsewhere; raw keys get no warm-up (segment_scan's maps)."""
    from sparsegdn.triton import forward
    for name, value in (("LISTS_SEGMENT", 256), ("COMMIT_SEGMENT", 0), ("WARM_UP", 0.0)):
        monkeypatch.setattr(forward, name, value)
    assert forward.chain_segments(True, True, 512) == (256, forward.LISTS_WARM_UP)
    assert forward.chain_segments(True, False, 512) == (256, 0.0)
    assert forward.chain_segments(False, True, 512) == (0, 0.0)
    monkeypatch.setattr(forward, "WARM_UP", 12.0)
    assert forward.chain_segments(True, True, 512) == (256, 12.0)
    monkeypatch.setattr(forward, "COMMIT_SEGMENT", 64)
    assert forward.chain_segments(False, True, 512) == (64, 12.0)
    monkeypatch.setattr(forward, "LISTS_SEGMENT", 0)
    assert forward.chain_segments(True, True, 512) == (64, 12.0)
    monkeypatch.setattr(forward, "LISTS_SEGMENT", "half")      # half the call's chunk count, rounded up; lists only
    assert forward.chain_segments(True, True, 2048) == (1024, 12.0)
    assert forward.chain_segments(True, True, 513) == (257, 12.0)
    assert forward.chain_segments(False, True, 2048) == (64, 12.0)
    # unnormalised keys keep whole chains under "half" (their segments would start from segment_scan's maps; the
    # lists' route is taken only with COMMIT_SEGMENT 0: lists_by_default)
    monkeypatch.setattr(forward, "COMMIT_SEGMENT", 0)
    assert forward.lists_segment(2048, normalize=False) == 0
    assert forward.chain_segments(True, False, 2048) == (0, 0.0)
    monkeypatch.setattr(forward, "LISTS_SEGMENT", 256)         # a count cuts every key's chains
    assert forward.chain_segments(True, False, 2048) == (256, 0.0)
