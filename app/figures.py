"""Figures: each a function from polars frames (the records of `analysis.records`) to a plotly figure.

No Streamlit here; tests call these on frames they build. Overviews are binned through
`app.tables`; hover labels say how many chunks a column covers.
"""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from app import tables
from app.viewstate import VALUE_LABELS

SELECTED_SCALE = [[0.0, "#f1f3f6"], [1.0, "#1f5fbf"]]
ERROR_SCALE = "Viridis"
BUDGET_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")   # kernel_speedup's budgets
DENSE_COLOUR = "#7f7f7f"
SPARSE_COLOUR = "#1f5fbf"
OTHER_COLOUR = "#d9711c"


def _chunk_hover(width: int) -> str:
    """Hover text for a chunk column; a template, so no per-cell strings travel to the browser."""
    return "chunk %{x}" if width == 1 else f"chunks %{{x}} to %{{x}}+{width - 1}"


def _chunk_span_labels(firsts: np.ndarray, lasts: np.ndarray) -> list[str]:
    return [f"chunk {int(a)}" if a == b else f"chunks {int(a)}–{int(b)}" for a, b in zip(firsts, lasts)]


def _integer_ticks(n_values: int) -> dict:
    """Axis settings for an integer axis (layers, head pairs): no 0.5 ticks, at most ~16 labels."""
    return {"tickmode": "linear", "tick0": 0, "dtick": max(1, -(-n_values // 16))}


def _layer_rows(fig: go.Figure) -> None:
    """Layers as categories, top to bottom: GDN layer ids skip the attention layers (0,1,2,4,…),
    and a numeric axis would stretch the rows next to each gap."""
    fig.update_yaxes(type="category", autorange="reversed")


def _mark_attention_layers(fig: go.Figure, layers: list[int]) -> None:
    """Grey bands where the attention layers sit between GDN layers: they have no GDN core, so no bar."""
    for layer in layers:
        fig.add_vrect(x0=layer - 0.45, x1=layer + 0.45, fillcolor="#e6e6e6", opacity=0.6, line_width=0,
                      layer="below", annotation_text="attention layer", annotation_position="inside top",
                      annotation_textangle=-90, annotation_font={"size": 10, "color": "#666666"})


def _mark_chunk(fig: go.Figure, chunk: int | None, **where) -> None:
    if chunk is not None:
        fig.add_vline(x=chunk, line_width=1.5, line_dash="dot", line_color="#d62728", **where)


def layer_overview(events: pl.DataFrame, max_columns: int = 512, chunk: int | None = None) -> go.Figure:
    """Layer x chunk heatmap of the share of head pairs' events selected (binned over chunks)."""
    share, width = tables.selected_share_by_layer(events, max_columns)
    layers, columns, z = tables.to_matrix(share, "layer", "chunk_bin", "share_selected")
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=columns,
            y=layers,
            colorscale="Blues",
            zmin=0.0,
            zmax=1.0,
            colorbar={"title": "share<br>selected", "tickformat": ".0%"},
            hovertemplate=f"layer %{{y}}<br>{_chunk_hover(width)}<br>selected %{{z:.0%}}<extra></extra>",
        )
    )
    binned = "" if width == 1 else f" ({width} chunks per column)"
    fig.update_layout(
        title=f"Events selected, all layers{binned}",
        xaxis_title="chunk",
        yaxis_title="layer",
        height=max(260, 16 * len(layers) + 120),
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
    )
    _layer_rows(fig)
    _mark_chunk(fig, chunk)
    return fig


def event_heatmap(
    events: pl.DataFrame,
    layer: int,
    value: str = "selected",
    chunk_window: tuple[int, int] | None = None,
    max_columns: int = 1024,
    previews: list[str] | None = None,
    chunk: int | None = None,
) -> go.Figure:
    """Head pair x chunk heatmap of one layer, with a document strip below to pick a chunk.

    `value` is "selected", "score" or "rel_err_o". The strip is a scatter trace (one point per
    column, hover shows the chunk's text) because heatmaps cannot be selected in Streamlit.
    """
    grid, width = tables.layer_event_grid(events, layer, value, chunk_window, max_columns)
    head_pairs, columns, z = tables.to_matrix(grid, "head_pair", "chunk_bin", value)
    start, end = chunk_window if chunk_window is not None else (0, tables.n_chunks_of(events))
    lasts = np.minimum(columns + width, end) - 1  # each column's last chunk; the window's end cuts the last bin
    # Chunk c spans c-0.5..c+0.5 on the axis, so a bin's cell is centred on its chunks; the axis range
    # below clips a short last bin at the window's end. Without a set range, plotly's autorange would
    # stretch the axis to the chosen-chunk line and pad it for the strip's markers.
    x = columns + (width - 1) / 2 if width > 1 else columns
    spans = _chunk_span_labels(columns, lasts)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.86, 0.14], vertical_spacing=0.03)
    shown = z       # the colour's value: z itself, or (scores) its log10
    value_hover = "%{z:.3g}"
    if value == "selected":
        colour = {"colorscale": SELECTED_SCALE if width == 1 else "Blues", "zmin": 0.0, "zmax": 1.0}
        label, fmt = (VALUE_LABELS[value] if width == 1 else "share selected"), ".0%"
        value_hover = "%{z:.0%}"
    elif value == "score":
        # Scores span many orders of magnitude (decay makes most tiny, the last chunks' large): coloured by
        # log10 on a scale of the 2nd..98th percentile, the colour bar ticked in powers of ten, the hover
        # showing the score itself. Zero scores take the smallest positive one's colour.
        label, fmt = VALUE_LABELS.get(value, value), ".3g"
        positive = z[np.isfinite(z) & (z > 0)]
        floor = float(positive.min()) if positive.size else 1e-12
        with np.errstate(invalid="ignore"):
            shown = np.log10(np.maximum(z, floor))
        finite = shown[np.isfinite(shown)]
        low, high = (np.percentile(finite, [2, 98]) if finite.size else (-12.0, 0.0))
        high = max(float(high), float(low) + 1e-6)
        steps = (1, 2, 5) if high - low < 3 else (1,)      # fewer than three decades: ticks at 1, 2 and 5 too
        tickvals = [p + math.log10(m) for p in range(math.floor(low), math.ceil(high) + 1) for m in steps]
        tickvals = [v for v in tickvals if low - 1e-9 <= v <= high + 1e-9]
        ticktext = [f"{10 ** v:.0e}" for v in tickvals]
        if len(tickvals) < 2:       # scores inside one decade, between its 1, 2 and 5: the range's two ends
            tickvals, ticktext = [float(low), high], [f"{10 ** float(low):.2g}", f"{10 ** high:.2g}"]
        colour = {"colorscale": ERROR_SCALE, "zmin": float(low), "zmax": high}
        ticks = {"tickvals": tickvals, "ticktext": ticktext}
        value_hover = "%{customdata[" + ("2" if width > 1 else "0") + "]:.3g}"
    else:
        # Errors are heavy-tailed (a few chunks dwarf the rest): clip the colour range to the 2nd..98th
        # percentile so the bulk stays readable; hover still shows the exact value.
        finite = z[np.isfinite(z)]
        low, high = (np.percentile(finite, [2, 98]) if finite.size else (0.0, 1.0))
        colour = {"colorscale": ERROR_SCALE, "zmin": float(low), "zmax": float(max(high, low + 1e-12))}
        label, fmt = VALUE_LABELS.get(value, value), ".3g"
    # A binned cell's hover names its first and last chunk (customdata: numbers, not per-cell strings).
    chunks_hover, chunk_data = _chunk_hover(1), {}
    if width > 1:
        chunks_hover = "chunks %{customdata[0]}–%{customdata[1]}"
        chunk_data = {"customdata": np.tile(np.stack([columns, lasts], axis=-1), (len(head_pairs), 1, 1))}
    if value == "score":        # the score itself for the hover, after the chunks where they are binned
        raw = z[..., None]
        chunk_data = {"customdata": np.concatenate([chunk_data["customdata"], raw], axis=-1) if width > 1 else raw}
    colour_bar = {"title": label + (" (log scale)" if value == "score" else ""), "len": 0.85, "y": 0.57,
                  **(ticks if value == "score" else {"tickformat": fmt})}
    fig.add_trace(
        go.Heatmap(
            z=shown,
            x=x,
            y=head_pairs,
            colorbar=colour_bar,
            hovertemplate=f"head pair %{{y}}<br>{chunks_hover}<br>{label} {value_hover}<extra></extra>",
            **chunk_data,
            **colour,
        ),
        row=1,
        col=1,
    )
    hover = spans
    if previews is not None:
        hover = [f"{span}: {previews[int(c)] if int(c) < len(previews) else ''}" for span, c in zip(spans, columns)]
    fig.add_trace(
        go.Scatter(
            x=x,
            y=np.zeros(len(columns)),
            customdata=columns,  # the chunk a click opens: the column's first
            mode="markers",
            marker={"symbol": "square", "size": 9, "color": "#9aa5b1"},
            text=hover,
            hovertemplate="%{text}<extra></extra>",
            name="document",
            showlegend=False,
        ),
        row=2,
        col=1,
    )
    binned = "" if width == 1 else f" ({width} chunks per column)"
    fig.update_layout(
        title=f"Layer {layer}: {label} per head pair and chunk{binned}",
        height=560,
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
        clickmode="event+select",
        dragmode="zoom",
    )
    fig.update_yaxes(title_text="head pair", autorange="reversed", row=1, col=1, **_integer_ticks(len(head_pairs)))
    fig.update_yaxes(visible=False, fixedrange=True, row=2, col=1)
    fig.update_xaxes(range=[start - 0.5, end - 0.5])
    if end - start <= 16:  # plotly ticks a window of a few chunks at half chunks
        fig.update_xaxes(**_integer_ticks(end - start))
    fig.update_xaxes(title_text="chunk (click the strip to read a chunk)", row=2, col=1)
    _mark_chunk(fig, chunk if chunk is not None and start <= chunk < end else None, row="all", col=1)
    return fig


def _bars_with_even_split(frame: pl.DataFrame, x: str, title: str, x_title: str) -> go.Figure:
    fig = go.Figure()
    fig.add_trace(
        go.Bar(x=frame[x].to_list(), y=frame["events_selected"].to_list(), name="events received", marker_color=SPARSE_COLOUR)
    )
    even = float(frame["even_split"][0]) if frame.height else 0.0
    shown = f"{even:,.0f}" if even >= 100 else f"{even:.3g}"
    fig.add_hline(y=even, line_dash="dash", line_color=OTHER_COLOUR, annotation_text=f"even split {shown}",
                  annotation_position="top right", annotation_bgcolor="rgba(255,255,255,0.85)")
    fig.update_layout(title=title, xaxis_title=x_title, yaxis_title="events", height=360, showlegend=False,
                      margin={"l": 60, "r": 20, "t": 50, "b": 40})
    fig.update_xaxes(**_integer_ticks(frame.height))
    return fig


def allocation_by_head_pair(per_head_pair: pl.DataFrame, layer: int) -> go.Figure:
    """Bars of events per head pair (`tables.events_per_head_pair`) against the even split."""
    return _bars_with_even_split(per_head_pair, "head_pair", f"Layer {layer}: events per head pair", "head pair")


def allocation_by_layer(per_layer: pl.DataFrame, attention: list[int] = ()) -> go.Figure:
    """Bars of events per layer (`tables.events_per_layer`) against the even split; `attention`: the
    attention layers among them, marked (`tables.attention_layers`)."""
    fig = _bars_with_even_split(per_layer, "layer", "Events per layer", "layer")
    _mark_attention_layers(fig, list(attention))
    return fig


ALLOCATION_MIN_HEIGHT = 420   # px: room for the colour bar's labels, however few the layers
MOST_COLOUR_TICKS = 7


def _power_ticks(reach: float) -> list[int]:
    """Powers of two for a log2 colour bar over [-reach, reach]: 0 and at most MOST_COLOUR_TICKS in all,
    every `step`-th power when there are more, so the labels never crowd."""
    top = int(np.ceil(reach))
    step = max(1, int(np.ceil(2 * top / (MOST_COLOUR_TICKS - 1))))
    return [-t for t in range(step, top + 1, step)][::-1] + list(range(0, top + 1, step))


def allocation_heatmap(heads: pl.DataFrame) -> go.Figure:
    """Layer x head pair heatmap of events received relative to the layer's even split (log2 colour)."""
    frame = heads.with_columns(
        (pl.col("events_selected") / pl.col("events_selected").mean().over("layer")).alias("relative")
    ).with_columns(pl.col("relative").clip(lower_bound=1 / 64).log(2).alias("log2_relative"))
    layers, head_pairs, z = tables.to_matrix(frame, "layer", "head_pair", "log2_relative")
    _, _, relative = tables.to_matrix(frame, "layer", "head_pair", "relative")
    reach = max(1.0, float(np.nanmax(np.abs(z))) if z.size else 1.0)
    ticks = _power_ticks(reach)
    fig = go.Figure(
        go.Heatmap(z=z, x=head_pairs, y=layers, customdata=relative, colorscale="RdBu", zmid=0.0,
                   zmin=-reach, zmax=reach,
                   colorbar={"title": "x even<br>split", "tickvals": ticks,
                             "ticktext": [f"×{2.0 ** t:g}" if t >= 0 else ("≤×1/64, or none" if t <= -6 else
                                                                            f"×1/{2 ** -t}") for t in ticks]},
                   hovertemplate="layer %{y}, head pair %{x}<br>%{customdata:.2f} x even split<extra></extra>")
    )
    fig.update_layout(title="Events received relative to an even split", xaxis_title="head pair",
                      yaxis_title="layer", height=max(ALLOCATION_MIN_HEIGHT, 24 * len(layers) + 120),
                      margin={"l": 60, "r": 20, "t": 50, "b": 40})
    fig.update_xaxes(**_integer_ticks(len(head_pairs)))
    _layer_rows(fig)
    return fig


def error_heatmap(heads: pl.DataFrame, column: str = "rel_err_o") -> go.Figure:
    """Layer x head pair heatmap of a relative error column of the heads table."""
    layers, head_pairs, z = tables.to_matrix(heads, "layer", "head_pair", column)
    label = tables.COLUMN_LABELS.get(column, column)
    fig = go.Figure(
        go.Heatmap(z=z, x=head_pairs, y=layers, colorscale=ERROR_SCALE, colorbar={"title": label.replace(" ", "<br>")},
                   hovertemplate=f"layer %{{y}}, head pair %{{x}}<br>{label} %{{z:.3g}}<extra></extra>")
    )
    fig.update_layout(title=f"Relative {label} versus dense, per layer and head pair",
                      xaxis_title="head pair", yaxis_title="layer", height=max(300, 16 * len(layers) + 120),
                      margin={"l": 60, "r": 20, "t": 50, "b": 40})
    fig.update_xaxes(**_integer_ticks(len(head_pairs)))
    _layer_rows(fig)
    return fig


def error_by_layer(layers: pl.DataFrame, attention: list[int] = ()) -> go.Figure:
    """Bars of each layer's relative output error versus dense; the attention layers marked."""
    fig = go.Figure(go.Bar(x=layers["layer"].to_list(), y=layers["rel_err_o"].to_list(), marker_color=SPARSE_COLOUR,
                           hovertemplate="layer %{x}<br>output error %{y:.3g}<extra></extra>"))
    fig.update_layout(title="Relative output error versus dense, per layer", xaxis_title="layer",
                      yaxis_title="||o_sparse − o_dense|| / ||o_dense||", height=340,
                      margin={"l": 60, "r": 20, "t": 50, "b": 40})
    fig.update_xaxes(**_integer_ticks(layers.height))
    _mark_attention_layers(fig, list(attention))
    return fig


def error_along_document(events: pl.DataFrame, layer: int | None = None, max_columns: int = 512,
                         chunk: int | None = None) -> go.Figure:
    """Chunk output error along the document: mean over head pairs, one line per layer."""
    frame, width = tables.error_along_document(events, layer, max_columns)
    fig = go.Figure()
    for (layer_id,), part in frame.group_by("layer", maintain_order=True):
        fig.add_trace(go.Scatter(x=part["chunk_bin"].to_list(), y=part["rel_err_o_mean"].to_list(), mode="lines",
                                 name=f"layer {layer_id}",
                                 hovertemplate=f"layer {layer_id}<br>chunk %{{x}}<br>mean output error %{{y:.3g}}<extra></extra>"))
    binned = "" if width == 1 else f" ({width} chunks per point)"
    fig.update_layout(title=f"Output error along the document, mean over head pairs{binned}", xaxis_title="chunk",
                      yaxis_title="relative error", yaxis_type="log", height=380,
                      showlegend=layer is not None or frame["layer"].n_unique() <= 12,
                      margin={"l": 60, "r": 20, "t": 50, "b": 40})
    _mark_chunk(fig, chunk)
    return fig


def timings_by_layer(layers: pl.DataFrame, device: str, ranges: pl.DataFrame | None = None,
                     attention: list[int] = ()) -> go.Figure:
    """Grouped bars of the GDN-core time per layer, dense against sparse: the median over the repeats,
    with their range as error bars when `ranges` (`tables.core_ranges`) has them; `attention`: the
    attention layers, marked."""
    long = tables.timings_long(layers)
    fig = go.Figure()
    repeats = 0
    for path, colour in (("dense", DENSE_COLOUR), ("sparse", SPARSE_COLOUR)):
        part = long.filter(pl.col("path") == path)
        error_y = None
        if ranges is not None and ranges.height:
            span = part.join(ranges.filter(pl.col("path") == path), on=["layer", "path"], how="left")
            repeats = max(repeats, int(span["n"].max() or 0))
            error_y = {"type": "data", "symmetric": False, "array": (span["high"] - span["median"]).to_list(),
                       "arrayminus": (span["median"] - span["low"]).to_list(), "color": "#333333", "thickness": 1}
        fig.add_trace(go.Bar(x=part["layer"].to_list(), y=part["core_ms"].to_list(), name=path, marker_color=colour,
                             error_y=error_y, hovertemplate=f"{path}<br>layer %{{x}}<br>%{{y:.3g}} ms<extra></extra>"))
    how = f"median of {repeats} repeats, bars show their range" if repeats > 1 else "one measurement"
    fig.update_layout(title=f"GDN-core time per layer on {device} ({how})", xaxis_title="layer", yaxis_title="ms",
                      barmode="group", height=360, margin={"l": 60, "r": 20, "t": 50, "b": 40})
    fig.update_xaxes(**_integer_ticks(layers.height))
    _mark_attention_layers(fig, list(attention))
    return fig


def prefill_totals(summary: dict, core_dense_ms: float, core_sparse_ms: float) -> go.Figure:
    """Whole prefill against GDN core, dense and sparse, so neither is mistaken for the other."""
    fig = go.Figure()
    rows = [("whole prefill", summary.get("prefill_ms_dense"), summary.get("prefill_ms_sparse")),
            ("GDN core (sum of layers)", core_dense_ms, core_sparse_ms)]
    for name, index, colour in (("dense", 1, DENSE_COLOUR), ("sparse", 2, SPARSE_COLOUR)):
        fig.add_trace(go.Bar(y=[r[0] for r in rows], x=[r[index] for r in rows], name=name, orientation="h",
                             marker_color=colour, hovertemplate=f"{name}<br>%{{y}}: %{{x:.4g}} ms<extra></extra>"))
    device = summary.get("device_name") or summary.get("device", "?")
    fig.update_layout(title=f"Prefill on {device}: whole model and GDN core", xaxis_title="ms",
                      barmode="group", height=260, margin={"l": 160, "r": 20, "t": 50, "b": 40})
    return fig


def stage_breakdown(stages: pl.DataFrame, device: str) -> go.Figure:
    """The sparse core's time per stage (columns stage, ms, share), in the order the stages run."""
    fig = go.Figure(go.Bar(
        y=stages["stage"].to_list(), x=stages["ms"].to_list(), orientation="h", marker_color=SPARSE_COLOUR,
        customdata=stages["share"].to_list(),
        hovertemplate="%{y}<br>%{x:.4g} ms (%{customdata:.0%} of the core)<extra></extra>"))
    fig.update_layout(title=f"SparseGDN core by stage on {device}, summed over layers", xaxis_title="ms",
                      height=80 + 40 * stages.height, margin={"l": 140, "r": 20, "t": 50, "b": 40})
    fig.update_yaxes(autorange="reversed")
    return fig


def timing_history(history: pl.DataFrame) -> go.Figure:
    """The session's runs measured here: whole-prefill time dense and sparse, one group per run; error
    bars from the columns `<column>_low` / `<column>_high` where they are given (repeated runs)."""
    fig = go.Figure()
    labels = history["label"].to_list()
    # One group per run, named by its number (two runs of the same options are two groups, not one bar of
    # their sum); the hover gives the run's whole label.
    runs = history["number"].to_list() if "number" in history.columns else labels
    for column, name, colour in (("prefill_ms_dense", "dense", DENSE_COLOUR), ("prefill_ms_sparse", "sparse", SPARSE_COLOUR)):
        error_y = None
        if f"{column}_low" in history.columns:
            middle = history[column].fill_null(0)
            error_y = {"type": "data", "symmetric": False, "color": "#333333", "thickness": 1,
                       "array": (history[f"{column}_high"].fill_null(middle) - middle).to_list(),
                       "arrayminus": (middle - history[f"{column}_low"].fill_null(middle)).to_list()}
        fig.add_trace(go.Bar(x=runs, y=history[column].to_list(), name=name, marker_color=colour, error_y=error_y,
                             customdata=labels,
                             hovertemplate=f"{name}<br>%{{x}} %{{customdata}}<br>%{{y:.4g}} ms<extra></extra>"))
    fig.update_layout(title="This session's runs: whole prefill", yaxis_title="ms", xaxis_title="run (the table's)",
                      barmode="group", height=340, margin={"l": 60, "r": 20, "t": 50, "b": 50})
    fig.update_xaxes(type="category")
    return fig


def compare_layers(a: pl.DataFrame, b: pl.DataFrame, column: str, labels: tuple[str, str], y_title: str,
                   attention: list[int] = ()) -> go.Figure:
    """Grouped bars of one per-layer column for two runs of the same document; the attention layers marked."""
    fig = go.Figure()
    for frame, label, colour in ((a, labels[0], SPARSE_COLOUR), (b, labels[1], OTHER_COLOUR)):
        fig.add_trace(go.Bar(x=frame["layer"].to_list(), y=frame[column].to_list(), name=label, marker_color=colour))
    fig.update_layout(title=f"{y_title[:1].upper()}{y_title[1:]} per layer", xaxis_title="layer", yaxis_title=y_title,
                      barmode="group",
                      height=340, margin={"l": 60, "r": 20, "t": 50, "b": 40}, legend={"orientation": "h", "y": -0.25})
    fig.update_xaxes(**_integer_ticks(a.height))
    _mark_attention_layers(fig, list(attention))
    return fig


def kernel_speedup(bench: pl.DataFrame) -> go.Figure:
    """FLA's time over the public call's against sequence length, one line per budget (band 1, score,
    the default design); the kernels alone (backend entry) dotted; FlashQLA's time over the public call's
    dashed where it was measured. Above 1 SparseGDN is faster; below 1, slower."""
    fig = go.Figure()
    rows = bench.filter((pl.col("band") == 1) & (pl.col("selector") == "score")
                        & pl.col("default_design").fill_null(True)).sort("T")
    # One colour a budget, one dash and marker a measure, each budget's lines one legend group (a click on
    # the legend hides or shows a budget's lines together).
    for index, budget in enumerate(sorted(rows["budget"].unique().to_list(), reverse=True)):
        part = rows.filter(pl.col("budget") == budget)
        colour = BUDGET_COLOURS[index % len(BUDGET_COLOURS)]
        for column, label, dash, symbol in (
                ("public_vs_fla", "public call", "solid", "circle"), ("kernels_vs_fla", "kernels only", "dot", "x"),
                ("public_vs_flashqla", "public call against FlashQLA", "dash", "diamond")):
            measured = part.filter(pl.col(column).is_not_null())
            if measured.is_empty():
                continue
            name = f"budget {budget:g}, {label}"
            fig.add_trace(go.Scatter(x=measured["T"].to_list(), y=measured[column].to_list(), mode="lines+markers",
                                     name=name, line={"dash": dash, "color": colour},
                                     marker={"symbol": symbol, "color": colour}, legendgroup=f"budget {budget:g}",
                                     hovertemplate="T %{x}<br>theirs / ours %{y:.2f}<extra>" + name + "</extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color=DENSE_COLOUR, annotation_text="as fast as the contender")
    lengths = sorted(rows["T"].unique().to_list())
    fig.update_xaxes(tickvals=lengths, ticktext=[f"{t // 1024}K" if t >= 1024 else str(t) for t in lengths])
    fig.update_layout(title="GDN-core time: FLA's (or FlashQLA's) over SparseGDN's (band 1, score selector)",
                      xaxis_title="tokens", yaxis_title="contender ms / SparseGDN ms (above 1: faster)", xaxis_type="log", height=380,
                      margin={"l": 60, "r": 20, "t": 50, "b": 40})
    return fig


def perplexity_change(change: pl.DataFrame, band: int) -> go.Figure:
    """Held-out perplexity change against dense per budget, one line per selector and source."""
    fig = go.Figure()
    rows = change.filter(pl.col("band") == band)
    for (selector, source), part in rows.sort("budget").group_by("selector", "source", maintain_order=True):
        fig.add_trace(go.Scatter(x=part["budget"].to_list(), y=part["change_pct"].to_list(), mode="lines+markers",
                                 name=f"{selector} · {source}",
                                 hovertemplate="budget %{x}<br>%{y:+.2f}%<extra>" + f"{selector} · {source}</extra>"))
    fig.update_layout(title=f"Held-out perplexity change against dense (band {band})", xaxis_title="budget",
                      yaxis_title="% change (lower is better)", height=380, margin={"l": 60, "r": 20, "t": 50, "b": 40})
    return fig


def scores_kept_and_skipped(events: pl.DataFrame, layer: int, chunk: int | None = None) -> go.Figure:
    """One layer's event scores, kept against skipped (log scale), with `chunk`'s events marked: the
    selector keeps the highest scores of the layer until the budget is spent."""
    frame = events.filter(pl.col("layer") == layer)
    floor = max(float(frame["score"].filter(frame["score"] > 0).min() or 1e-12), 1e-12)
    fig = go.Figure()
    for kept, name, colour in ((True, "kept", SPARSE_COLOUR), (False, "skipped", DENSE_COLOUR)):
        part = frame.filter(pl.col("selected") == kept)
        fig.add_trace(go.Box(x=part["score"].clip(lower_bound=floor).to_list(), name=name, marker_color=colour,
                             boxpoints="all", jitter=0.5, pointpos=0, orientation="h",
                             hovertemplate=f"{name}<br>score %{{x:.3g}}<extra></extra>"))
    if chunk is not None:
        here = frame.filter(pl.col("chunk") == chunk)
        fig.add_trace(go.Scatter(x=here["score"].clip(lower_bound=floor).to_list(),
                                 y=["kept" if s else "skipped" for s in here["selected"].to_list()],
                                 mode="markers", name=f"chunk {chunk}",
                                 marker={"symbol": "diamond", "size": 12, "color": "#d62728",
                                         "line": {"width": 1, "color": "white"}},
                                 hovertemplate=f"chunk {chunk}<br>score %{{x:.3g}}<extra></extra>"))
    fig.update_layout(title=f"Layer {layer}: selector scores of the kept and the skipped events",
                      xaxis_title="selector score (log scale)", xaxis_type="log", height=320, showlegend=True,
                      margin={"l": 80, "r": 20, "t": 50, "b": 40})
    return fig
