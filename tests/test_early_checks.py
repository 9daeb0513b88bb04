"""The early checks (sparsegdn/triton/forward.py EARLY_CHECKS): a scan of q and the initial state and pass 1 (k, v and g
as it loads them) raise a flag for a head vector's norm or an element of the state beyond the bound, and the public
call that they clear returns without waiting for its later kernels;
the contract's errors stay the same.

Under TRITON_INTERPRET=1 at small shapes (the GPU matrix repeats the public call's cases at the benchmark's heads).
On the CPU the kernels have run when a call returns, so "returns without waiting" is shown by what the call reads:
the early flags only, never the late ones.
"""
import pytest
import torch
from gdn_inputs import random_inputs

import sparsegdn
from sparsegdn import validation
from sparsegdn.triton import forward
from sparsegdn.triton import intra_chunk as intra_chunk_module
from sparsegdn.triton import schedule
from sparsegdn.triton.chunk_loads import FLAG_GATES, FLAG_WAIT, NUM_FLAGS, WAIT_BOUND
from sparsegdn.triton.intra_chunk import SCAN_TILES, early_scan, intra_chunk

pytestmark = [pytest.mark.skipif(not sparsegdn.config.triton_available(),
                                 reason="needs triton with CUDA or TRITON_INTERPRET=1"),
              pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter shapes; the GPU matrix covers GPUs")]

# (B, T, H, HV, K, V): ragged T, two value heads a key head, B = 2
SHAPE = (2, 150, 2, 4, 16, 32)


def _inputs(seed, dtype=torch.bfloat16, initial_state=True):
    return random_inputs(*SHAPE, dtype=dtype, seed=seed, initial_state=initial_state)


def _pass_one(q, k, v, g, beta, s0, early=True):
    flags = torch.zeros(NUM_FLAGS, dtype=torch.int32)
    intra_chunk(k, v, g, beta, flags, band=1, normalize=True, num_value_heads=v.shape[2], num_chunks=3,
                store_inverse=False, early=(q, s0) if early else None)
    return flags.tolist()


def _spoil(inputs, name, index, value):
    """The inputs with `name` (q, k, v or s0) at `index` (an element, or a head vector by its first three indices)
    set to value (a copy: the others are shared)."""
    q, k, v, g, beta, s0 = inputs
    spoiled = dict(q=q, k=k, v=v, g=g, beta=beta, s0=s0)
    spoiled[name] = spoiled[name].clone()
    spoiled[name][index] = value
    return tuple(spoiled[n] for n in ("q", "k", "v", "g", "beta", "s0"))


# one element each, away from the first chunk, head and batch row where the kernels' own indexing could hide it:
# q of key head 1 in batch row 1, k's last token, v's last value head, the initial state of batch row 1's last head
# pair
PLACES = {"q": (1, 100, 1, 7), "k": (0, 149, 1, 15), "v": (1, 65, 3, 31), "s0": (1, 3, 15, 31)}


@pytest.mark.parametrize("beside", [False, True], ids=["after-scan", "beside-scan"])
@pytest.mark.parametrize("name", list(PLACES))
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -2 * WAIT_BOUND.value])
def test_pass_one_asks_to_wait_for_an_input_element_that_is_not_finite_or_beyond_the_bound(name, value, beside,
                                                                                          monkeypatch):
    """Whether pass 1 follows the scan or starts beside it (intra_chunk.EARLY_BESIDE), the flags it leaves hold
    the scan's (q, the initial state) and its own (k, v)."""
    monkeypatch.setattr(intra_chunk_module, "EARLY_BESIDE", beside)
    inputs = _inputs(1)
    assert _pass_one(*inputs) == [0] * NUM_FLAGS, "clean inputs: nothing raised"
    flags = _pass_one(*_spoil(inputs, name, PLACES[name], value))
    assert flags[FLAG_WAIT] == 1 and flags[FLAG_GATES] == 0, (name, value, flags)
    assert _pass_one(*_spoil(inputs, name, PLACES[name], value), early=False)[FLAG_WAIT] == 0, "only when asked"


def test_pass_one_clears_inputs_at_the_bound():
    """q's, k's and v's head vectors with a norm of exactly the bound, an element of the initial state at it."""
    inputs = _spoil(_inputs(2, dtype=torch.float32), "s0", PLACES["s0"], WAIT_BOUND.value)
    for name in ("q", "k", "v"):
        row = torch.zeros(SHAPE[-1] if name == "v" else SHAPE[-2])
        row[-1] = WAIT_BOUND.value
        inputs = _spoil(inputs, name, PLACES[name][:3], row)
    assert _pass_one(*inputs)[FLAG_WAIT] == 0


@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_pass_one_asks_to_wait_for_a_head_vector_beyond_the_bound_in_norm(name):
    """Every element within the bound, the head vector's norm beyond it: the bound is on norms
    (chunk_loads.WAIT_BOUND)."""
    width = SHAPE[-1] if name == "v" else SHAPE[-2]
    inputs = _spoil(_inputs(2, dtype=torch.float32), name, PLACES[name][:3], WAIT_BOUND.value / width ** 0.5 * 1.01)
    assert _pass_one(*inputs)[FLAG_WAIT] == 1


SCAN_BLOCK = SCAN_TILES.value * 64     # tokens a program of the scan reads


@pytest.mark.parametrize("place", [(0, 0, 0, 0), (1, 599, 2, 11), (0, SCAN_BLOCK, 1, 3), (1, 2 * SCAN_BLOCK - 1, 0, 9),
                                   (0, 2 * SCAN_BLOCK + 64, 2, 0)])
def test_the_scan_finds_a_q_element_in_any_block_of_a_strided_view(place):
    """early_scan over three blocks of tokens (the last ragged) of a q split from a wider projection, as a model's q
    comes (read in place through its strides): an element anywhere raises FLAG_WAIT. K = 12 in tiles of 16 columns:
    the projection's columns 12-15 of each head lie inside the tile and are not q's (masked off)."""
    projection = torch.randn(2, 600, 3 * 24, dtype=torch.bfloat16)
    q = projection.view(2, 600, 3, 24)[..., :12]

    def scan(q, state=None):
        flags = torch.zeros(NUM_FLAGS, dtype=torch.int32)
        early_scan(q, state, flags, num_value_heads=6)
        return flags.tolist()
    projection.view(2, 600, 3, 24)[..., 12:] = float("nan")
    assert scan(q) == [0] * NUM_FLAGS, "clean q (NaN only past K, in the projection's other columns)"
    q[place] = float("inf")
    assert scan(q) == [0, 0, 0, 1], place
    state = torch.zeros(2, 6, 12, 32)
    state[1, 5, 11, 31] = float("nan")
    q[place] = 1.0
    assert scan(q, state) == [0, 0, 0, 1] and scan(q, torch.zeros_like(state)) == [0] * NUM_FLAGS


def _public(inputs, **options):
    q, k, v, g, beta, s0 = inputs
    return sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True,
                                             backend="triton", **options)


@pytest.fixture(params=[False, True], ids=["scan-by-pass-1", "scan-in-selection"])
def early(monkeypatch, request):
    """The early checks on; validation.read_flags (the wait for every kernel) noted in the returned list. The scan of
    q and the initial state by pass 1's launch, or by the selection's (schedule.SCAN_BESIDE_SELECT)."""
    monkeypatch.setattr(schedule, "SCAN_BESIDE_SELECT", request.param)
    monkeypatch.setattr(forward, "EARLY_CHECKS", True)
    waits = []
    read_flags = validation.read_flags
    monkeypatch.setattr(validation, "read_flags", lambda flags: waits.append(flags) or read_flags(flags))
    return waits


@pytest.mark.parametrize("band, initial_state", [(1, True), (3, False), (0, True)])
def test_the_early_checks_change_no_output_and_read_no_late_flag(early, monkeypatch, band, initial_state):
    inputs = _inputs(3, initial_state=initial_state)
    returns = validation.early_returns
    with_early = _public(inputs, band=band)
    assert early == [], "cleared by pass 1: the late flags are never read"
    assert validation.early_returns == returns + 1, "counted (kernel_bench.how_called reads the count)"
    monkeypatch.setattr(forward, "EARLY_CHECKS", False)
    without = _public(inputs, band=band)
    assert len(early) == 1, "without them the call waits for every flag"
    assert validation.early_returns == returns + 1
    for got, want in zip(with_early[:2], without[:2]):
        assert torch.equal(got, want)
    assert torch.equal(with_early[2].events, without[2].events)


@pytest.mark.parametrize("name", ["q", "k", "v", "initial_state"])
def test_a_non_finite_input_is_a_value_error_naming_it(early, name):
    inputs = _spoil(_inputs(4), "s0" if name == "initial_state" else name,
                    PLACES["s0" if name == "initial_state" else name], float("nan"))
    returns = validation.early_returns
    with pytest.raises(ValueError, match=f"^{name}"):
        _public(inputs)
    assert len(early) == 1, "not cleared: the call waited for every flag"
    assert validation.early_returns == returns, "not an early return"


@pytest.mark.parametrize("selector", ["score", "uniform", "all"])
def test_a_nan_in_q_is_a_value_error_wherever_the_scan_runs(early, selector, monkeypatch):
    """With the scan in the selection's launch (SCAN_BESIDE_SELECT) the `score` selector's select_kernel runs it (no
    launch of early_scan_kernel of its own), and a selector that launches no select_kernel scans on its own launch
    before selecting; with the scan in pass 1's launch, every selector scans there. Either way q's NaN is found and a
    clean call returns early."""
    scans, early_scan = [], intra_chunk_module.early_scan
    monkeypatch.setattr(intra_chunk_module, "early_scan",
                        lambda *args, **kw: scans.append(1) or early_scan(*args, **kw))
    returns = validation.early_returns
    _public(_inputs(12), selector=selector)
    assert early == [] and validation.early_returns == returns + 1, "clean: an early return"
    assert len(scans) == (0 if schedule.SCAN_BESIDE_SELECT and selector == "score" else 1), scans
    with pytest.raises(ValueError, match="^q"):
        _public(_spoil(_inputs(12), "q", PLACES["q"], float("nan")), selector=selector)
    assert len(early) == 1


def test_gates_out_of_range_are_a_value_error_naming_them(early):
    q, k, v, g, beta, s0 = _inputs(5)
    g = g.clone()
    g[0, 10, 2] = 0.5
    with pytest.raises(ValueError, match="^g"):
        _public((q, k, v, g, beta, s0))


def test_large_finite_inputs_wait_and_pass(early, monkeypatch):
    """Beyond the bound but finite and without overflow: the call waits, raises nothing, and computes as without."""
    inputs = _spoil(_inputs(6, dtype=torch.float32), "v", PLACES["v"], 4 * WAIT_BOUND.value)
    got = _public(inputs)
    assert len(early) == 1
    monkeypatch.setattr(forward, "EARLY_CHECKS", False)
    want = _public(inputs)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_an_overflow_still_raises(early):
    """Finite inputs whose o overflows: beyond the bound, so the call waits and finds the overflow, as without."""
    q, k, v, g, beta, s0 = _inputs(7, dtype=torch.float32, initial_state=False)
    v = torch.full_like(v, 3e38)
    with pytest.raises(validation.ResultOverflowError):
        _public((q, k, v, g, beta, s0))
    assert len(early) == 1


def test_a_large_scale_waits_and_still_finds_an_overflow(early):
    """A scale above 1 is outside the bound on o (forward.EARLY_MAX_SCALE): the call waits, and an o that overflows
    with inputs inside the bound raises as without the early checks."""
    inputs = _inputs(10, dtype=torch.float32, initial_state=False)
    with pytest.raises(validation.ResultOverflowError):
        _public(inputs, scale=3e38)
    assert len(early) == 1


def test_pass_one_asks_to_wait_for_a_decay_beyond_the_bound():
    """g inside the contract's range but below -WAIT_BOUND (its cumulative sum can leave float32's range: a NaN only
    o's flag reports) raises FLAG_WAIT, not FLAG_GATES."""
    q, k, v, g, beta, s0 = _inputs(11, dtype=torch.float32)
    assert _pass_one(q, k, v, g, beta, s0)[FLAG_WAIT] == 0
    g = g.clone()
    g[1, 140, 3] = -2 * WAIT_BOUND.value
    flags = _pass_one(q, k, v, g, beta, s0)
    assert flags[FLAG_WAIT] == 1 and flags[FLAG_GATES] == 0, flags


@pytest.mark.parametrize("case", ["deferred", "float16", "raw-keys", "scale-above-1"])
def test_calls_the_early_checks_cannot_clear_wait_as_before(early, monkeypatch, case):
    """A DeferredChecks caller (no call syncs), float16 outputs (overflow within reach), raw keys (commits that
    can expand) and a scale above 1 run without them: no early copy, and the public call reads every flag."""
    inputs = _inputs(8, dtype=torch.float16 if case == "float16" else torch.bfloat16)
    copies = []
    copy_early = validation.copy_early
    monkeypatch.setattr(validation, "copy_early", lambda flags: copies.append(flags) or copy_early(flags))
    if case == "deferred":
        checks = validation.DeferredChecks()
        _public(inputs, checks=checks)
        checks.check()                  # reads the flags it holds: once, in check()
    else:
        _public(inputs, use_qk_l2norm_in_kernel=case != "raw-keys", scale=2.0 if case == "scale-above-1" else None)
    assert len(early) == 1
    assert copies == []


def test_which_calls_take_the_early_checks(monkeypatch):
    def early_for(dtype, normalize=True, deferred=False, scale=0.1):
        return forward.early_checks(torch.zeros(1, dtype=dtype), normalize, scale, deferred=deferred)
    monkeypatch.setattr(forward, "EARLY_CHECKS", False)
    assert not any(early_for(dtype) for dtype in forward.EARLY_DTYPES)
    monkeypatch.setattr(forward, "EARLY_CHECKS", True)
    assert all(early_for(dtype) for dtype in (torch.bfloat16, torch.float32, torch.float64))
    assert not early_for(torch.float16)
    assert not early_for(torch.bfloat16, normalize=False)
    assert not early_for(torch.bfloat16, deferred=True)
    assert not early_for(torch.bfloat16, scale=1.5) and early_for(torch.bfloat16, scale=1.0)


def test_early_flags_a_backend_call_left_are_not_a_later_calls(early):
    """Clean early flags a backend call copied and nobody read (a benchmark's entry) must not clear a later public
    call that runs without the early checks (float16 here) and has a NaN."""
    from sparsegdn.triton import sparse_gdn_forward
    q, k, v, g, beta, s0 = _inputs(9)
    sparse_gdn_forward(q, k, v, g, beta, events=None, budget=0.29, selector="score", band=1, scale=16 ** -0.5,
                       initial_state=s0, output_final_state=True, use_qk_l2norm_in_kernel=True)
    spoiled = _spoil(tuple(x.half() for x in (q, k, v, g, beta)) + (s0,), "v", PLACES["v"], float("nan"))
    with pytest.raises(ValueError, match="^v"):
        _public(spoiled)


@pytest.mark.parametrize("design, process", [("early", False), ("waiting", True)])
def test_the_benchmark_designs_set_and_put_back_the_switch(design, process, monkeypatch):
    """kernel_bench's designs "early" and "waiting" are by_band with EARLY_CHECKS on and off, whatever the
    process's setting; the next design without their tag puts back what it was."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import kernel_bench
    monkeypatch.setattr(kernel_bench, "_saved_switches", {})
    monkeypatch.setattr(forward, "EARLY_CHECKS", process)
    kernel_bench.set_design(kernel_bench.DESIGNS[design])
    assert forward.EARLY_CHECKS == (design == "early")
    assert (forward.STORE_INVERSE, forward.COMMIT_SEGMENT) == (None, 0)
    kernel_bench.set_design(kernel_bench.DESIGNS["by_band"])
    assert forward.EARLY_CHECKS == process


def test_a_copy_nobody_waited_for_is_waited_for_before_its_buffer_is_used_again(monkeypatch):
    """validation.copy_early on a GPU: the pinned buffer's last copy, if nobody waited for it (a backend call's, on
    any stream), is waited for before the next copy into the buffer, so it cannot land after it. CPU stand-ins for
    the pinned buffer and the event."""
    waited = []

    class Event:
        def record(self, stream):
            pass

        def synchronize(self):
            waited.append(self)

    class Flags:
        is_cuda, device, shape, dtype = True, "cuda:0", (NUM_FLAGS,), torch.int32

    class Host:
        shape = (NUM_FLAGS,)

        def copy_(self, flags, non_blocking):
            assert non_blocking

        def tolist(self):
            return [0] * NUM_FLAGS
    place = ("early", Flags.device, Flags.shape, Flags.dtype)   # validation._copy_to_host's key
    monkeypatch.setattr(validation._read_back, "places", {place: [Host(), Event(), None]}, raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: None)
    validation.copy_early(Flags())
    first = validation.take_early()
    validation.copy_early(Flags())          # the first was never read: waited for now
    assert waited == [first.event]
    validation.take_early().read()          # read: nothing left to wait for at the next copy
    validation.copy_early(Flags())
    assert len(waited) == 2
    validation.take_early()


def test_the_flags_host_buffer_made_under_inference_mode_takes_copies_outside_it():
    """validation.host_buffer: the buffer a call's flags are copied into is kept for later calls, whatever their grad
    mode. One made under torch.inference_mode was an inference tensor, and the next call under no_grad failed on
    its copy (the GPU matrix, batch 34: 8 cases after a graph test on the same worker). On the CPU it is not pinned;
    the mode is what is checked."""
    flags = torch.tensor([0, 1, 0, 2], dtype=torch.int32)
    with torch.inference_mode():
        host = validation.host_buffer(flags)
    assert not host.is_inference() and host.shape == flags.shape and host.dtype == flags.dtype
    with torch.no_grad():
        host.copy_(flags)
    assert host.tolist() == [0, 1, 0, 2]
