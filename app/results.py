"""The project's committed measurements (analysis/results/) as tidy polars frames for the Results page."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl

RESULTS_DIR = Path(__file__).resolve().parents[1] / "analysis" / "results"
KERNEL_COLUMNS = {"T": pl.Int64, "budget": pl.Float64, "band": pl.Int64, "selector": pl.Utf8,
                  "sparsegdn_ms": pl.Float64, "api_ms": pl.Float64, "fla_ms": pl.Float64,
                  "flashqla_ms": pl.Float64, "flashqla_spec_ms": pl.Float64, "peak_mem_mb": pl.Float64,
                  "fla_peak_mem_mb": pl.Float64, "device": pl.Utf8, "date": pl.Utf8, "command": pl.Utf8}


def kernel_bench(results_dir: Path = RESULTS_DIR) -> pl.DataFrame:
    """One row per (T, budget, band, selector) of kernel_bench.json, with the speed-up over FLA."""
    path = results_dir / "kernel_bench.json"
    if not path.is_file():
        return pl.DataFrame(schema={**KERNEL_COLUMNS, "speedup_vs_fla": pl.Float64})
    rows = [{name: row.get(name) for name in KERNEL_COLUMNS} for row in json.loads(path.read_text())]
    frame = pl.DataFrame(rows, schema=KERNEL_COLUMNS)
    return frame.with_columns((pl.col("fla_ms") / pl.col("sparsegdn_ms")).alias("speedup_vs_fla"))


def ruler(results_dir: Path = RESULTS_DIR) -> pl.DataFrame:
    """ruler.json as the evaluation's own tidy table (see analysis.ruler_report.records_frame)."""
    from analysis.ruler_report import records_frame

    path = results_dir / "ruler.json"
    return records_frame(path) if path.is_file() else pl.DataFrame()


def perplexity_change(ruler_frame: pl.DataFrame) -> pl.DataFrame:
    """Per sparse configuration and held-out source: perplexity change against dense, in percent."""
    ppl = ruler_frame.filter(pl.col("kind") == "perplexity")
    dense = ppl.filter(pl.col("config") == "dense").select("source", pl.col("perplexity").alias("dense"))
    return (ppl.filter(pl.col("config") != "dense").join(dense, on="source")
            .with_columns((100 * (pl.col("perplexity") / pl.col("dense") - 1)).alias("change_pct"))
            .select("budget", "selector", "band", "source", "perplexity", "dense", "change_pct")
            .sort("band", "selector", "budget", "source"))


def ruler_accuracy(ruler_frame: pl.DataFrame) -> pl.DataFrame:
    """Mean accuracy over tasks per configuration and length (dense has budget 1 and selector 'dense')."""
    acc = ruler_frame.filter(pl.col("kind") == "ruler")
    return (acc.with_columns(pl.col("budget").fill_null(1.0), pl.col("selector").fill_null("dense"),
                             pl.col("band").fill_null(3))
            .group_by("config", "budget", "selector", "band", "length")
            .agg(pl.col("accuracy").mean().alias("accuracy"), pl.col("samples").sum().alias("samples"))
            .sort("length", "band", "selector", "budget"))
