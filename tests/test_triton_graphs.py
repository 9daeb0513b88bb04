"""sparsegdn/triton/graphs.py on the CPU: which calls are replayed from a CUDA graph, what a graph is valid for,
and the cache around the capture (a stand-in graph: CUDA graphs themselves run in the GPU matrix,
tests/test_triton_gpu_matrix.py::test_gpu_graph_replay_equals_the_launches)."""
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


class FakeGraph:
    """Replays `forward` on the captured call's own input copies, as a CUDA graph would."""

    def __init__(self, run):
        self.run = run
        self.replays = 0

    def replay(self):
        self.replays += 1
        self.run()


def test_replay_copies_inputs_in_and_outputs_out_and_keeps_the_newest_keys(graphs_on, monkeypatch):
    calls = []

    def forward(*, x, scale):
        calls.append(scale)
        return x * scale, None

    def capture(fn, tensors, options):
        inputs = {name: graphs._copy_of(t) for name, t in tensors.items()}
        outputs = fn(**inputs, **options)
        state = {"out": outputs}

        def run():                      # a graph writes into the same output buffers on every replay
            state["out"][0].copy_(inputs["x"] * options["scale"])
        return graphs.CapturedCall(FakeGraph(run), inputs, outputs)
    monkeypatch.setattr(graphs, "_capture", capture)
    monkeypatch.setattr(graphs, "CACHE_SIZE", 2)
    uses = []                                                     # stand-ins for the CUDA events
    monkeypatch.setattr(graphs, "_mark", lambda device: uses.append(f"use {len(uses)}") or uses[-1])
    waits = []
    monkeypatch.setattr(graphs, "_wait_for", lambda event, device: waits.append(event))
    finished = []
    monkeypatch.setattr(graphs, "_finished", lambda event: finished.append(event))
    first = graphs.replay(forward, {"x": torch.ones(3)}, {"scale": 2.0})
    second = graphs.replay(forward, {"x": torch.full((3,), 5.0)}, {"scale": 2.0})
    assert torch.equal(first[0], torch.full((3,), 2.0))         # not changed by the later replay
    assert torch.equal(second[0], torch.full((3,), 10.0)) and second[1] is None
    assert calls == [2.0]                                        # one capture for both calls
    assert waits == ["use 0"]           # the second call's copies wait for the first call's replay and copy-out
    graphs.replay(forward, {"x": torch.ones(4)}, {"scale": 2.0})
    graphs.replay(forward, {"x": torch.ones(5)}, {"scale": 2.0})
    assert len(graphs._captured) == 2                            # the oldest key evicted
    assert finished == ["use 1"]        # ... once the last replay of it (the second call) has finished
    graphs.replay(forward, {"x": torch.ones(3)}, {"scale": 2.0})
    assert calls == [2.0, 2.0, 2.0, 2.0]                         # captured again after its eviction


def test_a_copy_keeps_the_strides_the_kernels_read():
    v = torch.randn(1, 4, 6, 8).transpose(1, 3)                  # tokens innermost, as a model hands v over
    copy = graphs._copy_of(v)
    assert copy.stride() == v.stride() and torch.equal(copy, v) and copy.data_ptr() != v.data_ptr()
