"""The model card ties its evaluation to the checkpoint it measured (training/model_card.py)."""
import json
import shutil
from pathlib import Path

import pytest

from analysis import ruler_eval
from training import model_card

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def card(tmp_path, monkeypatch):
    """A copy of the committed default model's card inputs, with the card's paths pointed at it."""
    model_dir = tmp_path / "default-model"
    shutil.copytree(ROOT / "data" / "default-model", model_dir)
    results = tmp_path / "ruler.json"
    shutil.copyfile(ROOT / "analysis" / "results" / "ruler.json", results)
    monkeypatch.setattr(model_card, "MODEL_DIR", model_dir)
    monkeypatch.setattr(model_card, "RESULTS", results)
    return model_dir, results


def test_card_names_the_evaluated_checkpoint_and_refuses_another(card):
    model_dir, results = card
    data = json.loads(results.read_text())
    data["checkpoint_sha256"] = ruler_eval.checkpoint_digest(model_dir / "model.safetensors")
    results.write_text(json.dumps(data))
    text = model_card.render()
    assert f"sha256 `{data['checkpoint_sha256'][:16]}` (this one)" in text
    assert "same recipe is `python training/train.py --mixture first-run" in text
    (model_dir / "model.safetensors").write_bytes(b"other weights")
    with pytest.raises(SystemExit, match="evaluated another checkpoint"):
        model_card.render()


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
    with pytest.raises(SystemExit):      # ... and cannot be paired with the new weights if it has a digest
        data = json.loads(before)
        data["checkpoint_sha256"] = "0" * 64
        results.write_text(json.dumps(data))
        model_card.render()
    with pytest.raises(SystemExit, match="neither"):
        model_card.import_run(tmp_path / "empty")
