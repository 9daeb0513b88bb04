"""Export a run's records (CSV, Parquet, a zip of all) and figures (standalone HTML) as bytes."""
from __future__ import annotations

import html
import io
import json
import zipfile

import plotly.graph_objects as go
import polars as pl

RECORD_TABLES = ("events", "heads", "layers", "chunks", "timings", "tokens")
FORMATS = ("csv", "parquet")


def frame_bytes(frame: pl.DataFrame, fmt: str) -> bytes:
    buffer = io.BytesIO()
    if fmt == "csv":
        frame.write_csv(buffer)
    elif fmt == "parquet":
        frame.write_parquet(buffer)
    else:
        raise ValueError(f"unknown export format {fmt!r}; use one of {FORMATS}")
    return buffer.getvalue()


def figure_html(fig: go.Figure, source: str | None = None) -> bytes:
    """A standalone page: plotly.js is embedded so the file opens offline. `source` (the run's document and
    configuration, in words) goes under the figure's title and into the page's title, so that a saved file says
    what it shows."""
    if source:
        fig = go.Figure(fig)
        title = fig.layout.title.text or ""
        fig.update_layout(title_text=f"{title}<br><sup>{html.escape(source)}</sup>",
                          margin={"t": max(70, (fig.layout.margin.t or 0) + 20)})
    page = fig.to_html(full_html=True, include_plotlyjs=True)
    if source:
        page = page.replace("<head>", f"<head><title>{html.escape(source)}</title>", 1)
    return page.encode("utf-8")


def summary_json(summary: dict) -> bytes:
    return json.dumps(summary, indent=2, sort_keys=True, default=str).encode("utf-8")


def records_zip(result, fmt: str, document: str | None = None) -> bytes:
    """Every record table of a RunResult in `fmt`, plus summary.json (and the document)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in RECORD_TABLES:
            archive.writestr(f"{name}.{fmt}", frame_bytes(getattr(result, name), fmt))
        archive.writestr("summary.json", summary_json(result.summary))
        if document is not None:
            archive.writestr("document.txt", document.encode("utf-8"))
    return buffer.getvalue()
