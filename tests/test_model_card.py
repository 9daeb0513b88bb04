"""The model card ties its evaluation to the checkpoint it measured (training/model_card.py)."""
import json
import shlex
import shutil
from pathlib import Path

import pytest

from analysis.evaluation import checkpoint_digest
from training import model_card, train

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = ROOT / "data" / "default-model"
RESULTS = ROOT / "analysis" / "results" / "ruler.json"


@pytest.fixture
def card(tmp_path, monkeypatch):
    """A copy of the committed default model's card inputs, with the card's paths pointed at it."""
    model_dir = tmp_path / "default-model"
    shutil.copytree(MODEL_DIR, model_dir)
    results = tmp_path / "ruler.json"
    shutil.copyfile(RESULTS, results)
    monkeypatch.setattr(model_card, "MODEL_DIR", model_dir)
    monkeypatch.setattr(model_card, "RESULTS", results)
    return model_dir, results


def test_the_committed_evaluation_measured_the_committed_checkpoint():
    recorded = json.loads(RESULTS.read_text()).get("checkpoint_sha256")
    assert recorded == checkpoint_digest(MODEL_DIR / "model.safetensors"), \
        "analysis/results/ruler.json evaluated other weights than data/default-model/model.safetensors"


def test_the_committed_card_is_the_rendering_of_the_committed_files():
    assert model_card.render() == (MODEL_DIR / "README.md").read_text(), \
        "data/default-model/README.md is stale: run python training/model_card.py"


def test_card_names_the_evaluated_checkpoint_and_refuses_another(card):
    model_dir, _ = card
    digest = checkpoint_digest(model_dir / "model.safetensors")
    assert f"sha256 `{digest[:16]}` (this one)" in model_card.render()
    (model_dir / "model.safetensors").write_bytes(b"other weights")
    with pytest.raises(SystemExit, match="evaluated another checkpoint"):
        model_card.render()


def staged_log() -> dict:
    """A training log as today's train.py writes it: a two-job run of the tiny recipe."""
    args = train.parse_args(["--tiny", "--steps", "6"])
    core = train.core_name("fla", train.TORCH_CORE_CHUNK)
    check = {"niah_single": {"1024": 0.5, "4096": 0.25}, "niah_multikey": {"1024": 0.0, "4096": 0.0}}
    stages = [{"stage": 1, "command": "python training/train.py --tiny --steps 6 --out runs/stage1 --budget-s 500",
               "date": "2026-12-01 10:00 UTC", "device": "NVIDIA H200", "gdn_core": core, "first_step": 0,
               "last_step": 3, "seconds": 500.0, "train_seconds": 450.0, "tokens_per_second": 500000,
               "heldout_accuracy": check},
              {"stage": 2, "command": "python training/train.py --resume runs/stage1 --out runs/stage2 --budget-s 500",
               "date": "2026-12-01 10:12 UTC", "device": "NVIDIA H200", "gdn_core": core, "first_step": 3,
               "last_step": 6, "seconds": 480.0, "train_seconds": 430.0, "tokens_per_second": 510000,
               "heldout_accuracy": check}]
    log = [{"step": step, "seconds": step, "length": 256, "batch": 8, "lr": 1e-3, "lm_loss": 9.0 - step,
            "answer_loss": 9.0, "answer_token_accuracy": 0.1, "grad_norm": 1.0,
            "task_accuracy": {"repeat": 0.1 * step, "niah_single": 0.0}} for step in range(1, 7)]
    return {"recipe": json.loads(json.dumps(train.recipe(args))), "recipe_flags": train.recipe_flags(args),
            "parameters": 741000, "next_step": 6, "stages": stages, "log": log, "done": True}


def test_the_card_command_is_pasteable_and_trains_the_logged_recipe():
    log = staged_log()
    command = model_card.reproduce_command(log, {})
    words = shlex.split(command)
    assert words[:4] == ["python", "training/train.py", "--out", "runs/default"]
    assert json.loads(json.dumps(train.recipe(train.parse_args(words[2:])))) == log["recipe"]


def test_the_card_of_an_earlier_script_checks_out_the_commit_that_trained_it():
    # the shape of a log written by train.py before its jobs were staged (one command, the script's commit)
    log = {"script_commit": "e2b1c0ffee12", "command": "python training/train.py --out /root/out --budget-s 275",
           "gdn_core": "transformers.models.qwen3_5.modeling_qwen3_5.torch_chunk_gated_delta_rule (torch, fp32)"}
    command = model_card.reproduce_command(log, {})
    commit = log["script_commit"]
    assert command.endswith("--budget-s 275 --gdn-core torch")
    assert command.startswith(f"git worktree add /tmp/default-{commit} {commit} && cd /tmp/default-{commit} && ")
    assert "python training/train.py --out runs/default" in command
    with pytest.raises(SystemExit, match="script_commit"):
        model_card.reproduce_command({k: v for k, v in log.items() if k != "script_commit"}, {})


def test_the_card_refuses_a_command_that_no_longer_trains_the_logged_recipe(monkeypatch):
    log = staged_log()
    monkeypatch.setattr(train, "MIXTURE", train.MIXTURE[1:])
    with pytest.raises(SystemExit, match="mixture"):
        model_card.reproduce_command(log, {})


def test_the_card_renders_every_job_of_a_run(card):
    model_dir, _ = card
    (model_dir / "train_log.json").write_text(json.dumps(staged_log()))
    text = model_card.render()
    for stage in staged_log()["stages"]:
        assert f"`{stage['command']}`" in text and stage["date"] in text
    assert "| 2 | 6 | 0.50 | 0.25 | 0.00 | 0.00 |" in text          # the held-out check after job 2
    assert "repeat |" in text and "| 0.60 |" in text                   # per-task accuracy in the loss table


def test_import_takes_a_training_run_without_an_evaluation(card, tmp_path, capsys):
    model_dir, results = card
    before = results.read_bytes()
    run = tmp_path / "run"
    (run / "default-model").mkdir(parents=True)
    (run / "checkpoint").mkdir()
    for name in ("config.json", "generation_config.json"):
        shutil.copyfile(model_dir / name, run / "default-model" / name)
    (run / "default-model" / "model.safetensors").write_bytes(b"new weights")
    (run / "checkpoint" / "train_log.json").write_text(json.dumps({**staged_log(), "state_index": {"weights": {}}}))
    with pytest.raises(SystemExit, match="evaluated another checkpoint"):   # the old evaluation is not paired ...
        model_card.main(["--import-run", str(run)])
    assert (model_dir / "model.safetensors").read_bytes() == b"new weights"
    assert "state_index" not in json.loads((model_dir / "train_log.json").read_text())
    assert results.read_bytes() == before  # ... nor replaced
    assert "evaluate this checkpoint" in capsys.readouterr().out
    assert model_card.import_run(run) is False
    with pytest.raises(SystemExit, match="neither"):
        model_card.import_run(tmp_path / "empty")


def test_the_passkey_example_is_picked_by_the_rule_from_the_evaluation():
    """Samples that dense and score retrieve and uniform loses, in seed order, and every case counted."""
    from training import passkey_example

    names = {n: s.name for n, s in passkey_example.settings().items()}
    scores = {"dense": [1, 1, 1, 0, 1, 1], "score": [1, 0, 1, 0, 1, 1], "uniform": [0, 1, 1, 0, 0, 0.0]}
    records = [{"kind": "ruler", "task": "niah_single", "length": 4096, "config": names[n], "sample_scores": v}
               for n, v in scores.items()]
    records.append({"kind": "ruler", "task": "niah_single", "length": 8192, "config": names["dense"],
                    "sample_scores": [1]})
    seeds, counts = passkey_example.outcomes({"records": records, "seed": 0}, 4096)
    assert seeds == [0, 4, 5]
    assert counts == {"samples": 6, "dense retrieved": 5, "score and uniform kept": 1, "score kept, uniform lost": 3,
                      "uniform kept, score lost": 1, "both lost": 0}
    with pytest.raises(SystemExit, match="uniform"):
        passkey_example.outcomes({"records": records[:1]}, 4096)


def test_one_command_imports_a_training_run_and_its_evaluation(card, tmp_path, capsys):
    """--import-run takes the last job's folder and the evaluation's together, then renders the card."""
    model_dir, results = card
    run, evaluated = tmp_path / "stage2", tmp_path / "eval"
    (run / "checkpoint").mkdir(parents=True)
    shutil.copytree(model_dir, run / "default-model")
    (run / "checkpoint" / "train_log.json").write_text(json.dumps(staged_log()))
    evaluated.mkdir()
    shutil.copyfile(RESULTS, evaluated / "ruler.json")
    model_card.main(["--import-run", str(run), str(evaluated)])
    assert "evaluate this checkpoint" not in capsys.readouterr().out    # the second folder brought the evaluation
    card_text = (model_dir / "README.md").read_text()
    assert "| 2 | 2026-12-01 10:12 UTC |" in card_text and "(this one)" in card_text


def test_the_card_describes_the_layers_the_config_has():
    """A GDN-only config is said to have no attention layer (its attention fields unused); a hybrid one
    names its attention layers and their heads."""
    config = json.loads((MODEL_DIR / "config.json").read_text())
    gdn_only = {**config, "layer_types": ["linear_attention"] * 8}
    text = "\n".join(model_card.architecture(gdn_only))
    assert "every one Gated DeltaNet" in text and "no attention layer" in text and "which no layer uses" in text
    hybrid = {**config, "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 2}
    text = "\n".join(model_card.architecture(hybrid))
    assert "`GDN GDN GDN ATT GDN GDN GDN ATT` (6 Gated DeltaNet, 2 gated attention)" in text
    assert "- attention: 4 query heads, 2 KV heads, head dim 64" in text


def test_the_committed_card_says_what_it_misses_and_names_every_run_it_shows():
    """The evaluation is several runs merged: the card names every run's command, and since the last of them every
    setting at every length is measured and every target row says whether it is met; it names both fine-tune jobs,
    chained by digest."""
    card = (MODEL_DIR / "README.md").read_text()
    evaluation = json.loads(RESULTS.read_text())
    for run in evaluation["merged"]:
        assert f"`{run['command']}`" in card
    assert "Not measured" not in card and "Every target is met." in card
    targets = card.split("| target | measured | met |")[1].split("\n\n")[0].strip().splitlines()[1:]
    assert len(targets) == 11 and all(row.endswith("| yes |") for row in targets)
    assert "It does not extrapolate to 32K" in card
    jobs = json.loads((MODEL_DIR / model_card.FINETUNE_LOG).read_text())["jobs"]
    assert jobs[-1]["result_sha256"] == checkpoint_digest(MODEL_DIR / "model.safetensors")
    for earlier, later in zip(jobs, jobs[1:]):
        assert earlier["result_sha256"].startswith(later["recipe"]["start_model_sha256"])
    # the first job started from the pretrained weights, whose own evaluation is kept for the CPU cross-check
    pretrained = json.loads((RESULTS.parent / "ruler_gdn_only.json").read_text())["checkpoint_sha256"]
    assert pretrained.startswith(jobs[0]["recipe"]["start_model_sha256"])
    for job in jobs:
        assert f"`{job['stages'][-1]['command']}`" in card and f"`{job['result_sha256'][:12]}`" in card
    assert "gated attention)" not in card and "attention layers" not in card.split("## Architecture")[1].split("##")[0]


def test_a_fine_tune_is_imported_after_the_pretraining_only_from_the_committed_weights(card, tmp_path):
    """A sparse fine-tune's log (its recipe names a start_model) is appended to finetune_log.json, the pretraining's
    train_log.json kept; one that started from other weights than the committed ones is refused, nothing copied."""
    model_dir, _ = card
    pretraining = (model_dir / "train_log.json").read_text()
    jobs = json.loads((model_dir / model_card.FINETUNE_LOG).read_text())["jobs"]
    run = tmp_path / "finetune"
    (run / "default-model").mkdir(parents=True)
    (run / "checkpoint").mkdir()
    (run / "default-model" / "model.safetensors").write_bytes(b"fine-tuned weights")
    log = {key: value for key, value in jobs[-1].items() if key != "result_sha256"}
    log = {**log, "recipe": {**log["recipe"], "start_model_sha256": "0123456789ab"}, "state_index": {"weights": {}}}
    (run / "checkpoint" / "train_log.json").write_text(json.dumps(log))
    committed = (model_dir / "model.safetensors").read_bytes()
    with pytest.raises(SystemExit, match="import its jobs in order, each once"):
        model_card.import_run(run)
    assert (model_dir / "model.safetensors").read_bytes() == committed
    log["recipe"]["start_model_sha256"] = checkpoint_digest(model_dir / "model.safetensors")[:12]
    (run / "checkpoint" / "train_log.json").write_text(json.dumps(log))
    assert model_card.import_run(run) is False
    after = json.loads((model_dir / model_card.FINETUNE_LOG).read_text())["jobs"]
    assert len(after) == len(jobs) + 1 and "state_index" not in after[-1]
    assert after[-1]["result_sha256"] == checkpoint_digest(run / "default-model" / "model.safetensors")
    assert (model_dir / "model.safetensors").read_bytes() == b"fine-tuned weights"
    assert (model_dir / "train_log.json").read_text() == pretraining
    with pytest.raises(SystemExit, match="each once"):                  # the same job again: refused
        model_card.import_run(run)
    section = "\n".join(model_card.finetune_section(after))
    assert section.count(f"`{after[-1]['stages'][-1]['command']}`") == 2       # the last two jobs share a command
    assert f"`{after[-1]['result_sha256'][:12]}`" in section


@pytest.mark.parametrize("entries", [1, 5, 9, 41])
def test_the_fine_tune_loss_table_shows_each_logged_step_once(entries):
    """Every 4th-ish entry and the last, never the last twice; a step without answer tokens shows no accuracy."""
    log = [{"step": 10 * (i + 1), "sparse": {"lm_loss": 3.0, "answer_loss": 0.0, "answer_token_accuracy": 0.0,
                                            "task_accuracy": {} if i % 2 else {"repeat": 1.0}}} for i in range(entries)]
    job = {"recipe": {"start_model_sha256": "a" * 12, "lr": 3e-5, "sparse_weight": 1.0, "text_share": 0.7,
                      "sparse": {"budget": 0.29, "selector": "score", "band": 1}, "tokens_per_step": 32768,
                      "length": 4096, "optimizer": "AdamW"},
           "stages": [{"first_step": 0, "last_step": 10 * entries, "date": "d", "device": "cpu", "seconds": 1.0,
                       "train_seconds": 1.0, "command": "c"}], "log": log, "result_sha256": "b" * 64}
    rows = [line for line in model_card.finetune_section([job]) if line.startswith("| 1 | ")]
    steps = [row.split(" | ")[1] for row in rows]
    assert len(steps) == len(set(steps)) and steps[-1] == str(10 * entries)
    assert all(("- (no answer tokens)" in row) == (int(step) // 10 % 2 == 0) for row, step in zip(rows[1:], steps[1:]))
