"""Render RULER evaluation results (analysis/evaluation.py's JSON) as a tidy table, markdown and a figure.

    write_report(path)   # path.json -> path.md (the table) and path.html (a standalone plotly page)
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sparsegdn import SparseConfig

from .evaluation import DENSE, HEADLINE_SELECTORS, Setting, wilson_interval
from .ruler import TASKS

RESULTS = Path(__file__).resolve().parent / "results" / "ruler.json"


def records_frame(path: Path = RESULTS):
    """The committed results as one tidy polars table (one row per measurement; for the app).

    Columns: kind ('ruler' | 'perplexity'), config, budget, selector, band, length, task,
    samples, accuracy, ci_low, ci_high (ruler rows: the 95% Wilson interval), sample_var (ruler rows: the
    variance of the per-sample scores), source, windows, nll, perplexity (perplexity rows).
    """
    return records_frame_of(json.loads(Path(path).read_text()))


def records_frame_of(results: dict):
    """records_frame of results already read."""
    import polars as pl

    records = [with_interval(r) for r in results["records"]]
    schema = {"kind": pl.Utf8, "config": pl.Utf8, "budget": pl.Float64, "selector": pl.Utf8, "band": pl.Int64,
              "length": pl.Int64, "task": pl.Utf8, "samples": pl.Int64, "accuracy": pl.Float64,
              "ci_low": pl.Float64, "ci_high": pl.Float64, "sample_var": pl.Float64,
              "source": pl.Utf8, "windows": pl.Int64, "nll": pl.Float64, "perplexity": pl.Float64}
    rows = [{name: r.get(name) for name in schema} | {"sample_var": sample_variance(r)} for r in records]
    return pl.DataFrame(rows, schema=schema)


def sample_variance(record: dict) -> float | None:
    """The variance (n - 1 in the denominator) of a ruler record's per-sample scores; for a record written
    without them, that of 0/1 outcomes with its accuracy (the most scores in [0, 1] can vary)."""
    if record["kind"] != "ruler":
        return None
    scores = record.get("sample_scores")
    if scores is not None and len(scores) > 1:
        return float(np.var(scores, ddof=1))
    n, p = record["samples"], record["accuracy"]
    return p * (1 - p) * n / (n - 1) if n > 1 else 0.25


def with_interval(record: dict) -> dict:
    """A ruler record with its 95% Wilson interval (computed for records written before it was stored)."""
    if record["kind"] != "ruler" or "ci_low" in record:
        return record
    low, high = wilson_interval(record["accuracy"], record["samples"])
    return {**record, "ci_low": low, "ci_high": high}


INTERVAL_BUDGETS = (SparseConfig().budget, 0.15)   # the budgets the default model's targets name


def interval_table(results: dict) -> list[str]:
    """Per task and length, for dense and the headline selectors at the targets' budgets (band 1):
    accuracy, samples, 95% Wilson interval."""
    names = [DENSE.name] + [Setting(SparseConfig(budget=b, selector=s, band=1)).name
                            for b in INTERVAL_BUDGETS for s in HEADLINE_SELECTORS]
    records = [with_interval(r) for r in results["records"] if r["kind"] == "ruler" and r["config"] in names]
    lines = ["| config | length | task | accuracy | samples | 95% interval |", "|---|---|---|---|---|---|"]
    for r in sorted(records, key=lambda r: (r["length"], names.index(r["config"]), TASKS.index(r["task"]))):
        lines.append(f"| {r['config']} | {r['length']} | {r['task']} | {r['accuracy']:.3f} | {r['samples']} | "
                     f"{r['ci_low']:.2f}-{r['ci_high']:.2f} |")
    return lines


def summary_rows(records: list[dict]) -> list[dict]:
    """One row per (config, length): mean accuracy over tasks, per task, perplexity per source, and the
    wall seconds of its forwards (None for records written before they were timed)."""
    rows: dict[tuple[str, int], dict] = {}
    ppl = {}
    for r in records:
        if r["kind"] == "perplexity":
            ppl.setdefault(r["config"], {})[r["source"]] = r["perplexity"]
    for r in records:
        if r["kind"] != "ruler":
            continue
        row = rows.setdefault((r["config"], r["length"]), {
            "config": r["config"], "budget": r["budget"], "selector": r["selector"], "band": r["band"],
            "length": r["length"], "tasks": {}, "seconds": 0.0})
        row["tasks"][r["task"]] = r["accuracy"]
        row["seconds"] = None if row["seconds"] is None or "seconds" not in r else row["seconds"] + r["seconds"]
    out = []
    for row in rows.values():
        row["mean_accuracy"] = float(np.mean(list(row["tasks"].values())))
        row["perplexity"] = ppl.get(row["config"], {})
        out.append(row)
    return out


def markdown(results: dict, only: set[str] | None = None) -> str:
    """The results table; `only` keeps just those config names (e.g. the headline for a log)."""
    records = results["records"]
    rows = [r for r in summary_rows(records) if only is None or r["config"] in only]
    tasks = [t for t in TASKS if any(t in r["tasks"] for r in rows)]
    sources = sorted({r["source"] for r in records if r["kind"] == "perplexity"})
    digest = f" (model.safetensors sha256 {results['checkpoint_sha256'][:12]})" if "checkpoint_sha256" in results else ""
    cpu = (f" ({results['cpu_cores']} cores, {results['torch_threads']} torch thread(s))"
           if results.get("device") == "cpu" and "torch_threads" in results else "")
    lines = ["# RULER-style evaluation of SparseGDN", "",
             f"Model: {results.get('model', '?')}{digest}. Device: {results.get('device', '?')}{cpu}. "
             f"Date: {results.get('date', '?')}. Command: `{results.get('command', '?')}`."
             + "".join(f" Merged in (analysis/ruler_merge.py): {run.get('device', '?')}, {run.get('date', '?')}, "
                       f"`{run.get('command', '?')}`." for run in results.get("merged", [])), "",
             "Accuracy: fraction of answer spans whose every token is the model's argmax given the text before it "
             "(teacher forcing; for one answer this is greedy decoding). Samples per cell: "
             f"{results.get('samples', '?')}. Haystacks: held-out text. Perplexity: held-out windows of "
             f"{results.get('ppl_length', '?')} tokens.", ""]
    dense = {r["length"]: r for r in rows if r["config"] == DENSE.name}
    timed = bool(rows) and all(r["seconds"] is not None for r in rows)
    lines += ["| config | length | mean acc | vs dense | " + " | ".join(tasks) + " | "
              + " | ".join(f"ppl {s}" for s in sources) + " |" + (" wall s |" if timed else ""),
              "|---|---|---|---|" + "---|" * (len(tasks) + len(sources) + timed)]
    for row in sorted(rows, key=lambda r: (r["length"], r["config"] != DENSE.name, r["band"] or 0,
                                           -(r["budget"] or 2), r["selector"] or "")):
        base = dense.get(row["length"])
        ratio = row["mean_accuracy"] / base["mean_accuracy"] if base and base["mean_accuracy"] > 0 else float("nan")
        lines.append(f"| {row['config']} | {row['length']} | {row['mean_accuracy']:.3f} | {ratio:.3f} | "
                     + " | ".join(f"{row['tasks'].get(t, float('nan')):.2f}" for t in tasks) + " | "
                     + " | ".join(f"{row['perplexity'].get(s, float('nan')):.2f}" for s in sources) + " |"
                     + (f" {row['seconds']:.0f} |" if timed else ""))
    if timed:
        lines += ["", "wall s: the seconds of the row's batched forwards, all tasks (perplexity not included)."]
    if only is None:
        from .measurements import not_measured_text

        missing = not_measured_text(records_frame_of(results), [int(n) for n in results.get("samples", {})])
        if missing:
            lines += ["", "## Not measured", "", "Settings this run measured at other lengths but not at these (the "
                      "evaluation stops starting new work at its time budget):", ""] + missing
        lines += ["", "## Sample counts and 95% intervals (dense; score, uniform, random at budgets 0.29 and 0.15, band 1)", "",
                  "Wilson score intervals over the samples of each cell; a sample with several answers scores the "
                  "fraction it retrieved, which makes the interval conservative.", ""]
        lines += interval_table(results)
    return "\n".join(lines) + "\n"


def figure_html(results: dict) -> str:
    """Top: RULER accuracy against budget per length (each selector, bands 1 and 3; dashed: dense).
    Bottom: held-out perplexity relative to dense against budget, per source. A standalone plotly page."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = summary_rows(results["records"])
    ppl = [r for r in results["records"] if r["kind"] == "perplexity"]
    lengths = sorted({r["length"] for r in rows})
    sources = sorted({r["source"] for r in ppl})
    cols = max(len(lengths), len(sources), 1)
    titles = [f"accuracy, {n // 1024}K tokens" for n in lengths] + [""] * (cols - len(lengths))
    titles += [f"perplexity / dense, {s}" for s in sources] + [""] * (cols - len(sources))
    fig = make_subplots(rows=2, cols=cols, subplot_titles=titles, vertical_spacing=0.18)
    colors = {"score": "#1f77b4", "uniform": "#ff7f0e", "random": "#2ca02c", "oracle": "#9467bd"}

    def curves(points, x, y, row, col, show):
        for band, dash in ((1, "solid"), (3, "dot")):
            full = [p for p in points if p["band"] == band and (p["budget"] or 0) >= 1]
            for selector, color in colors.items():
                pts = sorted([p for p in points if p["band"] == band and p["selector"] == selector
                              and (p["budget"] or 0) < 1] + full, key=lambda p: p["budget"])
                if len(pts) < 1:
                    continue
                fig.add_trace(go.Scatter(x=[p["budget"] for p in pts], y=[y(p) for p in pts],
                                         mode="lines+markers", line=dict(color=color, dash=dash),
                                         name=f"{selector}, band {band}", legendgroup=f"{selector}{band}",
                                         showlegend=show), row=row, col=col)

    for col, length in enumerate(lengths, start=1):
        at = [r for r in rows if r["length"] == length]
        curves(at, "budget", lambda r: r["mean_accuracy"], 1, col, col == 1)
        dense = [r for r in at if r["config"] == DENSE.name]
        if dense:
            fig.add_hline(y=dense[0]["mean_accuracy"], line=dict(color="black", dash="dash"), row=1, col=col)
        fig.update_yaxes(range=[0, 1.02], row=1, col=col)
    for col, source in enumerate(sources, start=1):
        at = [r for r in ppl if r["source"] == source]
        dense = next((r["perplexity"] for r in at if r["config"] == DENSE.name), None)
        if dense:
            curves(at, "budget", lambda r, d=dense: r["perplexity"] / d, 2, col, False)
            fig.add_hline(y=1.0, line=dict(color="black", dash="dash"), row=2, col=col)
    fig.update_xaxes(title_text="budget (fraction of events kept)", type="log")
    fig.update_layout(title=f"SparseGDN on {results.get('model', '?')}: RULER-style accuracy and held-out perplexity",
                      height=760, width=300 * cols + 220)
    return fig.to_html(include_plotlyjs="cdn", full_html=True)


def sample_agreement(reference: dict, other: dict) -> list[dict]:
    """Per (config, length) that both evaluations measured, on the samples both ran (sample i has seed
    `seed` + i, so equal seeds mean equal samples): how many per-sample scores are equal (samples: over all
    tasks), and each evaluation's mean over tasks on those samples. Refuses evaluations of other seeds."""
    if reference.get("seed", 0) != other.get("seed", 0):
        raise ValueError(f"the evaluations drew other samples (seeds {reference.get('seed', 0)} and {other.get('seed', 0)})")
    by_key = {(r["config"], r["length"], r["task"]): r for r in reference["records"] if r["kind"] == "ruler"}
    rows: dict[tuple[str, int], dict] = {}
    for r in other["records"]:
        match = by_key.get((r.get("config"), r.get("length"), r.get("task")))
        if r["kind"] != "ruler" or match is None or "sample_scores" not in r or "sample_scores" not in match:
            continue
        n = min(len(r["sample_scores"]), len(match["sample_scores"]))
        mine, theirs = np.asarray(r["sample_scores"][:n]), np.asarray(match["sample_scores"][:n])
        row = rows.setdefault((r["config"], r["length"]), {"config": r["config"], "length": r["length"],
                                                           "samples": 0, "equal": 0, "means": []})
        row["samples"] += n
        row["equal"] += int((mine == theirs).sum())
        row["means"].append((float(theirs.mean()), float(mine.mean())))
    out = []
    for row in rows.values():
        reference_mean, other_mean = np.mean(row.pop("means"), axis=0)
        out.append({**row, "reference_mean": float(reference_mean), "other_mean": float(other_mean)})
    return sorted(out, key=lambda r: (r["length"], r["config"] != DENSE.name, r["config"]))


def write_report(json_path: Path) -> None:
    results = json.loads(json_path.read_text())
    json_path.with_suffix(".md").write_text(markdown(results))
    json_path.with_suffix(".html").write_text(figure_html(results))
