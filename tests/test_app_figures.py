"""Figures and the record views behind them, on RunResults built from documented columns."""
import math

import numpy as np
import plotly.graph_objects as go
import polars as pl
import pytest

from app import figures, session, tables
from test_app_support import synthetic_result, with_passkey


@pytest.fixture(scope="module")
def small():
    return synthetic_result(n_layers=3, head_pairs=4, n_chunks=20, seed=1)


@pytest.fixture(scope="module")
def long_run():
    # The 128K-token shape the issue asks to stay responsive at: 24 layers x 32 head pairs x 2048 chunks.
    return synthetic_result(n_layers=24, head_pairs=32, n_chunks=2048, seed=2)


def heatmap_of(fig: go.Figure) -> go.Heatmap:
    return next(trace for trace in fig.data if isinstance(trace, go.Heatmap))


def test_overview_is_share_selected_per_layer_and_chunk(small):
    fig = figures.layer_overview(small.events)
    z = np.asarray(heatmap_of(fig).z, dtype=float)
    expected = small.events.pivot(on="chunk", index="layer", values="selected", aggregate_function="mean").sort("layer")
    expected = expected.select([str(c) for c in range(20)]).to_numpy().astype(float)
    np.testing.assert_allclose(z, expected)


def test_overview_bins_long_documents_and_keeps_the_share(long_run):
    fig = figures.layer_overview(long_run.events, max_columns=512)
    trace = heatmap_of(fig)
    z = np.asarray(trace.z, dtype=float)
    assert z.shape == (24, 512), z.shape
    # Every layer keeps exactly ceil(0.29 * 32 * 2048) events, so each row's mean share is that fraction.
    kept = math.ceil(0.29 * 32 * 2048) / (32 * 2048)
    np.testing.assert_allclose(z.mean(axis=1), kept, rtol=1e-9)
    assert "4 chunks per column" in fig.layout.title.text


def test_layer_heatmap_full_resolution_inside_a_window(long_run):
    fig = figures.event_heatmap(long_run.events, layer=5, chunk_window=(1000, 1256), max_columns=1024)
    trace = heatmap_of(fig)
    z = np.asarray(trace.z, dtype=float)
    assert z.shape == (32, 256)
    assert list(trace.x[:2]) == [1000, 1001]
    expected = (long_run.events.filter((pl.col("layer") == 5) & pl.col("chunk").is_between(1000, 1255))
                .sort("head_pair", "chunk")["selected"].to_numpy().reshape(32, 256))
    np.testing.assert_array_equal(z.astype(bool), expected)


def test_layer_heatmap_axis_is_exactly_the_chunk_window(small):
    # Chunk c spans c-0.5..c+0.5: the axis covers the window's chunks and nothing else. A chosen chunk
    # outside the window is not drawn (its line stretched plotly's autorange to reach it).
    for window, chunk, expected in ((None, 3, (-0.5, 19.5)), ((5, 15), 2, (4.5, 14.5)), ((10, 20), 0, (9.5, 19.5)),
                                    ((12, 14), 19, (11.5, 13.5))):
        fig = figures.event_heatmap(small.events, layer=1, chunk_window=window, chunk=chunk)
        assert fig.layout.xaxis.range == expected and fig.layout.xaxis2.range == expected, (window, fig.layout.xaxis)
        first, end = window or (0, 20)
        assert list(heatmap_of(fig).x) == list(range(first, end)), window
        assert [shape.x0 for shape in fig.layout.shapes] == ([chunk, chunk] if first <= chunk < end else []), window
    narrow = figures.event_heatmap(small.events, layer=1, chunk_window=(12, 14))
    assert narrow.layout.xaxis2.dtick == 1, "a window of two chunks is ticked at chunks, not half chunks"


def test_layer_heatmap_bins_start_at_the_window_and_fill_it(long_run):
    # 1047 chunks over 1024 columns: 2 chunks per column from chunk 1001, the last column chunk 2047 alone.
    fig = figures.event_heatmap(long_run.events, layer=5, chunk_window=(1001, 2048), max_columns=1024)
    trace, strip = heatmap_of(fig), next(t for t in fig.data if isinstance(t, go.Scatter))
    assert "2 chunks per column" in fig.layout.title.text
    assert fig.layout.xaxis.range == (1000.5, 2047.5)
    # Each cell is centred on its two chunks, so its edges fall on chunk boundaries: 1000.5, 1002.5, …
    np.testing.assert_array_equal(np.asarray(trace.x) - 1, np.arange(1000.5, 2047, 2))
    assert list(strip.customdata[:2]) == [1001, 1003] and strip.customdata[-1] == 2047   # a click opens these
    assert strip.text[0] == "chunks 1001–1002" and strip.text[-1] == "chunk 2047"
    assert [list(cell) for cell in np.asarray(trace.customdata)[0, [0, -1]]] == [[1001, 1002], [2047, 2047]]
    assert "chunks %{customdata[0]}–%{customdata[1]}" in trace.hovertemplate
    first_column = long_run.events.filter((pl.col("layer") == 5) & pl.col("chunk").is_between(1001, 1002))
    expected = first_column.group_by("head_pair").agg(pl.col("selected").mean()).sort("head_pair")["selected"]
    np.testing.assert_allclose(np.asarray(trace.z, dtype=float)[:, 0], expected.to_numpy())


def test_layer_heatmap_bins_the_whole_long_document(long_run):
    fig = figures.event_heatmap(long_run.events, layer=0, max_columns=1024)
    assert np.asarray(heatmap_of(fig).z).shape == (32, 1024)
    # Small enough to send to a browser: a few hundred kB, not the 65K cells' worth of strings.
    assert len(fig.to_json()) < 2_000_000


def test_layer_heatmap_strip_hover_shows_chunk_text(small):
    previews = tables.chunk_previews(small.document, small.chunks)
    fig = figures.event_heatmap(small.events, layer=1, previews=previews, chunk=7)
    strip = next(trace for trace in fig.data if isinstance(trace, go.Scatter))
    assert len(strip.x) == 20
    assert previews[7] in strip.text[7]
    assert any(shape.x0 == 7 for shape in fig.layout.shapes), "the chosen chunk is marked"


def test_layer_heatmap_colours_by_score_and_error(small):
    error = np.asarray(heatmap_of(figures.event_heatmap(small.events, 2, "rel_err_o")).z, dtype=float)
    layer = small.events.filter(pl.col("layer") == 2).sort("head_pair", "chunk")
    np.testing.assert_allclose(error.ravel(), layer["rel_err_o"].to_numpy(), rtol=1e-6)
    # Scores span decades: coloured by log10, the hover (customdata) and colour bar ticks giving scores.
    trace = heatmap_of(figures.event_heatmap(small.events, 2, "score"))
    scores = layer["score"].to_numpy()
    np.testing.assert_allclose(np.asarray(trace.z, dtype=float).ravel(), np.log10(scores), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(trace.customdata, dtype=float)[..., 0].ravel(), scores, rtol=1e-6)
    ticks = np.asarray(trace.colorbar.tickvals, dtype=float)
    assert ticks.size >= 2 and trace.zmin - 1e-9 <= ticks.min() and ticks.max() <= trace.zmax + 1e-9
    assert [float(text) for text in trace.colorbar.ticktext] == pytest.approx(10 ** ticks, rel=0.05)
    assert "customdata[0]" in trace.hovertemplate and "log scale" in trace.colorbar.title.text


def test_layer_heatmap_scores_inside_one_decade_keep_a_labelled_colour_bar(small):
    # 8.0e-4 to 8.1e-4: no 1, 2 or 5 of a decade inside the range; the bar is labelled at its two ends instead
    events = small.events.with_columns((8.0e-4 + 1e-5 * pl.col("score") / pl.col("score").max()).alias("score"))
    trace = heatmap_of(figures.event_heatmap(events, 2, "score"))
    assert len(trace.colorbar.tickvals) == 2 and [float(t) for t in trace.colorbar.ticktext] == \
        pytest.approx([10 ** trace.zmin, 10 ** trace.zmax], rel=0.05)


def test_layer_heatmap_scores_of_many_decades_stay_readable(small):
    # The last chunk's scores huge (5% of the cells, beyond a percentile clip), one zero, the rest spread over
    # 1e-12..1e-1 (as the harbour-log example's are): the colours still spread over the bulk (the linear scale
    # left every cell but the last chunk's one colour); the zero takes the smallest positive score's colour.
    events = small.events.with_columns(
        pl.when(pl.col("chunk") == 19).then(350.0)
        .when((pl.col("chunk") == 0) & (pl.col("head_pair") == 0)).then(0.0)
        .otherwise(10.0 ** (-12.0 + 11.0 * pl.col("score") / pl.col("score").max())).alias("score"))
    trace = heatmap_of(figures.event_heatmap(events, 2, "score"))
    z = np.asarray(trace.z, dtype=float)
    bulk = z[1:, :19]
    assert np.isfinite(z).all()
    assert ((bulk - trace.zmin) / (trace.zmax - trace.zmin)).std() > 0.15
    raw = np.asarray(trace.customdata, dtype=float)[..., 0]
    assert raw[0, 0] == 0.0 and z[0, 0] == pytest.approx(np.log10(raw[raw > 0].min()))
    with pytest.raises(ValueError, match="no column"):
        figures.event_heatmap(small.events, 0, "nonsense")


def test_allocation_against_even_split(small):
    per_head = tables.events_per_head_pair(small.heads, layer=0)
    fig = figures.allocation_by_head_pair(per_head, 0)
    bars = fig.data[0]
    assert sum(bars.y) == math.ceil(0.29 * 4 * 20)
    assert per_head["even_split"][0] == pytest.approx(sum(bars.y) / 4)
    per_layer = tables.events_per_layer(small.heads)
    assert per_layer["events_selected"].to_list() == [math.ceil(0.29 * 4 * 20)] * 3
    trace = heatmap_of(figures.allocation_heatmap(small.heads))
    relative = np.asarray(trace.customdata, dtype=float)
    np.testing.assert_allclose(relative.mean(axis=1), 1.0)
    np.testing.assert_allclose(np.asarray(trace.z, dtype=float), np.log2(np.maximum(relative, 1 / 64)))


def test_the_even_split_is_labelled_as_drawn_and_no_events_are_named(small):
    """The even-split line's label gives the value it is drawn at (0.25 read "0.2" at one decimal); a head pair that
    received no events is coloured at the scale's floor, and the colour bar's floor says it holds none too."""
    per_head = tables.events_per_head_pair(small.heads, layer=0).with_columns(pl.lit(0.25).alias("even_split"))
    fig = figures.allocation_by_head_pair(per_head, 0)
    assert [a.text for a in fig.layout.annotations] == ["even split 0.25"]
    assert fig.layout.shapes[0].y0 == 0.25
    large = figures.allocation_by_head_pair(per_head.with_columns(pl.lit(4751.4).alias("even_split")), 0)
    assert [a.text for a in large.layout.annotations] == ["even split 4,751"]      # not "4.75e+03"
    none = small.heads.with_columns(pl.when(pl.col("head_pair") == 0).then(0).otherwise(pl.col("events_selected"))
                                    .alias("events_selected"))
    trace = heatmap_of(figures.allocation_heatmap(none))
    assert trace.colorbar.ticktext[0] == "≤×1/64, or none" and np.nanmin(np.asarray(trace.z, dtype=float)) == -6


def test_error_figures(small):
    np.testing.assert_allclose(figures.error_by_layer(small.layers).data[0].y, small.layers["rel_err_o"].to_numpy())
    z = np.asarray(heatmap_of(figures.error_heatmap(small.heads, "rel_err_state")).z, dtype=float)
    np.testing.assert_allclose(z.ravel(), small.heads.sort("layer", "head_pair")["rel_err_state"].to_numpy())
    fig = figures.error_along_document(small.events, layer=None)
    assert len(fig.data) == 3
    mean_chunk_3 = small.events.filter((pl.col("layer") == 0) & (pl.col("chunk") == 3))["rel_err_o"].mean()
    assert fig.data[0].y[3] == pytest.approx(mean_chunk_3)


def test_error_along_document_without_dense_is_empty():
    result = synthetic_result(compare_dense=False)
    assert not tables.has_error(result.events)
    assert len(figures.error_along_document(result.events).data) == 0


def test_timing_figures(small):
    fig = figures.timings_by_layer(small.layers, "cpu")
    assert [trace.name for trace in fig.data] == ["dense", "sparse"]
    np.testing.assert_allclose(fig.data[1].y, small.layers["core_ms_sparse"].to_numpy())
    assert "cpu" in fig.layout.title.text
    totals = figures.prefill_totals(small.summary, 9.0, 4.5)
    assert list(totals.data[0].x) == [100.0, 9.0] and list(totals.data[1].x) == [90.0, 4.5]
    history = pl.DataFrame({"label": ["a", "b"], "prefill_ms_dense": [1.0, 2.0], "prefill_ms_sparse": [0.5, 1.5]})
    assert list(figures.timing_history(history).data[1].y) == [0.5, 1.5]
    # Two runs of the same options (one label) stay two groups: bars by run number, the label in the hover.
    twins = pl.DataFrame({"number": ["#1", "#2"], "label": ["random, ρ=0.29, band 1"] * 2,
                          "prefill_ms_dense": [300.0, 310.0], "prefill_ms_sparse": [329.7, 380.2]})
    bars = figures.timing_history(twins).data[1]
    assert list(bars.x) == ["#1", "#2"] and list(bars.y) == [329.7, 380.2]
    assert list(bars.customdata) == ["random, ρ=0.29, band 1"] * 2
    # ... and runs of the random selector name their seed, so the table tells them apart
    assert session.options_label({"selector": "random", "budget": 0.29, "band": 1, "config": {"seed": 7}}) == \
        "random, ρ=0.29, band 1, seed 7"
    assert session.options_label({"selector": "score", "budget": 0.29, "band": 1, "config": {"seed": 7}}) == \
        "score, ρ=0.29, band 1"
    stages = pl.DataFrame({"stage": ["chunk_prepare", "selection", "state_pass"], "ms": [2.0, 0.1, 0.9],
                           "share": [2.0 / 3.0, 0.1 / 3.0, 0.3]})
    breakdown = figures.stage_breakdown(stages, "NVIDIA H200")
    assert list(breakdown.data[0].y) == ["chunk_prepare", "selection", "state_pass"]
    assert list(breakdown.data[0].x) == [2.0, 0.1, 0.9] and "NVIDIA H200" in breakdown.layout.title.text


def test_compare_layers_puts_two_runs_side_by_side(small):
    other = synthetic_result(n_layers=3, head_pairs=4, n_chunks=20, budget=0.5, seed=3)
    fig = figures.compare_layers(small.layers, other.layers, "rel_err_o", ("A", "B"), "error")
    assert [t.name for t in fig.data] == ["A", "B"]
    np.testing.assert_allclose(fig.data[1].y, other.layers["rel_err_o"].to_numpy())


def test_bin_width_and_matrix():
    assert tables.bin_width(2048, 512) == 4 and tables.bin_width(20, 512) == 1 and tables.bin_width(513, 512) == 2
    frame = pl.DataFrame({"r": [0, 2], "c": [5, 1], "v": [1.0, 2.0]})
    rows, columns, z = tables.to_matrix(frame, "r", "c", "v")
    assert list(rows) == [0, 2] and list(columns) == [1, 5]
    assert z[0, 1] == 1.0 and z[1, 0] == 2.0 and np.isnan(z[0, 0])


def test_chunk_text_and_find(small):
    text, chunks = small.document, small.chunks
    assert tables.chunk_text(text, chunks, 3) == text[192:256]
    # Plant a marker in chunks 3 and 11 (and one across the 11/12 boundary): found where it starts.
    marked = text[:200] + "Needle" + text[206:720] + "needle" + text[726:766] + "NEEDLE" + text[772:]
    assert len(marked) == len(text)
    assert tables.find_chunks(marked, chunks, "needle") == [3, 11]
    assert tables.find_chunks(marked, chunks, "  ") == []
    assert tables.find_chunks(marked, chunks, "zzz-not-there") == []
    with pytest.raises(ValueError, match="no chunk 99"):
        tables.chunk_text(text, chunks, 99)


def test_heavy_tailed_scores_do_not_wash_out_the_colour_scale(small):
    spiked = small.events.with_columns(
        pl.when((pl.col("layer") == 0) & (pl.col("chunk") == 19) & (pl.col("head_pair") == 0)).then(1e6).otherwise(pl.col("score")).alias("score"))
    trace = heatmap_of(figures.event_heatmap(spiked, 0, "score"))
    assert np.nanmax(np.asarray(trace.customdata, dtype=float)) == 1e6  # the exact value is still there for hover
    assert trace.zmax < 0.0  # the colours (log10) span the bulk (scores in [0, 1)), not the spike's 6


def test_figures_use_the_controls_words(small):
    """The heatmap, its colour bar and the error figures say "output error", as the control does."""
    fig = figures.event_heatmap(small.events, 1, "rel_err_o")
    assert fig.layout.title.text.startswith("Layer 1: output error per head pair and chunk")
    assert heatmap_of(fig).colorbar.title.text == "output error"
    assert heatmap_of(figures.event_heatmap(small.events, 1, "score")).colorbar.title.text == \
        "selector score (log scale)"
    state = figures.error_heatmap(small.heads, "rel_err_state")
    assert "final-state error" in state.layout.title.text and "rel_err" not in state.layout.title.text
    assert "rel_err" not in figures.error_by_layer(small.layers).data[0].hovertemplate


def test_attention_layers_are_marked_between_gdn_layers(small):
    layers = small.layers.with_columns(pl.Series("layer", [0, 1, 3], dtype=pl.Int32))   # layer 2: attention
    attention = tables.attention_layers(layers["layer"].to_list(), n_layers=5)
    assert attention == [2, 4] and tables.attention_layers([0, 1, 2]) == []
    for fig in (figures.timings_by_layer(layers, "cpu", attention=attention),
                figures.error_by_layer(layers, attention),
                figures.compare_layers(layers, layers, "rel_err_o", ("A", "B"), "error", attention)):
        marked = [(shape.x0 + shape.x1) / 2 for shape in fig.layout.shapes]
        assert marked == [2, 4], marked
        assert [a.text for a in fig.layout.annotations] == ["attention layer", "attention layer"]


def test_per_layer_timings_show_the_range_of_the_repeats(small):
    from test_app_support import with_timings

    timed = with_timings(synthetic_result(n_layers=3, head_pairs=4, n_chunks=20, seed=1), [100.0, 110.0, 130.0],
                         [90.0, 95.0, 97.0])
    ranges = tables.core_ranges(timed.timings)
    fig = figures.timings_by_layer(timed.layers, "cpu", ranges)
    dense = fig.data[0]
    medians = ranges.filter(pl.col("path") == "dense")["median"].to_numpy()
    np.testing.assert_allclose(np.asarray(dense.error_y.array) + medians,
                               ranges.filter(pl.col("path") == "dense")["high"].to_numpy())
    assert "median of 3 repeats" in fig.layout.title.text
    assert "one measurement" in figures.timings_by_layer(timed.layers, "cpu").layout.title.text


def test_readable_tables_have_words_and_rounded_numbers():
    frame = pl.DataFrame({"head_pair": [0], "rel_err_o": [0.000123456789], "prefill_ms_dense": [10060.8967],
                          "unlabelled": [1.23456789]})
    shown = tables.readable(frame)
    assert shown.columns == ["head pair", "output error", "prefill, dense (ms)", "unlabelled"]
    assert shown.row(0) == (0, 0.0001235, 10060.9, 1.235)


def test_a_history_row_keeps_the_spread_and_says_how_it_was_timed():
    from test_app_support import with_timings

    timed = with_timings(synthetic_result(seed=4), [100.0, 110.0, 130.0], [90.0, 95.0, 97.0])
    row = tables.history_row(timed, "run", "computed", 3.0)
    assert (row["prefill_ms_dense"], row["prefill_ms_dense_low"], row["prefill_ms_dense_high"]) == (110.0, 100.0, 130.0)
    assert row["timing"] == "median of 3"
    old = tables.history_row(synthetic_result(seed=4), "old", "example", None)
    assert old["timing"] == "one measurement" and old["prefill_ms_dense_low"] is None
    history = pl.DataFrame([row, old])
    bars = figures.timing_history(history)
    assert list(bars.data[0].error_y.array) == [20.0, 0.0]


def test_the_tour_finds_the_needle_and_how_its_chunk_fared(small):
    text = small.document
    chunk = tables.needle_chunk(text, small.chunks, text[640:660])       # inside chunk 10
    assert chunk == 10 and tables.needle_chunk(text, small.chunks, "no such words") is None
    layer = tables.layer_keeping_most(small.events, chunk)
    kept = small.events.filter(pl.col("chunk") == chunk).group_by("layer").agg(pl.col("selected").sum())
    assert kept.filter(pl.col("layer") == layer)["selected"][0] == kept["selected"].max()
    fate = tables.chunk_in_layer(small.events, layer, chunk)
    in_layer = small.events.filter(pl.col("layer") == layer)
    assert fate["rank"] == 1 + int((in_layer["score"] > fate["best_score"]).sum())
    assert fate["head_pairs"] == 4 and fate["events"] == in_layer.height
    fig = figures.scores_kept_and_skipped(small.events, layer, chunk)
    assert [trace.name for trace in fig.data] == ["kept", "skipped", f"chunk {chunk}"]
    assert len(fig.data[0].x) == int(in_layer["selected"].sum())


def test_the_tour_finds_the_passkey_of_the_bundled_example():
    """The bundled passkey sample is a held-out RULER sample: the tour's needle words find the chunk of the
    needle line, before the question at the end (which repeats them), and that chunk holds the answer."""
    import json
    from pathlib import Path

    from analysis.records import RunResult
    from app import teaching

    root = Path(__file__).resolve().parents[1]
    text = (root / "data" / "samples" / "passkey-haystack.txt").read_text(encoding="utf-8")
    result = RunResult.load(root / "data" / "examples" / teaching.TOUR_EXAMPLE)
    chunk = tables.needle_chunk(text, result.chunks, teaching.TOUR_NEEDLE)
    answer = text.rstrip().rsplit(" ", 1)[-1].rstrip(".")                   # "... is: 4229659."
    assert chunk is not None and chunk < result.chunks.height - 1, chunk
    assert answer.isdigit() and answer in tables.chunk_text(text, result.chunks, chunk)
    entry = next(e for e in json.loads((root / "data" / "samples" / "index.json").read_text())
                 if e.get("example") == teaching.TOUR_EXAMPLE)
    assert f'("{answer}")' in entry["description"]


def test_the_passkey_outcome_compares_each_paths_answer_with_the_needle():
    from app import teaching

    run = with_passkey(synthetic_result(n_chunks=20, seed=3), sparse_answer="5002295")
    outcome = tables.passkey_outcome(run.document, run.tokens, teaching.PASSKEY)
    assert outcome == {"expected": "4229659", "dense": {"answer": "4229659", "retrieved": True},
                       "sparse": {"answer": "5002295", "retrieved": False}}
    without_dense = run.tokens.with_columns(pl.lit(None, pl.Int64).alias("predicted_dense"))
    assert tables.passkey_outcome(run.document, without_dense, teaching.PASSKEY)["dense"] is None
    assert tables.passkey_outcome(run.document, run.tokens.clear(), teaching.PASSKEY) is None   # an older run
    assert tables.passkey_outcome("no needle here", run.tokens, teaching.PASSKEY) is None


def test_the_bundled_passkey_example_records_both_answers():
    """The committed example's predictions: consistent with its summary's top-1 agreement, and dense and
    `score` both answer the passkey the needle holds (why the sample was picked, data/samples/index.json)."""
    from pathlib import Path

    from analysis.documents import example_document
    from analysis.records import RunResult
    from app import teaching

    root = Path(__file__).resolve().parents[1]
    result = RunResult.load(root / "data" / "examples" / teaching.TOUR_EXAMPLE)
    tokens = result.tokens
    assert tokens.height == result.summary["n_tokens"]
    agreement = (tokens["predicted_dense"] == tokens["predicted_sparse"]).mean()
    assert agreement == pytest.approx(result.summary["top1_agreement"]), agreement
    outcome = tables.passkey_outcome(example_document(teaching.TOUR_EXAMPLE), tokens, teaching.PASSKEY)
    assert result.summary["selector"] == "score"
    assert outcome["dense"]["retrieved"] and outcome["sparse"]["retrieved"], outcome
    assert outcome["sparse"]["answer"] == outcome["expected"]


def test_the_allocation_colour_bar_has_few_labels_and_room(small):
    """An uneven allocation (one head pair with one event, one with 60 times the even split) spans 2^-6..2^6:
    the colour bar labels at most seven powers of two, 0 among them, and the figure is tall enough for them."""
    heads = small.heads.with_columns(
        pl.when((pl.col("head_pair") == 0)).then(1).when(pl.col("head_pair") == 1).then(600)
        .otherwise(pl.col("events_selected")).alias("events_selected"))
    fig = figures.allocation_heatmap(heads)
    ticks = list(heatmap_of(fig).colorbar.tickvals)
    assert len(ticks) <= figures.MOST_COLOUR_TICKS and 0 in ticks and max(ticks) >= 2, ticks
    assert ticks == sorted(ticks) and -min(ticks) == max(ticks), ticks
    assert fig.layout.height >= figures.ALLOCATION_MIN_HEIGHT
