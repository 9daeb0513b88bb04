"""Views of a run's records: group-bys and pivots of the tidy tables in `analysis.records`.

Everything here is a pure function of polars frames (no Streamlit), so the views can be
tested on frames built in tests. Overviews bin chunks so a 128K-token document (2048
chunks) stays a few hundred columns wide; `chunk_window` views are exact.
"""
from __future__ import annotations

import math

import numpy as np
import polars as pl


def bin_width(n_chunks: int, max_columns: int) -> int:
    """Chunks per column so that at most `max_columns` columns cover `n_chunks` chunks."""
    if max_columns < 1:
        raise ValueError(f"max_columns must be >= 1, got {max_columns}")
    return max(1, math.ceil(n_chunks / max_columns))


def _with_bin(frame: pl.DataFrame, width: int) -> pl.DataFrame:
    return frame.with_columns(((pl.col("chunk") // width) * width).alias("chunk_bin"))


def n_chunks_of(events: pl.DataFrame) -> int:
    return int(events["chunk"].max()) + 1 if events.height else 0


def selected_share_by_layer(events: pl.DataFrame, max_columns: int = 512) -> tuple[pl.DataFrame, int]:
    """Share of events selected per (layer, chunk bin), over head pairs and the bin's chunks.

    Returns the frame (layer, chunk_bin, share_selected) and the bin width in chunks.
    """
    width = bin_width(n_chunks_of(events), max_columns)
    share = (
        _with_bin(events.select("layer", "chunk", "selected"), width)
        .group_by("layer", "chunk_bin")
        .agg(pl.col("selected").cast(pl.Float64).mean().alias("share_selected"))
        .sort("layer", "chunk_bin")
    )
    return share, width


def layer_event_grid(
    events: pl.DataFrame,
    layer: int,
    value: str = "selected",
    chunk_window: tuple[int, int] | None = None,
    max_columns: int = 1024,
) -> tuple[pl.DataFrame, int]:
    """One layer's events as (head_pair, chunk_bin, value), inside `chunk_window` = [start, end).

    `value` is a column of the events table; selected is averaged to a share when binned.
    Returns the frame and the bin width (1 = full resolution).
    """
    if value not in events.columns:
        raise ValueError(f"events has no column {value!r}; columns: {events.columns}")
    frame = events.filter(pl.col("layer") == layer)
    if chunk_window is not None:
        start, end = chunk_window
        frame = frame.filter((pl.col("chunk") >= start) & (pl.col("chunk") < end))
        span = max(0, end - start)
    else:
        span = n_chunks_of(frame)
    width = bin_width(span, max_columns)
    grid = (
        _with_bin(frame.select("head_pair", "chunk", value), width)
        .group_by("head_pair", "chunk_bin")
        .agg(pl.col(value).cast(pl.Float64).mean().alias(value))
        .sort("head_pair", "chunk_bin")
    )
    return grid, width


def to_matrix(frame: pl.DataFrame, row: str, column: str, value: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pivot a long frame to (row labels, column labels, z[row, column]) with NaN where absent."""
    rows = np.sort(frame[row].unique().to_numpy())
    columns = np.sort(frame[column].unique().to_numpy())
    z = np.full((len(rows), len(columns)), np.nan)
    if frame.height:
        r = np.searchsorted(rows, frame[row].to_numpy())
        c = np.searchsorted(columns, frame[column].to_numpy())
        z[r, c] = frame[value].cast(pl.Float64).fill_null(float("nan")).to_numpy()
    return rows, columns, z


def events_per_head_pair(heads: pl.DataFrame, layer: int) -> pl.DataFrame:
    """Events each head pair of `layer` received, beside an even split of the layer's total."""
    frame = heads.filter(pl.col("layer") == layer).select("head_pair", "events_selected").sort("head_pair")
    even = frame["events_selected"].sum() / max(1, frame.height)
    return frame.with_columns(pl.lit(even, dtype=pl.Float64).alias("even_split"))


def events_per_layer(heads: pl.DataFrame) -> pl.DataFrame:
    """Events each layer received (summed over head pairs), beside an even split over layers."""
    frame = heads.group_by("layer").agg(pl.col("events_selected").sum()).sort("layer")
    even = frame["events_selected"].sum() / max(1, frame.height)
    return frame.with_columns(pl.lit(even, dtype=pl.Float64).alias("even_split"))


def allocation_spread(heads: pl.DataFrame) -> pl.DataFrame:
    """Per layer: fewest, most, and coefficient of variation of events over head pairs."""
    return (
        heads.group_by("layer")
        .agg(
            pl.col("events_selected").min().alias("fewest"),
            pl.col("events_selected").max().alias("most"),
            (pl.col("events_selected").std() / pl.col("events_selected").mean()).alias("variation"),
        )
        .sort("layer")
    )


def error_along_document(
    events: pl.DataFrame, layer: int | None = None, max_columns: int = 512
) -> tuple[pl.DataFrame, int]:
    """Mean and max of the chunk output error over head pairs, per (layer, chunk bin).

    `layer=None` keeps every layer. Rows with a null error (run without compare_dense) drop out.
    """
    frame = events.select("layer", "chunk", "rel_err_o").filter(pl.col("rel_err_o").is_not_null())
    if layer is not None:
        frame = frame.filter(pl.col("layer") == layer)
    width = bin_width(n_chunks_of(events), max_columns)
    out = (
        _with_bin(frame, width)
        .group_by("layer", "chunk_bin")
        .agg(
            pl.col("rel_err_o").mean().alias("rel_err_o_mean"),
            pl.col("rel_err_o").max().alias("rel_err_o_max"),
        )
        .sort("layer", "chunk_bin")
    )
    return out, width


def has_error(frame: pl.DataFrame, column: str = "rel_err_o") -> bool:
    return column in frame.columns and frame[column].null_count() < frame.height


def timings_long(layers: pl.DataFrame) -> pl.DataFrame:
    """Per layer GDN-core times as (layer, path, core_ms), path in {dense, sparse}."""
    return (
        layers.select("layer", pl.col("core_ms_dense").alias("dense"), pl.col("core_ms_sparse").alias("sparse"))
        .unpivot(index="layer", variable_name="path", value_name="core_ms")
        .sort("layer", "path")
    )


def chunk_text(text: str, chunks: pl.DataFrame, chunk: int) -> str:
    row = chunks.filter(pl.col("chunk") == chunk)
    if row.height == 0:
        raise ValueError(f"no chunk {chunk}; the document has {chunks.height} chunks")
    return text[int(row["char_start"][0]) : int(row["char_end"][0])]


def chunk_previews(text: str, chunks: pl.DataFrame, width: int = 90) -> list[str]:
    """A one-line preview of each chunk's text (for hover labels), in chunk order."""
    previews = []
    for start, end in chunks.sort("chunk").select("char_start", "char_end").iter_rows():
        snippet = " ".join(text[start:end].split())
        previews.append(snippet if len(snippet) <= width else snippet[: width - 1] + "…")
    return previews


def find_chunks(text: str, chunks: pl.DataFrame, query: str, limit: int = 50) -> list[int]:
    """Chunks whose text contains `query` (case-insensitive), in document order."""
    query = query.strip().lower()
    if not query:
        return []
    lowered = text.lower()
    starts = chunks.sort("chunk")["char_start"].to_numpy()
    found: list[int] = []
    position = lowered.find(query)
    while position != -1 and len(found) < limit:
        chunk = int(np.searchsorted(starts, position, side="right") - 1)
        if not found or found[-1] != chunk:
            found.append(chunk)
        position = lowered.find(query, position + 1)
    return found
