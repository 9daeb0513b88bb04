"""Views of a run's records: group-bys and pivots of the tidy tables in `analysis.records`.

Everything here is a pure function of polars frames (no Streamlit), so the views can be
tested on frames built in tests. Overviews bin chunks so a 128K-token document (2048
chunks) stays a few hundred columns wide; `chunk_window` views are exact.
"""
from __future__ import annotations

import math
import re

import numpy as np
import polars as pl

from analysis.timing import Spread

# What a person reads for each record column (docs: analysis/README.md); tables on screen use these.
COLUMN_LABELS = {
    "layer": "layer", "head_pair": "head pair", "chunk": "chunk", "selected": "kept",
    "score": "selector score", "rel_err_o": "output error", "rel_err_state": "final-state error",
    "events_selected": "events kept", "fewest": "fewest events", "most": "most events",
    "variation": "variation (std / mean)", "core_ms_dense": "GDN core, dense (ms)",
    "core_ms_sparse": "GDN core, sparse (ms)", "n_tokens": "tokens", "prefill_ms_dense": "prefill, dense (ms)",
    "prefill_ms_sparse": "prefill, sparse (ms)", "wall_s": "wall time (s)", "repeats": "timing repeats",
    "number": "#", "label": "run", "source": "source", "device": "device", "timing": "how timed",
    "T": "tokens", "budget": "budget", "band": "band", "selector": "selector", "design": "design",
    "api_ms": "public call (ms)", "api_ms_low": "public call, lowest round (ms)",
    "api_ms_high": "public call, highest round (ms)", "api_wall_ms": "public call, back to back (ms a call)",
    "sparsegdn_ms": "kernels only (ms)", "fla_ms": "FLA (ms)",
    "flashqla_ms": "FlashQLA (ms)", "public_vs_fla": "FLA / public call", "public_vs_flashqla": "FlashQLA / public call",
    "kernels_vs_fla": "FLA / kernels only", "peak_mem_mb": "peak extra MB", "fla_peak_mem_mb": "FLA peak extra MB",
    "output_lists": "outputs by the Gluon lists", "early_checks": "waited for the early checks only",
    "tokens": "tokens", "core": "GDN core", "error": "error", "prefill_ms_median": "prefill (ms, median)",
    "core_ms_median": "GDN core (ms, median)", "prefill_vs_dense": "prefill vs dense", "core_vs_dense": "core vs dense",
    "peak_mem_gib": "peak GiB", "family": "inputs", "seeds": "seeds", "config": "configuration", "length": "tokens",
    "accuracy": "accuracy", "samples": "samples", "shape": "shape", "dense_reference": "dense, reference (ms)",
    "sparse_reference": "sparse, reference (ms)", "sparse_api": "sparse, public torch path (ms)",
    "dense_api": "dense, same path (ms)", "sparse_api_1slab": "sparse, one slab (ms)", "model": "model",
    "device_name": "device", "prefill_dense_median": "prefill, dense (ms)", "prefill_sparse_median": "prefill, sparse (ms)",
    "core_dense_median": "GDN core, dense (ms)", "core_sparse_median": "GDN core, sparse (ms)",
    "ci_low": "95% interval, low", "ci_high": "95% interval, high", "tasks": "tasks",
    "equal": "per-sample scores equal", "mean": "mean accuracy", "reference mean": "reference's mean, same samples",
}
SIGNIFICANT_DIGITS = 4


def bin_width(n_chunks: int, max_columns: int) -> int:
    """Chunks per column so that at most `max_columns` columns cover `n_chunks` chunks."""
    if max_columns < 1:
        raise ValueError(f"max_columns must be >= 1, got {max_columns}")
    return max(1, math.ceil(n_chunks / max_columns))


def _with_bin(frame: pl.DataFrame, width: int, start: int = 0) -> pl.DataFrame:
    """Each chunk's column: the first chunk of its bin, bins of `width` chunks counted from `start`."""
    return frame.with_columns((start + (pl.col("chunk") - start) // width * width).alias("chunk_bin"))


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

    `value` is a column of the events table; selected is averaged to a share when binned. Bins start
    at the window's first chunk (the last may be shorter), so no column reaches outside the window.
    Returns the frame and the bin width (1 = full resolution).
    """
    if value not in events.columns:
        raise ValueError(f"events has no column {value!r}; columns: {events.columns}")
    frame = events.filter(pl.col("layer") == layer)
    start = 0
    if chunk_window is not None:
        start, end = chunk_window
        frame = frame.filter((pl.col("chunk") >= start) & (pl.col("chunk") < end))
        span = max(0, end - start)
    else:
        span = n_chunks_of(frame)
    width = bin_width(span, max_columns)
    grid = (
        _with_bin(frame.select("head_pair", "chunk", value), width, start)
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


def readable(frame: pl.DataFrame) -> pl.DataFrame:
    """A table as a person reads it: the column names of COLUMN_LABELS and floats to 4 significant
    digits (times in ms to 0.1 ms). Columns without a label keep their name."""
    rounded = []
    for name, dtype in frame.schema.items():
        column = pl.col(name)
        if dtype.is_float():
            column = column.round(1) if name.endswith("_ms") or "_ms_" in name else column.round_sig_figs(SIGNIFICANT_DIGITS)
        rounded.append(column.alias(COLUMN_LABELS.get(name, name)))
    return frame.select(rounded)


def timing_spreads(result) -> dict[str, Spread]:
    """The spreads a run's summary recorded ("prefill_dense", "core_sparse", ...); none for a run
    recorded before timings were repeated."""
    timing = result.summary.get("timing") or {}
    return {name: Spread.from_dict(value) for name, value in timing.items()
            if name.startswith(("prefill_", "core_")) and isinstance(value, dict)}


def core_ranges(timings: pl.DataFrame) -> pl.DataFrame:
    """Per layer and path: the median, min and max of the GDN core's time over the repeats."""
    return (timings.filter(pl.col("scope") == "core").group_by("layer", "path")
            .agg(pl.col("ms").median().alias("median"), pl.col("ms").min().alias("low"),
                 pl.col("ms").max().alias("high"), pl.len().alias("n"))
            .sort("layer", "path"))


def placement_table(rows: list[dict]) -> pl.DataFrame:
    """One row per GPU of a model spread over several (analysis.placement rows): its layers, the
    weights it holds and its peak allocated memory, out of its total."""
    from analysis.placement import layer_ranges

    return pl.DataFrame([{"device": row["device"], "card": row["name"], "layers": layer_ranges(row["layers"]),
                          "GDN layers": len(row["gdn_layers"]), "weights (GiB)": row["weights_gib"],
                          "peak (GiB)": row.get("peak_gib"), "memory (GiB)": row.get("total_gib")} for row in rows],
                        schema={"device": pl.String, "card": pl.String, "layers": pl.String, "GDN layers": pl.Int64,
                                "weights (GiB)": pl.Float64, "peak (GiB)": pl.Float64, "memory (GiB)": pl.Float64})


def attention_layers(gdn_layers: list[int], n_layers: int | None = None) -> list[int]:
    """The layers between (and, given n_layers, after) the GDN layers: attention layers, which have no
    GDN core and so no events, errors or core times."""
    if not gdn_layers:
        return []
    last = (n_layers - 1) if n_layers else max(gdn_layers)
    present = set(gdn_layers)
    return [layer for layer in range(last + 1) if layer not in present]


def needle_chunk(text: str, chunks: pl.DataFrame, needle: str) -> int | None:
    """The first chunk whose text holds `needle` (case-insensitive), or None."""
    found = find_chunks(text, chunks, needle, limit=1) if text else []
    return found[0] if found else None


def chunk_in_layer(events: pl.DataFrame, layer: int, chunk: int) -> dict:
    """How one chunk fared in one layer: head pairs that kept it, of how many, and the rank of its best
    score among the layer's events (1 = the highest)."""
    in_layer = events.filter(pl.col("layer") == layer)
    here = in_layer.filter(pl.col("chunk") == chunk)
    best = float(here["score"].max())
    return {"layer": layer, "chunk": chunk, "kept": int(here["selected"].sum()), "head_pairs": here.height,
            "best_score": best, "rank": int((in_layer["score"] > best).sum()) + 1, "events": in_layer.height,
            "kept_in_layer": int(in_layer["selected"].sum())}


def chunk_kept_by_layer(events: pl.DataFrame, chunk: int) -> pl.DataFrame:
    """Per layer: how many of its head pairs kept `chunk` (kept) and how many it has (head_pairs)."""
    return (events.filter(pl.col("chunk") == chunk).group_by("layer")
            .agg(pl.col("selected").sum().alias("kept"), pl.len().alias("head_pairs")).sort("layer"))


def layer_keeping_most(events: pl.DataFrame, chunk: int) -> int:
    """The layer in which most head pairs kept `chunk` (the first such layer)."""
    kept = chunk_kept_by_layer(events, chunk).sort(["kept", "layer"], descending=[True, False])
    return int(kept["layer"][0])


def passkey_outcome(text: str, tokens: pl.DataFrame, pattern: re.Pattern) -> dict | None:
    """Whether each path retrieved a passkey the document hides and asks for again at its end.

    `pattern` matches the needle's sentence with the passkey as its last group; the first match is the
    needle (the expected passkey), the last one the answer after the question, teacher-forced: the
    prediction before each of the answer's tokens is compared with that token. Returns {"expected",
    "dense", "sparse"}, each path {"answer": predicted text, "retrieved": bool} or None when the run
    has no dense predictions; None when the text holds no needle and answer, or the run no tokens."""
    found = list(pattern.finditer(text))
    if len(found) < 2 or tokens.height == 0:
        return None
    start, end = found[-1].span(found[-1].lastindex)
    answer = tokens.filter((pl.col("char_end") > start) & (pl.col("char_start") < end)).sort("position")
    before = tokens.filter(pl.col("position").is_in((answer["position"] - 1).implode())).sort("position")
    if answer.height == 0 or before.height != answer.height:
        return None
    outcome = {"expected": found[0].group(found[0].lastindex)}
    for path in ("dense", "sparse"):
        predicted = before[f"predicted_{path}"]
        outcome[path] = None if predicted.null_count() else {
            "answer": "".join(before[f"predicted_{path}_text"].to_list()).strip(),
            "retrieved": predicted.to_list() == answer["token"].to_list()}
    return outcome


def history_row(result, label: str, source: str, seconds: float | None) -> dict:
    """One run of the session as the Timings page lists it: prefill medians and ranges, how timed."""
    summary = result.summary
    spreads = timing_spreads(result)
    row = {"label": label, "source": source, "device": summary.get("device_name") or summary.get("device"),
           "n_tokens": summary.get("n_tokens"),
           "timing": f"median of {summary['timing']['repeats']}" if summary.get("timing") else "one measurement"}
    for path in ("dense", "sparse"):
        spread = spreads.get(f"prefill_{path}")
        row[f"prefill_ms_{path}"] = spread.median if spread else summary.get(f"prefill_ms_{path}")
        row[f"prefill_ms_{path}_low"] = spread.low if spread else None
        row[f"prefill_ms_{path}_high"] = spread.high if spread else None
    row["wall_s"] = seconds
    return row


def core_implementation(summary: dict) -> str:
    """Which code ran the GDN cores of a run, in words."""
    if summary.get("backend") == "triton":
        sparse = "SparseGDN's Triton kernels"
    elif summary.get("timing"):
        sparse = ("SparseGDN's torch path (sparsegdn/event_forward.py: a skipped event costs no recurrence step)")
    else:
        return "This run was recorded by an earlier version, whose CPU path was the chunked reference."
    dense = {"fla": "FLA's kernels", "torch": "the same torch path with every event and the exact solve (band 3), "
             "so dense and sparse differ by what is skipped and, below band 3, by the block-adjacent solve"
             }.get(summary.get("dense_backend"), "—")
    return f"Sparse core: {sparse}. Dense core: {dense}."

