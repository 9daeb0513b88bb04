"""The Results page's frames: committed measurements read back as tidy tables, with derived columns right."""
import json

import polars as pl
import pytest

from app import figures, results


@pytest.fixture
def results_dir(tmp_path):
    bench = [
        {"T": 4096, "budget": 0.29, "band": 1, "selector": "score", "sparsegdn_ms": 0.5, "fla_ms": 1.0,
         "device": "GPU", "date": "2026-11-30", "command": "bench"},
        {"T": 32768, "budget": 0.29, "band": 1, "selector": "score", "sparsegdn_ms": 2.0, "fla_ms": 3.0,
         "device": "GPU", "date": "2026-11-30", "command": "bench"},
        {"T": 32768, "budget": 1.0, "band": 3, "selector": "all", "sparsegdn_ms": 4.0, "fla_ms": 3.0,
         "device": "GPU", "date": "2026-11-30", "command": "bench"},
    ]
    (tmp_path / "kernel_bench.json").write_text(json.dumps(bench))
    records = [
        {"kind": "perplexity", "config": "dense", "source": "a", "perplexity": 100.0, "length": 8192},
        {"kind": "perplexity", "config": "s", "budget": 0.29, "selector": "score", "band": 1, "source": "a",
         "perplexity": 101.0, "length": 8192},
        {"kind": "ruler", "config": "dense", "length": 4096, "task": "t1", "samples": 4, "accuracy": 0.5},
        {"kind": "ruler", "config": "dense", "length": 4096, "task": "t2", "samples": 4, "accuracy": 1.0},
        {"kind": "ruler", "config": "s", "budget": 0.29, "selector": "score", "band": 1, "length": 4096,
         "task": "t1", "samples": 4, "accuracy": 0.25},
    ]
    (tmp_path / "ruler.json").write_text(json.dumps({"records": records}))
    return tmp_path


def test_kernel_bench_speedup_is_fla_over_ours(results_dir):
    bench = results.kernel_bench(results_dir)
    assert bench["speedup_vs_fla"].to_list() == [2.0, 1.5, 0.75]
    fig = figures.kernel_speedup(bench)
    assert [t.name for t in fig.data] == ["budget 0.29"] and list(fig.data[0].y) == [2.0, 1.5]


def test_perplexity_change_and_accuracy_against_dense(results_dir):
    evaluation = results.ruler(results_dir)
    change = results.perplexity_change(evaluation)
    assert change.height == 1 and change["change_pct"][0] == pytest.approx(1.0)
    accuracy = results.ruler_accuracy(evaluation)
    dense = accuracy.filter(pl.col("selector") == "dense")
    assert dense["accuracy"].to_list() == [0.75] and dense["samples"].to_list() == [8]
    assert accuracy.filter(pl.col("selector") == "score")["accuracy"].to_list() == [0.25]
    fig = figures.perplexity_change(change, band=1)
    assert list(fig.data[0].y) == pytest.approx([1.0])


def test_missing_results_give_empty_frames(tmp_path):
    assert results.kernel_bench(tmp_path).is_empty() and results.ruler(tmp_path).is_empty()


def test_the_committed_results_load():
    """The files in analysis/results/ parse with the columns the page shows."""
    bench = results.kernel_bench()
    assert bench.height > 0 and bench["speedup_vs_fla"].is_not_null().all()
    assert results.perplexity_change(results.ruler()).height > 0
