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


def test_the_speed_figure_gives_each_budget_one_colour_and_the_text_says_where_flashqla_leads(results_dir):
    """Every budget's lines share one colour (and a legend group), no two budgets share one; a measure is told by
    its dash. The Results page's sentence on FlashQLA names the lengths where its call was faster than ours."""
    rows = json.loads((results_dir / "kernel_bench.json").read_text())
    rows = [dict(row, flashqla_ms=ms) for row, ms in zip(rows, (0.6, 3.0, None))]
    for budget in (1.0, 0.5, 0.15):
        rows += [dict(row, budget=budget, api_ms=row["api_ms"] * budget) for row in rows[:2]]
    (results_dir / "kernel_bench.json").write_text(json.dumps(rows))
    bench = measurements.kernel_bench(results_dir / "kernel_bench.json")
    fig = figures.kernel_speedup(bench)
    colours = {}
    for trace in fig.data:
        budget = trace.name.split(",")[0]
        colours.setdefault(budget, set()).add(trace.line.color)
        assert trace.legendgroup == budget and trace.marker.color == trace.line.color
    assert len(colours) == 4 and all(len(shades) == 1 for shades in colours.values())
    assert len({next(iter(shades)) for shades in colours.values()}) == 4
    dashes = {trace.name.split(", ", 1)[1]: trace.line.dash for trace in fig.data}
    assert dashes == {"public call": "solid", "kernels only": "dot", "public call against FlashQLA": "dash"}
    # at budget 0.29 FlashQLA took 0.6 ms against our 0.5 at 4K (we lead) and 3.0 against 4.0 at 32K (it leads)
    assert measurements.flashqla_leads(bench) == [32768]
    assert measurements.flashqla_standing(bench).endswith("it leads our public call at 32K")
    ahead = bench.with_columns(pl.col("public_vs_flashqla") * 10)
    assert measurements.flashqla_standing(ahead).endswith("ahead of it at every length measured")
    unmeasured = measurements.kernel_bench(results_dir / "kernel_bench.json").with_columns(
        pl.lit(None, dtype=pl.Float64).alias("public_vs_flashqla"))
    assert measurements.flashqla_standing(unmeasured) == measurements.flashqla_standing(None) == \
        "the last table above did not measure FlashQLA"
    assert measurements.lengths_in_words([8192, 32768, 131072]) == "8K, 32K and 128K"
    assert measurements.lengths_in_words([32768]) == "32K"


def test_the_public_call_shows_the_spread_of_its_rounds_and_its_wall_time(results_dir):
    """A row with timed rounds shows its lowest and highest beside the median and says how many rounds there were;
    a back-to-back wall time, where recorded, is said; rows of files without rounds show none."""
    rows = json.loads((results_dir / "kernel_bench.json").read_text())
    rows[0].update(api_ms=0.5, api_ms_runs=[0.45, 0.5, 0.7], api_wall_ms=0.61)
    rows[1].update(api_ms_runs=[4.0, 3.9, 4.2])
    (results_dir / "kernel_bench.json").write_text(json.dumps(rows))
    bench = measurements.kernel_bench(results_dir / "kernel_bench.json")
    assert bench["api_ms_low"].to_list()[0] == 0.45 and bench["api_ms_high"].to_list()[0] == 0.7
    table = measurements.kernel_table(bench, "kernel_bench.json")
    assert "| 4K | 0.500 (0.450-0.700) | 0.400 |" in table
    assert "| 32K | 4.000 (3.900-4.200) | 2.000 |" in table
    assert "median of 3 timed rounds" in table and "0.610 ms at 4K of wall time" in table
    for row in rows:
        row.pop("api_ms_runs", None)
        row.pop("api_wall_ms", None)
    (results_dir / "kernel_bench.json").write_text(json.dumps(rows))
    table = measurements.kernel_table(measurements.kernel_bench(results_dir / "kernel_bench.json"), "kernel_bench.json")
    assert "| 4K | 0.500 | 0.400 |" in table and "timed rounds" not in table     # a file without rounds: no spread


def test_the_table_says_which_calls_waited_for_the_early_checks_only(results_dir):
    """Rows that record early_checks say where the public call waited for those flags only; files without the
    field say nothing about them."""
    rows = json.loads((results_dir / "kernel_bench.json").read_text())

    def table():
        (results_dir / "kernel_bench.json").write_text(json.dumps(rows))
        return measurements.kernel_table(measurements.kernel_bench(results_dir / "kernel_bench.json"), "k")

    assert "early checks" not in table()
    rows[0]["early_checks"], rows[1]["early_checks"] = True, False
    assert "At budget 0.29, band 1, `score` at 4K the default design's public call waited for the early" in table()
    for row in rows:
        row["early_checks"] = True
    assert "At every length and configuration the default design's public call waited" in table()


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
    # mean of the tasks [its interval: 0.75 +- 1.96 * sqrt(0.5 * 0.5 * 16 / 15 / 16) / 2] / niah_single [Wilson] (samples)
    assert "| dense | 0.75 [0.62-0.88] / 1.00 [0.81-1.00] (16) | 0.50 [0.13-0.87] / 0.50 [0.22-0.78] (8) |" in table
    assert "| sparse b=0.15 uniform band=1 | 0.25 [0.03-0.47] / 0.25 [0.10-0.49] (16) | not measured |" in table
    assert "band=3" not in table and "b=0.5" not in table       # other bands and budgets are left out
    no_single = measurements.selector_accuracy_table(
        evaluation.filter(pl.col("task") != "niah_single"), band=1)      # an evaluation without that task
    assert "| dense | 0.50 [0.25-0.75] (16) |" in no_single.splitlines()


def test_a_readme_block_is_replaced_by_the_rendering_of_its_file(results_dir):
    text = ("before\n<!-- generated from analysis/results/kernel_bench.json -->\nstale 9.99x faster\n"
            "<!-- end generated -->\nafter\n")
    fresh = front_page.rewrite(text, results_dir)
    assert "stale" not in fresh and "0.75 (slower)" in fresh
    assert fresh.startswith("before\n") and fresh.endswith("<!-- end generated -->\nafter\n")


def test_the_readme_tables_are_what_the_committed_files_render():
    text = (ROOT / "README.md").read_text()
    results = ROOT / "analysis" / "results"
    shown = [path.name for pattern in ("kernel_bench*.json", "prefill_*.json", "ruler.json", "selector_eval.json",
                                                    "flashqla_cp_study*.json")
             for path in sorted(results.glob(pattern))]
    missing = [name for name in shown if f"<!-- generated from analysis/results/{name} -->" not in text]
    assert shown and not missing, f"committed results without a README table: {missing}"
    assert front_page.rewrite(text) == text, "README.md is stale: run python -m analysis.front_page"


def test_the_readme_shows_transformers_own_core_in_the_whole_prefill_table():
    meta, runs = measurements.prefill(ROOT / "analysis" / "results" / "prefill_4b_32k.json")
    assert "transformers" in runs["core"].to_list()
    assert "| transformers |" in front_page.render("prefill_4b_32k.json")


def test_a_segmented_prefill_says_its_segments_and_a_whole_one_does_not():
    segmented = front_page.render("prefill_4b_128k.json")
    whole = front_page.render("prefill_4b_32k.json")
    assert "Prefilled in segments of 8192 tokens" in segmented
    assert "Prefilled in segments" not in whole


def test_the_context_parallelism_study_names_each_contender_and_its_errors():
    table = front_page.render("flashqla_cp_study.json")
    meta, rows = measurements.cp_study(ROOT / "analysis" / "results" / "flashqla_cp_study.json")
    assert rows.height == len(table.splitlines()) - 4          # provenance, blank line, header, rule
    assert set(rows["contender"]) == set(measurements.CP_CONTENDERS)
    assert meta["command"] in table and "auto_cp=False (every chunk in order)" in table
    assert rows["ms"].min() > 0 and rows["output_rel_err"].max() < 0.05


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
    assert "First-call work" not in table          # recorded before timed repeats were watched: nothing claimed
    timing["first_calls"] = [{"repeat": 1, "path": "sparse", "kind": "compile", "kernel": "state_output_kernel",
                              "count": 2, "seconds": 9.5}]
    timing["clean"] = {"sparse": {"prefill": {"median": 870.0, "low": 850.0, "high": 890.0, "n": 2},
                                  "core": {"median": 59.0, "low": 58.0, "high": 60.0, "n": 2}}}
    clean_run = {**run, "model": "other", "timing": {**timing, "first_calls": [], "clean": {}}}
    (tmp_path / "app_run_cpu.json").write_text(json.dumps({"meta": meta, "runs": [run, clean_run]}))
    table = front_page.render("app_run_cpu.json", tmp_path)
    note = next(line for line in table.splitlines() if line.startswith("First-call work"))
    assert "default: Repeat 2 of 3 of SparseGDN included 2 compiles of 1 kernel" in note and "state_output_kernel" in note
    assert "other: none" in note


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


def evaluation_records(scores: dict[tuple[str, int], list[float]], ppl: dict[str, float]) -> list[dict]:
    """RULER records of one task (niah_single) from per-sample scores by (config, length), and perplexity
    records of one source; configs are dense or 'selector@budget' (band 1)."""
    records = []
    for (config, length), samples in scores.items():
        fields = {"config": "dense"} if config == "dense" else {
            "config": f"sparse b={config.split('@')[1]} {config.split('@')[0]} band=1",
            "budget": float(config.split("@")[1]), "selector": config.split("@")[0], "band": 1}
        records.append({"kind": "ruler", **fields, "length": length, "task": "niah_single", "samples": len(samples),
                        "accuracy": sum(samples) / len(samples), "sample_scores": samples})
    for config, value in ppl.items():
        fields = {"config": "dense"} if config == "dense" else {
            "config": f"sparse b={config.split('@')[1]} {config.split('@')[0]} band=1",
            "budget": float(config.split("@")[1]), "selector": config.split("@")[0], "band": 1}
        records.append({"kind": "perplexity", **fields, "source": "a", "length": 8192, "windows": 8,
                        "perplexity": value})
    return records


def test_the_targets_say_a_miss_and_what_was_not_measured(tmp_path):
    """A perplexity 4% above dense misses the 3% target; a selector the run did not reach at 8K is 'not
    measured', never a 'no' or a 'yes'; the settings reached at 4K but not at 8K are listed."""
    scores = {("dense", 4096): [1.0] * 10, ("score@0.29", 4096): [1.0] * 9 + [0.0],
              ("uniform@0.29", 4096): [0.0] * 8 + [1.0] * 2, ("random@0.29", 4096): [0.0] * 10,
              ("dense", 8192): [1.0] * 10, ("score@0.29", 8192): [1.0] * 10}
    records = evaluation_records(scores, {"dense": 100.0, "score@0.29": 104.0})
    (tmp_path / "ruler.json").write_text(json.dumps({"records": records, **RUN, "model": "m", "samples": {"4096": 10, "8192": 10}}))
    _, frame = measurements.ruler(tmp_path / "ruler.json")
    targets = {row["target"]: row for row in measurements.ruler_targets(frame).iter_rows(named=True)}
    assert targets["dense niah_single at 4K >= 0.90"]["met"] == "yes"
    assert targets["dense niah_single at 4K >= 0.90"]["measured"] == "1.000 [0.72-1.00], 10 samples"
    assert targets["score above uniform and random at b=0.29, 4K"]["met"] == "yes"
    assert targets["score above uniform and random at b=0.29, 8K"]["met"] == "not measured"
    assert targets["score above uniform and random at b=0.15, 4K (by >= 0.10: dense >= 0.90)"]["met"] == "not measured"
    ppl = targets["perplexity with score (b=0.29) within 3% of dense (a)"]
    assert ppl["met"] == "no" and ppl["measured"] == "100.00 -> 104.00 (+4.00%)"
    assert measurements.not_measured_text(frame, [4096, 8192]) == ["- 8K: band 1: b=0.29 random/uniform (2 settings)"]
    block = measurements.evaluation_table(tmp_path / "ruler.json", "ruler.json")
    assert "| perplexity with score (b=0.29) within 3% of dense (a) | 100.00 -> 104.00 (+4.00%) | no |" in block
    assert "- 8K: band 1: b=0.29 random/uniform (2 settings)" in block


def test_the_mean_over_tasks_has_a_normal_interval_over_the_samples(tmp_path):
    """Two tasks: 0.5 (scores 0/1, sample variance 0.5 * 0.5 * 8 / 7 over 8) and 1.0 (no variance)."""
    records = [{"kind": "ruler", "config": "dense", "length": 4096, "task": task, "samples": 8, "accuracy": sum(s) / 8,
                "sample_scores": s} for task, s in (("t1", [0.0, 1.0] * 4), ("t2", [1.0] * 8))]
    (tmp_path / "ruler.json").write_text(json.dumps({"records": records, **RUN, "model": "m"}))
    row = measurements.ruler_accuracy(measurements.ruler(tmp_path / "ruler.json")[1]).row(0, named=True)
    half_width = 1.96 * (0.25 * 8 / 7 / 8) ** 0.5 / 2
    assert row["accuracy"] == 0.75 and row["tasks"] == 2 and row["samples"] == 16
    assert row["ci_low"] == pytest.approx(0.75 - half_width) and row["ci_high"] == pytest.approx(min(1.0, 0.75 + half_width))


def test_length_text_says_where_the_model_stops_retrieving(tmp_path):
    scores = {("dense", 4096): [1.0] * 8, ("dense", 16384): [1.0] * 5 + [0.0] * 3, ("dense", 32768): [1.0] + [0.0] * 7}
    (tmp_path / "ruler.json").write_text(json.dumps({"records": evaluation_records(scores, {}), **RUN}))
    _, frame = measurements.ruler(tmp_path / "ruler.json")
    text = measurements.length_text(frame, trained=8192)
    assert "It does not extrapolate to 32K:" in text and "16K" not in text.split("extrapolate to")[1]
    assert "extrapolate" not in measurements.length_text(frame, trained=32768)
    assert measurements.trained_length({"recipe": {"curriculum": [[0.0, 256], [0.8, 8192]]}}) == 8192


def test_the_cross_check_counts_equal_scores_on_the_same_samples_and_refuses_other_weights(tmp_path):
    reference = {"records": evaluation_records({("dense", 4096): [1.0, 0.0, 1.0, 1.0]}, {"dense": 10.0}),
                 "checkpoint_sha256": "ab" * 32, "seed": 0, "ppl_length": 8192, **RUN}
    other = {"records": evaluation_records({("dense", 4096): [1.0, 1.0]}, {"dense": 11.0}),
             "checkpoint_sha256": "ab" * 32, "seed": 0, "ppl_length": 4096, **RUN, "device": "cpu", "backend": "torch"}
    (tmp_path / "ruler.json").write_text(json.dumps(reference))
    (tmp_path / "cpu.json").write_text(json.dumps(other))
    _, rows = measurements.cross_check(tmp_path / "cpu.json", tmp_path / "ruler.json")
    assert rows.select("samples", "equal", "mean", "reference mean").row(0) == (2, 1, 1.0, 0.5)   # its first two
    (tmp_path / "gdn_only_eval_cpu.json").write_text(json.dumps(other))      # the README's block of that file,
    (tmp_path / measurements.CROSS_CHECK_REFERENCE).write_text(json.dumps(reference))   # against its own reference
    table = front_page.render("gdn_only_eval_cpu.json", tmp_path)
    assert "In all 1 of 2 per-sample scores are equal (50.0%)" in table and "Perplexity is not compared" in table
    (tmp_path / "cpu.json").write_text(json.dumps({**other, "checkpoint_sha256": "cd" * 32}))
    with pytest.raises(ValueError, match="did not evaluate one checkpoint"):
        measurements.cross_check(tmp_path / "cpu.json", tmp_path / "ruler.json")
    (tmp_path / "cpu.json").write_text(json.dumps({**other, "seed": 5}))
    with pytest.raises(ValueError, match="other samples"):
        measurements.cross_check(tmp_path / "cpu.json", tmp_path / "ruler.json")


def test_the_evaluation_block_gives_each_source_its_own_window_count():
    """Held-out sources of different sizes are read on different numbers of windows: the block says each one's
    (one count where they agree, '?' where the file records none), never the largest as if every source had it."""
    frame = pl.DataFrame({"kind": ["perplexity", "perplexity", "perplexity", "accuracy"],
                          "source": ["milton", "pydoc-howto", "milton", None], "windows": [50, 24, 50, None]})
    assert measurements.window_counts(frame) == "50 (milton) / 24 (pydoc-howto)"
    assert measurements.window_counts(frame.with_columns(pl.lit(8).alias("windows"))) == "8"
    assert measurements.window_counts(frame.filter(pl.col("kind") == "accuracy")) == "?"
