"""Training pieces: the architecture and its limits, the data mixture and schedule, the compact optimizer,
the torch training core, state files, and a run that resumes exactly where it stopped."""

import argparse
import json
import math
import subprocess
from pathlib import Path

import corpus_stand_in
import pytest
import torch

from analysis.patching import swap_gdn_core, torch_reference_core
from training import train
from training.compact_adamw import CompactAdamW

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(train.TOKENIZER))


@pytest.fixture(scope="module")
def source(tokenizer):
    return train.SequenceSource(tokenizer, corpus_stand_in.haystack(), seed=0)


def test_config_is_the_issue_architecture():
    """qwen3_5_text, 3 GDN : 1 attention, GDN heads of Qwen3.5's real size (K = V = 128, HV = 2H); the bf16
    checkpoint fits one 16 MiB file and the run's state (8 bytes a parameter) the 40 MiB that travels
    into a GPU job beside the repository, the corpus and the FLA wheels."""
    from transformers import Qwen3_5ForCausalLM

    config = train.model_config(8192, 0)
    assert config.model_type == "qwen3_5_text"
    assert config.layer_types == (["linear_attention"] * 3 + ["full_attention"]) * 2
    assert (config.linear_key_head_dim, config.linear_value_head_dim) == (128, 128)
    assert config.linear_num_value_heads == 2 * config.linear_num_key_heads
    with torch.device("meta"):
        parameters = sum(p.numel() for p in Qwen3_5ForCausalLM(config).parameters())
    assert 2 * parameters <= 16 * 2**20 - 2**16, f"bf16 checkpoint of {2 * parameters / 2**20:.1f} MiB"
    assert 8 * parameters <= 40 * 2**20, f"run state of {8 * parameters / 2**20:.1f} MiB"


def test_gdn_only_config_is_a_stock_checkpoint_within_the_limits(tmp_path):
    """--gdn-only: every layer linear_attention, the same GDN heads, the same limits; a qwen3_5_text checkpoint
    that transformers loads back as it was saved."""
    from transformers import AutoModelForCausalLM, Qwen3_5ForCausalLM

    config = train.model_config(8192, 0, gdn_only=True)
    assert config.model_type == "qwen3_5_text" and config.layer_types == ["linear_attention"] * 8
    assert (config.linear_key_head_dim, config.linear_num_key_heads, config.linear_num_value_heads) == (128, 2, 4)
    with torch.device("meta"):
        parameters = sum(p.numel() for p in Qwen3_5ForCausalLM(config).parameters())
    assert 2 * parameters <= 16 * 2**20 - 2**16 and 8 * parameters <= 40 * 2**20, parameters
    Qwen3_5ForCausalLM(train.model_config(64, 0, tiny=True, gdn_only=True)).save_pretrained(str(tmp_path))
    assert AutoModelForCausalLM.from_pretrained(str(tmp_path)).config.layer_types == ["linear_attention"] * 4


def test_default_checkpoint_fits_the_limits():
    """bf16 checkpoint <= 16 MiB (one file back from the GPU) and the folder <= 20 MB."""
    model_file = ROOT / "data" / "default-model" / "model.safetensors"
    if not model_file.exists():
        pytest.fail("data/default-model/model.safetensors is missing")
    assert model_file.stat().st_size <= 16 * 2**20
    total = sum(p.stat().st_size for p in model_file.parent.iterdir() if p.is_file())
    assert total <= 20e6, f"data/default-model holds {total / 1e6:.1f} MB"


def test_batches_mark_the_answer_tokens(source, tokenizer):
    ids, mask, _ = source.batch(0, 1024, 16)
    assert ids.shape == mask.shape == (16, 1024)
    assert ids.max() < len(tokenizer) and mask.any()
    for row in range(16):
        if mask[row].any():  # answers are digits, upper-case variable names or a repeated span
            assert mask[row].sum() < 1024 // 4


def test_the_committed_log_says_how_it_was_trained():
    """data/default-model/train_log.json is a run of today's recipe, or names the commit whose train.py trained it."""
    log = json.loads((ROOT / "data" / "default-model" / "train_log.json").read_text())
    if "stages" in log:
        args = train.parse_args(["--out", "runs/x"] + log["recipe_flags"])
        assert json.loads(json.dumps(train.recipe(args))) == log["recipe"]
        return
    commit = log["script_commit"]
    try:
        shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout.strip() == "true"
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    if shallow:
        pytest.skip("a shallow clone may not hold the commit")
    found = subprocess.run(["git", "cat-file", "-e", f"{commit}:training/train.py"], cwd=ROOT, capture_output=True)
    assert found.returncode == 0, f"commit {commit} (script_commit of the committed log) has no training/train.py"


def test_schedule_holds_the_learning_rate_through_the_plateau():
    """Warm-up, then the peak until 90% of the steps, then linear to a tenth; lengths follow the step."""
    schedule = train.Schedule(1000, train.CURRICULUM, 1e-3, warmup=10)
    assert [schedule.length(s) for s in (0, 299, 300, 450, 600, 720, 840, 999)] == \
        [256, 256, 512, 1024, 2048, 4096, 8192, 8192]
    assert schedule.lr(0) == pytest.approx(1e-4)
    assert schedule.lr(9) == pytest.approx(1e-3)
    assert schedule.lr(500) == schedule.lr(899) == pytest.approx(1e-3)
    assert schedule.lr(950) == pytest.approx(0.55e-3)
    assert schedule.lr(1000) == pytest.approx(1e-4)


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
    """A few CompactAdamW steps of the tiny model on one batch lower its loss (the loop can learn)."""
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(train.model_config(8192, 0, tiny=True))
    ids, mask, _ = source.batch(0, 256, 4)
    optimizer = CompactAdamW(model)
    losses = []
    with train.training_core(model, "torch", 64):
        for _ in range(6):
            lm, answer, _ = train.loss_terms(model, ids, mask)
            loss = lm + answer
            optimizer.zero_grad()
            loss.backward()
            optimizer.clip_grad_norm(1.0)
            optimizer.step(3e-3)
            losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] - 0.5, f"loss did not fall: {losses}"


def test_the_mixture_draws_its_tasks(tokenizer):
    """The mixture yields plain text, both drills and every retrieval task, with answers marked; a drill's
    answers repeat a span that stands earlier in the row."""
    assert sum(share for share, *_ in train.MIXTURE) == pytest.approx(1.0)
    assert {task for _, task, *_ in train.MIXTURE} >= {None, "repeat", "copy", "niah_single", "niah_multikey",
                                                        "niah_multiquery", "niah_multivalue", "variable_tracking"}
    src = train.SequenceSource(tokenizer, corpus_stand_in.haystack(), seed=1)
    names = src.task_names()
    ids, mask, entries = src.batch(0, 512, 96)
    answered = mask.any(dim=1)
    drawn = {names[int(e)] for e in entries}
    assert drawn >= {"text", "repeat", "copy", "niah_single"}, drawn
    for row in range(96):   # a row answers exactly when it was drawn from a task (short rows may fall back to text)
        name = names[int(entries[row])]
        if name == "text":
            assert not answered[row]
        if name in ("repeat", "copy"):
            span = int(mask[row].sum()) + 1
            tail = ids[row, -span:]
            assert mask[row, -span + 1:].all() and 17 <= span <= 64
            assert any(torch.equal(ids[row, s:s + span], tail) for s in range(512 - 2 * span + 1)), \
                f"row {row}: the {name} span does not stand earlier in the row"
    assert answered.float().mean() > 0.5


def test_batches_depend_on_the_step_alone(tokenizer):
    """Batch k is the same whichever process builds it and wherever the stream starts (what resuming needs)."""
    src = train.SequenceSource(tokenizer, corpus_stand_in.haystack(), seed=4)
    schedule = train.Schedule(12, ((0.0, 256), (0.5, 512)), 1e-3)
    in_process = list(train.batch_stream(src, schedule, 1024, 0, workers=0))
    in_workers = list(train.batch_stream(src, schedule, 1024, 0, workers=2))
    resumed = list(train.batch_stream(src, schedule, 1024, 5, workers=2))
    assert [b[0] for b in in_process] == [b[0] for b in in_workers] == list(range(12))
    assert [b[1].shape for b in in_process[5:7]] == [(4, 256), (2, 512)]
    for a, b in zip(in_process, in_workers):
        assert all(torch.equal(x, y) for x, y in zip(a[1:], b[1:]))
    for a, b in zip(in_process[5:], resumed):
        assert all(torch.equal(x, y) for x, y in zip(a[1:], b[1:]))


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
        lr=1e-3, seed=0, log_every=2, stop_at=0.0, lm_answer_weight=2.0, optimizer="compact")
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


def test_compact_adamw_parameters_are_views_of_its_flat_buffers():
    """Backward accumulates into the flat gradient buffer and a step moves the parameters in place."""
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(2)
    model = Qwen3_5ForCausalLM(train.model_config(64, 0, tiny=True))
    optimizer = CompactAdamW(model)
    assert optimizer.weights.numel() == sum(p.numel() for p in model.parameters())
    inside = lambda tensor, buffer: buffer.data_ptr() <= tensor.data_ptr() < buffer.data_ptr() + 4 * buffer.numel()
    ids = torch.randint(0, 64, (2, 40))
    with train.training_core(model, "torch", 64):
        optimizer.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
    assert optimizer.grads.abs().sum() > 0
    before = optimizer.weights.clone()
    optimizer.step(1e-3)
    for name, p in model.named_parameters():
        assert inside(p, optimizer.weights) and inside(p.grad, optimizer.grads), name
    assert not torch.equal(before, optimizer.weights)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_compact_adamw_steps_are_adamw_up_to_its_bf16_moments():
    """Three steps on fresh random gradients move the weights as torch's AdamW does (weight decay on the
    matrix, none on the embedding and the vector), to within the rounding of the moments to bf16."""
    torch.manual_seed(3)
    module = torch.nn.Module()
    module.matrix = torch.nn.Parameter(torch.randn(6, 5))
    module.embed_tokens = torch.nn.Parameter(torch.randn(9, 5))
    module.vector = torch.nn.Parameter(torch.randn(7))
    reference = {name: p.detach().clone().requires_grad_() for name, p in module.named_parameters()}
    optimizer = CompactAdamW(module, betas=(0.9, 0.95), weight_decay=0.1)
    torch_adamw = torch.optim.AdamW([{"params": [reference["matrix"]], "weight_decay": 0.1},
                                     {"params": [reference["embed_tokens"], reference["vector"]], "weight_decay": 0.0}],
                                    lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    for _ in range(3):
        optimizer.zero_grad()
        for name, p in module.named_parameters():
            grad = torch.randn(p.shape)
            p.grad.copy_(grad)
            reference[name].grad = grad.clone()
        optimizer.step(1e-2)
        torch_adamw.step()
    for name, p in module.named_parameters():
        moved = (reference[name].detach() - p.detach()).abs().max().item()
        assert moved < 0.05 * 1e-2, f"{name}: {moved:.2e} from torch's AdamW after three steps of 1e-2"
    assert optimizer.exp_avg.dtype == optimizer.exp_avg_sq.dtype == torch.bfloat16


def test_state_files_split_large_tensors_and_restore_them_exactly(tmp_path):
    tensors = {"weights": torch.randn(1000), "moment": torch.randn(10, 30).to(torch.bfloat16),
               "steps": torch.tensor([7]), "empty": torch.zeros(0), "rng": torch.get_rng_state()}
    index = train.save_tensors(tmp_path, tensors, max_bytes=1024)
    files = sorted(tmp_path.glob("state-*.safetensors"))
    assert len(files) > 4 and all(f.stat().st_size <= 1024 + 2048 for f in files)   # data + safetensors header
    back = train.load_tensors(tmp_path, index)
    for name, tensor in tensors.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor), name


@pytest.fixture
def stand_in_corpus(tmp_path, monkeypatch):
    """data/corpus/ replaced by the bundled sample texts (the real corpus is generated, not tracked)."""
    corpus_stand_in.install(tmp_path, monkeypatch, train)
    return tmp_path


def test_a_resumed_run_continues_exactly_where_it_stopped(stand_in_corpus):
    """Six steps in one job and three + three in two jobs (the second resumed from the first's checkpoint
    folder) end with the same weights, optimizer state and loss log, and the log records both jobs."""
    from training.train import LOG, load_tensors

    runs = stand_in_corpus
    common = ["--tiny", "--steps", "6", "--log-every", "1", "--check-samples", "0"]
    train.main(["--out", str(runs / "whole")] + common)
    train.main(["--out", str(runs / "first")] + common + ["--job-steps", "3"])
    train.main(["--resume", str(runs / "first"), "--out", str(runs / "second"), "--log-every", "1",
                "--check-samples", "1"])

    def finished(name):
        folder = runs / name / "checkpoint"
        run = json.loads((folder / LOG).read_text())
        return run, load_tensors(folder, run["state_index"])

    whole, whole_state = finished("whole")
    split, split_state = finished("second")
    assert whole["done"] and split["done"] and split["next_step"] == 6
    for name, tensor in whole_state.items():
        if not name.startswith("rng"):
            assert torch.equal(tensor, split_state[name]), f"{name} differs after resuming"
    strip = lambda log: [{k: v for k, v in e.items() if k != "seconds"} for e in log]
    assert strip(whole["log"]) == strip(split["log"])
    assert [(s["first_step"], s["last_step"]) for s in split["stages"]] == [(0, 3), (3, 6)]
    assert "--resume" in split["stages"][1]["command"] and split["stages"][1]["date"]
    assert set(split["stages"][1]["heldout_accuracy"]) == {"niah_single", "niah_multikey"}
    assert (runs / "second" / "default-model" / "model.safetensors").is_file()
    with pytest.raises(SystemExit):   # a resumed run keeps its recipe
        train.parse_args(["--resume", str(runs / "first"), "--steps", "8"])


def test_the_first_job_sets_the_step_count_from_measured_step_times(stand_in_corpus):
    """Without --steps, steps at every curriculum length are timed on a copy of the model (left untouched)."""
    from transformers import Qwen3_5ForCausalLM, PreTrainedTokenizerFast

    args = train.parse_args(["--tiny", "--tokens-per-step", "512", "--plan-s", "30", "--min-steps", "10"])
    args.core = "torch"
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(train.TOKENIZER))
    src = train.SequenceSource(tokenizer, corpus_stand_in.haystack(), seed=0)
    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(train.model_config(len(tokenizer), 0, tiny=True))
    before = [p.detach().clone() for p in model.parameters()]
    steps, seconds = train.calibrate(model, src, args, torch.device("cpu"), workers=0)
    assert set(seconds) == {256, 512} and all(s > 0 for s in seconds.values())
    assert steps >= 10 and steps % 10 == 0
    per_step = 0.5 * seconds[256] + 0.5 * seconds[512]
    assert steps == max(10, int(30 / per_step) // 10 * 10)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    args.min_steps = 10 ** 9                     # a plan too short for the floor is raised to it
    assert train.calibrate(model, src, args, torch.device("cpu"), workers=0)[0] == 10 ** 9


def test_a_gdn_only_run_keeps_its_layers_when_resumed(stand_in_corpus):
    """--gdn-only is part of the recipe: logged with its flag, rebuilt by --resume (which refuses it again),
    written to runs/gdn-only unless --out says otherwise."""
    runs = stand_in_corpus
    train.main(["--gdn-only", "--tiny", "--steps", "2", "--job-steps", "1", "--check-samples", "0",
                "--out", str(runs / "first")])
    train.main(["--resume", str(runs / "first"), "--out", str(runs / "second"), "--check-samples", "0"])
    run = json.loads((runs / "second" / "checkpoint" / train.LOG).read_text())
    assert run["done"] and run["recipe"]["gdn_only"] and run["recipe_flags"][0] == "--gdn-only"
    config = json.loads((runs / "second" / "default-model" / "config.json").read_text())
    assert config["layer_types"] == ["linear_attention"] * 4
    with pytest.raises(SystemExit):
        train.parse_args(["--resume", str(runs / "first"), "--gdn-only"])
    assert train.parse_args(["--gdn-only"]).out == ROOT / "runs" / "gdn-only"
    assert train.parse_args([]).out == ROOT / "runs" / "default"
