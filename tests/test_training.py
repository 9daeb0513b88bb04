"""Training pieces: the data mixture, the torch training core, and a tiny CPU run that learns."""

import argparse
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from training import train

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(train.TOKENIZER))


@pytest.fixture(scope="module")
def source(tokenizer):
    tokens = np.load(train.TRAIN_TOKENS)["tokens"][:300_000]
    return train.SequenceSource(tokenizer, tokens, seed=0, mixture=train.MIXTURE_RETRIEVAL)


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
    ids, mask = source.batch(1024, 16)
    assert ids.shape == mask.shape == (16, 1024)
    assert ids.max() < len(tokenizer) and mask.any()
    for row in range(16):
        if mask[row].any():  # answers are digits or upper-case variable names
            text = tokenizer.decode(ids[row][mask[row]].tolist())
            assert text.replace(" ", "").isalnum(), text


def test_curriculum_and_learning_rate_schedule():
    assert [train.phase_length(p, train.CURRICULUM) for p in (0.0, 0.3, 0.5, 0.6, 0.8, 0.99)] == \
        [256, 512, 1024, 2048, 4096, 8192]
    assert train.learning_rate(0, 0.0, 1e-3, 10) == pytest.approx(1e-4)
    assert train.learning_rate(100, 0.0, 1e-3, 10) == pytest.approx(1e-3)
    assert train.learning_rate(100, 1.0, 1e-3, 10) == pytest.approx(1e-4)


def test_training_core_with_long_chunks_matches_transformers_core():
    """The 128-token chunk core used in training gives transformers' outputs and gradients."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m

    torch.manual_seed(0)
    B, T, H, K = 1, 200, 2, 32
    inputs = [torch.randn(B, T, H, K) for _ in range(3)] + [-torch.rand(B, T, H), torch.rand(B, T, H)]

    def run():
        leaves = [x.clone().requires_grad_() for x in inputs]
        o, _ = m.torch_chunk_gated_delta_rule(*leaves[:3], g=leaves[3], beta=leaves[4], use_qk_l2norm_in_kernel=True)
        return o, torch.autograd.grad(o.square().sum(), leaves)

    o64, g64 = run()
    with train.training_core(128):
        o128, g128 = run()
    assert (o64 - o128).abs().max() < 1e-4
    for a, b in zip(g64, g128):
        assert (a - b).norm() / a.norm() < 1e-4


def test_tiny_training_steps_decrease_the_loss(source):
    """A few AdamW steps of the tiny model on one batch lower its loss (the loop can learn)."""
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(train.model_config(8192, 0, tiny=True))
    ids, mask = source.batch(256, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    with train.training_core(64):
        for _ in range(6):
            lm, answer, _ = train.loss_terms(model, ids, mask)
            loss = lm + answer
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] - 0.5, f"loss did not fall: {losses}"


def test_curriculum_flag_parses_and_rejects_unsorted_phases():
    assert train.parse_curriculum("0:256,0.5:512") == ((0.0, 256), (0.5, 512))
    with pytest.raises(argparse.ArgumentTypeError):
        train.parse_curriculum("0.2:256,0.5:512")  # must start at 0
    with pytest.raises(argparse.ArgumentTypeError):
        train.parse_curriculum("0:512,0.5:256,0.3:1024")


def test_every_mixture_draws_its_tasks(tokenizer):
    """Each named mixture yields plain text and every retrieval task it lists, with answers marked."""
    tokens = np.load(train.TRAIN_TOKENS)["tokens"][:300_000]
    for name, mixture in train.MIXTURES.items():
        assert sum(share for share, *_ in mixture) == pytest.approx(1.0), name
        src = train.SequenceSource(tokenizer, tokens, seed=1, mixture=mixture)
        ids, mask = src.batch(512, 48)
        answered = mask.any(dim=1).float().mean().item()
        text_share = sum(share for share, task, *_ in mixture if task is None)
        # rows without answers are the plain-text share (binomial noise allowed)
        assert abs((1 - answered) - text_share) < 0.2, (name, answered)


def test_copy_sequences_repeat_an_earlier_span(tokenizer):
    """The copy drill's answer tokens are the tail of a span that occurs earlier in the same row."""
    tokens = np.load(train.TRAIN_TOKENS)["tokens"][:300_000]
    src = train.SequenceSource(tokenizer, tokens, seed=2)
    for _ in range(20):
        ids, mask = src.copy_sequence(256, 40)
        assert mask.sum() == 39 and mask[-39:].all()
        tail = ids[-40:]
        earlier = [i for i in range(256 - 80 + 1) if np.array_equal(ids[i:i + 40], tail)]
        assert earlier, "the repeated span is not found earlier in the sequence"


def test_repeat_sequences_write_a_random_span_twice(tokenizer):
    """The induction drill: the answer tail is a span of word tokens that also occurs earlier."""
    tokens = np.load(train.TRAIN_TOKENS)["tokens"][:300_000]
    src = train.SequenceSource(tokenizer, tokens, seed=3)
    for span in (8, 33, 64):
        ids, mask = src.repeat_sequence(256, span)
        assert mask.sum() == span - 1 and mask[-(span - 1):].all()
        tail = ids[-span:]
        assert tail.min() >= src.lowest_word and tail.max() < len(tokenizer)
        assert any(np.array_equal(ids[i:i + span], tail) for i in range(256 - 2 * span + 1))


def test_batch_stream_follows_the_requested_length(tokenizer):
    """Batches come at the length the training loop sets, in worker processes too."""
    tokens = np.load(train.TRAIN_TOKENS)["tokens"][:300_000]
    src = train.SequenceSource(tokenizer, tokens, seed=4)
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
    got = train.task_accuracy(hits, mask, torch.tensor([1, 0, 2]), ["text", "repeat", "niah_single"])
    assert got == {"repeat": pytest.approx(2 / 3, abs=1e-4), "niah_single": 1.0}


def test_loss_terms_per_row_hits_count_correct_answer_tokens():
    """per_row hits equal a direct count of argmax == target on the masked answer tokens."""
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(1)
    model = Qwen3_5ForCausalLM(train.model_config(64, 0, tiny=True)).eval()
    ids = torch.randint(0, 64, (2, 40))
    mask = torch.rand(2, 40) < 0.5
    with train.training_core(64), torch.no_grad():
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
