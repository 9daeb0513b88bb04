"""Folded commits (forward.FOLD_COMMITS): pass 3 forms m = -k_commit^T w and c = k_commit^T u for every selected
event, and the chain commits S e^(gamma_L) + m S + c, one product on the state instead of two. The same arithmetic
rounded at other points: it must compute what the unfolded chain computes, in the one launch, in two launches and
in warm-up segments, and stay within the torch backend's tolerance. Interpreter shapes (TRITON_INTERPRET=1); the
GPU matrix repeats it at the benchmark's heads."""
import pytest
import torch
from gdn_inputs import random_events, random_inputs, rel_err, scheduled_events

import sparsegdn

pytestmark = pytest.mark.skipif(not sparsegdn.config.triton_available(),
                                reason="needs triton with CUDA or TRITON_INTERPRET=1")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
small_shapes = pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter shapes; the GPU matrix covers GPUs")
TOLERANCE = {torch.bfloat16: 2e-2, torch.float32: 1e-3}
AGREEMENT = {torch.bfloat16: 2e-2, torch.float32: 1e-5}     # folded against unfolded


def _events(batch, value_heads, n_chunks):
    events = random_events(batch, value_heads, n_chunks, seed=7, p=0.5)
    events[0, 0] = True                 # a chain that commits every chunk
    events[-1, -1] = False              # and one that commits none
    return events.to(DEVICE)


def _call(inputs, events, **options):
    q, k, v, g, beta, s0 = inputs
    return sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=1, initial_state=s0,
                                             output_final_state=True, use_qk_l2norm_in_kernel=True, **options)


@small_shapes
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("overlap", [True, False], ids=["one-launch", "two-launches"])
def test_folded_commits_compute_the_unfolded_chain(overlap, dtype, monkeypatch):
    from sparsegdn.triton import forward
    monkeypatch.setattr(forward, "OVERLAP", overlap)
    tokens = 64 * 9 - 13                # ragged
    inputs = random_inputs(2, tokens, 1, 2, 16, 32, dtype=dtype, seed=11, initial_state=True, device=DEVICE)
    events = _events(2, 2, sparsegdn.num_chunks(tokens))
    out = {}
    for folded in (False, True):
        monkeypatch.setattr(forward, "FOLD_COMMITS", folded)
        out[folded] = _call(inputs, events, backend="triton")
    reference = _call(inputs, events, backend="torch")
    for index, name in ((0, "output"), (1, "final state")):
        agreement = rel_err(out[True][index], out[False][index])
        assert agreement <= AGREEMENT[dtype], f"{name}: folded against unfolded {agreement:.2e}"
        error = rel_err(out[True][index], reference[index])
        assert error <= TOLERANCE[dtype], f"{name}: folded against torch {error:.2e}"


@small_shapes
def test_folded_commits_walk_warm_up_segments(monkeypatch):
    """Warm-up segments walk the folded lists (their warm-up too); segment_scan's maps and paired chains keep the
    unfolded lists (forward.folded_commits), so those calls are unchanged by the switch."""
    from sparsegdn.triton import forward
    tokens = 64 * 12
    inputs = random_inputs(1, tokens, 1, 2, 16, 16, dtype=torch.float32, seed=4, initial_state=True, device=DEVICE)
    events = _events(1, 2, sparsegdn.num_chunks(tokens))
    monkeypatch.setattr(forward, "COMMIT_SEGMENT", 4)
    monkeypatch.setattr(forward, "WARM_UP", 20.0)
    out = {}
    for folded in (False, True):
        monkeypatch.setattr(forward, "FOLD_COMMITS", folded)
        out[folded] = _call(inputs, events, backend="triton")
    assert rel_err(out[True][0], out[False][0]) <= 1e-5 and rel_err(out[True][1], out[False][1]) <= 1e-5
    monkeypatch.setattr(forward, "FOLD_COMMITS", True)
    assert forward.folded_commits(False, 12, 16, 20.0)
    assert not forward.folded_commits(False, 12, 16, 0.0)       # segment_scan's maps
    assert not forward.folded_commits(True, 12, 16, 20.0)       # paired chains
    assert not forward.folded_commits(False, 12, 256, 20.0)     # a K x K tile too large for the chain's stages
    assert not forward.folded_commits(False, 12, 128, 20.0, torch.float32)     # float32 tiles: twice as large
    assert forward.folded_commits(False, 12, 256, 20.0, torch.float32, on_gpu=False)     # the interpreter


@small_shapes
def test_folded_tiles_are_the_products_of_the_unfolded_lists():
    """event_prepare(folded=True) writes m = -k_commit^T w and c = k_commit^T u of the same events, and the chain
    pass refuses folded lists where it would read them as unfolded ones (segment_scan's maps, paired chains)."""
    from sparsegdn.triton import state_pass
    from sparsegdn.triton.event_prepare import event_prepare
    batch, value_heads, key_dim, value_dim, n_chunks = 1, 2, 16, 32, 5
    (k, v, g, beta, t_inv, s0, flags, schedule), options = scheduled_events(
        batch, value_heads, key_dim, value_dim, 64 * n_chunks, _events(batch, value_heads, n_chunks), seed=2,
        device=DEVICE)
    w, u, k_commit = event_prepare(k, v, g, beta, t_inv, schedule.event_chunks, **options)
    m, c, none = event_prepare(k, v, g, beta, t_inv, schedule.event_chunks, folded=True, **options)
    assert none is None and m.shape[-2:] == (key_dim, key_dim) and c.shape[-2:] == (key_dim, value_dim)
    used = int(schedule.per_head.sum())     # the filled slots; the rest is padding
    kc = k_commit[0, :used].double()
    assert rel_err(m[0, :used], -kc.transpose(-1, -2) @ w[0, :used].double()) <= 1e-5
    assert rel_err(c[0, :used], kc.transpose(-1, -2) @ u[0, :used].double()) <= 1e-5
    with pytest.raises(ValueError, match="folded commits"):
        state_pass.state_pass(m, c, None, schedule, s0, flags, store_final=True, segment=2, folded=True)
    with pytest.raises(ValueError, match="folded commits"):
        state_pass.check_folded(True, True, False, 0.0)


def test_benchmark_designs_set_and_put_back_the_fold(monkeypatch):
    """kernel_bench's folded designs turn FOLD_COMMITS on (one_launch_folded also LISTS_FROM off), and the next design
    puts back what they changed, also when two tags set the same switch one after the other."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import kernel_bench
    from sparsegdn.triton import forward
    monkeypatch.setattr(kernel_bench, "_saved_switches", {})
    lists_from, fold = forward.LISTS_FROM, forward.FOLD_COMMITS
    try:
        kernel_bench.set_design(kernel_bench.DESIGNS["one_launch_folded"])
        assert forward.FOLD_COMMITS and forward.LISTS_FROM == 0
        kernel_bench.set_design(kernel_bench.DESIGNS["folded"])
        assert forward.FOLD_COMMITS and forward.LISTS_FROM == lists_from
        kernel_bench.set_design(kernel_bench.DESIGNS["one_launch"])
        assert forward.FOLD_COMMITS == fold and forward.LISTS_FROM == 0
        kernel_bench.set_design(kernel_bench.DESIGNS["by_band"])
        assert (forward.FOLD_COMMITS, forward.LISTS_FROM) == (fold, lists_from)
    finally:
        forward.LISTS_FROM, forward.FOLD_COMMITS = lists_from, fold


def test_benchmark_designs_set_and_put_back_the_transpose(monkeypatch):
    """kernel_bench's transposed designs turn state_pass.TRANSPOSED on (streamed_transposed also STREAM_PREPARE,
    transposed_tma also TMA_SNAPSHOTS), and the next design puts back what they set, also after the streamed design
    set STREAM_PREPARE under its own tag."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import kernel_bench
    from sparsegdn.triton import forward, state_pass
    monkeypatch.setattr(kernel_bench, "_saved_switches", {})
    monkeypatch.setattr(state_pass, "TRANSPOSED", False)
    monkeypatch.setattr(state_pass, "TMA_SNAPSHOTS", False)
    monkeypatch.setattr(forward, "STREAM_PREPARE", False)
    kernel_bench.set_design(kernel_bench.DESIGNS["streamed_transposed"])
    assert state_pass.TRANSPOSED and forward.STREAM_PREPARE
    kernel_bench.set_design(kernel_bench.DESIGNS["transposed"])
    assert state_pass.TRANSPOSED and not forward.STREAM_PREPARE
    kernel_bench.set_design(kernel_bench.DESIGNS["streamed"])
    assert forward.STREAM_PREPARE and not state_pass.TRANSPOSED
    kernel_bench.set_design(kernel_bench.DESIGNS["transposed_tma"])
    assert state_pass.TRANSPOSED and state_pass.TMA_SNAPSHOTS and not forward.STREAM_PREPARE
    kernel_bench.set_design(kernel_bench.DESIGNS["by_band"])
    assert not (state_pass.TRANSPOSED or state_pass.TMA_SNAPSHOTS or forward.STREAM_PREPARE)


def test_benchmark_rows_name_the_settings_their_process_started_with(monkeypatch):
    """kernel_bench's rows carry a command that runs them again: the SPARSEGDN_* settings (read at import, so they
    shape every row of the process) lead it, in name order, and nothing else of the environment does."""
    import os
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import kernel_bench
    for name in [name for name in os.environ if name.startswith("SPARSEGDN_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("FLA_FLASH_QLA", "0")
    assert kernel_bench.process_settings() == ""
    monkeypatch.setenv("SPARSEGDN_WARM_UP", "20")
    monkeypatch.setenv("SPARSEGDN_CHAIN_BV", "32")
    assert kernel_bench.process_settings() == "SPARSEGDN_CHAIN_BV=32 SPARSEGDN_WARM_UP=20 "
