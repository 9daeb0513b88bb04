"""Training pieces: the data mixture, the torch training core, and a tiny CPU run that learns."""

import argparse
import json
import math
from pathlib import Path

import corpus_stand_in
import pytest
import torch

from analysis.patching import swap_gdn_core, torch_reference_core
from training import train

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(train.TOKENIZER))


@pytest.fixture(scope="module")
def source(tokenizer):
    return train.SequenceSource(tokenizer, corpus_stand_in.haystack(), seed=0)


def test_config_is_the_issue_architecture():
    config = train.model_config(8192, 0)
    assert config.model_type == "qwen3_5_text"
    assert config.layer_types == (["linear_attention"] * 3 + ["full_attention"]) * 2
    assert config.linear_num_value_heads == 2 * config.linear_num_key_heads
    assert min(config.linear_key_head_dim, config.linear_value_head_dim) >= 32


def test_default_checkpoint_fits_the_limits():
    """bf16 checkpoint <= 16 MiB (one file back from the GPU) and the folder <= 20 MB."""
    model_file = ROOT / "data" / "default-model" / "model.safetensors"
    if not model_file.exists():
        pytest.fail("data/default-model/model.safetensors is missing")
    assert model_file.stat().st_size <= 16 * 2**20
    total = sum(p.stat().st_size for p in model_file.parent.iterdir() if p.is_file())
    assert total <= 20e6, f"data/default-model holds {total / 1e6:.1f} MB"


def test_batches_mark_the_answer_tokens(source, tokenizer):
    ids, mask, _ = source.labelled_batch(1024, 16)
    assert ids.shape == mask.shape == (16, 1024)
    assert ids.max() < len(tokenizer) and mask.any()
    for row in range(16):
        if mask[row].any():  # answers are digits or upper-case variable names
            text = tokenizer.decode(ids[row][mask[row]].tolist())
            assert text.replace(" ", "").isalnum(), text


def test_defaults_are_the_committed_checkpoint_recipe():
    """train.py keeps one recipe: the one data/default-model/train_log.json records."""
    log = json.loads((ROOT / "data" / "default-model" / "train_log.json").read_text())
    args = train.parse_args(["--out", "runs/x"])
    args.core_name = log["gdn_core"]
    today = json.loads(json.dumps(train.recipe(args)))
    assert {key: today[key] for key in today if key in log} == {key: log[key] for key in today if key in log}


def test_curriculum_and_learning_rate_schedule():
    assert [train.phase_length(p, train.CURRICULUM) for p in (0.0, 0.2, 0.4, 0.6, 0.9)] == \
        [1024, 2048, 4096, 8192, 16384]
    assert train.learning_rate(0, 0.0, 1e-3, 10) == pytest.approx(1e-4)
    assert train.learning_rate(100, 0.0, 1e-3, 10) == pytest.approx(1e-3)
    assert train.learning_rate(100, 1.0, 1e-3, 10) == pytest.approx(1e-4)


def test_training_core_with_long_chunks_matches_transformers_core():
    """The 128-token chunk core used in training, swapped in by analysis/patching.py, gives transformers'
    own outputs and gradients."""
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(train.model_config(64, 0, tiny=True))
    ids = torch.randint(0, 64, (2, 200))

    def run():
        model.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    loss64, grads64 = run()
    with swap_gdn_core(model, torch_reference_core(128)):
        loss128, grads128 = run()
    assert abs(loss64 - loss128) < 1e-5
    for a, b in zip(grads64, grads128):
        assert (a - b).norm() <= 1e-4 * a.norm() + 1e-8


def test_tiny_training_steps_decrease_the_loss(source):
    """A few AdamW steps of the tiny model on one batch lower its loss (the loop can learn)."""
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(train.model_config(8192, 0, tiny=True))
    ids, mask, _ = source.labelled_batch(256, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    with train.training_core(model, "torch", 64):
        for _ in range(6):
            lm, answer, _ = train.loss_terms(model, ids, mask)
            loss = lm + answer
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] - 0.5, f"loss did not fall: {losses}"


def test_the_mixture_draws_its_tasks(tokenizer):
    """The mixture yields plain text and every retrieval task it lists, with answers marked."""
    assert sum(share for share, *_ in train.MIXTURE) == pytest.approx(1.0)
    src = train.SequenceSource(tokenizer, corpus_stand_in.haystack(), seed=1)
    ids, mask, entries = src.labelled_batch(512, 48)
    answered = mask.any(dim=1)
    text_entries = [i for i, (_, task, *_) in enumerate(train.MIXTURE) if task is None]
    for row in range(48):   # a row answers exactly when it was drawn from a task (short rows may fall back to text)
        if int(entries[row]) in text_entries:
            assert not answered[row]
    assert answered.float().mean() > 0.5


def test_batch_stream_follows_the_requested_length(tokenizer):
    """Batches come at the length the training loop sets, in worker processes too."""
    src = train.SequenceSource(tokenizer, corpus_stand_in.haystack(), seed=4)
    for workers in (0, 1):
        wanted, batches = train.batch_stream(src, 1024, 256, workers)
        length, ids, mask, entries = next(batches)
        assert length == 256 and ids.shape == (4, 256) and mask.shape == (4, 256) and entries.shape == (4,)
        wanted.value = 512
        seen = [next(batches)[0] for _ in range(8)]  # a few built before the change may still come
        assert seen[-1] == 512 and next(batches)[1].shape == (2, 512)


def test_task_accuracy_groups_answer_hits_by_task():
    """Per-task accuracy: hits over answer tokens of the rows drawn from each mixture entry."""
    mask = torch.zeros(3, 6, dtype=torch.bool)
    mask[0, 2:5] = True   # 3 answers (targets are positions 1..5)
    mask[2, 1:6] = True   # 5 answers
    hits = torch.tensor([2, 0, 5])
    got = train.task_accuracy(hits, mask, torch.tensor([1, 0, 2]), ["text", "niah_multikey", "niah_single"])
    assert got == {"niah_multikey": pytest.approx(2 / 3, abs=1e-4), "niah_single": 1.0}


def test_loss_terms_per_row_hits_count_correct_answer_tokens():
    """per_row hits equal a direct count of argmax == target on the masked answer tokens."""
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(1)
    model = Qwen3_5ForCausalLM(train.model_config(64, 0, tiny=True)).eval()
    ids = torch.randint(0, 64, (2, 40))
    mask = torch.rand(2, 40) < 0.5
    with train.training_core(model, "torch", 64), torch.no_grad():
        lm, answer, accuracy, hits = train.loss_terms(model, ids, mask, per_row=True)
        logits = model(input_ids=ids).logits[:, :-1]
    direct = ((logits.argmax(-1) == ids[:, 1:]) & mask[:, 1:]).sum(1)
    assert torch.equal(hits, direct)
    assert accuracy.item() == pytest.approx(direct.sum().item() / mask[:, 1:].sum().item())


def test_induction_probe_builds_the_configuration_it_is_asked_for():
    """The probe's flags reach the model config; a short run logs finite losses and accuracies."""
    from training import induction_probe

    args = argparse.Namespace(
        default=False, layers="GA", head_dim=16, rope_theta=1e7, rotary=0.5, steps=4, batch=2, span=8, draw=64, gap=5,
        lr=1e-3, seed=0, log_every=2, stop_at=0.0, lm_answer_weight=2.0)
    config = induction_probe.probe_config(args)
    assert config.layer_types == ["linear_attention", "full_attention"] and config.head_dim == 16
    assert config.rope_parameters["rope_theta"] == 1e7 and config.rope_parameters["partial_rotary_factor"] == 0.5
    default = induction_probe.probe_config(argparse.Namespace(default=True, layers="", head_dim=0, rope_theta=None,
                                                              rotary=None))
    assert default.rope_parameters == train.model_config(8192, 0).rope_parameters
    log = induction_probe.run(args)
    assert [e["step"] for e in log] == [2, 4]
    assert all(math.isfinite(e["answer_loss"]) and 0.0 <= e["accuracy"] <= 1.0 for e in log)


def test_induction_probe_rows_repeat_their_tail_at_a_varying_distance():
    from training import induction_probe

    ids, mask = induction_probe.repeat_batch(64, 6, 10, 100, torch.Generator().manual_seed(0))
    assert ids.shape == (64, 22) and mask.sum(1).eq(5).all() and mask[:, -5:].all()
    assert ids.min() >= induction_probe.FIRST_WORD and ids.max() < induction_probe.FIRST_WORD + 100
    starts = []
    for row in ids:
        found = [s for s in range(11) if torch.equal(row[s:s + 6], row[-6:])]
        assert found, "the tail does not occur earlier in the row"
        starts.append(found[0])
    assert len(set(starts)) > 5, f"the first copy always starts at the same place: {sorted(set(starts))}"


def test_a_missing_corpus_is_built_on_first_use_or_said_how_to_get(tmp_path, monkeypatch, capsys):
    """data/corpus/ is generated, not tracked: training builds it, and says what to run when it cannot."""
    from training import build_corpus

    monkeypatch.setattr(train, "TRAIN_TOKENS", tmp_path / "corpus" / "train.npz")
    monkeypatch.setattr(train, "HELDOUT_TOKENS", tmp_path / "corpus" / "heldout.npz")
    monkeypatch.setattr(train, "ROOT", tmp_path)
    built = []

    def build(argv):
        built.append(argv)
        train.TRAIN_TOKENS.parent.mkdir()
        train.TRAIN_TOKENS.write_bytes(b"x")
        train.HELDOUT_TOKENS.write_bytes(b"x")

    monkeypatch.setattr(build_corpus, "main", build)
    train.ensure_corpus()
    train.ensure_corpus()                      # present now: not built again
    assert built == [[]] and "building it with training/build_corpus.py" in capsys.readouterr().out

    def offline(argv):
        raise OSError("no network")

    monkeypatch.setattr(train, "TRAIN_TOKENS", tmp_path / "other" / "train.npz")
    monkeypatch.setattr(build_corpus, "main", offline)
    with pytest.raises(SystemExit, match="python training/build_corpus.py"):
        train.ensure_corpus()
