"""sparsegdn/triton/call_plans.py on the CPU: what a plan records, that it replays a call's launches with that
call's pointers, and which calls are launched instead.

The compiled kernels are stand-ins that note what they were launched with (the real ones need a GPU: the
GPU matrix compares a planned call with a launched one bit for bit); the forward's host code runs as it
does on a GPU, on CPU tensors.
"""
import ctypes
import dataclasses

import pytest
import torch
from gdn_inputs import random_inputs

from sparsegdn import validation
from sparsegdn.triton import call_plans, call_record, forward, graphs, launch, segment_scan  # noqa: F401 (every kernel module)
from sparsegdn.triton.chunk_loads import NUM_FLAGS

OPTIONS = dict(events=None, budget=0.29, selector="score", band=1, scale=64 ** -0.5, output_final_state=True,
               use_qk_l2norm_in_kernel=True, stage_hook=None)


class FakeCompiled:
    """Notes each launch: (kernel name, grid, the arguments after the launch metadata)."""
    function = packed_metadata = None

    def __init__(self, name, log):
        self.name, self.log = name, log

    def run(self, grid_x, grid_y, grid_z, stream, function, metadata, hook_a, hook_b, hook_c, *arguments):
        self.log.append((self.name, (grid_x, grid_y, grid_z), arguments))


class FakeKernel:
    """Stands in for a (tuned) Triton kernel: kernel[grid](...) "compiles" and returns the compiled stand-in."""

    def __init__(self, compiled):
        self.compiled = compiled
        self.best_config = type("Config", (), {"all_kwargs": lambda self: {"BV": 64, "GROUP": 1, "STATE_BV": 32}})()

    def __getitem__(self, grid):
        def first_call(*args, **constants):
            self.compiled.log.append((self.compiled.name, "through Triton", args))
            return self.compiled
        return first_call


class FakeDriver:
    class active:
        get_current_device = staticmethod(lambda: 0)
        get_current_stream = staticmethod(lambda device: 0)


class FakeZeroKernel:
    """The compiled zero_words_kernel's stand-in: takes the launch as Triton's launcher does (every parameter of
    the kernel, constexpr ones too) and clears the CPU memory at the address."""
    function = packed_metadata = None

    def __init__(self, zeroed):
        self.zeroed = zeroed

    def run(self, grid_x, grid_y, grid_z, stream, function, metadata, hook_a, hook_b, hook_c, *arguments):
        assert len(arguments) == len(call_plans.zero_words_kernel.arg_names), arguments
        address, n_words, block = arguments
        assert block == call_plans.ZERO_BLOCK and grid_x * block >= n_words > (grid_x - 1) * block
        ctypes.memset(address, 0, 4 * n_words)


def noted_zero_words(zero_words, log):
    """call_plans.zero_words, noting in log.zeroed (offset in the buffer, words, launches noted before it)."""
    def noted(address, n_words, stream, buffer):
        assert buffer.data_ptr() <= address and address + 4 * n_words <= buffer.data_ptr() + buffer.numel()
        log.zeroed.append((address - buffer.data_ptr(), n_words, len(log)))
        return zero_words(address, n_words, stream, buffer)
    return noted


class LaunchLog(list):
    """The launches noted (a list), and in `zeroed` the planned calls' clearings: (offset in the buffer, words,
    launches noted before it)."""
    zeroed: list


@pytest.fixture
def launches(monkeypatch):
    """Every Launcher's kernel stubbed; returns the list the launches are noted in."""
    log = LaunchLog()
    monkeypatch.setattr(launch, "FAST_LAUNCH", True)
    monkeypatch.setattr(launch, "driver", FakeDriver)
    for launcher in launch.launchers():
        monkeypatch.setattr(launcher, "kernel", FakeKernel(FakeCompiled(getattr(launcher.jit, "__name__", ""), log)))
        monkeypatch.setattr(launcher, "autotuned", True)
        monkeypatch.setattr(launcher, "plans", {})

    log.zeroed = []
    monkeypatch.setattr(call_plans, "_zero_kernels", {None: FakeZeroKernel(log.zeroed)})    # CPU tensors' index
    monkeypatch.setattr(call_plans, "zero_words", noted_zero_words(call_plans.zero_words, log))
    call_plans.clear()
    yield log
    call_plans.clear()


def _inputs(seed, initial_state=False):
    q, k, v, g, beta, s0 = random_inputs(1, 300, 2, 4, 64, 64, dtype=torch.bfloat16, seed=seed,
                                         initial_state=initial_state)
    return dict(q=q, k=k, v=v, g=g, beta=beta, initial_state=s0)


def _call(tensors, **changes):
    return call_plans.call(forward._forward, tensors, {**OPTIONS, **changes}, forward.design_switches())


def _traced(log, tensors, allocations):
    """The launches in `log` with every pointer named: ("input", name, offset) or ("part", index, offset)
    through the recorded allocations' addresses, or ("address", int) for an int (a planned call's pointer)."""
    inputs = {x.data_ptr(): name for name, x in tensors.items() if x is not None}
    spans = [(t.data_ptr(), t.numel() * t.element_size()) for t, _ in allocations]

    def name(x):
        if isinstance(x, torch.Tensor):
            if x.data_ptr() in inputs:
                return ("input", inputs[x.data_ptr()], 0)
            index = next(i for i, (start, size) in enumerate(spans) if start <= x.data_ptr() < start + max(size, 1))
            return ("part", index, x.data_ptr() - spans[index][0])
        return x
    return [(kernel, grid, tuple(name(x) for x in arguments)) for kernel, grid, arguments in log]


CASES = {"default": ({}, {}, False), "no-final-state": ({"output_final_state": False}, {}, False),
         "initial-state": ({}, {}, True), "all-events": ({"selector": "all"}, {}, False),
         "stored-inverse": ({}, {"STORE_INVERSE": True}, False), "paired": ({}, {"PAIRED": True}, True),
         "split-outputs": ({}, {"SPLIT_OUTPUTS": True}, False), "early-checks": ({"early": True}, {}, True)}


@pytest.mark.parametrize("case", list(CASES))
def test_a_plan_replays_the_launches_of_a_call_with_that_calls_pointers(launches, monkeypatch, case):
    changes, switches, initial = CASES[case]
    for name, value in switches.items():
        monkeypatch.setattr(forward, name, value)
    options = {**OPTIONS, **changes}
    _call(_inputs(1, initial), **changes)          # first call: every kernel "compiles", nothing is planned
    assert not call_plans._plans and not call_plans._refused
    _call(_inputs(2, initial), **changes)          # second call: recorded, planned
    assert len(call_plans._plans) == 1
    plan = next(iter(call_plans._plans.values()))

    x = _inputs(3, initial)
    launches.clear()
    with call_record.recording() as record:           # the same call launched as usual, for comparison
        launched = forward._forward(**x, **options)
    expected = _traced(launches, x, record.allocations)
    launches.clear()
    empty = call_record.empty

    def poisoned(*shape, dtype, device):              # torch.empty's memory may hold anything: not zeros here
        return empty(*shape, dtype=dtype, device=device).fill_(0xFF if dtype == torch.uint8 else 1)
    monkeypatch.setattr(call_record, "empty", poisoned)
    with call_record.recording() as replayed:         # the planned call's own allocations
        planned = _call(x, **changes)
    monkeypatch.setattr(call_record, "empty", empty)
    assert len(launches) == len(expected) == len(plan.launches) >= 5       # `all` selects without a kernel
    inputs = {t.data_ptr(): name for name, t in x.items() if t is not None}
    base_of_part = {}
    for (kernel, grid, arguments), (kernel_0, grid_0, arguments_0) in zip(launches, expected):
        assert (kernel, grid, len(arguments)) == (kernel_0, grid_0, len(arguments_0))
        for got, want in zip(arguments, arguments_0):
            if isinstance(want, tuple) and want[0] == "input":
                assert got == x[want[1]].data_ptr() + want[2]
            elif isinstance(want, tuple) and want[0] == "part":
                assert isinstance(got, int) and got not in inputs
                assert base_of_part.setdefault(want[1], got - want[2]) == got - want[2], "one part, one base"
            else:
                assert got == want
    # every part where the plan put it: a returned one is that output, the others at their offset in the zeroed
    # buffer (allocated first, cleared whole by one launch of zero_words before any kernel) or the workspace (the
    # planned call's only other allocations); none overlaps another
    zeroed, workspace = [tensor for tensor, _ in replayed.allocations if tensor.dtype == torch.uint8]
    assert (zeroed.numel(), workspace.numel()) == (plan.zeroed_bytes, plan.workspace_bytes) and plan.zeroed_bytes > 0
    assert len(replayed.allocations) == 2 + sum(part.place == call_plans.OWN for part in plan.parts)
    assert launches.zeroed == [(0, plan.zeroed_bytes // 4, 0)], "cleared once, whole, before the first launch"
    buffers = {call_plans.WORKSPACE: workspace, call_plans.ZEROED: zeroed}
    outputs = {index: planned[position] for position, (kind, index) in enumerate(plan.outputs) if kind == "part"}
    for index, base in base_of_part.items():
        part = plan.parts[index]
        if part.place == call_plans.OWN:
            assert base == outputs[index].data_ptr(), index
        else:
            buffer = buffers[part.place]
            assert base == buffer.data_ptr() + part.offset and part.offset + part.nbytes <= buffer.numel(), index
    # a returned tensor keeps no more memory than its own (the flags, a view of the small zeroed buffer, keep that):
    # never the workspace, which a caller holding the flags (DeferredChecks) would otherwise keep for every call
    for index, tensor in outputs.items():
        part = plan.parts[index]
        own = -(-part.nbytes // call_plans.ALIGN) * call_plans.ALIGN
        assert tensor.untyped_storage().nbytes() <= max(own, plan.zeroed_bytes if part.place == call_plans.ZEROED
                                                        else 0), (index, part.place)
    spans = sorted((base, base + plan.parts[index].nbytes) for index, base in base_of_part.items())
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    # the same outputs, fresh: shapes, dtypes, zeroed flags
    assert len(planned) == len(launched)
    for got, want in zip(planned, launched):
        assert (got is None) == (want is None)
        if want is not None:
            assert (got.shape, got.dtype, got.device) == (want.shape, want.dtype, want.device)
    assert torch.equal(planned[5], torch.zeros(NUM_FLAGS, dtype=torch.int32)), "the value flags start at zero"
    assert torch.equal(planned[2], launched[2]) if case == "all-events" else True, "every event, filled as launched"
    again = _call(_inputs(4, initial), **changes)
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(again[:5], planned[:5]) if a is not None)


def test_a_plan_keeps_no_tensor(launches):
    for seed in (1, 2):
        _call(_inputs(seed, initial_state=True))
    plan = next(iter(call_plans._plans.values()))
    assert plan.input_names == ("q", "k", "v", "g", "beta", "initial_state")

    def tensors_in(value):
        if isinstance(value, torch.Tensor):
            return 1
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return sum(tensors_in(getattr(value, f.name)) for f in dataclasses.fields(value))
        if isinstance(value, (tuple, list)):
            return sum(tensors_in(item) for item in value)
        return 0
    assert tensors_in(plan) == 0


def test_calls_whose_buffers_torch_makes_are_launched(launches):
    """`uniform` makes its events with torch ops the recording cannot see: never planned. `all` fills its
    events through call_record.full: planned, its events filled with True on every planned call."""
    for selector in ("uniform", "all"):
        for seed in (1, 2, 3):
            out = _call(_inputs(seed), selector=selector)
    assert len(call_plans._plans) == 1 and len(call_plans._refused) == 1
    assert out[2].dtype == torch.bool and out[2].all(), "the planned `all` call's events are every event"
    launches.clear()
    _call(_inputs(4), selector="uniform")
    assert launches and all(any(isinstance(x, torch.Tensor) for x in arguments) for _, _, arguments in launches), \
        "launched with tensors, not from a plan's pointers"


def test_keys_apart(launches):
    """Another length, another option or another layout of v is another plan."""
    for seed in (1, 2):
        _call(_inputs(seed))
        _call(_inputs(seed), band=3)
        x = _inputs(seed)
        x["v"] = x["v"].permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)     # tokens innermost
        _call(x)
    assert len(call_plans._plans) == 3


def test_only_plain_calls_are_planned(monkeypatch):
    monkeypatch.setattr(launch, "FAST_LAUNCH", True)
    monkeypatch.setattr(call_plans, "CALL_PLANS", True)
    assert call_plans.wanted(events=None, stage_hook=None)
    assert not call_plans.wanted(events=torch.ones(1, 4, 5, dtype=torch.bool), stage_hook=None)
    assert not call_plans.wanted(events=None, stage_hook=print)
    monkeypatch.setattr(call_plans, "CALL_PLANS", False)
    assert not call_plans.wanted(events=None, stage_hook=None)
    monkeypatch.setattr(call_plans, "CALL_PLANS", True)
    monkeypatch.setattr(launch, "FAST_LAUNCH", False)       # the interpreter: Triton's own launches
    assert not call_plans.wanted(events=None, stage_hook=None)


def test_recording_notes_only_this_threads_allocations():
    import threading
    with call_record.recording() as record:
        call_record.empty(3, dtype=torch.float32, device="cpu")
        other = threading.Thread(target=lambda: call_record.zeros(2, dtype=torch.int32, device="cpu"))
        other.start()
        other.join()
        call_record.zeros(4, dtype=torch.int32, device="cpu")
    assert [(tuple(t.shape), fill) for t, fill in record.allocations] == [((3,), None), ((4,), 0)]
    assert call_record.active() is None


def test_a_call_given_one_tensor_as_two_inputs_is_not_planned(launches):
    """q passed as k too: a plan would give a later call's distinct k the pointer of its q."""
    for seed in (1, 2, 3):
        x = _inputs(seed)
        x["k"] = x["q"]
        _call(x)
    assert not call_plans._plans and len(call_plans._refused) == 1


def _zeros_written_by_torch(monkeypatch):
    """call_record.zeros followed by a torch write into the buffer (zeroed again in place)."""
    zeros = call_record.zeros

    def zeros_then_written(*shape, dtype, device):
        tensor = zeros(*shape, dtype=dtype, device=device)
        tensor.zero_()
        return tensor
    monkeypatch.setattr(call_record, "zeros", zeros_then_written)


def test_a_recording_torch_wrote_into_is_not_planned(launches, monkeypatch):
    """A torch write into a recorded buffer (here the value flags, zeroed again in place) would be skipped by
    every planned call: such a recording is refused."""
    _zeros_written_by_torch(monkeypatch)
    for seed in (1, 2, 3):
        _call(_inputs(seed))
    assert not call_plans._plans and len(call_plans._refused) == 1


def test_a_callers_key_finds_the_plan_in_place_of_its_own(launches, monkeypatch):
    """The public call hands in its key (sparsegdn.api.checked_key): the plan is kept and found under it, with the
    design switches; the backend makes no key of its own."""
    design = forward.design_switches()

    def no_key(*_):
        raise AssertionError("the backend made a key of its own")
    monkeypatch.setattr(graphs, "call_key", no_key)
    for seed in (1, 2):         # the first call "compiles", the second is recorded
        call_plans.call(forward._forward, _inputs(seed), dict(OPTIONS), design, key="the caller's")
    assert list(call_plans._plans) == [("caller", "the caller's", design)]
    launches.clear()
    call_plans.call(forward._forward, _inputs(2), dict(OPTIONS), design, key="the caller's")
    assert launches and not any(isinstance(x, torch.Tensor) for _, _, arguments in launches for x in arguments), \
        "launched with tensors, not from the plan"
    call_plans.call(forward._forward, _inputs(2), dict(OPTIONS), design + ("changed",), key="the caller's")
    assert len(call_plans._plans) == 2                  # other design switches: another plan


def test_a_call_with_a_launch_no_plan_can_make_is_refused_and_then_not_recorded():
    # list_output's Gluon launches are not Launcher's: a recording of such a call would keep every allocation alive
    # until it returns, call after call, and a plan would miss the launches; its key is refused after one recording
    call_plans.clear()
    recorded = []

    def forward(x):
        recorded.append(call_record.active() is not None)
        call_record.empty(4, dtype=torch.float32, device="cpu")
        call_record.note_unreplayable()
        return x + 1

    tensors = {"x": torch.zeros(3)}
    for _ in range(3):
        assert torch.equal(call_plans.call(forward, tensors, {}, key=("unreplayable",)), torch.ones(3))
    assert recorded == [True, False, False]
    call_plans.clear()


def test_a_descriptor_argument_is_replayed_around_the_calls_address(monkeypatch):
    """A TMA descriptor argument (list_output's Gluon kernels take them) over a view of an input and one over a
    recorded allocation: the plan keeps no tensor of either, and a replay hands the launcher descriptors with the
    same shape, strides, block shape, layout and padding around the new call's addresses (the input's plus the
    view's offset; the fresh workspace's)."""
    gl = pytest.importorskip("triton.experimental.gluon.language")
    TensorDescriptor = pytest.importorskip("triton.experimental.gluon.nvidia.hopper").TensorDescriptor
    layout = gl.NVMMASharedLayout.get_default_for([64, 128], gl.bfloat16)

    def recorded(q):
        with call_record.recording() as record:
            o = call_record.empty(256, 128, dtype=torch.bfloat16, device="cpu")
            tiles = TensorDescriptor.from_tensor(q.view(-1, 256)[:, 128:], [64, 128], layout)  # offset 256 bytes
            out = TensorDescriptor.from_tensor(o, [64, 128], layout)
            call_record.note_launch(compiled, (2, 1, 1), (tiles, 7, out))
        return record, o

    monkeypatch.setattr(launch, "driver", FakeDriver)
    log = []
    compiled = FakeCompiled("list", log)
    q = torch.zeros(1, 128, 2, 128, dtype=torch.bfloat16)
    record, o = recorded(q)
    plan = call_plans.build(record, {"v": q}, (o,))
    assert plan is not None
    (step,) = plan.launches
    assert step.arguments[1] == 7 and step.arguments[0] is None and step.arguments[2] is None
    assert [(position, source, offset) for position, source, offset, _ in step.pointers] == [(0, 0, 256), (2, 1, 0)]
    fresh = torch.zeros(1, 128, 2, 128, dtype=torch.bfloat16)
    (o_again,) = call_plans.run(plan, {"v": fresh})
    (name, dims, (tiles, seven, out)), = log
    assert dims == (2, 1, 1) and seven == 7
    assert tiles.base.data_ptr() == fresh.data_ptr() + 256 and out.base.data_ptr() == o_again.data_ptr()
    assert (tuple(tiles.shape), tuple(tiles.strides), tuple(tiles.block_shape)) == ((128, 128), (256, 1), (64, 128))
    assert tiles.layout == layout and tiles.padding == out.padding == "zero" and tuple(out.shape) == (256, 128)
    # a descriptor over memory two inputs share (k a view of q): which input it reads is unknowable, so no plan
    record, o = recorded(q)
    assert call_plans.build(record, {"v": q, "k": q.view_as(q)}, (o,)) is None


@pytest.mark.parametrize("in_selection", [False, True], ids=["scan-by-pass-1", "scan-in-selection"])
def test_a_plan_copies_the_early_flags_where_the_recorded_call_did(launches, monkeypatch, in_selection):
    """The early checks' copy (forward.EARLY_CHECKS) is no launch: a plan notes its place (after the scan and pass 1,
    or after pass 1, score_scan and select_kernel where select_kernel's launch runs the scan:
    schedule.SCAN_BESIDE_SELECT) and makes it there with the planned call's own flags, before the later launches."""
    from sparsegdn.triton import schedule
    monkeypatch.setattr(schedule, "SCAN_BESIDE_SELECT", in_selection)
    place, first = ((3, ["intra_chunk_kernel", "score_scan_kernel", "select_kernel"]) if in_selection
                    else (2, ["early_scan_kernel", "intra_chunk_kernel"]))
    copies = []
    monkeypatch.setattr(validation, "copy_early", lambda flags: copies.append((len(launches), flags.data_ptr(),
                                                                               tuple(flags.shape))))
    for seed in (1, 2):                 # compiled, then recorded
        _call(_inputs(seed, True), early=True)
    plan = next(iter(call_plans._plans.values()))
    assert plan.early is not None and plan.early[0] == place, "after the scan and pass 1, the first recorded launches"
    copies.clear()
    launches.clear()
    planned = _call(_inputs(3, True), early=True)
    assert copies == [(place, planned[5].data_ptr(), (NUM_FLAGS,))], "once, after the scan, the planned call's flags"
    assert [name for name, *_ in launches[:place]] == first and len(launches) > place
    copies.clear()
    _call(_inputs(4, True))             # without the early checks: another key, launched and recorded, no copy
    assert copies == []


def test_calls_under_inference_mode_are_planned_and_torch_writes_still_refused(launches, monkeypatch):
    """The app's analysis pass calls the core under torch.inference_mode, where the buffers torch makes are
    inference tensors, which keep no version counter: reading one raised "Inference tensors do not track version
    counter" when the first complete call was turned into a plan (the app's run on a GPU, batch 52). The recorded
    buffers are made as normal tensors, whose writes by torch stay counted, so such calls are planned and the
    later ones replayed, and a torch write into one is still refused."""
    replays = call_plans.replays
    with torch.inference_mode():
        for seed in (1, 2, 3):
            out = _call(_inputs(seed))
    assert len(call_plans._plans) == 1 and not call_plans._refused
    assert call_plans.replays - replays == 1, "recorded once (the first call compiled), then replayed"
    assert out[0].shape == (1, 300, 4, 64)
    call_plans.clear()
    _zeros_written_by_torch(monkeypatch)
    with torch.inference_mode():
        for seed in (1, 2, 3):
            _call(_inputs(seed))
    assert not call_plans._plans and len(call_plans._refused) == 1
