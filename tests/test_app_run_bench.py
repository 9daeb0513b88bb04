"""benchmarks/app_run.py, the app's own runs measured (on a GPU for the committed figures): here a short
CPU run that goes through the same path, the run page, the Timings page and the README's table."""
import json
import os
import subprocess
import sys
from pathlib import Path

from analysis import front_page

ROOT = Path(__file__).resolve().parents[1]


def test_the_app_run_script_records_the_apps_timings(tmp_path):
    out = tmp_path / "app_run_cpu.json"
    env = {**os.environ, "SPARSEGDN_RUNS_DIR": str(tmp_path / "runs"), "SPARSEGDN_THREADS": "1"}
    done = subprocess.run([sys.executable, "benchmarks/app_run.py", "--device", "cpu", "--models", "default",
                           "--tokens", "300", "--repeats", "2", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    run = data["runs"][0]
    assert run["n_tokens"] >= 300 and run["timing"]["repeats"] == 2 and run["device_name"] == "CPU"
    assert data["meta"]["threads"]["threads"] == 1
    assert run["timings_page"]["Whole prefill, dense"].endswith(" ms")     # the page drew the run's figures
    repeats = {(row["repeat"], row["path"]): row for row in run["per_repeat"]}
    assert set(repeats) == {(0, "dense"), (0, "sparse"), (1, "dense"), (1, "sparse")}
    sparse_cores = sorted(row["core_ms"] for (_, path), row in repeats.items() if path == "sparse")
    spread = run["timing"]["core_sparse"]                                    # the same repeats, rounded to 1 us
    assert abs(sparse_cores[0] - spread["low"]) < 1e-3 and abs(sparse_cores[-1] - spread["high"]) < 1e-3
    assert set(repeats[(0, "sparse")]["stages_ms"]) == {"intra_solve", "selection", "event_prepare", "state_pass",
                                                         "output"}
    assert repeats[(0, "dense")]["stages_ms"] == {}
    assert all(row["first_calls"] == [] for row in run["per_repeat"])      # nothing compiles on a CPU
    table = front_page.render(out.name, tmp_path)
    assert "| default | CPU |" in table


def test_each_repeat_row_names_the_first_call_work_that_landed_in_it():
    import polars as pl

    from analysis.records import SCHEMAS
    from benchmarks.app_run import per_repeat

    timings = pl.DataFrame([{"repeat": repeat, "path": "sparse", "scope": "prefill", "layer": None, "stage": None,
                             "ms": ms, "first_calls": calls} for repeat, ms, calls in ((0, 80.0, 0), (1, 12100.0, 2))],
                           schema=SCHEMAS["timings"])
    first_calls = [{"repeat": 1, "path": "sparse", "kind": "compile", "kernel": "state_output_kernel", "count": 2,
                    "seconds": 11.98765}]
    staged = pl.DataFrame([{"repeat": 2, "path": "sparse", "scope": "stage", "layer": None, "stage": name, "ms": ms,
                            "first_calls": 0} for name, ms in (("intra_solve", 1.5), ("output", 2.25))],
                          schema=SCHEMAS["timings"])
    rows = {row["repeat"]: row for row in per_repeat(pl.concat([timings, staged]), first_calls)}
    assert not rows[0]["staged"] and rows[0]["prefill_ms"] == 80.0 and rows[1]["prefill_ms"] == 12100.0
    # a GPU's stage-time prefill: its stages, no prefill or core time of a repeat
    assert rows[2]["staged"] and rows[2]["prefill_ms"] is None and rows[2]["core_ms"] is None
    assert rows[2]["stages_ms"] == {"intra_solve": 1.5, "output": 2.25}
    assert rows[0]["first_calls"] == []
    assert rows[1]["first_calls"] == [{"kind": "compile", "kernel": "state_output_kernel", "count": 2,
                                       "seconds": 11.988}]
