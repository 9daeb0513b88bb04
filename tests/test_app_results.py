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


def test_the_selector_table_shows_every_selector_with_its_samples(results_dir):
    records = [
        {"kind": "ruler", "config": "dense", "length": 4096, "task": "niah_single", "samples": 16, "accuracy": 1.0},
        {"kind": "ruler", "config": "dense", "length": 4096, "task": "niah_multikey", "samples": 16, "accuracy": 0.5},
        {"kind": "ruler", "config": "sparse b=0.15 uniform band=1", "budget": 0.15, "selector": "uniform", "band": 1,
         "length": 4096, "task": "niah_single", "samples": 16, "accuracy": 0.25},
        {"kind": "ruler", "config": "sparse b=0.15 uniform band=3", "budget": 0.15, "selector": "uniform", "band": 3,
         "length": 4096, "task": "niah_single", "samples": 16, "accuracy": 0.75},
        {"kind": "ruler", "config": "sparse b=0.5 score band=1", "budget": 0.5, "selector": "score", "band": 1,
         "length": 8192, "task": "niah_single", "samples": 8, "accuracy": 1.0},
        {"kind": "ruler", "config": "dense", "length": 8192, "task": "niah_single", "samples": 8, "accuracy": 0.5},
    ]
    (results_dir / "ruler.json").write_text(json.dumps({"records": records, **RUN, "model": "m"}))
    _, evaluation = measurements.ruler(results_dir / "ruler.json")
    table = measurements.selector_accuracy_table(evaluation, band=1)
    assert "| dense | 0.75 / 1.00 (16) | 0.50 / 0.50 (8) |" in table     # mean of the tasks / niah_single (samples)
    assert "| sparse b=0.15 uniform band=1 | 0.25 / 0.25 (16) | – |" in table   # not evaluated at 8K
    assert "band=3" not in table and "b=0.5" not in table       # other bands and budgets are left out
    no_single = measurements.selector_accuracy_table(
        evaluation.filter(pl.col("task") != "niah_single"), band=1)      # an evaluation without that task
    assert "| dense | 0.50 |" in no_single.splitlines()


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


def cpu_core_report(sparse, dense, reference) -> dict:
    def spread(samples):
        return {"median_ms": sorted(samples)[len(samples) // 2], "min_ms": min(samples), "max_ms": max(samples),
                "samples_ms": samples}

    row = {"shape": "K=V=128", "T": 4096, "errors": {}, "sparse_api": spread(sparse), "dense_api": spread(dense),
           "dense_reference": spread(reference)}
    return {"date": "2026-11-30", "machine": "2-core CPU", "torch": "2", "threads": 1, "command": "bench",
            "load_before": 0.1, "load_after": 0.2, "repeats": 3, "budget": 0.29, "band": 1, "rows": [row]}


def test_the_cpu_table_says_a_difference_inside_the_noise(tmp_path):
    path = tmp_path / "cpu_core_bench.json"
    path.write_text(json.dumps(cpu_core_report([50.0, 52.0, 70.0], [55.0, 60.0, 61.0], [100.0, 101.0, 102.0])))
    table = front_page.render("cpu_core_bench.json", tmp_path)
    row = next(line for line in table.splitlines() if line.startswith("| K=V=128"))
    assert "| 1.15x (within the noise) |" in row       # dense 60 / sparse 52, ranges overlap
    assert row.endswith("| 1.94x (faster) |")           # reference 101 / sparse 52, ranges apart
    assert "`cpu_core_bench.json`: 2-core CPU" in table and "Load average" in table


def test_the_app_run_table_shows_medians_ranges_and_the_warm_up(tmp_path):
    timing = {"repeats": 3, "threads": 1, "warm_up": {"tokens": 128, "dense_ms": 40.0, "sparse_ms": 50.0},
              **{name: {"median": median, "low": median - spread, "high": median + spread, "n": 3}
                 for name, median, spread in (("prefill_dense", 900.0, 30.0), ("prefill_sparse", 880.0, 30.0),
                                              ("core_dense", 90.0, 1.0), ("core_sparse", 60.0, 1.0))}}
    run = {"model": "default", "device_name": "CPU", "n_tokens": 32768, "n_segments": 4, "backend": "torch",
           "dense_backend": "torch", "timing": timing, "wall_s": 100.0, "top1_agreement": 0.99}
    meta = {"device": "cpu", "machine": "2-core CPU", "date": "2026-11-30", "build": "abc", "command": "app_run",
            "load_before": 1.0, "load_after": 1.5}
    (tmp_path / "app_run_cpu.json").write_text(json.dumps({"meta": meta, "runs": [run]}))
    table = front_page.render("app_run_cpu.json", tmp_path)
    row = next(line for line in table.splitlines() if line.startswith("| default"))
    assert "| 900.0 [870.0-930.0] | 880.0 [850.0-910.0] | 1.02x (within the noise) |" in row
    assert "| 1.50x (faster) |" in row and "40 / 50 ms on 128 tokens" in row


def test_the_multi_gpu_runs_report_renders_from_its_committed_record(monkeypatch):
    """The README's two-GPU block and the run's own report come from one rendering of the JSON."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import multi_gpu_run

    record = json.loads((ROOT / "analysis" / "results" / "multi_gpu_run.json").read_text())
    report = multi_gpu_run.markdown(record)
    assert report == (ROOT / "analysis" / "results" / "multi_gpu_run.md").read_text()
    block = front_page.render("multi_gpu_run.json")
    assert block.splitlines()[2] == f"Command: `{record['meta']['command']}`"
    assert "| cuda:0 | NVIDIA H200 | 0-23 | 18 |" in block and "| cuda:1 | NVIDIA H200 | 24-47 | 18 |" in block
