"""A model split over two GPUs records what the same model records on one (to bfloat16 tolerance),
and every piece under the records works on the GPU of its tensors, not the current one.

Runs only where two CUDA GPUs are visible (skipped in CI, which has none); its log is committed as
analysis/results/multi_gpu_tests.log. One command, on a machine with two GPUs:

    python -m pytest -q tests/test_multi_gpu.py

Nothing here is timed: the timings are only checked to exist for every layer.
"""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

import sparsegdn
from sparsegdn import SparseConfig
from sparsegdn.validation import DeferredChecks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                reason="needs two CUDA GPUs")

REPO = Path(__file__).resolve().parents[1]
TOLERANCE = 2e-2          # relative, bfloat16
TEXT = (REPO / "data" / "samples" / "gated-deltanet-notes.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A small bf16 Qwen3.5 checkpoint whose GDN heads (K = V = 64) take the Triton kernels: 8 layers,
    6 of them GDN, so the balanced map puts GDN layers on both GPUs. Seeded random weights with slow
    decays (skipped events then cost visible error); the default model's tokenizer."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    from analysis.models import slow_gdn_decay

    config = Qwen3_5TextConfig(
        vocab_size=8192, hidden_size=256, intermediate_size=512, num_hidden_layers=8, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=64, linear_value_head_dim=64, max_position_embeddings=65536, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(config).to(torch.bfloat16)
    slow_gdn_decay(model)
    root = tmp_path_factory.mktemp("models")
    directory = root / "split-test"
    model.save_pretrained(directory)
    shutil.copy(REPO / "data" / "default-model" / "tokenizer.json", directory / "tokenizer.json")
    return root, directory


def _analyze(loaded, text=TEXT):
    from analysis.pipeline import RunConfig, analyze

    config = RunConfig(SparseConfig(budget=0.29, selector="score", band=1, backend="auto"), segment_tokens=512,
                       repeats=1)
    return analyze(loaded, text, config)


def _close(a, b, name):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    assert (np.isfinite(a) == np.isfinite(b)).all(), f"{name}: null/finite pattern differs"
    scale = max(np.abs(b[both]).max(), 1e-12)
    worst = np.abs(a[both] - b[both]).max() / scale
    assert worst <= TOLERANCE, f"{name}: split differs from one GPU by {worst:.3g} of its largest value"


def test_records_of_a_model_split_over_two_gpus_equal_those_on_one(checkpoint):
    from analysis.models import load_model

    root, directory = checkpoint
    one = load_model(str(directory), device="cuda", roots=[root])
    split = load_model(str(directory), device="auto", device_map="balanced", gpus=2, roots=[root])
    assert [row["device"] for row in split.placement] == ["cuda:0", "cuda:1"]
    assert [row["layers"] for row in split.placement] == [[0, 1, 2, 3], [4, 5, 6, 7]]

    a, b = _analyze(split), _analyze(one)
    assert a.summary["n_segments"] > 1, "the test must carry states across segments"
    layer_devices = dict(a.layers.select("layer", "device").iter_rows())
    assert layer_devices == {0: "cuda:0", 1: "cuda:0", 2: "cuda:0", 4: "cuda:1", 5: "cuda:1", 6: "cuda:1"}
    assert set(b.layers["device"]) == {"cuda:0"}
    assert a.summary["placement"]["device_map"] == "balanced"
    assert all(row["peak_gib"] > 0 for row in a.summary["placement"]["devices"])

    events_a, events_b = (r.events.sort("layer", "head_pair", "chunk") for r in (a, b))
    agree = float((events_a["selected"] == events_b["selected"]).mean())
    assert agree >= 0.99, f"only {agree:.2%} of the events selected alike on one and two GPUs"
    _close(events_a["score"], events_b["score"], "event scores")
    _close(events_a["rel_err_o"].fill_null(np.nan), events_b["rel_err_o"].fill_null(np.nan), "event errors")
    for column in ("rel_err_o", "rel_err_state"):
        _close(a.heads[column].fill_null(np.nan), b.heads[column].fill_null(np.nan), f"head pairs' {column}")
    for key in ("kl_mean", "ppl_dense", "ppl_sparse"):
        assert math.isclose(a.summary[key], b.summary[key], rel_tol=TOLERANCE, abs_tol=1e-4), \
            f"{key}: {a.summary[key]} split, {b.summary[key]} on one GPU"
    assert a.summary["top1_agreement"] == pytest.approx(b.summary["top1_agreement"], abs=0.02)
    cores = a.timings.filter(pl.col("scope") == "core")
    assert sorted(set(cores["layer"])) == [0, 1, 2, 4, 5, 6], "every GDN layer's core is timed, on its GPU"


def test_random_weight_preset_built_across_two_gpus_runs(tmp_path):
    from analysis.models import load_model

    loaded = load_model("qwen3.5-4b-shape", device="auto", device_map="auto", gpus=2)
    assert {row["device"] for row in loaded.placement} == {"cuda:0", "cuda:1"}
    assert all(not parameter.is_meta for parameter in loaded.model.parameters())
    result = _analyze(loaded, TEXT[:2000])     # bytes are its tokens: 2,000 tokens, 4 segments
    assert set(result.layers["device"]) == {"cuda:0", "cuda:1"}
    assert result.summary["non_finite"] == 0


def test_triton_kernels_launch_on_the_inputs_gpu_not_the_current_one():
    torch.manual_seed(0)
    shapes = {"q": (1, 700, 2, 64), "k": (1, 700, 2, 64), "v": (1, 700, 4, 64)}
    q, k, v = (torch.randn(shape, dtype=torch.bfloat16) for shape in shapes.values())
    g = -torch.rand(1, 700, 4) * 0.05
    beta = torch.rand(1, 700, 4).clamp(0.05, 0.95).to(torch.bfloat16)
    runs = []
    for device in ("cuda:0", "cuda:1"):
        with torch.cuda.device(0):     # the current device stays GPU 0 for both calls
            inputs = [x.to(device) for x in (q, k, v, g, beta)]
            checks = DeferredChecks()
            o, state, info = sparsegdn.sparse_gated_delta_rule(*inputs, output_final_state=True, backend="triton",
                                                               checks=checks)
            checks.check()
        assert o.device == torch.device(device) and state.device == torch.device(device)
        runs.append((o.float().cpu(), state.cpu(), info.events.cpu()))
    assert torch.equal(runs[0][2], runs[1][2])
    error = (runs[0][0] - runs[1][0]).norm() / runs[1][0].norm()
    assert error <= TOLERANCE, f"output on GPU 1 differs from GPU 0 by {error:.3g}"


def test_deferred_checks_read_flags_from_several_gpus_and_name_the_bad_call():
    checks = DeferredChecks()
    checks.add(torch.zeros(4, dtype=torch.int32, device="cuda:0"), "layer 0")
    checks.add(torch.zeros(4, dtype=torch.int32, device="cuda:1"), "layer 4")
    checks.check()
    checks.add(torch.zeros(4, dtype=torch.int32, device="cuda:0"), "layer 0")
    checks.add(torch.tensor([0, 1, 0, 0], dtype=torch.int32, device="cuda:1"), "layer 4")
    with pytest.raises(ValueError, match="^layer 4"):
        checks.check()


def test_the_public_calls_flag_read_back_waits_on_the_flags_own_gpu():
    """read_flags copies through pinned memory behind the work queued on the flags' device, whichever
    device is current: a value written by a long product on GPU 1 is read, not a stale one."""
    from sparsegdn.validation import read_flags

    x = torch.randn(4096, 4096, device="cuda:1")
    flags = torch.zeros(3, dtype=torch.int32, device="cuda:1")
    with torch.cuda.device(0):
        for _ in range(8):
            x = x @ x / 64
        flags[1] = (x.abs().sum() >= 0).int()      # set only once the products are done
        assert read_flags(flags) == [0, 1, 0]


def test_intervals_and_stage_clocks_time_on_the_gpu_of_their_work():
    from analysis.timing import StageClock, Timer

    timer = Timer(["cuda:0", "cuda:1"])
    x = torch.randn(2048, 2048, device="cuda:1")
    with torch.cuda.device(0):
        with timer.interval("cuda:1") as layer, timer.interval() as whole:
            clock = StageClock(True)
            clock.start("cuda:1")
            x @ x
            clock.hook("intra_solve")
    timer.resolve()
    assert layer.ms >= 0 and whole.ms >= 0
    assert list(clock.totals_ms()) == ["intra_solve"]
