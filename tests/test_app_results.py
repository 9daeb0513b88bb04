"""The committed measurements (analysis/measurements.py): frames, the README's tables and the Results page.

What the README and the app show comes from the files: the public call's time, every contender the
run measured, a loss said as a loss, and where, when and how each run was made.
"""
import json
from pathlib import Path

import polars as pl
import pytest

from analysis import front_page, measurements
from app import figures

ROOT = Path(__file__).resolve().parents[1]
RUN = {"device": "GPU", "date": "2026-11-30", "command": "bench"}


@pytest.fixture
def results_dir(tmp_path):
    bench = [
        {"T": 4096, "budget": 0.29, "band": 1, "selector": "score", "api_ms": 0.5, "sparsegdn_ms": 0.4,
         "fla_ms": 1.0, **RUN},
        {"T": 32768, "budget": 0.29, "band": 1, "selector": "score", "api_ms": 4.0, "sparsegdn_ms": 2.0,
         "fla_ms": 3.0, **RUN},
        {"T": 32768, "budget": 1.0, "band": 3, "selector": "all", "sparsegdn_ms": 4.0, "fla_ms": 3.0, **RUN},
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
    (tmp_path / "ruler.json").write_text(json.dumps({"records": records, **RUN, "model": "m"}))
    return tmp_path


def test_the_public_call_is_compared_with_fla_and_a_loss_stays_a_loss(results_dir):
    bench = measurements.kernel_bench(results_dir / "kernel_bench.json")
    assert bench["public_vs_fla"].to_list() == [2.0, 0.75, None]
    assert bench["kernels_vs_fla"].to_list() == [2.5, 1.5, 0.75]
    table = measurements.kernel_table(bench, "kernel_bench.json")
    assert "| 4K | 0.500 | 0.400 | 1.000 | 2.00 (faster) |" in table
    assert "| 32K | 4.000 | 2.000 | 3.000 | 0.75 (slower) |" in table
    assert "GPU, 2026-11-30, build not recorded; `bench`" in table
    assert "FlashQLA was not measured in this run" in table
    fig = figures.kernel_speedup(bench)
    assert [t.name for t in fig.data] == ["budget 0.29, public call", "budget 0.29, kernels only"]
    assert list(fig.data[0].y) == [2.0, 0.75]


def test_a_measured_flashqla_gets_its_own_columns(results_dir):
    rows = json.loads((results_dir / "kernel_bench.json").read_text())
    for row in rows:
        row["flashqla_ms"] = 0.25
    (results_dir / "kernel_bench.json").write_text(json.dumps(rows))
    table = measurements.kernel_table(measurements.kernel_bench(results_dir / "kernel_bench.json"), "k")
    assert "| FlashQLA ms | FlashQLA / public call |" in table and "0.50 (slower)" in table
    assert "not measured" not in table


def test_perplexity_change_and_accuracy_against_dense(results_dir):
    meta, evaluation = measurements.ruler(results_dir / "ruler.json")
    assert (meta["device"], meta["checkpoint"]) == ("GPU", "not recorded")
    change = measurements.perplexity_change(evaluation)
    assert change.height == 1 and change["change_pct"][0] == pytest.approx(1.0)
    accuracy = measurements.ruler_accuracy(evaluation)
    dense = accuracy.filter(pl.col("selector") == "dense")
    assert dense["accuracy"].to_list() == [0.75] and dense["samples"].to_list() == [8]
    assert accuracy.filter(pl.col("selector") == "score")["accuracy"].to_list() == [0.25]
    fig = figures.perplexity_change(change, band=1)
    assert list(fig.data[0].y) == pytest.approx([1.0])


def test_a_readme_block_is_replaced_by_the_rendering_of_its_file(results_dir):
    text = ("before\n<!-- generated from analysis/results/kernel_bench.json -->\nstale 9.99x faster\n"
            "<!-- end generated -->\nafter\n")
    fresh = front_page.rewrite(text, results_dir)
    assert "stale" not in fresh and "0.75 (slower)" in fresh
    assert fresh.startswith("before\n") and fresh.endswith("<!-- end generated -->\nafter\n")


def test_the_readme_tables_are_what_the_committed_files_render():
    text = (ROOT / "README.md").read_text()
    results = ROOT / "analysis" / "results"
    shown = [path.name for pattern in ("kernel_bench*.json", "prefill_*.json", "ruler.json", "selector_eval.json")
             for path in sorted(results.glob(pattern))]
    missing = [name for name in shown if f"<!-- generated from analysis/results/{name} -->" not in text]
    assert shown and not missing, f"committed results without a README table: {missing}"
    assert front_page.rewrite(text) == text, "README.md is stale: run python -m analysis.front_page"


def test_the_readme_shows_transformers_own_core_in_the_whole_prefill_table():
    meta, runs = measurements.prefill(ROOT / "analysis" / "results" / "prefill_4b_32k.json")
    assert "transformers" in runs["core"].to_list()
    assert "| transformers |" in front_page.render("prefill_4b_32k.json")


def test_the_committed_results_load():
    """The files in analysis/results/ parse with the columns the page shows."""
    files = measurements.kernel_bench_files()
    assert files
    for path in files:
        bench = measurements.kernel_bench(path)
        assert bench.height > 0 and bench["api_ms"].is_not_null().any()
    meta, evaluation = measurements.ruler(measurements.RESULTS_DIR / "ruler.json")
    assert measurements.perplexity_change(evaluation).height > 0


def test_each_committed_kernel_report_is_the_rendering_of_its_json():
    for path in measurements.kernel_bench_files():
        assert path.with_suffix(".md").read_text() == measurements.kernel_report(path), \
            f"{path.with_suffix('.md').name} is stale: python benchmarks/kernel_bench.py --render {path}"
