"""Every shape the API accepts runs on the GPU: the Triton backend against the torch backend with the same events.

The CPU interpreter does not catch every GPU fault (an out-of-bounds access at small head sizes, for
one), so this matrix runs on a CUDA device only, and is skipped elsewhere. One command, on a machine
with a GPU (pytest-xdist optional; -n spreads the compilation over CPU cores):

    python -m pytest -q tests/test_triton_gpu_matrix.py [-n 8]

Head sizes K, V in {32, 64, 128, 256} (equal and unequal), value heads per key head HV/H in
{1, 2, 3, 4}, ragged T and T < 64, B > 1, an initial state, every band and every selector. A CUDA
fault corrupts the process's context, so a case that faults ends its worker process (pytest-xdist
reports the case and starts a fresh worker) after printing the pass it faulted in.
"""
import os

import pytest
import torch
from gdn_inputs import random_events, random_inputs, rel_err

import sparsegdn
from sparsegdn.validation import DeferredChecks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU matrix needs a CUDA device")
TOLERANCE = {torch.bfloat16: 2e-2, torch.float32: 2e-3}

# (B, T, H, HV, K, V, band, initial state, dtype)
SHAPES = [(1 + (i % 2), tokens, key_heads, key_heads * ratio, dim, dim, band, i % 2 == 0, torch.bfloat16)
          for i, (dim, band, ratio, tokens, key_heads) in enumerate(
              (dim, band, 1 + (j + band) % 4, (1000, 333, 50, 777)[(j + band) % 4], (1, 2, 3, 2)[band])
              for j, dim in enumerate((32, 64, 128, 256)) for band in range(4))]
SHAPES += [(1, 300, 2, 4, 32, 128, 1, True, torch.bfloat16), (1, 300, 2, 4, 128, 32, 1, False, torch.bfloat16),
           (2, 200, 1, 2, 64, 256, 3, True, torch.bfloat16), (1, 200, 1, 3, 256, 64, 0, False, torch.bfloat16),
           (1, 500, 2, 8, 32, 32, 1, True, torch.float32), (1, 300, 1, 2, 128, 128, 1, True, torch.float32),
           (1, 300, 1, 2, 256, 256, 2, True, torch.float32), (2, 130, 4, 16, 128, 128, 1, True, torch.float16)]


def _case_id(shape):
    batch, tokens, key_heads, value_heads, key_dim, value_dim, band, initial, dtype = shape
    return (f"B{batch}-T{tokens}-H{key_heads}-HV{value_heads}-K{key_dim}-V{value_dim}-band{band}"
            f"-{'s0' if initial else 'nos0'}-{str(dtype).split('.')[-1]}")


def _run_guarded(fn):
    """Run fn; on a CUDA fault print the last pass that completed and end the process."""
    done = []

    def hook(name):
        torch.cuda.synchronize()
        done.append(name)
    try:
        return fn(hook)
    except RuntimeError as error:       # torch.AcceleratorError is a RuntimeError
        if "CUDA" in str(error) or "illegal" in str(error):
            print(f"CUDA fault after passes {done}: {error}", flush=True)
            os._exit(3)
        raise


def _compare(inputs, **options):
    q, k, v, g, beta, s0 = inputs
    ref = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True,
                                            backend="torch", **options)
    out = _run_guarded(lambda hook: sparsegdn.sparse_gated_delta_rule(
        q, k, v, g, beta, initial_state=s0, output_final_state=True, backend="triton", stage_hook=hook, **options))
    return ref, out


@pytest.mark.parametrize("store_inverse", [False, True], ids=["tinv_on_chip", "tinv_stored"])
@pytest.mark.parametrize("shape", SHAPES, ids=_case_id)
def test_gpu_matches_torch_given_events(shape, store_inverse, monkeypatch):
    """Every shape in both designs of the GPU path (Tinv solved where it is used, the default, or stored by
    the intra-chunk pass)."""
    from sparsegdn.triton import forward
    monkeypatch.setattr(forward, "STORE_INVERSE", store_inverse)
    batch, tokens, key_heads, value_heads, key_dim, value_dim, band, initial, dtype = shape
    inputs = random_inputs(batch, tokens, key_heads, value_heads, key_dim, value_dim, dtype=dtype,
                           initial_state=initial, device="cuda")
    events = random_events(batch, value_heads, sparsegdn.num_chunks(tokens), seed=tokens, p=0.35).cuda()
    if sparsegdn.api.gpu_shape_problem(key_dim, value_dim, dtype):    # refused before any launch; auto uses torch
        q, k, v, g, beta, s0 = inputs
        with pytest.raises(ValueError, match=r"^k, v: head sizes"):
            sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=band, backend="triton")
        o, _, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=band, backend="auto")
        assert torch.isfinite(o).all()
        return
    (o_ref, s_ref, _), (o, s, info) = _compare(inputs, events=events, band=band)
    assert o.dtype == inputs[2].dtype and o.shape == o_ref.shape and s.dtype == torch.float32
    assert torch.equal(info.events, events)
    assert rel_err(o, o_ref) <= TOLERANCE.get(dtype, 2e-2), f"output rel err {rel_err(o, o_ref):.2e}"
    assert rel_err(s, s_ref) <= TOLERANCE.get(dtype, 2e-2), f"state rel err {rel_err(s, s_ref):.2e}"


@pytest.mark.parametrize("overlap", [True, False], ids=["one-launch", "two-launches"])
def test_gpu_chunks_from_a_zero_state_skip_its_part(overlap, monkeypatch):
    """Without an initial state, the chunks before their head pair's first commit skip the state's part
    (chunk_output.SKIP_ZERO_STATE): the torch backend's result, and the launch's own with the skip off, for
    head pairs that never commit, commit late, commit from the first chunk, and a batch of two rows."""
    from sparsegdn.triton import chunk_output, forward
    monkeypatch.setattr(forward, "OVERLAP", overlap)
    q, k, v, g, beta, _ = random_inputs(2, 3000, 2, 8, 128, 128, dtype=torch.bfloat16, device="cuda")
    events = random_events(2, 8, sparsegdn.num_chunks(3000), seed=8, p=0.4).cuda()
    events[0, 0, :30] = False
    events[0, 1] = False
    events[1, 2, 0] = True
    ref = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, output_final_state=True, backend="torch")
    out = {}
    for skip in (True, False):
        monkeypatch.setattr(chunk_output, "SKIP_ZERO_STATE", skip)
        out[skip] = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, output_final_state=True,
                                                      backend="triton")
    o, s, _ = out[True]
    assert rel_err(o, ref[0]) <= 2e-2 and rel_err(s, ref[1]) <= 2e-2, (rel_err(o, ref[0]), rel_err(s, ref[1]))
    assert rel_err(o, out[False][0]) <= 1e-3 and torch.equal(s, out[False][1])      # the same chains


@pytest.mark.parametrize("shape", [(2, 32, 2048), (1, 48, 129), (3, 5, 23)], ids=lambda s: "x".join(map(str, s)))
def test_gpu_schedule_is_the_same_whatever_the_loads(shape, monkeypatch):
    """schedule_kernel's count of the earlier head pairs' events, a row a load or SCHEDULE_LOAD events' worth of rows
    a load (the last load partly past them): every list of the schedule equal, at the benchmark's 128K rows (32 head
    pairs x 2,048 chunks), 48 head pairs of a ragged length and a small shape."""
    from sparsegdn.triton import schedule as schedule_module
    batch, heads, n_chunks = shape
    events = random_events(batch, heads, n_chunks, seed=3, p=0.3).cuda()
    chunk_log_decay = -torch.rand(batch, heads, n_chunks, generator=torch.Generator().manual_seed(4)).cuda()
    built = {}
    for load in (0, 64, 4096):
        monkeypatch.setattr(schedule_module, "SCHEDULE_LOAD", load)
        built[load] = schedule_module.build_schedule(events, chunk_log_decay)
    for load in (64, 4096):
        for name in ("per_head", "event_chunks", "first_event", "snapshot_of_chunk", "log_decay_since",
                     "final_log_decay", "event_decays"):
            assert torch.equal(getattr(built[load], name), getattr(built[0], name)), (load, name)


@pytest.mark.parametrize("store_inverse", [False, True], ids=["tinv_on_chip", "tinv_stored"])
@pytest.mark.parametrize("magnitude", [1e8, 1e20, 1e30])
def test_gpu_huge_log_decays_in_range_match_torch(magnitude, store_inverse, monkeypatch):
    """g of -1e8 to -1e30 a token (inside the contract's range): the chunks' cumulative sums round by thousands, and
    the kernels cap the rounding-made positive differences at 0 (band_solve.log_decay_between); the GPU's minimum
    must keep that and still propagate NaN, as the interpreter's does."""
    from sparsegdn.triton import forward
    monkeypatch.setattr(forward, "STORE_INVERSE", store_inverse)
    q, k, v, g, beta, _ = random_inputs(1, 300, 1, 2, 128, 128, dtype=torch.float32, device="cuda")
    g = -torch.rand(g.shape, generator=torch.Generator().manual_seed(7)).to(g) * magnitude
    events = random_events(1, 2, sparsegdn.num_chunks(300), seed=3, p=0.5).cuda()
    (o_ref, s_ref, _), (o, s, _) = _compare((q, k, v, g, beta, None), events=events, band=1)
    assert torch.isfinite(o).all() and rel_err(o, o_ref) <= 2e-3 and rel_err(s, s_ref) <= 2e-3, \
        (rel_err(o, o_ref), rel_err(s, s_ref))


@pytest.mark.parametrize("key_dim", [64, 128])
@pytest.mark.parametrize("selector", ["score", "uniform", "random", "oracle", "all"])
def test_gpu_selectors_match_torch(selector, key_dim):
    inputs = random_inputs(2, 1500, 2, 4, key_dim, key_dim, dtype=torch.float32, initial_state=True, device="cuda")
    (o_ref, s_ref, info_ref), (o, s, info) = _compare(inputs, budget=0.3, selector=selector, band=1)
    agree = (info.events == info_ref.events).float().mean().item()
    assert agree >= 0.995, f"events agree on {agree:.4f}"    # float32 scores: near-ties may swap at the threshold
    count = sparsegdn.event_count(0.3 if selector != "all" else 1.0, 4, sparsegdn.num_chunks(1500))
    assert (info.events.flatten(1).sum(1) == count).all()
    if agree == 1.0:
        assert rel_err(o, o_ref) <= 2e-3 and rel_err(s, s_ref) <= 2e-3, (rel_err(o, o_ref), rel_err(s, s_ref))


def test_gpu_reads_strided_model_views_in_place():
    """q, k, v split from one projection (token stride larger than the row), and v with the tokens innermost
    (as transformers' Qwen3.5 hands it over), give the contiguous inputs' result."""
    batch, tokens, heads, dim = 1, 700, 4, 128
    mixed = torch.randn(batch, tokens, 3 * heads * dim, device="cuda", dtype=torch.bfloat16)
    q, k, v = (x.reshape(batch, tokens, heads, dim) for x in mixed.split(heads * dim, dim=-1))
    g = -torch.rand(batch, tokens, heads, device="cuda") * 0.1
    beta = torch.rand(batch, tokens, heads, device="cuda") * 0.9 + 0.05
    strided = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, backend="triton", output_final_state=True)
    dense = sparsegdn.sparse_gated_delta_rule(q.contiguous(), k.contiguous(), v.contiguous(), g, beta,
                                              backend="triton", output_final_state=True)
    tokens_innermost = v.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    transposed = sparsegdn.sparse_gated_delta_rule(q, k, tokens_innermost, g, beta, backend="triton",
                                                   output_final_state=True)
    assert not q.is_contiguous() and tokens_innermost.stride(1) == 1
    assert torch.equal(strided[0], dense[0]) and torch.equal(strided[1], dense[1])
    assert torch.equal(transposed[0], dense[0]) and torch.equal(transposed[1], dense[1])


LONG_CHAIN_SHAPES = [(2, 3000, 2, 8, 128, 128, 1, True, torch.bfloat16),
                     (1, 2000, 4, 8, 64, 256, 3, False, torch.bfloat16),
                     (1, 1500, 2, 4, 256, 128, 2, True, torch.float16)]


def _check_long_chain(shape):
    """A long-chain shape against the torch backend with the same events: random events, one head pair committing
    every chunk (the longest chain)."""
    batch, tokens, key_heads, value_heads, key_dim, value_dim, band, initial, dtype = shape
    inputs = random_inputs(batch, tokens, key_heads, value_heads, key_dim, value_dim, dtype=dtype,
                           initial_state=initial, device="cuda")
    events = random_events(batch, value_heads, sparsegdn.num_chunks(tokens), seed=tokens, p=0.5).cuda()
    events[0, 0] = True                   # one head pair commits every chunk: the longest chain
    (o_ref, s_ref, _), (o, s, _) = _compare(inputs, events=events, band=band)
    assert rel_err(o, o_ref) <= 2e-2, f"output rel err {rel_err(o, o_ref):.2e}"
    assert rel_err(s, s_ref) <= 2e-2, f"state rel err {rel_err(s, s_ref):.2e}"


@pytest.mark.parametrize("delta,overlap", [(False, True), (True, True), (True, False)],
                         ids=["float32-maps", "delta-maps", "delta-maps-two-launches"])
@pytest.mark.parametrize("shape", LONG_CHAIN_SHAPES, ids=_case_id)
def test_gpu_commit_chain_in_segments_matches_torch(shape, delta, overlap, monkeypatch):
    """The segmented commit chain against the torch backend with the same events: cut into segments of 8
    commits (segment_maps, segment_scan, then every segment replayed from its start in the one launch beside
    the outputs, or in the state pass before the output pass), the maps in float32 or as a scaled identity
    plus a difference in the input dtype (segment_maps.DELTA_MAPS); above K = 128 the chain is walked whole
    (state_pass.SEGMENT_MAX_KEY_DIM)."""
    from sparsegdn.triton import forward, segment_maps
    monkeypatch.setattr(forward, "COMMIT_SEGMENT", 8)
    monkeypatch.setattr(forward, "OVERLAP", overlap)
    monkeypatch.setattr(segment_maps, "DELTA_MAPS", delta)
    _check_long_chain(shape)


@pytest.mark.parametrize("overlap", [True, False], ids=["one-launch", "two-launches"])
@pytest.mark.parametrize("shape", LONG_CHAIN_SHAPES, ids=_case_id)
def test_gpu_commit_chain_in_warm_up_segments_matches_torch(shape, overlap, monkeypatch):
    """The commit chain cut into segments of 8 commits, each walking its entering state from a warm-up back to
    where the decay since reaches e^-20 (forward.WARM_UP; no maps, any key head size), against the torch
    backend with the same events (segment_scan's maps made to fail: they must not run)."""
    from sparsegdn.triton import forward, segment_scan

    def no_maps(*args, **kwargs):
        raise AssertionError("segment_scan's maps used where the warm-up should walk the entering states")
    monkeypatch.setattr(segment_scan, "segment_starts", no_maps)
    monkeypatch.setattr(forward, "COMMIT_SEGMENT", 8)
    monkeypatch.setattr(forward, "WARM_UP", 20.0)
    monkeypatch.setattr(forward, "OVERLAP", overlap)
    _check_long_chain(shape)


SPLIT_SHAPES = [shape for shape in SHAPES if not shape[7]] + [shape for shape in LONG_CHAIN_SHAPES if not shape[7]]


@pytest.mark.parametrize("segment", [0, 8], ids=["whole-chains", "warm-up-segments"])
@pytest.mark.parametrize("shape", SPLIT_SHAPES, ids=_case_id)
def test_gpu_split_outputs_match_torch(shape, segment, monkeypatch):
    """The outputs split over two launches (forward.SPLIT_OUTPUTS: the chains and the chunks with a state in the one
    launch, then the zero-state chunks' own outputs under a register cap) against the torch backend, with o and
    the snapshots filled with NaN before every launch (a chunk neither launch writes, or a snapshot read before
    its store, shows), for head pairs that never commit, commit late and commit every chunk; whole chains, or cut
    into warm-up segments of 8 commits (forward.WARM_UP)."""
    from sparsegdn.triton import forward, state_output, state_pass
    monkeypatch.setattr(forward, "SPLIT_OUTPUTS", True)
    monkeypatch.setattr(forward, "COMMIT_SEGMENT", segment)
    monkeypatch.setattr(forward, "WARM_UP", 20.0 if segment else 0.0)
    monkeypatch.setattr(state_output, "POISON", True)
    monkeypatch.setattr(state_pass, "POISON", True)
    batch, tokens, key_heads, value_heads, key_dim, value_dim, band, initial, dtype = shape
    if sparsegdn.api.gpu_shape_problem(key_dim, value_dim, dtype):
        pytest.skip("refused before any launch (test_gpu_matches_torch_given_events checks the refusal)")
    inputs = random_inputs(batch, tokens, key_heads, value_heads, key_dim, value_dim, dtype=dtype, device="cuda")
    n_chunks = sparsegdn.num_chunks(tokens)
    events = random_events(batch, value_heads, n_chunks, seed=tokens, p=0.4).cuda()
    events[0, 0] = True                                  # every chunk: the longest chain
    events[-1, -1, : n_chunks // 2] = False              # a late first commit
    if value_heads > 1:
        events[0, 1] = False                             # never
    (o_ref, s_ref, _), (o, s, _) = _compare(inputs, events=events, band=band)
    assert torch.isfinite(o).all(), "a chunk neither launch wrote, or a snapshot read before its store"
    tolerance = TOLERANCE.get(dtype, 2e-2)
    assert rel_err(o, o_ref) <= tolerance, f"output rel err {rel_err(o, o_ref):.2e}"
    assert rel_err(s, s_ref) <= tolerance, f"state rel err {rel_err(s, s_ref):.2e}"


# Shapes the GPU runs (K, V >= 64), most without an initial state (the split's own outputs need zero-state chunks),
# float32 and float16 among them, one chunk (T = 50) and a ragged last chunk.
VECTOR_SHAPES = ([SHAPES[i] for i in (6, 7, 9, 12, 13, 15, 19)]
                 + [SHAPES[i][:7] + (False, SHAPES[i][8]) for i in (21, 23)])


@pytest.mark.parametrize("design", ["one-launch", "split-outputs", "two-launches"])
@pytest.mark.parametrize("shape", VECTOR_SHAPES, ids=_case_id)
def test_gpu_stored_vectors_match_torch(shape, design, monkeypatch):
    """Pass 1's chunk vectors read by the output roles (forward.STORE_VECTORS) against the torch backend, and against
    the roles computing them: o within a quarter of the tolerance (pass 1 sums in its own layout, so a stored value
    may differ in its last float32 bit), the final state bit for bit (the chains do not read them); in the one launch
    (o filled with NaN before it), the split outputs (its own outputs' kernel) and the two launches."""
    from sparsegdn.triton import forward, state_output
    batch, tokens, key_heads, value_heads, key_dim, value_dim, band, initial, dtype = shape
    if sparsegdn.api.gpu_shape_problem(key_dim, value_dim, dtype):
        pytest.skip("refused before any launch (test_gpu_matches_torch_given_events checks the refusal)")
    monkeypatch.setattr(forward, "SPLIT_OUTPUTS", design == "split-outputs")
    monkeypatch.setattr(forward, "OVERLAP", design != "two-launches")
    monkeypatch.setattr(state_output, "POISON", True)
    inputs = random_inputs(batch, tokens, key_heads, value_heads, key_dim, value_dim, dtype=dtype,
                           initial_state=initial, device="cuda")
    n_chunks = sparsegdn.num_chunks(tokens)
    events = random_events(batch, value_heads, n_chunks, seed=tokens, p=0.4).cuda()
    events[..., : n_chunks // 2] = False                  # zero-state chunks for the split's own outputs
    events[..., -1] = True                                # and a final state that is not zero
    computed = {}
    for stored in (False, True):
        monkeypatch.setattr(forward, "STORE_VECTORS", stored)
        (o_ref, s_ref, _), computed[stored] = _compare(inputs, events=events, band=band)
    o, s, _ = computed[True]
    tolerance = TOLERANCE.get(dtype, 2e-2)
    assert rel_err(o, o_ref) <= tolerance, f"output rel err {rel_err(o, o_ref):.2e}"
    assert rel_err(s, s_ref) <= tolerance, f"state rel err {rel_err(s, s_ref):.2e}"
    assert rel_err(o, computed[False][0]) <= tolerance / 4, f"against computed {rel_err(o, computed[False][0]):.2e}"
    assert torch.equal(s, computed[False][1])


@pytest.mark.parametrize("overlap,ready,paired,relaxed,segment", [
    (False, False, False, False, 0), (True, False, False, False, 0), (True, True, False, False, 0),
    (True, False, True, False, 0), (False, False, True, False, 0), (True, False, False, True, 0),
    (True, False, False, False, 16)],
    ids=["two-launches", "one-launch", "one-launch-ready-order", "one-launch-paired", "two-launches-paired",
         "one-launch-relaxed-poll", "one-launch-segments-delta-maps"])
def test_gpu_overlapped_passes_match_torch_on_skewed_chains(overlap, ready, paired, relaxed, segment, monkeypatch):
    """The benchmark's head shape with the shared budget's skew (a few head pairs commit nearly every chunk, most
    commit almost none), both designs of passes 4 and 5 (one launch whose output programs wait for their
    snapshots, in order of readiness or chunk by chunk, polling with acquire atomics or plain loads; or two
    launches; commits one or two at a time; whole chains, or cut into segments of 16 commits walked side by
    side with delta maps, each output waiting on its snapshot's segment) against the torch backend. After a
    first call (compiling and autotuning) the snapshots are filled with NaN before every launch and the chains
    publish their progress after every commit (every pair when paired) or every 16, so an output that reads
    its snapshot before the chain stored it gives NaN, not an earlier call's values."""
    from sparsegdn.triton import forward, segment_maps, state_output, state_pass
    monkeypatch.setattr(forward, "OVERLAP", overlap)
    monkeypatch.setattr(forward, "COMMIT_SEGMENT", segment)
    monkeypatch.setattr(segment_maps, "DELTA_MAPS", segment > 0)
    monkeypatch.setattr(state_output, "READY_ORDER", ready)
    monkeypatch.setattr(forward, "PAIRED", paired)
    monkeypatch.setattr(state_output, "RELAXED_POLL", relaxed)
    inputs = random_inputs(1, 8192, 4, 8, 128, 128, dtype=torch.bfloat16, initial_state=True, device="cuda")
    events = torch.zeros(1, 8, sparsegdn.num_chunks(8192), dtype=torch.bool, device="cuda")
    events[0, :2, :112] = True             # two long chains (112 commits: a multiple of the segments' 16) and
    #                                        16 chunks after their last commit, which wait for the last snapshot
    events[0, 2:5, ::9] = True             # short chains; head pairs 5-7 commit nothing
    q, k, v, g, beta, s0 = inputs
    ref = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, initial_state=s0, output_final_state=True,
                                            backend="torch")

    def run():
        return sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, initial_state=s0,
                                                 output_final_state=True, backend="triton")
    first = run()[0]
    monkeypatch.setattr(state_output, "POISON", True)
    monkeypatch.setattr(state_pass, "POISON", True)
    for publish in (1, 16):
        monkeypatch.setattr(state_output, "PUBLISH", publish)
        for _ in range(3):
            o, s, _ = run()
            assert torch.isfinite(o).all(), "an output read a snapshot before its chain stored it"
            assert rel_err(o, ref[0]) <= 2e-2 and rel_err(s, ref[1]) <= 2e-2, (rel_err(o, ref[0]), rel_err(s, ref[1]))
            assert torch.equal(o, first)


@pytest.mark.parametrize("selector,strided_v", [("score", False), ("all", True)])
def test_gpu_graph_replay_equals_the_launches(selector, strided_v, monkeypatch):
    """graphs.CUDA_GRAPH: a short call replayed from a CUDA graph returns what the same call's launches return,
    bit for bit (the same kernels and configs), for three different inputs of one shape in a row (the first
    launched, the second captured and replayed, the third replaying that graph with its inputs copied in),
    with v as a model hands it over (tokens innermost), and leaves the earlier calls' outputs alone; the
    graph is captured under inference_mode and replayed under no_grad."""
    from sparsegdn.triton import call_plans, graphs
    graphs.clear()

    def inputs(seed):
        q, k, v, g, beta, s0 = random_inputs(1, 2000, 2, 4, 128, 128, dtype=torch.bfloat16, seed=seed,
                                             initial_state=True, device="cuda")
        if strided_v:
            v = v.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)       # strides (HV V T, 1, V T, T)
        return q, k, v, g, beta, s0

    def call(q, k, v, g, beta, s0):
        return sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True,
                                                 budget=0.29, selector=selector, band=1, backend="triton")
    try:
        for seed, mode in ((1, torch.inference_mode), (2, torch.inference_mode), (3, torch.no_grad)):
            x = inputs(seed)
            with mode():
                monkeypatch.setattr(graphs, "CUDA_GRAPH", False)
                monkeypatch.setattr(call_plans, "CALL_PLANS", False)       # the reference: launched, not planned
                o_ref, s_ref, info_ref = call(*x)
                monkeypatch.setattr(graphs, "CUDA_GRAPH", True)
                o, s, info = call(*x)
            assert torch.equal(o, o_ref) and torch.equal(s, s_ref), seed
            assert torch.equal(info.events, info_ref.events) and torch.equal(info.scores, info_ref.scores)
            assert len(graphs._captured) == (0 if seed == 1 else 1), seed      # captured on the second call
            if seed == 2:
                kept = o.clone()
                second = o
        assert torch.equal(second, kept), "a later replay changed an earlier call's output"
    finally:
        graphs.clear()


def _list_outputs_on(monkeypatch, by_default=False, **switches):
    """The two launches with the vectors stored and the outputs by list_output's Gluon lists (skipped without Gluon
    on an sm_90 device), list_output's other `switches` as given; by_default: the switches left as they are, the
    lists taken by forward.LISTS_FROM. Returns the list each ListCall made appends (whether it solves Tinv, its band;
    with by_default also whether it runs beside the chains and claims) to: a call replayed from a plan makes none."""
    from sparsegdn.triton import forward, list_output
    if list_output.GLUON_PROBLEM or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the list outputs need Gluon on an sm_90 device")
    if not by_default:
        monkeypatch.setattr(forward, "OVERLAP", False)
        monkeypatch.setattr(forward, "STORE_VECTORS", True)
    for name, value in switches.items():
        monkeypatch.setattr(list_output, name, value)
    made, real_call = [], list_output.ListCall

    def spy(*args, **kwargs):
        call = real_call(*args, **kwargs)
        made.append((call.solve, call.band, call.overlap, call.claim) if by_default else (call.solve, call.band))
        return call
    monkeypatch.setattr(list_output, "ListCall", spy)
    return made


def _lists_from(monkeypatch, head_chunks, row_chunks):
    """forward's route thresholds lowered so that a call of `head_chunks` head chunks (batch rows x value heads x
    chunks) in rows of `row_chunks` chunks takes the lists by default: LISTS_FROM and LISTS_MIN_ROW_CHUNKS set to
    them, and LISTS_MIN_ROWS to 0, so that the doubled threshold of calls with few head-pair rows (batch 49) does not
    send a case's small shape back to the one launch (it did, from batch 49 to 51, for the B 2, HV 4 cases)."""
    from sparsegdn.triton import forward
    monkeypatch.setattr(forward, "LISTS_FROM", head_chunks)
    monkeypatch.setattr(forward, "LISTS_MIN_ROW_CHUNKS", row_chunks)
    monkeypatch.setattr(forward, "LISTS_MIN_ROWS", 0)


def _lists_from_every_call(monkeypatch):
    """The long calls' path at any size: the Gluon lists taken by default (_list_outputs_on's by_default, skipped
    without them) with the route's thresholds lowered to 1 (_lists_from). Returns _list_outputs_on's list."""
    made = _list_outputs_on(monkeypatch, by_default=True)
    _lists_from(monkeypatch, 1, 1)
    return made


@pytest.mark.parametrize("case", ["B1-T2000-s0-strided_v", "B2-T777-K64-deferred", "B1-T9000-HV8",
                                  "B1-T3000-all-no_final_state", "B1-T9000-HV8-lists", "B1-T9000-HV8-lists-overlap",
                                  "B2-T4096-s0-lists-overlap", "B2-T4096-s0-default-lists",
                                  "B1-T2000-s0-strided_v-inference", "B2-T4096-s0-default-lists-inference"])
def test_gpu_planned_calls_equal_the_launches(case, monkeypatch):
    """call_plans.CALL_PLANS: calls of one key launched from its recorded plan return what the same calls'
    launches return, bit for bit (the same compiled kernels with the same arguments). Four inputs in a row, each
    launched then called with plans on: the first planned call is recorded (its launched twin compiled every
    kernel), the next three replay the plan; a later call leaves an earlier call's outputs alone; a fifth input
    with a NaN in v raises through the planned call's value flags. With v as a model hands it over and an
    initial state, B > 1 with deferred checks (a model's layers), a length past the CUDA graphs', and the `all`
    selector without the final state. Graphs off, so that the short cases take the plans too. "-lists": the outputs
    by the Gluon lists (list_output.py, Hopper; Tinv solved by them, claimed chunks) after the chain pass, or beside
    it ("-overlap"): their chunk lists made by kernels, their TMA descriptors remade around each replay's addresses;
    "-default-lists": the lists beside the chains taken by the defaults (forward.LISTS_FROM lowered to the case).
    "-inference": every call under torch.inference_mode, as the app's analysis pass and the prefill benchmark make
    them (the plan's recording read the version counters of inference tensors and raised, batch 52)."""
    import contextlib
    from sparsegdn.triton import call_plans, graphs, state_pass
    monkeypatch.setattr(graphs, "CUDA_GRAPH", False)
    mode = torch.inference_mode if case.endswith("-inference") else contextlib.nullcontext
    case = case.removesuffix("-inference")
    batch, tokens, heads, value_heads, dim = {"B1-T2000-s0-strided_v": (1, 2000, 2, 4, 128),
                                              "B2-T777-K64-deferred": (2, 777, 1, 3, 64),
                                              "B1-T9000-HV8": (1, 9000, 4, 8, 128),
                                              "B1-T3000-all-no_final_state": (1, 3000, 2, 4, 128),
                                              "B1-T9000-HV8-lists": (1, 9000, 4, 8, 128),
                                              "B1-T9000-HV8-lists-overlap": (1, 9000, 4, 8, 128),
                                              "B2-T4096-s0-lists-overlap": (2, 4096, 2, 4, 128),
                                              "B2-T4096-s0-default-lists": (2, 4096, 2, 4, 128)}[case]
    lists = []
    if "-default-lists" in case:        # the switches as they are: the lists by forward.LISTS_FROM (2 x 4 x 64)
        lists = _list_outputs_on(monkeypatch, by_default=True)
        _lists_from(monkeypatch, batch * value_heads * sparsegdn.num_chunks(tokens), sparsegdn.num_chunks(tokens))
        monkeypatch.setattr(state_pass, "POISON", True)
    elif "-lists" in case:
        lists = _list_outputs_on(monkeypatch, LIST_OUTPUTS=True, CLAIM=True, OVERLAP_LISTS=case.endswith("overlap"))
        monkeypatch.setattr(state_pass, "POISON", True)   # a snapshot read before its chain stored it: NaN
    initial = case.endswith("strided_v") or "-s0-" in case
    strided = case.endswith("strided_v")
    selector = "all" if "-all" in case else "score"
    final = "no_final_state" not in case
    replays = []
    monkeypatch.setattr(call_plans, "run", lambda plan, tensors, run=call_plans.run: replays.append(1) or run(plan, tensors))

    def call(seed, poison=False):
        with mode():
            return _call(seed, poison)

    def _call(seed, poison):
        q, k, v, g, beta, s0 = random_inputs(batch, tokens, heads, value_heads, dim, dim, dtype=torch.bfloat16,
                                             seed=seed, initial_state=initial, device="cuda")
        if strided:
            v = v.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)       # tokens innermost
        if poison:
            v[0, tokens // 2, 0, 0] = float("nan")
        checks = DeferredChecks() if "deferred" in case else None
        o, s, info = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=final,
                                                       budget=0.29, selector=selector, band=1, backend="triton",
                                                       checks=checks)
        if checks is not None:
            checks.check()
        if "-lists" in case and seed == 1 and not poison:   # the lists (made by kernels) against the torch backend
            o_torch, s_torch, _ = sparsegdn.sparse_gated_delta_rule(
                q, k, v, g, beta, initial_state=s0, output_final_state=final, events=info.events, band=1,
                backend="torch")
            assert rel_err(o, o_torch) <= TOLERANCE[torch.bfloat16], f"output rel err {rel_err(o, o_torch):.2e}"
            assert rel_err(s, s_torch) <= TOLERANCE[torch.bfloat16], f"state rel err {rel_err(s, s_torch):.2e}"
        return o, s, info
    call_plans.clear()
    try:
        for seed in (1, 2, 3, 4):
            monkeypatch.setattr(call_plans, "CALL_PLANS", False)
            o_ref, s_ref, info_ref = call(seed)
            monkeypatch.setattr(call_plans, "CALL_PLANS", True)
            o, s, info = call(seed)
            assert torch.equal(o, o_ref) and (s is s_ref is None or torch.equal(s, s_ref)), seed
            assert torch.equal(info.events, info_ref.events) and torch.equal(info.scores, info_ref.scores)
            assert torch.equal(info.budget_per_head, info_ref.budget_per_head)
            if seed == 3:
                kept, third = o.clone(), o
        assert len(replays) == 3 and len(call_plans._plans) == 1, (len(replays), len(call_plans._plans))
        assert len(lists) == (5 if "-lists" in case else 0), len(lists)    # 4 launched, 1 recorded, 3 replayed
        if "-default-lists" in case:        # Tinv solved (band 1), beside the chains, claimed chunks
            assert set(lists) == {(True, 1, True, True)}, lists
        assert torch.equal(third, kept), "a later call changed an earlier call's output"
        with pytest.raises(ValueError):         # the planned call's value flags reach the check
            call(5, poison=True)
        assert len(replays) == 4
    finally:
        call_plans.clear()


# K = V = 128, the list outputs' one head size: B = 1 with a ragged last chunk and with one short chunk, B = 2 with
# whole chunks, float16, with and without an initial state, the benchmark's heads.
LIST_SHAPES = [(1, 1000, 3, 3, 128, 128, 1, False, torch.bfloat16), (2, 640, 2, 4, 128, 128, 1, True, torch.bfloat16),
               (1, 512, 4, 16, 128, 128, 3, False, torch.float16), (2, 256, 1, 2, 128, 128, 0, False, torch.bfloat16),
               (1, 50, 2, 4, 128, 128, 1, True, torch.bfloat16), (1, 4096, 16, 32, 128, 128, 1, False, torch.bfloat16)]


# (shape, side stream, normalize, Tinv stored by pass 1, arrangement): without Tinv the lists solve bands 0 and 1
# themselves (gluon_band_solve) and chunk_output solves on chip too; band 3 unstored is refused (chunk_output writes
# it). Arrangements: "" the defaults, "claim" chunks claimed from a counter (list_output.CLAIM), "stages" one stage
# for the zero-state list (q's buffer the solve's scratch) and two for the list with a state, "overlap" the lists
# beside the chain pass (list_output.OVERLAP_LISTS: programmatic dependent launches, the list with a state waiting on
# the chains' progress counts), with claims, with segments of 2 commits from segment_scan's maps, or with warm-up
# segments of 4 commits (forward.WARM_UP 20), so that chains cross segments, also with claims (the route the default
# takes with forward.LISTS_SEGMENT).
LIST_CASES = ([(shape, side_stream, True, True, "") for shape in LIST_SHAPES for side_stream in (True, False)]
              + [(LIST_SHAPES[1], True, False, True, ""), (LIST_SHAPES[2], False, False, True, "")]    # raw keys
              + [(shape, False, True, False, "") for shape in LIST_SHAPES]
              + [(LIST_SHAPES[1], True, False, False, "")]
              + [(LIST_SHAPES[0], True, True, False, "claim"), (LIST_SHAPES[1], False, True, True, "claim"),
                 (LIST_SHAPES[0], False, True, False, "stages"), (LIST_SHAPES[1], False, True, True, "stages")]
              + [(shape, False, True, True, "overlap") for shape in LIST_SHAPES]
              + [(LIST_SHAPES[0], False, True, False, "overlap"), (LIST_SHAPES[5], False, True, False, "overlap"),
                 (LIST_SHAPES[2], False, False, True, "overlap"), (LIST_SHAPES[1], False, True, True, "overlap-claim"),
                 (LIST_SHAPES[1], False, True, True, "overlap-segments"),
                 (LIST_SHAPES[5], False, True, True, "overlap-warm-up"),
                 (LIST_SHAPES[5], False, True, False, "overlap-warm-up"),
                 (LIST_SHAPES[5], False, True, False, "overlap-warm-up-claim")])   # forward.LISTS_SEGMENT's route


@pytest.mark.parametrize("shape,side_stream,normalize,stored,arrangement", LIST_CASES, ids=[
    f"{_case_id(shape)}-{'side' if side else 'one'}-stream{'' if normalize else '-raw-keys'}"
    f"{'' if stored else '-solved'}{'-' + arrangement if arrangement else ''}"
    for shape, side, normalize, stored, arrangement in LIST_CASES])
def test_gpu_list_outputs_match_chunk_output(shape, side_stream, normalize, stored, arrangement, monkeypatch):
    """The output pass over chunk lists (list_output.py, Gluon) against its twin chunk_output in the two launches
    with the vectors stored, and Tinv stored or solved by both (bands 0 and 1; band 3 unstored takes chunk_output):
    o within 2e-4 (the same products and roundings; 1.4e-5 measured), the final state bit for bit (the lists do not
    touch it), both within the tolerance of the torch backend; the list launches ran (a spy, which also sees whether
    they solve) and wrote every chunk (o's allocation filled with NaN); the zero-state list beside the chain pass on
    its own stream or after it. The stage hook syncs after every pass, so the call is made again without it (twice;
    given events, so launched, never from a plan: test_gpu_planned_calls_equal_the_launches plans the lists) and must
    give the same o bit for bit: a missing join of the side stream, or an overlapped list that read a snapshot before
    its chain stored it, would show there."""
    from sparsegdn.triton import call_record, forward, list_output
    ran = _list_outputs_on(monkeypatch, SIDE_STREAM=side_stream, CLAIM=arrangement.endswith("claim"))
    monkeypatch.setattr(forward, "STORE_INVERSE", stored)
    if arrangement == "stages":
        monkeypatch.setattr(list_output, "OWN_LAUNCH", (1, 2))
        monkeypatch.setattr(list_output, "STATE_LAUNCH", (2, 1))
    if arrangement.startswith("overlap"):     # snapshots poisoned: one read before its chain stored it shows
        from sparsegdn.triton import state_pass
        monkeypatch.setattr(list_output, "OVERLAP_LISTS", True)
        monkeypatch.setattr(state_pass, "POISON", True)
        if arrangement == "overlap-segments":     # head pairs of up to 4 events here: up to two segments
            monkeypatch.setattr(forward, "COMMIT_SEGMENT", 2)
        if arrangement.startswith("overlap-warm-up"):     # ~13 events a head pair: up to four segments
            monkeypatch.setattr(forward, "COMMIT_SEGMENT", 4)
            monkeypatch.setattr(forward, "WARM_UP", 20.0)
    real_empty = call_record.empty

    def poisoned(*shape, dtype, device):
        tensor = real_empty(*shape, dtype=dtype, device=device)
        return tensor.fill_(float("nan")) if dtype.is_floating_point else tensor
    monkeypatch.setattr(call_record, "empty", poisoned)
    batch, tokens, key_heads, value_heads, key_dim, value_dim, band, initial, dtype = shape
    inputs = random_inputs(batch, tokens, key_heads, value_heads, key_dim, value_dim, dtype=dtype,
                           initial_state=initial, device="cuda")
    if not normalize:       # raw keys of unit norm: random ones of norm ~11 make the delta rule itself blow up
        q, k = (x / x.float().norm(dim=-1, keepdim=True).to(x.dtype) for x in inputs[:2])
        inputs = (q, k, *inputs[2:])
    n_chunks = sparsegdn.num_chunks(tokens)
    events = random_events(batch, value_heads, n_chunks, seed=tokens, p=0.4).cuda()
    events[..., : n_chunks // 2] = False                  # zero-state chunks (without an initial state)
    events[..., -1] = True
    options = dict(events=events, band=band, use_qk_l2norm_in_kernel=normalize)
    computed = {}
    for switch in (False, True):
        monkeypatch.setattr(list_output, "LIST_OUTPUTS", switch)
        (o_ref, s_ref, _), computed[switch] = _compare(inputs, **options)
    used = stored or band <= 1          # else eligible refuses: chunk_output writes both
    assert ran == ([(not stored, band)] if used else [])
    o, s, _ = computed[True]
    tolerance = TOLERANCE.get(dtype, 2e-2)
    assert torch.isfinite(o).all(), "a chunk the lists did not write"
    assert rel_err(o, o_ref) <= tolerance, f"output rel err {rel_err(o, o_ref):.2e}"
    assert rel_err(s, s_ref) <= tolerance, f"state rel err {rel_err(s, s_ref):.2e}"
    assert rel_err(o, computed[False][0]) <= 2e-4, f"against chunk_output {rel_err(o, computed[False][0]):.2e}"
    assert torch.equal(s, computed[False][1])
    q, k, v, g, beta, s0 = inputs
    for _ in range(2):
        o_free, s_free, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, initial_state=s0,
                                                              output_final_state=True, backend="triton", **options)
        assert torch.equal(o_free, o) and torch.equal(s_free, s)
    assert ran == ([(not stored, band)] * 3 if used else [])


@pytest.mark.parametrize("initial,lists_segment", [(False, 0), (True, 0), (False, 4), (False, "half")],
                         ids=["no_s0", "s0", "no_s0-lists-segments", "no_s0-lists-half"])
def test_gpu_default_takes_the_lists_from_lists_from(initial, lists_segment, monkeypatch):
    """forward.LISTS_FROM with the switches as they are: a call of the benchmark's heads (H 16, HV 32, K = V = 128,
    band 1, budget 0.29's selection) of at least LISTS_FROM head chunks (its rows' floor LISTS_MIN_ROW_CHUNKS lowered
    to the case) runs the Gluon lists beside the chain pass, solving Tinv and claiming chunks (a spy), and a call one
    head chunk short of it, or keeping every event (budget 1), the one launch (no lists); each within the torch
    backend's tolerance given the call's events, and the lists' call the same again without the stage hook's syncs
    (a list that read a snapshot before its chain stored it would differ: they are poisoned). With forward.LISTS_SEGMENT
    (segments of 4 commits: chains of ~9 cross two or three; "half": 16, half the 32 chunks, crossed only by a chain
    of more than 16) the lists' call walks warm-up segments (a spy on the chain pass's arguments) and the one launch's
    calls stay whole."""
    from sparsegdn.triton import forward, state_pass
    made = _list_outputs_on(monkeypatch, by_default=True)
    monkeypatch.setattr(state_pass, "POISON", True)
    monkeypatch.setattr(forward, "LISTS_SEGMENT", lists_segment)
    walked, real_state_pass, real_state_output = [], forward.state_pass, forward.state_output
    monkeypatch.setattr(forward, "state_pass", lambda *a, **kw: walked.append((kw["segment"], kw["warm_up"]))
                        or real_state_pass(*a, **kw))
    monkeypatch.setattr(forward, "state_output", lambda *a, **kw: walked.append((kw["segment"], kw["warm_up"]))
                        or real_state_output(*a, **kw))
    q, k, v, g, beta, s0 = random_inputs(1, 2048, 16, 32, 128, 128, dtype=torch.bfloat16, initial_state=initial,
                                         device="cuda", seed=5)
    head_chunks = 32 * sparsegdn.num_chunks(2048)
    monkeypatch.setattr(forward, "LISTS_MIN_ROW_CHUNKS", sparsegdn.num_chunks(2048))
    for threshold, budget, lists in ((head_chunks, 0.29, [(True, 1, True, True)]), (head_chunks + 1, 0.29, []),
                                     (head_chunks, 1.0, [])):
        options = dict(initial_state=s0, output_final_state=True, budget=budget, selector="score", band=1)
        monkeypatch.setattr(forward, "LISTS_FROM", threshold)
        made.clear()
        walked.clear()
        o, s, info = _run_guarded(lambda hook: sparsegdn.sparse_gated_delta_rule(
            q, k, v, g, beta, backend="triton", stage_hook=hook, **options))
        assert made == lists, (threshold, made)
        segment = forward.lists_segment(sparsegdn.num_chunks(2048))
        segments = (segment, forward.LISTS_WARM_UP) if lists and lists_segment else (0, forward.WARM_UP)
        assert walked == [segments], (threshold, walked)
        o_torch, s_torch, _ = sparsegdn.sparse_gated_delta_rule(
            q, k, v, g, beta, initial_state=s0, output_final_state=True, events=info.events, band=1, backend="torch")
        assert rel_err(o, o_torch) <= TOLERANCE[torch.bfloat16], f"output rel err {rel_err(o, o_torch):.2e}"
        assert rel_err(s, s_torch) <= TOLERANCE[torch.bfloat16], f"state rel err {rel_err(s, s_torch):.2e}"
        if lists:
            o_free, s_free, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, backend="triton", **options)
            assert torch.equal(o_free, o) and torch.equal(s_free, s)


@pytest.mark.parametrize("design,key_dim", [("one-launch", 128), ("one-launch", 64), ("two-launches", 128),
                                            ("warm-up", 128), ("lists", 128), ("key-256-unfolded", 256)])
def test_gpu_folded_commits_match_torch(design, key_dim, monkeypatch):
    """forward.FOLD_COMMITS: the chains walk event_prepare's folded tiles (one product on the state a commit) in
    the one launch, in two launches, in warm-up segments and beside the Gluon lists (the default for long calls,
    LISTS_FROM lowered to the case), each within the torch backend's tolerance given the call's events and within
    it of the same call unfolded; at K = 256 (too wide for a folded stage) the call stays unfolded and runs. The
    snapshots are poisoned: a list or output reading one its chain never stored would show it."""
    from sparsegdn.triton import event_prepare, forward, state_output, state_pass
    monkeypatch.setattr(state_pass, "POISON", True)
    monkeypatch.setattr(state_output, "POISON", True)
    made = []
    if design == "lists":
        made = _lists_from_every_call(monkeypatch)
    else:
        monkeypatch.setattr(forward, "LISTS_FROM", 0)
    monkeypatch.setattr(forward, "OVERLAP", design != "two-launches")
    if design == "warm-up":
        monkeypatch.setattr(forward, "COMMIT_SEGMENT", 8)
        monkeypatch.setattr(forward, "WARM_UP", 20.0)
    folds, real_prepare = [], event_prepare.event_prepare

    def spy(*args, **kwargs):
        folds.append(kwargs.get("folded", False))
        return real_prepare(*args, **kwargs)
    monkeypatch.setattr(forward, "event_prepare", spy)
    heads, value_heads = (16, 32) if design == "lists" else (2, 4)
    q, k, v, g, beta, s0 = random_inputs(1, 3000, heads, value_heads, key_dim, key_dim, dtype=torch.bfloat16,
                                         initial_state=True, device="cuda", seed=9)
    out = _off_then_on(monkeypatch, forward, "FOLD_COMMITS", (q, k, v, g, beta, s0))
    assert folds == [False, key_dim <= state_pass.FOLD_MAX_KEY_DIM], folds
    if design == "lists":
        assert len(made) == 2, made
    _switched_matches_torch((q, k, v, g, beta, s0), out[True], out[False], TOLERANCE[torch.bfloat16], "folded")


@pytest.mark.parametrize("streamed,tma", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["after-prepare", "streamed", "after-prepare-tma", "streamed-tma"])
def test_gpu_transposed_chains_match_torch(streamed, tma, monkeypatch):
    """state_pass.TRANSPOSED beside the Gluon lists (LISTS_FROM lowered to the case): the publishing chain pass commits
    on the state's transpose, at this process's chain block (SPARSEGDN_CHAIN_BV: 32 by default since batch 28; run it
    again with SPARSEGDN_CHAIN_BV=64 for Hopper's matrix instruction with its left operands in registers), after pass
    3 or waiting on the streamed preparation's marks, the snapshots stored plainly or by TMA (state_pass.TMA_SNAPSHOTS:
    each run of commits waits for its bulk stores before publishing). Seed 0 runs under the stage hook (it syncs
    between the passes: a fault names its pass); seeds 1-3 run as a real call does, the lists waiting on the chains'
    counts (and the chains on pass 3's marks, streamed): seed 1 recorded, seeds 2 and 3 replayed from its plans (the
    TMA descriptor remade around each call's snapshots). Each call within the torch backend's tolerance given its events and within
    1e-3 of the same call on the state itself; the launches' switches are checked. The snapshots are poisoned after
    pass 3 (not streamed: the fill would come between the two passes): a list reading one its chain never stored
    would show it."""
    from sparsegdn.triton import call_plans, forward, state_pass
    made = _lists_from_every_call(monkeypatch)
    monkeypatch.setattr(forward, "STREAM_PREPARE", streamed)
    if streamed:    # the streamed preparation serves whole chains only (forward.streams_preparation)
        monkeypatch.setattr(forward, "LISTS_SEGMENT", 0)
    monkeypatch.setattr(state_pass, "POISON", not streamed)
    monkeypatch.setattr(state_pass, "TMA_SNAPSHOTS", tma)
    taken, real_launch = [], state_pass.launch_publishing_chains
    descriptor = 1 + state_pass.state_pass_kernel.fn.arg_names.index("snapshot_desc")     # after the grid

    def spy(*args, **kwargs):
        taken.append((kwargs["TRANSPOSED"], kwargs["STREAMED"], args[descriptor] is not None))
        return real_launch(*args, **kwargs)
    monkeypatch.setattr(state_pass, "launch_publishing_chains", spy)
    replays = []
    monkeypatch.setattr(call_plans, "run",
                        lambda plan, tensors, run=call_plans.run: replays.append(1) or run(plan, tensors))
    call_plans.clear()
    for seed in range(4):
        inputs = random_inputs(1, 4000, 16, 32, 128, 128, dtype=torch.bfloat16, initial_state=True, device="cuda",
                               seed=40 + seed)
        out = _off_then_on(monkeypatch, state_pass, "TRANSPOSED", inputs, hooked=seed == 0)
        _switched_matches_torch(inputs, out[True], out[False], 1e-3, f"transposed, seed {seed}")
    # launched (through the spy): seed 0 under the hook and seed 1 recorded; replayed: seeds 2 and 3
    assert taken == [(False, streamed, False), (True, streamed, tma)] * 2 and made, (taken, made)
    assert len(replays) == 4, len(replays)


def _capped_lists_call(monkeypatch, module, launcher):
    """The long calls' path (the Gluon lists beside the chains, LISTS_FROM lowered to a case's size), every call
    launched (none replayed from an earlier case's plan), and module.launcher spied on: returns the ListCalls made
    (_list_outputs_on) and the `maxnreg` option of each of the launcher's launches, in order."""
    from sparsegdn.triton import call_plans
    made = _lists_from_every_call(monkeypatch)
    call_plans.clear()
    taken, real_launch = [], getattr(module, launcher)

    def spy(*args, **kwargs):
        taken.append(kwargs.get("maxnreg"))
        return real_launch(*args, **kwargs)
    monkeypatch.setattr(module, launcher, spy)
    return made, taken


@pytest.mark.parametrize("cap", [168, 128])
def test_gpu_register_capped_chains_match_torch(cap, monkeypatch):
    """state_pass.CHAIN_MAXNREG beside the Gluon lists (LISTS_FROM lowered to the case): the publishing chain programs
    compiled under a register cap (they spill at 168 and 128: compile_report --lists-path) give the same call as
    uncapped, the lists waiting on their counts as in a real call (no stage hook): within the torch backend's
    tolerance given the events and within 1e-3 of the uncapped call. The launches' option is checked."""
    from sparsegdn.triton import state_pass
    made, taken = _capped_lists_call(monkeypatch, state_pass, "launch_publishing_chains")
    q, k, v, g, beta, s0 = inputs = random_inputs(1, 4000, 16, 32, 128, 128, dtype=torch.bfloat16,
                                                  initial_state=True, device="cuda", seed=70)
    out = {}
    for value in (0, cap):
        monkeypatch.setattr(state_pass, "CHAIN_MAXNREG", value)
        out[value] = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, backend="triton", initial_state=s0,
                                                       output_final_state=True, budget=0.29, selector="score", band=1)
    _switched_matches_torch(inputs, out[cap], out[0], 1e-3, f"chains capped at {cap} registers")
    assert taken == [None, cap] and made, (taken, made)


@pytest.mark.parametrize("own_launch, caps", [((1, 3), (168, 168)), ((1, 3), (128, 0))])
def test_gpu_register_capped_lists_match_torch(own_launch, caps, monkeypatch):
    """list_output.LIST_MAXNREG with the zero-state list at one stage and three programs an SM (batch 35's probe):
    the Gluon lists compiled under register caps (they spill: compiled for sm_90, 128-340 local-memory instructions)
    give the same call as uncapped at the default launch shapes, the lists beside the chains waiting on their counts
    as in a real call: within the torch backend's tolerance given the events and within 1e-3 of the uncapped call.
    The launches' options are checked (a spy), and that both lists had chunks (a zero start: some head pairs' first
    chunks have no state)."""
    from sparsegdn.triton import list_output
    made, taken = _capped_lists_call(monkeypatch, list_output, "launch_list_output")
    lists, real_lists = [], list_output.make_chunk_lists

    def lists_spy(*args, **kwargs):
        tiles, own_count = real_lists(*args, **kwargs)
        lists.append((tiles.numel(), own_count))
        return tiles, own_count
    monkeypatch.setattr(list_output, "make_chunk_lists", lists_spy)
    q, k, v, g, beta, s0 = inputs = random_inputs(1, 4000, 16, 32, 128, 128, dtype=torch.bfloat16,
                                                  device="cuda", seed=71)     # no initial state: both lists run
    out, sizes = {}, []
    for capped in (False, True):
        monkeypatch.setattr(list_output, "LIST_MAXNREG", caps if capped else (0, 0))
        if capped:
            monkeypatch.setattr(list_output, "OWN_LAUNCH", own_launch)
        out[capped] = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, backend="triton", initial_state=s0,
                                                        output_final_state=True, budget=0.29, selector="score", band=1)
        total, own_count = lists[-1]
        sizes.append((int(own_count.item()), total))
    assert all(0 < own < total for own, total in sizes), sizes
    _switched_matches_torch(inputs, out[True], out[False], 1e-3, f"lists capped at {caps} registers")
    expected = [None, None, caps[0] or None, caps[1] or None]
    assert taken == expected and made, (taken, made)


def _off_then_on(monkeypatch, module, name, inputs, hooked=True):
    """{False: the call, True: the call}, with module.name set to each (budget 0.29, band 1, `score`, the final state
    asked for), of inputs (q, k, v, g, beta, initial state); hooked: under the stage hook's guard (a sync after each
    pass), else as a real call runs, its passes overlapping where they do."""
    q, k, v, g, beta, s0 = inputs
    options = dict(initial_state=s0, output_final_state=True, budget=0.29, selector="score", band=1)
    out = {}
    for value in (False, True):
        monkeypatch.setattr(module, name, value)
        if hooked:
            out[value] = _run_guarded(lambda hook: sparsegdn.sparse_gated_delta_rule(
                q, k, v, g, beta, backend="triton", stage_hook=hook, **options))
        else:
            out[value] = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, backend="triton", **options)
    return out


def _switched_matches_torch(inputs, switched, plain, agreement, label):
    """A call with a switch on (`switched`: o, final state, info) against the same call with it off (`plain`): the
    same events, within the torch backend's tolerance given them, and within `agreement` of the plain call."""
    q, k, v, g, beta, s0 = inputs
    assert torch.equal(switched[2].events, plain[2].events), label
    o_torch, s_torch, _ = sparsegdn.sparse_gated_delta_rule(
        q, k, v, g, beta, initial_state=s0, output_final_state=True, events=switched[2].events, band=1,
        backend="torch")
    for got, off, expected, name in ((switched[0], plain[0], o_torch, "output"), (switched[1], plain[1], s_torch,
                                                                                   "state")):
        assert rel_err(got, expected) <= TOLERANCE[torch.bfloat16], f"{label} {name}: {rel_err(got, expected):.2e}"
        assert rel_err(got, off) <= agreement, f"{label} {name} against the plain call: {rel_err(got, off):.2e}"


@pytest.mark.parametrize("initial", [False, True], ids=["no_s0", "s0"])
def test_gpu_streamed_preparation_matches_torch(initial, monkeypatch):
    """forward.STREAM_PREPARE beside the Gluon lists (LISTS_FROM lowered to the case): pass 3's persistent programs
    prepare the events in rounds while the chain pass, their programmatic dependent, walks the events already marked.
    The launched call (stage hook), then three calls without it (the first recorded, the next two replayed from its
    plan: the overlap as in a real call), each within the torch backend's tolerance given the events and within 1e-3 of
    the same call unstreamed. A chain that read an event before it was stored would read a list slot left over from the
    call before (the allocator hands the same blocks back), and each call has fresh inputs, so that shows. The snapshots
    are not poisoned here: the fill would be a kernel between pass 3 and the chain pass, which then could not start
    early. The chains walk whole (forward.LISTS_SEGMENT 0): the streamed preparation serves no other."""
    from sparsegdn.triton import call_plans, event_prepare, forward
    made = _lists_from_every_call(monkeypatch)
    monkeypatch.setattr(forward, "LISTS_SEGMENT", 0)    # whole chains: the only ones it serves (streams_preparation)
    replays = []
    monkeypatch.setattr(call_plans, "run",
                        lambda plan, tensors, run=call_plans.run: replays.append(1) or run(plan, tensors))
    call_plans.clear()
    streamed, real_prepare = [], event_prepare.event_prepare

    def spy(*args, **kwargs):
        streamed.append(kwargs.get("streamed") is not None)
        return real_prepare(*args, **kwargs)
    monkeypatch.setattr(forward, "event_prepare", spy)
    for seed in range(4):
        q, k, v, g, beta, s0 = random_inputs(1, 4000, 16, 32, 128, 128, dtype=torch.bfloat16, initial_state=initial,
                                             device="cuda", seed=20 + seed)
        options = dict(initial_state=s0, output_final_state=True, budget=0.29, selector="score", band=1)
        out = {}
        for stream in (False, True):
            monkeypatch.setattr(forward, "STREAM_PREPARE", stream)
            if seed == 0:
                out[stream] = _run_guarded(lambda hook: sparsegdn.sparse_gated_delta_rule(
                    q, k, v, g, beta, backend="triton", stage_hook=hook, **options))
            else:
                out[stream] = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, backend="triton", **options)
        _switched_matches_torch((q, k, v, g, beta, s0), out[True], out[False], 1e-3, f"streamed, seed {seed}")
    assert streamed[:2] == [False, True] and made, (streamed, made)
    assert len(replays) == 4, len(replays)         # seeds 2 and 3, streamed and not


@pytest.mark.parametrize("place", ["after-scan", "beside-scan", "scan-in-selection"])
@pytest.mark.parametrize("route", ["one-launch-s0", "default-lists", "float32-K64", "two-launches-HV3"])
def test_gpu_early_checks_change_no_output(route, place, monkeypatch):
    """forward.EARLY_CHECKS: a scan of q and the initial state, then pass 1 checks k, v and g, and the public call
    waits for their flags only. Four calls of one key in a row, each with the early checks off then on (the first of
    each launched, then recorded, then replayed from its plan with the early copy in it): the same events and outputs,
    and with them on no call reads its late flags. Then through the plan: a NaN in q is a ValueError naming q, an
    element of v beyond the bound (finite) waits and passes. Routes: the one launch with an initial state, the lists
    beside the chains by the defaults (LISTS_FROM lowered to the case), float32 heads of 64, the two launches with
    three value heads a key head. `place`: the scan before pass 1, pass 1 beside it (intra_chunk.EARLY_BESIDE), or
    the scan in select_kernel's launch (schedule.SCAN_BESIDE_SELECT), the early copy then after the selection."""
    from sparsegdn import validation
    from sparsegdn.triton import call_plans, forward, graphs, intra_chunk, schedule
    from sparsegdn.triton.chunk_loads import WAIT_BOUND
    monkeypatch.setattr(graphs, "CUDA_GRAPH", False)
    monkeypatch.setattr(intra_chunk, "EARLY_BESIDE", place == "beside-scan")
    monkeypatch.setattr(schedule, "SCAN_BESIDE_SELECT", place == "scan-in-selection")
    batch, tokens, heads, value_heads, dim, dtype, initial = {
        "one-launch-s0": (1, 2000, 2, 4, 128, torch.bfloat16, True),
        "default-lists": (2, 4096, 2, 4, 128, torch.bfloat16, False),
        "float32-K64": (2, 777, 1, 2, 64, torch.float32, True),
        "two-launches-HV3": (1, 1500, 2, 6, 128, torch.bfloat16, False)}[route]
    made = []
    if route == "default-lists":
        made = _list_outputs_on(monkeypatch, by_default=True)
        _lists_from(monkeypatch, batch * value_heads * sparsegdn.num_chunks(tokens), sparsegdn.num_chunks(tokens))
    if route == "two-launches-HV3":
        monkeypatch.setattr(forward, "OVERLAP", False)
    waits, read_flags = [], validation.read_flags
    monkeypatch.setattr(validation, "read_flags", lambda flags: waits.append(1) or read_flags(flags))

    def call(seed, early, spoil=None):
        monkeypatch.setattr(forward, "EARLY_CHECKS", early)
        q, k, v, g, beta, s0 = random_inputs(batch, tokens, heads, value_heads, dim, dim, dtype=dtype, seed=seed,
                                             initial_state=initial, device="cuda")
        if spoil == "q":
            q[batch - 1, tokens // 3, heads - 1, 5] = float("nan")
        elif spoil == "v":
            v[0, tokens - 1, value_heads - 1, 0] = 2 * WAIT_BOUND.value
        return sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True,
                                                 budget=0.29, band=1, backend="triton")
    call_plans.clear()
    try:
        for seed in (1, 2, 3, 4):
            o_ref, s_ref, info_ref = call(seed, False)
            waits.clear()
            o, s, info = call(seed, True)
            assert waits == [], f"seed {seed}: the late flags were read"
            # the same kernels after pass 1, whose early variant computes its statistics as before: equal, within
            # a margin for a compiler that orders pass 1's sums otherwise
            assert torch.equal(info.events, info_ref.events), seed
            assert rel_err(o, o_ref) <= 1e-6 and rel_err(s, s_ref) <= 1e-6, (seed, rel_err(o, o_ref))
        if route == "default-lists":    # the route the case names was taken (the lists made by every launched call)
            assert set(made) == {(True, 1, True, True)}, made     # Tinv solved (band 1), beside the chains, claims
        if route != "two-launches-HV3":     # a route no plan serves there (batch 30: no plan made): launched
            plan = next(plan for plan in call_plans._plans.values() if plan.early is not None)
            # behind the scan and pass 1, or behind pass 1, score_scan and select_kernel with the scan
            assert plan.early[0] == (3 if place == "scan-in-selection" else 2), plan.early
        with pytest.raises(ValueError, match="^q"):
            call(5, True, spoil="q")
        waits.clear()
        o, s, _ = call(6, True, spoil="v")
        assert len(waits) == 1 and torch.isfinite(o).all()
        o_ref, s_ref, _ = call(6, False, spoil="v")
        assert rel_err(o, o_ref) <= 1e-6 and rel_err(s, s_ref) <= 1e-6
    finally:
        call_plans.clear()


@pytest.mark.parametrize("stages, per_sm", [(1, 2), (2, 1)])
def test_gpu_paired_zero_state_list_equals_unpaired(stages, per_sm, monkeypatch):
    """list_output's PAIR form (both value heads of one key head a list position, q and k loaded once; a probe's,
    benchmarks/gluon_probe.py --pairs) writes the unpaired zero-state list's o bit for bit, every chunk of a ragged
    call taken as the zero-state list's (every_chunk_list), each o filled with NaN before: every output written and
    finite. The ListCall is made from the arguments a real call (LISTS_FROM lowered to it) gave it, with Tinv solved
    on chip (the form's only one), fixed shares and nothing beside it."""
    from sparsegdn.triton import call_plans, list_output
    _lists_from_every_call(monkeypatch)
    call_plans.clear()
    made, real_call = [], list_output.ListCall

    def spy(*args, **kwargs):
        made.append((args, kwargs))
        return real_call(*args, **kwargs)
    monkeypatch.setattr(list_output, "ListCall", spy)
    q, k, v, g, beta, s0 = random_inputs(1, 4000, 16, 32, 128, 128, dtype=torch.bfloat16, device="cuda", seed=73)
    try:
        sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, backend="triton", output_final_state=True, budget=0.29,
                                          selector="score", band=1)
    finally:
        call_plans.clear()          # no plan made under these settings outlives the case
    assert made, "the call took no lists"
    args, kwargs = made[-1]
    call = real_call(*args[:4], None, *args[5:], **{**kwargs, "claim": False, "overlap": False})   # Tinv solved
    schedule = args[6]
    out = {}
    for pair, launch in ((False, list_output.OWN_LAUNCH), (True, (stages, per_sm))):
        call.o.fill_(float("nan"))
        call.own_over(*list_output.every_chunk_list(schedule, pair), launch, pair=pair)
        out[pair] = call.o.clone()
    assert torch.isfinite(out[False]).all()
    assert torch.equal(out[True], out[False])


@pytest.mark.parametrize("initial", [False, True], ids=["zero_state_list", "list_with_a_state"])
def test_gpu_lists_flag_one_overflowing_row(initial, monkeypatch):
    """The Gluon lists' overflow flag: one row of one tile whose o overflows must raise. Finite inputs with q zero past
    the first chunk and v zero but at its last token, where q = k, so every o is zero but that token's, which a scale
    of 3e38 takes past bfloat16's range. The first chunk is the zero-state list's without an initial state and the
    list with a state's with one (zeros). The same inputs at a scale of 1.5 return finite outputs without an error; both
    scales are above forward.EARLY_MAX_SCALE, so both calls wait for every flag (no early return): a flag that fires
    regardless would fail the first."""
    from sparsegdn import validation
    from sparsegdn.triton import call_plans
    from sparsegdn.validation import ResultOverflowError
    made = _lists_from_every_call(monkeypatch)
    q, k, v, g, beta, s0 = random_inputs(1, 4000, 2, 4, 128, 128, dtype=torch.bfloat16, device="cuda", seed=81)
    s0 = torch.zeros(1, 4, 128, 128, device="cuda", dtype=torch.float32) if initial else None
    q[0, 64:] = 0.0                                 # no output past the first chunk, whatever the state
    v = torch.zeros_like(v)
    v[0, 63, 1] = 100.0                             # value head 1 reads key head 0
    k[0, 63, 0] = q[0, 63, 0]
    call_plans.clear()
    try:
        returns = validation.early_returns
        o, _, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True,
                                                    budget=0.29, band=1, backend="triton", scale=1.5)
        assert validation.early_returns == returns, "the call returned early: the lists' flag was not read"
        assert torch.isfinite(o).all() and o[0, 63, 1].abs().max() > 0
        assert o[0, :63].abs().max() == 0 and o[0, 64:].abs().max() == 0 and o[0, 63, [0, 2, 3]].abs().max() == 0
        with pytest.raises(ResultOverflowError):
            sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True,
                                              budget=0.29, band=1, backend="triton", scale=3e38)
    finally:
        call_plans.clear()
    assert made, "the calls took no lists"


@pytest.mark.parametrize("own_launch", [(2, 2), (2, 1)], ids=["two_an_SM", "one_an_SM"])
def test_gpu_claims_ahead_equal_claims_at_once(own_launch, monkeypatch):
    """list_output.CLAIM_AHEAD (the zero-state list claiming two tiles ahead, thread 0's atomic read at a tile's end)
    hands out the same tiles as claims read at once, only to other programs: the default lists' call (beside the
    chains, claiming; LISTS_FROM lowered to it) returns the same o and final state bit for bit either way, three
    seeds, o finite. No initial state and the benchmark's heads (H 16, HV 32) at 16,000 tokens: a zero-state list of
    some 3,000-5,000 tiles over 132-264 programs, so that each walks a dozen or more through the claims' shared-memory
    slots; a spy checks that its launch took the AHEAD form."""
    from sparsegdn.triton import call_plans, list_output
    made = _lists_from_every_call(monkeypatch)
    monkeypatch.setattr(list_output, "OWN_LAUNCH", own_launch)
    forms, real_launch = [], list_output.launch_list_output

    def spy(grid, *args, **kwargs):
        forms.append(kwargs.get("AHEAD", False))
        return real_launch(grid, *args, **kwargs)
    monkeypatch.setattr(list_output, "launch_list_output", spy)
    outputs = {}
    for ahead in (False, True):
        monkeypatch.setattr(list_output, "CLAIM_AHEAD", ahead)
        forms.clear()
        call_plans.clear()
        try:
            for seed in (1, 2, 3):
                q, k, v, g, beta, _ = random_inputs(1, 16000, 16, 32, 128, 128, dtype=torch.bfloat16, device="cuda",
                                                    seed=90 + seed)
                o, s, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, budget=0.29, band=1,
                                                            output_final_state=True, backend="triton")
                outputs[ahead, seed] = (o, s)
        finally:
            call_plans.clear()
        assert (True in forms) == ahead and forms, (ahead, forms)
    assert made and all(overlap and claim for _, _, overlap, claim in made), made     # beside the chains, claiming
    for seed in (1, 2, 3):
        (o_at_once, s_at_once), (o_ahead, s_ahead) = outputs[False, seed], outputs[True, seed]
        assert torch.isfinite(o_ahead).all(), seed
        assert torch.equal(o_ahead, o_at_once) and torch.equal(s_ahead, s_at_once), seed
