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


def test_the_card_command_is_pasteable_and_trains_the_logged_recipe():
    log = json.loads((MODEL_DIR / "train_log.json").read_text())
    command = model_card.reproduce_command(log, json.loads(RESULTS.read_text()))
    words = shlex.split(command)
    assert words[:4] == ["python", "training/train.py", "--out", "runs/default"]
    args = train.parse_args(words[2:])
    assert (args.budget_s, args.tokens_per_step, args.lr, args.answer_weight) == \
        (log["budget_s"], log["tokens_per_step"], log["peak_lr"], log["answer_weight"])
    assert [list(phase) for phase in args.curriculum] == log["curriculum"]


def test_the_card_refuses_a_command_that_no_longer_trains_the_logged_recipe(monkeypatch):
    log = json.loads((MODEL_DIR / "train_log.json").read_text())
    monkeypatch.setattr(train, "MIXTURE", train.MIXTURE[1:])
    with pytest.raises(SystemExit, match="mixture"):
        model_card.reproduce_command(log, json.loads(RESULTS.read_text()))


def test_import_takes_a_training_run_without_an_evaluation(card, tmp_path, capsys):
    model_dir, results = card
    before = results.read_bytes()
    run = tmp_path / "run"
    (run / "default-model").mkdir(parents=True)
    for name in ("config.json", "generation_config.json"):
        shutil.copyfile(model_dir / name, run / "default-model" / name)
    (run / "default-model" / "model.safetensors").write_bytes(b"new weights")
    (run / "train_log.json").write_text((model_dir / "train_log.json").read_text())
    model_card.import_run(run)
    assert (model_dir / "model.safetensors").read_bytes() == b"new weights"
    assert results.read_bytes() == before  # the old evaluation is not replaced ...
    assert "evaluate this checkpoint" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="evaluated another checkpoint"):   # ... nor paired with the new weights
        model_card.render()
    with pytest.raises(SystemExit, match="neither"):
        model_card.import_run(tmp_path / "empty")
