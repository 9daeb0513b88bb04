"""The app's pipeline measured through the app itself: AppTest drives app/Home.py's run page (choose the
model, paste a document of at least --tokens tokens, press Run) and reads what the run recorded.

    python benchmarks/app_run.py --device cpu --models default --tokens 32768 \
        --out analysis/results/app_run_cpu.json                                  # a CPU machine
    python benchmarks/app_run.py --device cuda --models default qwen3.5-4b-shape --tokens 32768 \
        --out analysis/results/app_run_gpu.json                                  # a CUDA GPU

Each model's run is the app's own: warm-up (not timed), the analysis pass, then --repeats timed whole
prefills of each path, interleaved; the JSON keeps each run's summary timing (median and range of the
repeats, the warm-up, the threads, the first-call work seen inside repeats and the medians without
those repeats), the stages, the model-level metrics, the whole run's wall time, the Timings page's
metrics as drawn and each repeat's figures (`per_repeat`). The document is the bundled samples, one after another,
repeated until it has --tokens tokens for the model's tokenizer. Render the README's table with
`python -m analysis.front_page` (analysis/measurements.py reads the file).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def samples_text() -> str:
    from analysis.documents import list_samples

    return "\n\n".join(sample.read() for sample in list_samples())


def paste_document(app, tokens: int) -> int:
    """Paste the bundled samples, repeated and then cut, so that the run page counts between `tokens` and
    5% more with the selected model's tokenizer; returns the count."""
    def count(text: str) -> int:
        app.text_area(key="doc_paste").set_value(text).run()
        counted = next(m.value for m in app.metric if m.label == "Tokens / chunks")
        return int(counted.split("/")[0].replace(",", ""))

    samples = samples_text()
    text = samples
    while count(text) < tokens:
        text += "\n\n" + samples
    low, high = 0, len(text)          # a cut of `high` characters has enough tokens
    for _ in range(20):
        if count(text[:high]) <= tokens * 1.05:
            break
        middle = (low + high) // 2
        if count(text[:middle]) >= tokens:
            high = middle
        else:
            low = middle
    return count(text[:high])


def build() -> str:
    """The git commit and the library's sources digest (benchmarks/kernel_bench.build): the digest stays
    true where the checkout's git history travelled stale (the lent GPU machine's copy)."""
    try:
        from benchmarks.kernel_bench import build as commit_and_digest
        return commit_and_digest()
    except Exception:  # noqa: BLE001 - the build name is a label; its absence must not stop a run
        pass
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "not recorded"


def run_in_the_app(model: str, tokens: int, repeats: int, timeout: float) -> dict:
    """One run through the app's run page; the recorded summary and what the Timings page drew."""
    from streamlit.testing.v1 import AppTest

    from analysis.records import RunResult

    app = AppTest.from_file(str(ROOT / "app" / "Home.py"), default_timeout=timeout)
    app.run()
    app.selectbox(key="model_spec").set_value(model).run()
    app.radio(key="doc_source").set_value("Paste").run()
    paste_document(app, tokens)
    app.number_input(key="timing_repeats").set_value(repeats).run()
    started = time.perf_counter()
    app.button(key="run_button").click().run()
    wall_s = time.perf_counter() - started
    problems = [e.value for e in app.exception] + [e.value for e in app.error]
    if problems or not any(s.value.startswith("Run finished") for s in app.success):
        raise RuntimeError(f"{model}: the run did not finish: {problems}")
    key = app.session_state["current"].key
    result = RunResult.load(pathlib.Path(os.environ["SPARSEGDN_RUNS_DIR"]) / key)
    summary = result.summary
    app.switch_page("views/timings.py")
    app.run()
    if app.exception:
        raise RuntimeError(f"{model}: the Timings page failed: {[e.value for e in app.exception]}")
    drawn = {metric.label: metric.value for metric in app.metric}
    return {"model": summary["model"], "n_tokens": summary["n_tokens"], "n_segments": summary["n_segments"],
            "device_name": summary["device_name"], "dtype": summary["dtype"], "backend": summary["backend"],
            "dense_backend": summary["dense_backend"], "random_weights": summary["random_weights"],
            "timing": summary["timing"], "stages": summary["stages"], "kl_mean": summary["kl_mean"],
            "top1_agreement": summary["top1_agreement"], "ppl_dense": summary["ppl_dense"],
            "ppl_sparse": summary["ppl_sparse"], "wall_s": wall_s, "timings_page": drawn, "run_key": key,
            "per_repeat": per_repeat(result.timings, summary["timing"].get("first_calls", []))}


def per_repeat(timings, first_calls: list[dict]) -> list[dict]:
    """Each timed repeat of each path: the whole prefill, the GDN core summed over layers, its slowest
    layer, (sparse) each stage's sum, in ms, and the first-call work seen inside it (the summary's
    timing.first_calls: Triton compiles and autotune benchmarks per kernel, in s); a one-off cost inside a
    repeat shows where it landed and, when Triton's, what it was. On a GPU the stage sums are a row of their
    own (`staged`: the sparse prefill after the timed ones, with no prefill or core time: a call carrying the
    stage clock takes no launch plan, so it is no timed repeat)."""
    import polars as pl

    rows = []
    for (repeat, path), group in sorted(timings.group_by("repeat", "path"), key=lambda item: item[0]):
        cores = group.filter(pl.col("scope") == "core")
        slowest = cores.sort("ms", descending=True).head(1)
        prefill = group.filter(pl.col("scope") == "prefill")["ms"]
        rows.append({"repeat": repeat, "path": path, "staged": prefill.len() == 0,
                     "prefill_ms": round(prefill.sum(), 3) if prefill.len() else None,
                     "core_ms": round(cores["ms"].sum(), 3) if cores.height else None,
                     "slowest_layer": ((slowest["layer"].item(), round(slowest["ms"].item(), 3)) if cores.height
                                       else None),
                     "stages_ms": {stage: round(ms, 3) for stage, ms in group.filter(pl.col("scope") == "stage")
                                   .group_by("stage", maintain_order=True).agg(pl.col("ms").sum()).iter_rows()},
                     "first_calls": [{"kind": row["kind"], "kernel": row["kernel"], "count": row["count"],
                                      "seconds": round(row["seconds"], 3)} for row in first_calls
                                     if (row["repeat"], row["path"]) == (repeat, path)]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cpu | cuda (SPARSEGDN_DEVICE of the app)")
    parser.add_argument("--models", nargs="+", default=["default", "qwen3.5-4b-shape"])
    parser.add_argument("--tokens", type=int, default=32768, help="the document's length, at least")
    parser.add_argument("--repeats", type=int, default=3, help="timed prefills of each path")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds one run may take")
    parser.add_argument("--out", required=True, help="path of the JSON to write")
    args = parser.parse_args()
    os.environ["SPARSEGDN_DEVICE"] = args.device
    os.environ.setdefault("SPARSEGDN_RUNS_DIR", tempfile.mkdtemp(prefix="app-run-"))
    os.environ.pop("SPARSEGDN_DEMO", None)

    from analysis.timing import use_threads

    threads = use_threads()      # as the app's server does, once per process
    load_before = os.getloadavg()[0]
    command = " ".join(["python benchmarks/app_run.py"] + sys.argv[1:])
    code = build()       # once: the sources do not change during the run
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    runs, started = [], time.perf_counter()
    for model in args.models:
        begun = time.perf_counter()
        runs.append(run_in_the_app(model, args.tokens, args.repeats, args.timeout))
        print(f"{model}: {runs[-1]['n_tokens']:,} tokens, run {runs[-1]['wall_s']:.1f} s "
              f"({time.perf_counter() - begun:.1f} s with loading and pasting; {time.perf_counter() - started:.0f} s "
              "so far)", file=sys.stderr, flush=True)
        # Written after every model, so a run cut short (a time limit) still leaves the models done.
        meta = {"date": datetime.date.today().isoformat(), "device": args.device,
                "machine": f"{os.cpu_count()}-core CPU ({platform.processor() or platform.machine()})",
                "threads": threads, "load_before": load_before, "load_after": os.getloadavg()[0],
                "command": command, "build": code}
        out.write_text(json.dumps({"meta": meta, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
