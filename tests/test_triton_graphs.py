"""sparsegdn/triton/graphs.py on the CPU: which calls are replayed from a CUDA graph, what a graph is valid for,
and the cache around the capture (a stand-in graph: CUDA graphs themselves run in the GPU matrix,
tests/test_triton_gpu_matrix.py::test_gpu_graph_replay_equals_the_launches)."""
import warnings
from types import SimpleNamespace

import pytest
import torch

from sparsegdn.triton import graphs


class CudaLike(SimpleNamespace):
    """What graphs.wanted reads of v: is_cuda and shape."""


def _tensors(batch=1, tokens=4096):
    return dict(q=None, k=None, v=CudaLike(is_cuda=True, shape=(batch, tokens, 32, 128)), g=None, beta=None,
                initial_state=None)


@pytest.fixture
def graphs_on(monkeypatch):
    monkeypatch.setattr(graphs, "CUDA_GRAPH", True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    graphs.clear()
    yield
    graphs.clear()


def test_only_short_calls_whose_host_work_ignores_the_data_are_replayed(graphs_on, monkeypatch):
    assert graphs.wanted(_tensors(), events=None, selector="score", stage_hook=None)
    assert graphs.wanted(_tensors(2, 4096), events=None, selector="all", stage_hook=None)
    assert not graphs.wanted(_tensors(2, 4097), events=None, selector="score", stage_hook=None)   # too long
    assert not graphs.wanted(_tensors(1, 16384), events=None, selector="score", stage_hook=None)
    assert not graphs.wanted(_tensors(), events=torch.ones(1), selector="score", stage_hook=None)  # sized by a sync
    assert not graphs.wanted(_tensors(), events=None, selector="random", stage_hook=None)     # selected in torch
    assert not graphs.wanted(_tensors(), events=None, selector="score", stage_hook=print)      # a hook syncs
    assert not graphs.wanted(_tensors(), events=None, selector="score", stage_hook=None, deferred=True)  # no sync
    cpu = dict(_tensors(), v=torch.zeros(1, 64, 2, 16))
    assert not graphs.wanted(cpu, events=None, selector="score", stage_hook=None)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)        # inside a caller's graph
    assert not graphs.wanted(_tensors(), events=None, selector="score", stage_hook=None)
    monkeypatch.setattr(graphs, "CUDA_GRAPH", False)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    assert not graphs.wanted(_tensors(), events=None, selector="score", stage_hook=None)


def test_a_graph_is_valid_for_the_layout_and_options_not_the_values():
    x = torch.randn(2, 8, 3)
    key = graphs.call_key({"v": x, "s": None}, {"budget": 0.29, "band": 1})
    assert key == graphs.call_key({"v": torch.randn(2, 8, 3), "s": None}, {"band": 1, "budget": 0.29})
    assert key != graphs.call_key({"v": x.transpose(0, 1).contiguous().transpose(0, 1), "s": None},
                                  {"budget": 0.29, "band": 1})                                   # other strides
    assert key != graphs.call_key({"v": x.double(), "s": None}, {"budget": 0.29, "band": 1})
    assert key != graphs.call_key({"v": x, "s": x}, {"budget": 0.29, "band": 1})
    assert key != graphs.call_key({"v": x, "s": None}, {"budget": 0.3, "band": 1})
    assert key != graphs.call_key({"v": x, "s": None}, {"budget": 0.29, "band": 1}, design=(True,))


def test_a_graph_is_not_replayed_under_other_design_switches(monkeypatch):
    """A switch the forward reads at run time (forward.OVERLAP, state_output.PUBLISH, ...) is part of the key."""
    from sparsegdn.triton import forward, state_output
    before = forward.design_switches()
    monkeypatch.setattr(forward, "OVERLAP", not forward.OVERLAP)
    assert forward.design_switches() != before
    monkeypatch.setattr(forward, "OVERLAP", not forward.OVERLAP)
    monkeypatch.setattr(state_output, "PUBLISH", state_output.PUBLISH + 2)
    assert forward.design_switches() != before
    monkeypatch.setattr(state_output, "PUBLISH", state_output.PUBLISH - 2)
    for name in ("SPLIT_OUTPUTS", "STORE_VECTORS"):        # switches of the output roles
        monkeypatch.setattr(forward, name, not getattr(forward, name))
        assert forward.design_switches() != before, name
        monkeypatch.setattr(forward, name, not getattr(forward, name))
    other_segment = 256 if forward.LISTS_SEGMENT != 256 else 512      # LISTS_SEGMENT: a count or "half"
    for name, value in (("LISTS_SEGMENT", other_segment), ("LISTS_WARM_UP", forward.LISTS_WARM_UP + 1),
                        ("COMMIT_SEGMENT", forward.COMMIT_SEGMENT + 64)):     # how the chains are cut
        saved = getattr(forward, name)
        monkeypatch.setattr(forward, name, value)
        assert forward.design_switches() != before, name
        monkeypatch.setattr(forward, name, saved)


class FakeGraph:
    """Replays `forward` on the captured call's own input copies, as a CUDA graph would."""

    def __init__(self, run):
        self.run = run
        self.replays = 0

    def replay(self):
        self.replays += 1
        self.run()


@pytest.fixture
def fake_capture(graphs_on, monkeypatch):
    """graphs._capture with a stand-in graph, and the CUDA events as labels. Yields (calls of the forward,
    events waited for, events finished)."""
    calls, waits, finished, uses = [], [], [], []

    def capture(fn, tensors, options):
        inputs = {name: graphs._copy_of(t) for name, t in tensors.items()}
        outputs = fn(**inputs, **options)
        state = {"out": outputs}

        def run():                      # a graph writes into the same output buffers on every replay
            state["out"][0].copy_(inputs["x"] * options["scale"])
        return graphs.CapturedCall(FakeGraph(run), inputs, outputs)
    monkeypatch.setattr(graphs, "_capture", capture)
    monkeypatch.setattr(graphs, "_mark", lambda device: uses.append(f"use {len(uses)}") or uses[-1])
    monkeypatch.setattr(graphs, "_wait_for", lambda event, device: waits.append(event))
    monkeypatch.setattr(graphs, "_finished", lambda event: finished.append(event))
    yield calls, waits, finished


def _forward(calls):
    def forward(*, x, scale):
        calls.append(scale)
        return x * scale, None
    return forward


def test_replay_copies_inputs_in_and_outputs_out_and_keeps_the_newest_keys(fake_capture, monkeypatch):
    calls, waits, finished = fake_capture
    forward = _forward(calls)
    monkeypatch.setattr(graphs, "CACHE_SIZE", 2)
    launched = graphs.replay(forward, {"x": torch.ones(3)}, {"scale": 2.0})
    assert calls == [2.0] and not graphs._captured                # a key's first call is launched
    first = graphs.replay(forward, {"x": torch.full((3,), 3.0)}, {"scale": 2.0})
    second = graphs.replay(forward, {"x": torch.full((3,), 5.0)}, {"scale": 2.0})
    assert torch.equal(launched[0], torch.full((3,), 2.0))
    assert torch.equal(first[0], torch.full((3,), 6.0))          # not changed by the later replay
    assert torch.equal(second[0], torch.full((3,), 10.0)) and second[1] is None
    assert calls == [2.0, 2.0]                                   # one capture for the second and third calls
    assert waits == ["use 0"]           # the third call's copies wait for the second call's replay and copy-out
    for n in (4, 5):                    # two more keys, each captured on its second call
        graphs.replay(forward, {"x": torch.ones(n)}, {"scale": 2.0})
        graphs.replay(forward, {"x": torch.ones(n)}, {"scale": 2.0})
    assert len(graphs._captured) == 2                            # the oldest key evicted
    assert finished == ["use 1"]        # ... once the last replay of it (the third call) has finished
    before = len(calls)
    graphs.replay(forward, {"x": torch.ones(3)}, {"scale": 2.0})
    assert len(calls) == before + 1 and len(graphs._captured) == 2   # seen before: captured again at once


def test_a_graph_made_under_inference_mode_serves_callers_under_no_grad_and_keeps_no_autograd_history(fake_capture):
    calls, _, _ = fake_capture
    forward = _forward(calls)
    with torch.inference_mode():
        for _ in range(2):              # launched, then captured
            graphs.replay(forward, {"x": torch.ones(3)}, {"scale": 2.0})
    with torch.no_grad():
        out = graphs.replay(forward, {"x": torch.full((3,), 4.0)}, {"scale": 2.0})
    assert torch.equal(out[0], torch.full((3,), 8.0))
    leaf = torch.ones(3, requires_grad=True)
    out = graphs.replay(forward, {"x": leaf * 2.0}, {"scale": 2.0})   # grad mode on (only the backend sees this)
    call = next(iter(graphs._captured.values()))
    assert call.inputs["x"].grad_fn is None and not call.inputs["x"].requires_grad and out[0].grad_fn is None


def test_a_failed_capture_is_said_once_and_its_key_launched(graphs_on, monkeypatch):
    calls = []
    forward = _forward(calls)

    def failing(fn, tensors, options):
        raise RuntimeError("operation not permitted when stream is capturing")
    monkeypatch.setattr(graphs, "_capture", failing)
    graphs.replay(forward, {"x": torch.ones(3)}, {"scale": 2.0})
    with pytest.warns(RuntimeWarning, match="capture failed"):
        out = graphs.replay(forward, {"x": torch.ones(3)}, {"scale": 2.0})
    assert torch.equal(out[0], torch.full((3,), 2.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")                           # no second warning, no second try
        graphs.replay(forward, {"x": torch.ones(3)}, {"scale": 2.0})
    assert calls == [2.0, 2.0, 2.0]


def test_a_copy_keeps_the_strides_the_kernels_read():
    v = torch.randn(1, 4, 6, 8).transpose(1, 3)                  # tokens innermost, as a model hands v over
    copy = graphs._copy_of(v)
    assert copy.stride() == v.stride() and torch.equal(copy, v) and copy.data_ptr() != v.data_ptr()


@pytest.mark.parametrize("deferred", [False, True])
def test_a_call_whose_checks_are_deferred_is_not_replayed(deferred, monkeypatch):
    """A caller that defers its value checks (a model's layers) does not sync per call: its launches already
    overlap the GPU, so the public call keeps it off the graphs (the copies would only add work)."""
    import sparsegdn
    from sparsegdn import triton as backend
    from sparsegdn.validation import DeferredChecks
    seen = {}

    def stand_in(q, k, v, g, beta, **options):
        seen.update(options)
        batch, tokens, heads, value_dim = v.shape
        n_chunks = sparsegdn.num_chunks(tokens)
        return (torch.zeros_like(v), None, torch.ones(batch, heads, n_chunks, dtype=torch.bool),
                torch.zeros(batch, heads, n_chunks), torch.full((batch, heads), n_chunks),
                torch.zeros(3, dtype=torch.int32))
    monkeypatch.setattr(backend, "sparse_gdn_forward", stand_in)
    monkeypatch.setattr(sparsegdn.config, "triton_available", lambda: True)
    monkeypatch.setenv("TRITON_INTERPRET", "1")              # the backend is allowed on CPU tensors
    q = torch.randn(1, 64, 2, 16)
    v = torch.randn(1, 64, 4, 16)
    g, beta = -torch.rand(1, 64, 4), torch.rand(1, 64, 4)
    checks = DeferredChecks() if deferred else None
    sparsegdn.sparse_gated_delta_rule(q, q.clone(), v, g, beta, backend="triton", checks=checks)
    assert seen["replayable"] is (not deferred)
