"""Placing a model over several GPUs (analysis/placement.py), checked on the CPU: the --device-map
requests and their errors, the maps themselves (on meta-device models of the real shapes, with the
GPUs' free memory given), the random-weight build on the meta device, and the placement summary.
The runs on two GPUs are in tests/test_multi_gpu.py."""
from __future__ import annotations

import polars as pl
import pytest
import torch
from transformers import AutoModelForCausalLM

from analysis import cli, placement
from analysis.models import (ModelError, default_random_config, qwen35_122b_a10b_shape_config,
                             qwen35_4b_shape_config, wrap_model, ByteTokenizer)
from analysis.patching import dense_core, swap_gdn_core
from analysis.records import RunResult

GIB = 2 ** 30
H200_FREE = 139 * GIB


def meta(config, dtype=torch.bfloat16):
    return placement.meta_model(lambda: AutoModelForCausalLM.from_config(config), dtype)


# ---------------------------------------------------------------------------------- requests

def test_device_map_none_uses_no_gpu_and_refuses_a_gpu_count():
    assert placement.check_device_map("none", visible=2) == []
    with pytest.raises(ModelError, match="needs a device map"):
        placement.check_device_map("none", 2, visible=2)


@pytest.mark.parametrize("device_map", ["auto", "balanced"])
def test_device_map_spreads_over_every_visible_gpu_or_the_number_asked(device_map):
    assert placement.check_device_map(device_map, visible=2) == [0, 1]
    assert placement.check_device_map(device_map, 1, visible=2) == [0]


@pytest.mark.parametrize("device_map", ["auto", "balanced"])
def test_device_map_on_a_machine_without_gpus_is_one_clear_sentence(device_map):
    with pytest.raises(ModelError, match=f"--device-map {device_map} .* none visible; use --device-map none"):
        placement.check_device_map(device_map, visible=0)


def test_device_map_asking_for_more_gpus_than_visible_names_both_counts():
    with pytest.raises(ModelError, match="asks for 3 GPUs but this machine has 2 visible"):
        placement.check_device_map("balanced", 3, visible=2)


@pytest.mark.parametrize("device_map, gpus, message", [
    ("sequential", None, "Unknown device map 'sequential'"),
    ("auto", 0, "at least 1, got 0"),
    ("auto", True, "at least 1, got True"),
])
def test_device_map_bad_values_are_refused(device_map, gpus, message):
    with pytest.raises(ModelError, match=message):
        placement.check_device_map(device_map, gpus, visible=2)


@pytest.mark.parametrize("flags", [
    ["--device-map", "auto"],
    ["--device-map", "balanced", "--gpus", "64"],
    ["--device-map", "everywhere"],
    ["--gpus", "2"],
    ["--device-map", "auto", "--device", "cpu"],
])
def test_cli_device_map_errors_are_one_line_with_the_input_exit_code(flags, tmp_path, capsys):
    if flags[:2] == ["--device-map", "auto"] and len(flags) == 2 and torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --device-map auto is not an error here")
    code = cli.main(["run", "--doc", "data/samples/gated-deltanet-notes.md", "--out", str(tmp_path / "run"),
                     *flags])
    error = capsys.readouterr().err
    assert code == cli.EXIT_INPUT, error
    assert error.startswith("error: ") and error.count("\n") == 1, error
    assert "Traceback" not in error
    assert not (tmp_path / "run").exists()


def test_the_122b_preset_refuses_to_load_on_one_device(tmp_path, capsys):
    code = cli.main(["run", "--model", "qwen3.5-122b-a10b-shape", "--doc", "data/samples/gated-deltanet-notes.md",
                     "--out", str(tmp_path / "run"), "--device", "cpu"])
    assert code == cli.EXIT_INPUT
    assert "227 GiB" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- maps

def test_the_122b_preset_is_larger_than_one_h200_and_fits_two():
    model = meta(qwen35_122b_a10b_shape_config())
    total = sum(p.numel() for p in model.parameters())
    assert 121e9 < total < 123e9, f"{total / 1e9:.2f}B parameters, not the 122B of Qwen3.5-122B-A10B"
    assert total * 2 > H200_FREE
    with pytest.raises(ModelError, match="does not fit on 1 GPU"):
        placement.plan(model, "auto", [0], torch.bfloat16, name="122b", free={0: H200_FREE})
    for device_map in ("auto", "balanced"):
        chosen = placement.plan(model, device_map, [0, 1], torch.bfloat16, name="122b",
                                free={0: H200_FREE, 1: H200_FREE})
        shares = placement.weights_per_gpu(model, chosen, torch.bfloat16)
        assert set(shares) == {0, 1}
        assert abs(shares[0] - shares[1]) < 0.05 * total * 2, f"{device_map}: {shares}"


def test_balanced_map_cuts_the_layers_into_equal_runs_in_order():
    model = meta(qwen35_122b_a10b_shape_config())
    chosen = placement.balanced_map(model, [0, 1])
    layers = [chosen[f"model.layers.{i}"] for i in range(48)]
    assert layers == [0] * 24 + [1] * 24
    assert chosen["model.embed_tokens"] == 0 and chosen["model.norm"] == 1
    assert chosen["lm_head"] == 1, "an untied lm_head belongs after the last layer"
    three = placement.balanced_map(meta(qwen35_4b_shape_config()), [0, 1, 2])
    runs = [three[f"model.layers.{i}"] for i in range(32)]
    assert runs == sorted(runs) and [runs.count(g) for g in (0, 1, 2)] in ([11, 11, 10], [11, 10, 11], [10, 11, 11])
    assert three["lm_head"] == three["model.embed_tokens"] == 0, "a tied lm_head stays with the embeddings"


def test_balanced_map_that_overflows_a_gpu_is_refused_before_any_allocation():
    model = meta(qwen35_122b_a10b_shape_config())
    with pytest.raises(ModelError, match="puts 113.7 GiB of weights on GPU 0, which has 100.0 GiB free"):
        placement.plan(model, "balanced", [0, 1], torch.bfloat16, name="122b", free={0: 100 * GIB, 1: 200 * GIB})


def test_meta_model_allocates_nothing():
    model = meta(qwen35_122b_a10b_shape_config())
    assert all(parameter.is_meta for parameter in model.parameters())


# ---------------------------------------------------------------------------------- building

def small_map(model, device="cpu"):
    first, layers, last = placement.module_groups(model)
    return {name: device for name in first + layers + last}


def test_materialised_random_model_is_initialised_tied_and_runs():
    config = default_random_config()
    model = placement.materialise_random(meta(config, torch.float32), small_map(meta(config)), seed=0)
    assert not any(parameter.is_meta for parameter in model.parameters())
    assert model.lm_head.weight is model.model.embed_tokens.weight, "tie_word_embeddings must survive the build"
    fresh = AutoModelForCausalLM.from_config(config)
    assert torch.allclose(model.model.rotary_emb.inv_freq, fresh.model.rotary_emb.inv_freq), \
        "the rotary table must be recomputed, not left as to_empty's memory"
    again = placement.materialise_random(meta(config, torch.float32), small_map(meta(config)), seed=0)
    assert torch.equal(model.model.layers[0].mlp.up_proj.weight, again.model.layers[0].mlp.up_proj.weight), \
        "the same seed and map must give the same weights"
    std = float(model.model.layers[0].mlp.up_proj.weight.detach().std())
    assert 0.01 < std < 0.03, f"weights drawn with std {std}, not transformers' initializer_range 0.02"
    # The torch core: where FLA is installed (the GPU machines) transformers would call its Triton
    # kernels on these CPU tensors.
    with torch.inference_mode(), swap_gdn_core(model, dense_core("torch")):
        logits = model(torch.arange(10)[None]).logits
    assert torch.isfinite(logits).all()


def test_a_map_that_leaves_a_module_out_is_an_error():
    config = default_random_config()
    model = meta(config, torch.float32)
    partial = small_map(model)
    partial.pop("model.norm")
    with pytest.raises(ModelError, match="unplaced"):
        placement.materialise_random(model, partial, seed=0)


# ---------------------------------------------------------------------------------- summary

def test_placement_summary_of_a_model_on_one_device():
    model = AutoModelForCausalLM.from_config(default_random_config())
    loaded = wrap_model(model, ByteTokenizer(), name="t", description="t", random_weights=True, device="cpu",
                        dtype=torch.float32)
    (row,) = loaded.placement
    assert row["device"] == "cpu" and row["name"] == "CPU"
    assert row["layers"] == [0, 1, 2, 3] and row["gdn_layers"] == loaded.gdn_layers == [0, 1, 2]
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert row["weights_gib"] == pytest.approx(weights / GIB, abs=1e-3)
    assert loaded.device_map == "none"


@pytest.mark.parametrize("layers, text", [([0, 1, 2, 5, 6], "0-2, 5-6"), ([3], "3"), ([], "none"),
                                          (list(range(24)), "0-23")])
def test_layer_ranges(layers, text):
    assert placement.layer_ranges(layers) == text


def test_cli_prints_one_placement_line_per_gpu():
    summary = {"placement": {"device_map": "balanced", "devices": [
        {"device": "cuda:0", "name": "NVIDIA H200", "layers": list(range(24)), "gdn_layers": [],
         "weights_gib": 113.7, "total_gib": 140.4, "peak_gib": 120.5},
        {"device": "cuda:1", "name": "NVIDIA H200", "layers": list(range(24, 48)), "gdn_layers": [],
         "weights_gib": 113.7, "total_gib": 140.4, "peak_gib": 121.0}]}}
    lines = cli._placement_lines(summary)
    assert lines[1] == ("placement   cuda:1 (NVIDIA H200): layers 24-47, 113.7 GiB of weights, "
                        "peak 121.0 of 140.4 GiB")
    assert cli._placement_lines({"placement": {"device_map": "none", "devices": []}}) == []


def test_runs_saved_before_the_layer_device_column_still_load(tmp_path):
    from analysis.records import SCHEMAS

    frames = {table: pl.DataFrame(schema={k: v for k, v in schema.items() if (table, k) != ("layers", "device")})
              for table, schema in SCHEMAS.items()}
    old = RunResult(summary={"model": "m"}, **{t: frames[t] for t in ("events", "heads", "layers", "chunks")})
    assert old.layers.columns[1] == "device" and old.layers.schema["device"] == pl.String


# ---------------------------------------------------------------------------------- app

def test_app_placement_table_has_one_row_per_gpu():
    from app.tables import placement_table

    rows = [{"device": "cuda:0", "name": "NVIDIA H200", "layers": list(range(24)), "gdn_layers": [0, 1, 2],
             "weights_gib": 113.7, "total_gib": 140.4, "peak_gib": 120.0},
            {"device": "cuda:1", "name": "NVIDIA H200", "layers": list(range(24, 48)), "gdn_layers": [24],
             "weights_gib": 113.7, "total_gib": 140.4}]
    table = placement_table(rows)
    assert table["layers"].to_list() == ["0-23", "24-47"]
    assert table["GDN layers"].to_list() == [3, 1]
    assert table["peak (GiB)"].to_list() == [120.0, None]


@pytest.mark.parametrize("raw, expected", [("", "none"), ("balanced", "balanced"), ("auto", "auto")])
def test_app_device_map_setting(raw, expected, monkeypatch):
    from app.settings import load_settings

    monkeypatch.setenv("SPARSEGDN_DEVICE_MAP", raw)
    assert load_settings().device_map == expected


def test_app_device_map_setting_refuses_unknown_values(monkeypatch):
    from app.settings import load_settings

    monkeypatch.setenv("SPARSEGDN_DEVICE_MAP", "sequential")
    with pytest.raises(ValueError, match="SPARSEGDN_DEVICE_MAP must be one of none, auto, balanced"):
        load_settings()
