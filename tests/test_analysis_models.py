"""Model loading: presets, checkpoints under the configured roots only, clear errors, no remote code."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from analysis.models import ModelError, list_models, load_model, model_roots
from test_analysis_support import tiny_config


def write_checkpoint(directory, *, model_type_override=None, extra_config=None):
    """A tiny Qwen3.5 checkpoint (safetensors + config.json + tokenizer.json) in `directory`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(0)
    Qwen3_5ForCausalLM(tiny_config()).save_pretrained(directory)
    vocab = {chr(c): i for i, c in enumerate(range(32, 127))}
    vocab["[UNK]"] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tokenizer.save(str(directory / "tokenizer.json"))
    config_file = directory / "config.json"
    config = json.loads(config_file.read_text())
    if model_type_override:
        config["model_type"] = model_type_override
    for key, value in (extra_config or {}).items():   # None removes the key
        config[key] = value
        if value is None:
            del config[key]
    config_file.write_text(json.dumps(config))
    return directory


@pytest.fixture(scope="module")
def checkpoint_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    write_checkpoint(root / "tiny-qwen35")
    return root


def test_default_is_labelled_random_until_the_trained_model_lands():
    loaded = load_model("default")
    if loaded.random_weights:
        assert "random weights" in loaded.name and "RANDOM" in loaded.description
    assert loaded.gdn_layers and loaded.head_pairs % 2 == 0
    assert loaded.tokenizer.decode(loaded.tokenizer.encode("héllo")) == "héllo"


def test_the_embedded_default_is_the_gdn_only_model_and_says_so():
    """data/default-model: 8 layers, all Gated DeltaNet, 4 head pairs of K = V = 128 (issue #12)."""
    loaded = load_model("default")
    assert not loaded.random_weights
    assert loaded.gdn_layers == list(range(8)) and loaded.n_layers == 8 and loaded.head_pairs == 4
    assert loaded.description == ("Embedded default: default (qwen3_5_text, 5.21M parameters, 8 layers: "
                                  "8 Gated DeltaNet, 0 attention)")


def test_checkpoint_under_a_root_loads(checkpoint_root):
    loaded = load_model(str(checkpoint_root / "tiny-qwen35"), roots=[checkpoint_root])
    assert not loaded.random_weights
    assert loaded.gdn_layers == [0, 1, 2] and loaded.head_pairs == 4 and loaded.n_layers == 4
    ids, offsets = loaded.tokenizer.encode_with_offsets("abc d")
    assert len(ids) == len(offsets) == 5 and offsets[-1] == (4, 5)
    with torch.no_grad():
        assert loaded.model(torch.tensor([ids])).logits.shape[-1] == tiny_config().vocab_size


def test_checkpoint_outside_the_roots_is_refused(checkpoint_root, tmp_path):
    with pytest.raises(ModelError, match="outside the model roots"):
        load_model(str(checkpoint_root / "tiny-qwen35"), roots=[tmp_path])


def test_roots_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARSEGDN_MODEL_ROOTS", str(tmp_path))
    assert model_roots() == [tmp_path.resolve()]


def test_other_architectures_are_refused_naming_what_is_supported(tmp_path):
    write_checkpoint(tmp_path / "llama", model_type_override="llama")
    with pytest.raises(ModelError, match="not Qwen3.5.*qwen3_5_text"):
        load_model(str(tmp_path / "llama"), roots=[tmp_path])


def test_remote_code_is_never_run(tmp_path):
    """A checkpoint that names its own code loads as plain Qwen3.5; its code is never imported.

    The load must succeed: a load that failed early for another reason would prove nothing.
    """
    directory = write_checkpoint(tmp_path / "remote", extra_config={
        "auto_map": {"AutoModelForCausalLM": "evil.EvilModel", "AutoConfig": "evil.EvilConfig"}})
    marker = tmp_path / "executed"
    (directory / "evil.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig\n"
        "class EvilConfig(Qwen3_5TextConfig):\n    pass\n"
        "class EvilModel(Qwen3_5ForCausalLM):\n    config_class = EvilConfig\n")
    loaded = load_model(str(directory), roots=[tmp_path])
    assert type(loaded.model).__module__.startswith("transformers."), type(loaded.model)
    assert loaded.gdn_layers == [0, 1, 2]
    assert not marker.exists(), "the checkpoint's own code ran"


@pytest.mark.parametrize("spec, pattern", [("llama-7b", "Unknown model"), ("", "No model"),
                                           ("nobody/none", "not in a Hugging Face cache")])
def test_unknown_specs_name_what_is_supported(spec, pattern, tmp_path):
    with pytest.raises(ModelError, match=pattern) as error:
        load_model(spec, roots=[tmp_path])
    assert "qwen3.5-4b-shape" in str(error.value)


def test_hub_cache_id_loads_offline(checkpoint_root, tmp_path):
    cache = tmp_path / "hub"
    snapshot = cache / "models--acme--tiny-qwen35" / "snapshots" / ("0" * 40)
    shutil.copytree(checkpoint_root / "tiny-qwen35", snapshot)
    (cache / "models--acme--tiny-qwen35" / "refs").mkdir()
    (cache / "models--acme--tiny-qwen35" / "refs" / "main").write_text("0" * 40)
    loaded = load_model("acme/tiny-qwen35", roots=[cache])
    assert loaded.name == "acme/tiny-qwen35" and loaded.gdn_layers == [0, 1, 2]
    assert "acme/tiny-qwen35" in [choice.spec for choice in list_models(roots=[cache])]


def test_list_models_offers_presets_and_checkpoints(checkpoint_root):
    specs = [choice.spec for choice in list_models(roots=[checkpoint_root])]
    assert specs[:2] == ["default", "qwen3.5-4b-shape"]
    assert str((checkpoint_root / "tiny-qwen35").resolve()) in specs


def test_4b_shape_preset_config():
    from analysis.models import qwen35_4b_shape_config

    config = qwen35_4b_shape_config()
    kinds = config.layer_types
    assert kinds.count("linear_attention") == 24 and kinds.count("full_attention") == 8
    assert (config.linear_num_key_heads, config.linear_num_value_heads) == (16, 32)
    assert (config.linear_key_head_dim, config.linear_value_head_dim) == (128, 128)


# ---- issue 11, item 3: a long text is measured against the limit without tokenising all of it ----

def spy_on_encode(tokenizer) -> list[int]:
    """The length of every text the tokenizer encodes from now on."""
    seen, real = [], tokenizer.encode

    def encode(text):
        seen.append(len(text))
        return real(text)

    tokenizer.encode = encode
    return seen


def test_counting_tokens_stops_soon_after_the_limit():
    from analysis.documents import SAMPLES_DIR
    from analysis.models import PIECE_CHARS

    tokenizer = load_model("default").tokenizer
    sample = (SAMPLES_DIR / "passkey-haystack.txt").read_text(encoding="utf-8")
    text = sample * (4_000_000 // len(sample) + 1)           # ~4 M characters, about a million tokens
    seen = spy_on_encode(tokenizer)
    assert tokenizer.count_up_to(text, 1000) > 1000
    assert sum(seen) <= 2 * PIECE_CHARS, f"{sum(seen):,} of {len(text):,} characters tokenised for a limit of 1,000"


@pytest.mark.parametrize("copies", [1, 3, 40])
def test_a_count_under_the_limit_is_exact(copies):
    from analysis.documents import SAMPLES_DIR

    tokenizer = load_model("default").tokenizer
    text = (SAMPLES_DIR / "gated-deltanet-notes.md").read_text(encoding="utf-8") * copies
    exact = len(tokenizer.encode(text))
    assert tokenizer.count_up_to(text, exact) == exact
    assert tokenizer.count_up_to(text, exact - 1) > exact - 1


# ---- issue 11, item 4: a checkpoint loads only with every weight present and sane sizes ----

def drop_weight(directory, key: str) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(directory / "model.safetensors")
    del weights[key]
    save_file(weights, directory / "model.safetensors", metadata={"format": "pt"})


def test_a_checkpoint_missing_a_weight_is_refused(tmp_path):
    """It used to run with that weight at its random initialisation, reported as a trained model."""
    directory = write_checkpoint(tmp_path / "partial")
    drop_weight(directory, "model.layers.0.linear_attn.A_log")
    with pytest.raises(ModelError, match=r"lacks 1 weight.*model\.layers\.0\.linear_attn\.A_log.*random values"):
        load_model(str(directory), roots=[tmp_path])


@pytest.mark.parametrize("change, message", [
    ({"num_hidden_layers": 100000, "layer_types": None}, r"num_hidden_layers is 100000, not a size this app can build"),
    ({"vocab_size": 1e9}, r"vocab_size is 1000000000\.0, not a size"),
    ({"hidden_size": -32}, r"hidden_size is -32, not a size"),
    ({"num_hidden_layers": 600}, r"describes at least [\d,]+ parameters but its weights hold [\d,]+"),
    ({"hidden_size": 64}, r"weights do not match config\.json's sizes"),
    ({"vocab_size": 64}, r"tokenizer\.json has 96 tokens but the model's vocabulary holds 64"),
])
def test_a_config_that_does_not_fit_its_weights_is_refused_before_the_model_is_built(change, message, tmp_path,
                                                                                     monkeypatch):
    import transformers

    directory = write_checkpoint(tmp_path / "odd", extra_config=change)
    built = []
    real = transformers.AutoModelForCausalLM.from_pretrained
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *args, **kwargs: built.append(args) or real(*args, **kwargs))
    with pytest.raises(ModelError, match=message):
        load_model(str(directory), roots=[tmp_path])
    if "not a size" in message or "describes at least" in message:
        assert not built, "the model was built before the sizes were checked"


def test_a_model_larger_than_the_free_memory_is_refused(tmp_path, monkeypatch):
    from analysis import checkpoints

    directory = write_checkpoint(tmp_path / "tiny")
    monkeypatch.setattr(checkpoints, "free_memory_bytes", lambda device: 1000)
    with pytest.raises(ModelError, match=r"needs at least .* GiB on cpu, which has 0\.0 GiB free"):
        load_model(str(directory), roots=[tmp_path])


@pytest.mark.parametrize("device", ["mps", "meta", "nonsense", "cuda:x", "", None])
def test_unknown_devices_are_refused_by_name(device):
    with pytest.raises(ModelError, match=r"Unknown device .*use auto .* cpu, or cuda"):
        load_model("default", device=device)
