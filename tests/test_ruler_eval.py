"""The RULER evaluation: work order, scoring, and that SparseGDN with every event kept equals dense."""

import json
from pathlib import Path

import corpus_stand_in
import numpy as np
import pytest
import torch

from analysis import evaluation, ruler_report
from analysis.evaluation import Plan, Setting
from analysis.ruler import RulerGenerator
from sparsegdn import SparseConfig

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def setup():
    from transformers import Qwen3_5ForCausalLM

    from training.train import model_config

    torch.manual_seed(0)
    tokenizer = corpus_stand_in.tokenizer()
    model = Qwen3_5ForCausalLM(model_config(tokenizer.get_vocab_size(), 0, tiny=True)).eval()
    heldout = corpus_stand_in.heldout()
    return model, RulerGenerator(tokenizer, heldout["sonnets"]), heldout


def test_grid_has_every_budget_selector_band_and_headline_comes_first():
    grid = evaluation.setting_grid()
    assert len(grid) == 2 * (1 + 3 * 4)  # bands x (budget 1 + three budgets x four selectors)
    order = evaluation.work_order(grid, (4096, 8192, 16384))
    assert [s for s, _ in order[:3]] == [evaluation.DENSE] * 3
    assert {s.sparse.selector for s, _ in order[3:9]} == {"score", "uniform", "random"}
    assert all(s.sparse.budget == 0.29 and s.sparse.band == 1 for s, _ in order[3:9])
    assert len(order) == 3 + 3 * len(grid)


def test_all_events_kept_scores_like_dense(setup):
    """budget 1, band 3 is dense semantics: the same accuracy and (to float error) the same perplexity."""
    model, generator, heldout = setup
    configs = [Setting(SparseConfig(budget=1.0, band=3, backend="torch")),
               Setting(SparseConfig(budget=0.15, selector="uniform", band=1, backend="torch"))]
    plan = Plan(settings=configs, tasks=("niah_single", "niah_multivalue"), lengths=(512,), samples=2,
                ppl_length=256, ppl_windows=2, time_budget_s=600)
    records = evaluation.evaluate(model, generator, heldout, plan, device="cpu")
    ppl = {(r["config"], r["source"]): r["perplexity"] for r in records if r["kind"] == "perplexity"}
    for source in heldout:
        dense, full = ppl[("dense", source)], ppl[(configs[0].name, source)]
        assert abs(full / dense - 1) < 1e-4, f"{source}: all events {full} vs dense {dense}"
    acc = {(r["config"], r["task"]): r["sample_scores"] for r in records if r["kind"] == "ruler"}
    assert acc[("dense", "niah_single")] == acc[(configs[0].name, "niah_single")]
    assert {r["config"] for r in records} == {"dense", configs[0].name, configs[1].name}


def test_time_budget_stops_new_work(setup):
    model, generator, heldout = setup
    logged = []
    plan = Plan(tasks=("niah_single",), lengths=(512,), samples=1, ppl_length=256, ppl_windows=1, time_budget_s=0.0)
    records = evaluation.evaluate(model, generator, heldout, plan, device="cpu", log=logged.append)
    assert records == []
    assert "time budget reached" in logged[-1]


def test_score_batch_counts_a_perfect_model_as_right(setup):
    """A model that returns the true next token everywhere gets accuracy 1 on every task."""
    _, generator, _ = setup
    samples = [generator.sample(t, 512, seed=0) for t in ("niah_multiquery", "variable_tracking")]

    following = {tuple(s.input_ids[:8]): np.roll(s.input_ids, -1) for s in samples}

    class Oracle:
        """model.model(...).last_hidden_state holds the true next ids; lm_head one-hots them."""

        def __init__(self):
            self.model = self

        def __call__(self, input_ids, use_cache=False):
            rows = [torch.as_tensor(following[tuple(r[:8].tolist())]) for r in input_ids]
            return type("Output", (), {"last_hidden_state": torch.stack(rows)})()

        @staticmethod
        def lm_head(hidden):
            return torch.nn.functional.one_hot(hidden, 8192).float()

    oracle = Oracle()
    assert evaluation.score_batch(oracle, samples, "cpu") == [1.0, 1.0]


def test_committed_results_render(tmp_path):
    results = ROOT / "analysis" / "results" / "ruler.json"
    copy = tmp_path / "ruler.json"
    copy.write_text(results.read_text())
    ruler_report.write_report(copy)
    table = copy.with_suffix(".md").read_text()
    assert "| dense | 4096 |" in table
    assert "<html>" in copy.with_suffix(".html").read_text()
    frame = ruler_report.records_frame(copy)
    assert set(frame["kind"].unique()) == {"ruler", "perplexity"}
    assert frame.height == len(json.loads(results.read_text())["records"])


def test_the_command_line_renders_a_report(tmp_path):
    from analysis import ruler_eval

    copy = tmp_path / "ruler.json"
    copy.write_text((ROOT / "analysis" / "results" / "ruler.json").read_text())
    ruler_eval.main(["--report", str(copy)])
    assert copy.with_suffix(".md").read_text() == ruler_report.markdown(json.loads(copy.read_text()))


def test_every_accuracy_comes_with_its_sample_count_and_a_wilson_interval(setup, tmp_path):
    """Records carry a 95% Wilson interval that contains the accuracy and narrows with more samples; the
    report lists the counts and intervals of dense and the headline selectors, also for older records."""
    assert evaluation.wilson_interval(0.0, 16) == (0.0, pytest.approx(0.194, abs=1e-3))
    low, high = evaluation.wilson_interval(0.9, 16)
    assert low < 0.9 < high and high - low > evaluation.wilson_interval(0.9, 64)[1] - evaluation.wilson_interval(0.9, 64)[0]
    model, generator, heldout = setup
    plan = Plan(settings=[], tasks=("niah_single",), lengths=(512,), samples=3, ppl_length=256, ppl_windows=1,
                time_budget_s=600)
    record = next(r for r in evaluation.evaluate(model, generator, heldout, plan, device="cpu") if r["kind"] == "ruler")
    assert record["samples"] == 3 and record["ci_low"] <= record["accuracy"] <= record["ci_high"]
    committed = json.loads((ROOT / "analysis" / "results" / "ruler.json").read_text())
    table = ruler_report.markdown(committed)
    assert "| dense | 4096 | niah_single | 1.000 | 32 | 0.89-1.00 |" in table         # 32 of 32
    assert "| dense | 8192 | niah_single | 0.938 | 32 | 0.80-0.98 |" in table         # 30 of 32


def test_the_command_line_restricts_the_grid_and_sets_samples_per_length(tmp_path, monkeypatch):
    """--budgets, --selectors and --bands pick part of the grid; --samples takes one count per length."""
    from analysis import ruler_eval

    planned = []
    monkeypatch.setattr(ruler_eval, "load_checkpoint", lambda model_dir, device: (None, None))
    monkeypatch.setattr(ruler_eval, "evaluate_to_file", lambda model, tokenizer, plan, **kw: planned.append(plan))
    monkeypatch.setattr(ruler_eval, "write_report", lambda path: None)
    heldout = tmp_path / "heldout.npz"
    heldout.write_bytes(b"")
    common = ["--heldout", str(heldout), "--device", "cpu", "--out", str(tmp_path / "r.json"), "--lengths", "4096", "8192"]
    ruler_eval.main(common + ["--budgets", "0.29", "0.15", "--selectors", "score", "uniform", "--bands", "1",
                              "--samples", "16", "8"])
    plan = planned[-1]
    assert [s.name for s in plan.settings] == [
        "sparse b=0.29 score band=1", "sparse b=0.29 uniform band=1",
        "sparse b=0.15 score band=1", "sparse b=0.15 uniform band=1"]
    assert (plan.samples_at(4096), plan.samples_at(8192)) == (16, 8)
    ruler_eval.main(common + ["--samples", "4"])
    assert planned[-1].settings == evaluation.setting_grid() and planned[-1].samples_at(8192) == 4
    for bad in (["--samples", "1", "2", "3"], ["--budgets", "1.5"], ["--bands", "7"], ["--selectors", "all"]):
        with pytest.raises(SystemExit):
            ruler_eval.main(common + bad)


def test_the_report_names_the_weights_and_the_cpu_and_times_each_row():
    """The header carries the checkpoint digest and, on a CPU, the cores and threads; rows whose records
    are timed get the wall seconds of their forwards, older records none."""
    record = {"kind": "ruler", "task": "niah_single", "length": 4096, **evaluation.DENSE.fields(), "samples": 2,
              "accuracy": 0.5, "sample_scores": [0.0, 1.0]}
    results = {"model": "m", "device": "cpu", "cpu_cores": 2, "torch_threads": 1, "checkpoint_sha256": "ab" * 32,
               "records": [{**record, "seconds": 1.5}, {**record, "task": "niah_multikey", "seconds": 2.0}]}
    table = ruler_report.markdown(results)
    assert "sha256 abababababab" in table and "cpu (2 cores, 1 torch thread(s))" in table
    assert "| dense | 4096 | 0.500 |" in table and table.split("| dense | 4096 |")[1].split("\n")[0].endswith(" 4 |")
    untimed = ruler_report.markdown({**results, "records": [record]})
    assert "wall s" not in untimed


def _results(records, **header):
    return {"checkpoint_sha256": "ab" * 32, "seed": 0, "haystack": "milton (held out)", "ppl_length": 8192,
            "samples": {"4096": 8}, "command": "first", "date": "2026-12-01", "device": "NVIDIA H200",
            "backend": "triton", **header, "records": records}


def _record(config, length, task="niah_single", accuracy=1.0):
    return {"kind": "ruler", "task": task, "length": length, "config": config, "budget": None, "selector": None,
            "band": None, "samples": 8, "accuracy": accuracy, "ci_low": 0.6, "ci_high": 1.0,
            "sample_scores": [accuracy] * 8, "seconds": 1.0}


def test_a_later_run_merges_in_without_replacing_what_was_measured(tmp_path):
    """ruler_merge: the second file's new settings are added, its repeats of measured ones left out, its
    command kept; the report names it."""
    from analysis.ruler_eval import main
    base = _results([_record("dense", 4096), _record("dense", 32768, accuracy=0.25)],
                    samples={"4096": 8, "32768": 4})
    extra = _results([_record("dense", 32768, accuracy=0.5), _record("sparse b=0.15 score band=1", 32768)],
                     samples={"32768": 4}, command="second", date="2026-12-02")
    (tmp_path / "ruler.json").write_text(json.dumps(base))
    (tmp_path / "more.json").write_text(json.dumps(extra))
    main(["--merge", str(tmp_path / "more.json"), "--out", str(tmp_path / "ruler.json")])
    merged = json.loads((tmp_path / "ruler.json").read_text())
    assert [(r["config"], r["length"], r["accuracy"]) for r in merged["records"]] == [
        ("dense", 4096, 1.0), ("dense", 32768, 0.25), ("sparse b=0.15 score band=1", 32768, 1.0)]
    assert merged["merged"] == [{"command": "second", "date": "2026-12-02", "device": "NVIDIA H200",
                                 "backend": "triton"}]
    assert "`second`" in (tmp_path / "ruler.md").read_text()


def test_a_merged_file_merged_in_keeps_the_runs_merged_into_it():
    """A file that was itself merged (an earlier evaluation in two runs) brings both runs' provenance."""
    from analysis.ruler_merge import merge
    earlier = _results([_record("dense", 32768)], samples={"32768": 4}, command="second", date="2026-12-02",
                       merged=[{"command": "third", "date": "2026-12-02", "device": "NVIDIA H200", "backend": "triton"}])
    merged, added, left_out = merge(_results([_record("dense", 4096)], command="new"), earlier)
    assert (added, left_out) == (1, 0)
    assert [run["command"] for run in merged["merged"]] == ["second", "third"]


@pytest.mark.parametrize("field,value", [("checkpoint_sha256", "cd" * 32), ("seed", 1), ("ppl_length", 4096),
                                         ("samples", {"4096": 16})])
def test_a_run_of_other_weights_or_samples_is_refused(tmp_path, field, value):
    from analysis.ruler_merge import MergeError, merge
    with pytest.raises(MergeError, match=field.split("_")[0]):
        merge(_results([_record("dense", 4096)]), _results([_record("dense", 8192)], **{field: value}))
