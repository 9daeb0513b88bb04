"""Every page of the explorer under streamlit's AppTest, on prepared examples (no model needed)."""
import base64
import json
from pathlib import Path

import numpy as np

import pytest
from streamlit.testing.v1 import AppTest

from test_app_support import synthetic_result, with_passkey

HOME = str(Path(__file__).resolve().parents[1] / "app" / "Home.py")
PAGES = ("views/run.py", "views/events.py", "views/budget.py", "views/error.py", "views/timings.py",
         "views/compare.py", "views/export.py", "views/results.py")


@pytest.fixture
def examples(tmp_path, monkeypatch):
    """Two prepared examples of one document (budgets 0.29 and 0.5) and an empty runs dir."""
    directory = tmp_path / "examples"
    synthetic_result(n_layers=3, head_pairs=4, n_chunks=40, budget=0.29, seed=7).save(directory / "demo")
    half = synthetic_result(n_layers=3, head_pairs=4, n_chunks=40, budget=0.5, seed=7)
    half.summary["selector"] = "uniform"
    half.save(directory / "half")
    monkeypatch.setenv("SPARSEGDN_EXAMPLES_DIR", str(directory))
    monkeypatch.setenv("SPARSEGDN_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SPARSEGDN_DEMO", "demo")
    return directory


@pytest.fixture
def no_model(monkeypatch):
    """Fail loudly if a page loads a model: demo mode must open without one."""
    import app.session

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(app.session, "load_model", refuse)


def start(**query) -> AppTest:
    at = AppTest.from_file(HOME, default_timeout=60)
    at.query_params.update(query)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def charts(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def array(value) -> np.ndarray:
    """A plotly JSON array: a list, or base64 'bdata' with dtype and shape (plotly >= 6)."""
    if isinstance(value, dict) and "bdata" in value:
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        shape = [int(n) for n in str(value.get("shape", len(flat))).split(",")]
        return flat.reshape(shape)
    return np.asarray(value)


def titles(at: AppTest) -> list[str]:
    return [chart["layout"]["title"]["text"] for chart in charts(at)]


def goto(at: AppTest, page: str) -> AppTest:
    at.switch_page(page)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_demo_mode_opens_on_the_example_without_a_model(examples, no_model):
    at = start()
    assert at.title[0].value == "Selected events"
    assert any("Events selected, all layers" in t for t in titles(at))
    assert any(t.startswith("Layer 0: selected per head pair and chunk") for t in titles(at))
    assert at.query_params["example"] == "demo"
    assert "prepared example" in " ".join(c.value for c in at.caption)


@pytest.mark.parametrize("page,expected", [
    ("views/events.py", ["Events selected, all layers", "Layer 0: selected"]),
    ("views/budget.py", ["Layer 0: events per head pair", "Events per layer", "relative to an even split"]),
    ("views/error.py", ["per layer", "per layer and head pair", "along the document"]),
    ("views/timings.py", ["whole model and GDN core", "GDN-core time per layer on cpu"]),
    ("views/results.py", ["over SparseGDN's", "perplexity change against dense"]),
])
def test_each_view_draws_its_figures(examples, no_model, page, expected):
    at = goto(start(), page)
    drawn = titles(at)
    for part in expected:
        assert any(part in title for title in drawn), (part, drawn)


def test_events_page_moves_along_the_document(examples, no_model):
    at = start()
    at.number_input(key="chunk_input").set_value(12).run()
    assert at.query_params["chunk"] == "12"
    text = at.code[0].value
    assert len(text) == 64  # one chunk of the byte-tokenised synthetic document
    at.button[[b.label for b in at.button].index("next ▶")].click().run()
    assert at.query_params["chunk"] == "13"
    # Find a phrase: the first hit's button jumps to its chunk.
    at.text_input(key="find_text").set_value(text[10:30]).run()
    hit = next(b for b in at.button if b.label.startswith("chunk "))
    hit.click().run()
    assert at.query_params["chunk"] == hit.label.removeprefix("chunk ")
    at.selectbox(key="layer_pick").set_value(2).run()
    assert at.query_params["layer"] == "2"
    assert any(t.startswith("Layer 2:") for t in titles(at))
    at.radio(key="value_pick").set_value("score").run()
    assert at.query_params["value"] == "score"


def test_a_link_reopens_the_same_view(examples, no_model):
    at = start(example="demo", layer="1", chunk="30", value="rel_err_o")
    assert at.selectbox(key="layer_pick").value == 1
    assert at.number_input(key="chunk_input").value == 30
    assert any(t.startswith("Layer 1: output error per head pair") for t in titles(at))   # the control's words
    assert dict(at.query_params) == {"example": "demo", "layer": "1", "chunk": "30", "value": "rel_err_o"}


def test_a_broken_link_opens_the_default_view(examples, no_model):
    at = start(run="0" * 24, layer="oops", chunk="-5")
    assert at.title[0].value == "Selected events"  # demo example, since the run is unknown here


def test_compare_two_examples_side_by_side(examples, no_model):
    at = start()
    next(b for b in at.sidebar.button if b.label == "Open example: half").click().run()
    next(b for b in at.sidebar.button if b.label == "Open example: demo").click().run()
    goto(at, "views/compare.py")
    next(b for b in at.button if b.label == "Use as B").click().run()
    assert not at.exception
    drawn = titles(at)
    assert sum("Events selected, all layers" in t for t in drawn) == 2
    assert any("Relative output error per layer" in t for t in drawn)
    subheaders = [h.value for h in at.subheader]
    assert any(h.startswith("A: score, ρ=0.29") for h in subheaders)
    assert any(h.startswith("B: uniform, ρ=0.5") for h in subheaders)
    assert len(at.query_params["compare"]) > 0


def test_export_offers_every_record_and_a_figure(examples, no_model):
    at = goto(start(), "views/export.py")
    labels = [button.label for button in at.get("download_button")]
    assert labels == ["events (480 rows)", "heads (12 rows)", "layers (3 rows)", "chunks (40 rows)",
                      "everything (.zip)", "Download as HTML (opens offline)"]
    assert "/events?example=demo" in at.code[0].value


def test_no_run_yet_points_to_the_run_page(tmp_path, monkeypatch, no_model):
    monkeypatch.setenv("SPARSEGDN_EXAMPLES_DIR", str(tmp_path / "none"))
    monkeypatch.delenv("SPARSEGDN_DEMO", raising=False)
    at = AppTest.from_file(HOME, default_timeout=60)
    at.switch_page("views/events.py")
    at.run()
    assert not at.exception
    assert "No run yet" in at.info[0].value


def test_a_link_to_a_run_the_server_lacks_says_so(tmp_path, monkeypatch, no_model):
    """A shared link whose run has left the server's cache (or names no example it ships) says what it named and
    that it is gone, not a bare "No run yet"."""
    monkeypatch.setenv("SPARSEGDN_EXAMPLES_DIR", str(tmp_path / "none"))
    monkeypatch.setenv("SPARSEGDN_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("SPARSEGDN_DEMO", raising=False)
    for query, named in (({"run": "deadbeef"}, "the run deadbeef"),
                         ({"example": "no-such-example"}, "the prepared example no-such-example")):
        at = AppTest.from_file(HOME, default_timeout=60)
        at.query_params.update(query)
        at.switch_page("views/events.py")
        at.run()
        assert not at.exception
        assert named in at.warning[0].value and "does not hold" in at.warning[0].value
        assert not at.info


def test_events_view_at_128k_tokens_bins_overviews_and_zooms_on_demand(tmp_path, monkeypatch, no_model):
    # 24 layers x 32 head pairs x 2048 chunks = 1.57M events: what a 128K-token document gives a 4B model.
    directory = tmp_path / "examples"
    synthetic_result(n_layers=24, head_pairs=32, n_chunks=2048, seed=8).save(directory / "long")
    monkeypatch.setenv("SPARSEGDN_EXAMPLES_DIR", str(directory))
    monkeypatch.setenv("SPARSEGDN_DEMO", "long")
    at = start(chunk="1500")
    overview, layer = charts(at)
    assert array(overview["data"][0]["z"]).shape == (24, 512)
    assert array(layer["data"][0]["z"]).shape == (32, 1024)
    payload = sum(len(chart.proto.spec) for chart in at.get("plotly_chart"))
    assert payload < 3_000_000, f"{payload / 1e6:.1f} MB of figures per view is too much for a browser"
    zoom = next(b for b in at.button if b.label.startswith("Zoom to chunks 1372–1627, around chunk 1500"))
    zoom.click().run()
    assert not at.exception
    layer = charts(at)[1]
    assert array(layer["data"][0]["z"]).shape == (32, 256) and array(layer["data"][0]["x"])[0] == 1372
    assert (at.query_params["from"], at.query_params["to"]) == ("1372", "1628")
    assert "chunks per column" not in layer["layout"]["title"]["text"]


@pytest.mark.parametrize("name", sorted(p.name for p in (Path(HOME).parents[1] / "data" / "examples").glob("*")
                                        if (p / "summary.json").is_file()))
def test_bundled_examples_open_in_demo_mode(name, monkeypatch, no_model):
    directory = Path(HOME).parents[1] / "data" / "examples" / name
    size = sum(f.stat().st_size for f in directory.iterdir())
    assert size < 2_000_000, f"example {name} is {size / 1e6:.1f} MB; keep examples under 2 MB"
    monkeypatch.delenv("SPARSEGDN_EXAMPLES_DIR", raising=False)
    monkeypatch.setenv("SPARSEGDN_DEMO", name)
    at = start()
    assert at.title[0].value == "Selected events"
    assert any("Events selected, all layers" in t for t in titles(at))
    for page in PAGES[2:]:
        goto(at, page)


def test_the_results_page_names_the_file_build_date_and_command_of_each_figure(examples, no_model):
    from analysis import measurements

    at = goto(start(), "views/results.py")
    captions = " ".join(c.value for c in at.caption)
    for path in measurements.kernel_bench_files():
        where = measurements.provenance(measurements.kernel_bench(path))
        assert f"`{path.name}` · {where['device']} · {where['date']} · build {where['build']}" in captions
        assert where["command"] in captions
    assert "`prefill_4b_32k.json`" in captions and "`ruler.json`" in captions
    assert "`prefill_4b_128k.json`" in captions
    assert "`flashqla_cp_study.json` · NVIDIA H200 · 2026-12-03T07:15:31+00:00 · build sources c075b0a67b4d" in captions
    assert "checkpoint sha256 b275831e7f41ed90" in captions and "samples per task: 32 at 4K" in captions
    assert len(at.radio) == 1 and at.radio[0].key == "results_band"        # one evaluation, one band choice
    targets = next(frame.value for frame in at.dataframe if "met" in frame.value.columns)
    assert targets.shape[0] == 11 and set(targets["met"]) == {"yes"}      # every target of the evaluation met ...
    assert not any("Missed or not measured" in w.value for w in at.warning)  # ... so no target is listed as missed
    # the evaluation is runs merged: each one's command is shown; since the last, every setting is measured
    assert "Merged into `ruler.json` (analysis/ruler_merge.py): NVIDIA H200 · 2026-12-02 · " in captions
    assert "--lengths 16384 32768 --samples 16 16" in captions
    assert "NVIDIA H200 · 2026-12-03 · `python -m analysis.ruler_eval --model data/default-model" in captions
    assert not any("Not measured" in i.value for i in at.info)
    assert any("does not extrapolate to 32K" in m.value for m in at.markdown)
    # the CPU evaluation of the pretrained checkpoint against its own H200 evaluation: a cross-check of the backends
    assert "`gdn_only_eval_cpu.json` · cpu (torch backend)" in captions
    assert [h.value for h in at.subheader].count("Cross-check: the same evaluation on the CPU") == 1
    assert any("832 of 840 per-sample scores are equal" in m.value for m in at.markdown)
    # the perplexity change over every held-out window, of the same weights, beside the evaluation's sample
    assert "`perplexity_spread.json` · NVIDIA H200 (triton backend) · 2026-12-02" in captions
    spread = next(frame.value for frame in at.dataframe if "8-window sample %" in frame.value.columns)
    assert spread.shape[0] == 2 and list(spread["windows"]) == [50, 24]
    assert not any("measured other weights" in w.value for w in at.warning)
    assert "`app_run_gpu.json`" in captions                     # the app's own GPU run, beside the CPU one
    shown = " ".join(m.value for m in at.markdown)
    assert "`multi_gpu_run.json`: " in shown and "| cuda:1 | NVIDIA H200 | 24-47 |" in shown


def test_compare_refuses_a_run_of_another_document(examples, no_model, tmp_path, monkeypatch):
    """A second example of another document, named by compare= in the link: said, never drawn."""
    other = synthetic_result(n_layers=3, head_pairs=4, n_chunks=40, budget=0.5, seed=99)   # another text
    other.save(examples / "other")
    at = start(example="demo", compare="example:other")
    goto(at, "views/compare.py")
    assert any("runs of different documents are not compared" in e.value for e in at.error), \
        [e.value for e in at.error]
    assert not [h.value for h in at.subheader if h.value.startswith(("A:", "B:"))]
    assert "compare" not in at.query_params


def test_teaching_mode_puts_a_note_on_every_view(examples, no_model):
    from app.teaching import NOTES

    at = start()
    assert not at.info or all(NOTES["events"] != i.value for i in at.info)
    at.sidebar.toggle(key="teaching_toggle").set_value(True).run()
    assert at.query_params["teach"] == "1"
    for page, key in (("views/events.py", "events"), ("views/budget.py", "budget"), ("views/error.py", "error"),
                      ("views/timings.py", "timings"), ("views/compare.py", "compare"),
                      ("views/export.py", "export"), ("views/results.py", "results")):
        goto(at, page)
        assert any(i.value == NOTES[key] for i in at.info), page


def test_the_tour_steps_through_the_example(examples, no_model, monkeypatch):
    """The tour on a made example that holds the needle: each step draws its figure."""
    from app import teaching

    monkeypatch.setattr(teaching, "TOUR_EXAMPLE", "demo")
    monkeypatch.setattr(teaching, "TOUR_NEEDLE", "state")
    at = goto(start(), "views/tour.py")
    assert at.subheader[0].value.startswith("1. ")
    assert any("per head pair and chunk" in t for t in titles(at))
    next(b for b in at.button if b.label == "Next ▶").click().run()
    assert any("selector scores of the kept and the skipped events" in t for t in titles(at))
    next(b for b in at.button if b.label == "Next ▶").click().run()
    assert at.subheader[0].value.startswith("3. ") and at.query_params["step"] == "2"
    assert any("Output error along the document" in t for t in titles(at))


def test_the_run_picker_shows_the_current_run(examples, no_model):
    at = start()                                     # demo: one run
    next(b for b in at.sidebar.button if b.label == "Open example: half").click().run()
    picker = at.sidebar.selectbox(key="history_pick")
    assert picker.value == 1
    picker.set_value(0).run()
    assert at.session_state["current"].key == "example:demo"
    next(b for b in at.sidebar.button if b.label == "Open example: half").click().run()
    assert at.sidebar.selectbox(key="history_pick").value == 2


def metrics(at: AppTest) -> dict[str, tuple[str, str]]:
    return {m.label: (m.value, m.proto.delta) for m in at.metric}


def test_the_passkey_outcome_shows_each_paths_answer(examples, no_model, monkeypatch):
    """A run of a document that hides a passkey says, on the error page, in the tour and on Compare, what
    dense and the sparse run answered at the end against the passkey."""
    from app import teaching

    run = with_passkey(synthetic_result(n_layers=3, head_pairs=4, n_chunks=40, seed=5), sparse_answer="5002295")
    run.save(examples / "passkey")
    at = goto(start(example="passkey"), "views/error.py")
    shown = metrics(at)
    assert shown["Passkey in the document"][0] == "4229659"
    assert shown["Dense answered"] == ("4229659", "retrieved")
    assert shown["Sparse answered"] == ("5002295", "lost")
    monkeypatch.setattr(teaching, "TOUR_EXAMPLE", "passkey")
    at = goto(start(example="passkey", step="2"), "views/tour.py")
    assert metrics(at)["Sparse answered"] == ("5002295", "lost")


def test_a_run_without_predictions_says_so_where_the_passkey_would_be(examples, no_model):
    run = with_passkey(synthetic_result(n_layers=3, head_pairs=4, n_chunks=40, seed=5))
    run.tokens = run.tokens.clear()            # as runs recorded before the tokens table
    run.save(examples / "older")
    at = goto(start(example="older"), "views/error.py")
    assert "Passkey in the document" not in metrics(at)
    assert any("recorded before the model's predictions were kept" in c.value for c in at.caption)


def test_the_tour_says_its_layer_is_the_most_favourable_and_offers_the_others(examples, no_model, monkeypatch):
    """The tour opens on the layer where most head pairs kept the needle's chunk, says so with every other
    layer's count from the records, and lets the reader pick another layer."""
    import polars as pl

    from app import tables, teaching

    monkeypatch.setattr(teaching, "TOUR_EXAMPLE", "demo")
    monkeypatch.setattr(teaching, "TOUR_NEEDLE", "state")
    at = goto(start(), "views/tour.py")
    from analysis.records import RunResult

    run = RunResult.load(examples / "demo")
    chunk = tables.needle_chunk(run.document, run.chunks, "state")
    kept = tables.chunk_kept_by_layer(run.events, chunk)
    best = tables.layer_keeping_most(run.events, chunk)
    assert at.selectbox(key="tour_layer").value == best
    note = next(c.value for c in at.caption if "most favourable" in c.value)
    for row in kept.filter(pl.col("layer") != best).iter_rows(named=True):
        assert f"layer {row['layer']}: {row['kept']} of {row['head_pairs']}" in note, note
    other = next(layer for layer in kept["layer"].to_list() if layer != best)
    at.selectbox(key="tour_layer").set_value(other).run()
    assert any(t.startswith(f"Layer {other}:") for t in titles(at)), titles(at)
    next(b for b in at.button if b.label == "Next ▶").click().run()
    assert at.selectbox(key="tour_layer").value == other                     # kept from step to step


def test_compare_gives_the_timings_caveat_of_the_timings_page(examples, no_model):
    """Compare sets two runs' timings side by side: it says, in the Timings page's own words, that timings of
    different runs are not comparable as if measured together, and where and when each was measured."""
    from app.views.common import TIMINGS_APART

    at = start()
    goto(at, "views/timings.py")
    next(b for b in at.sidebar.button if b.label == "Open example: half").click().run()
    assert any(c.value == TIMINGS_APART for c in at.caption)
    next(b for b in at.sidebar.button if b.label == "Open example: demo").click().run()
    goto(at, "views/compare.py")
    next(b for b in at.button if b.label == "Use as B").click().run()
    assert any(w.value == TIMINGS_APART for w in at.warning), [w.value for w in at.warning]
    assert sum(c.value.startswith("Measured on **cpu** on ") for c in at.caption) == 2


def test_the_error_page_of_a_run_without_dense_keeps_its_link(examples, no_model):
    """A run made with 'compare with dense' off: the error page says it has no errors, and the address bar
    still names the run (the page stops early, after writing the view into the link)."""
    synthetic_result(n_layers=3, head_pairs=4, n_chunks=40, seed=7, compare_dense=False).save(examples / "sparse-only")
    at = start(example="sparse-only")
    at.query_params.clear()
    goto(at, "views/error.py")
    assert "skipped the dense comparison" in at.info[0].value
    assert at.query_params["example"] == "sparse-only"


def test_a_run_that_keeps_every_event_is_labelled_without_a_budget(examples, no_model):
    """selector=all keeps every event whatever the budget: its labels say so and name no budget."""
    synthetic_result(n_layers=3, head_pairs=4, n_chunks=40, budget=1.0, selector="all", seed=7).save(examples / "every")
    at = start(example="every")
    shown = [c.value for c in at.caption] + [m.value for m in at.sidebar.markdown]
    labels = [text for text in shown if "all events (dense semantics)" in text]
    assert len(labels) >= 2, shown                       # the run's caption and the sidebar's current run
    assert not any("ρ=" in text or "budget 1.0" in text for text in labels), labels


@pytest.mark.parametrize("interpreted", [False, True])
def test_the_triton_backend_is_offered_only_where_it_can_run(examples, no_model, monkeypatch, interpreted):
    """On a machine without CUDA the backend control leaves triton out and says why, unless the kernels run
    in Triton's interpreter (TRITON_INTERPRET=1)."""
    import torch

    from sparsegdn.config import triton_available

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if interpreted:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        if not triton_available():
            pytest.skip("triton is not installed here")
    else:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    at = goto(start(), "views/compare.py")
    backend = at.selectbox(key="compare_backend")
    assert ("triton" in backend.options) == interpreted, backend.options
    assert ("Not offered here: triton" in backend.help) != interpreted, backend.help


def test_a_figure_that_includes_first_call_work_is_said_so(examples):
    """A run whose second SparseGDN repeat held Triton compiles: the Timings page
    names the repeat, what it held and the median without it; the run page's prefill figure points there."""
    from analysis.timing import Spread
    from test_app_support import with_timings

    run = with_timings(synthetic_result(n_layers=3, head_pairs=4, n_chunks=40, seed=7), [100.0, 101.0, 102.0],
                       [80.0, 12100.0, 81.0])
    run.summary["timing"].update(
        first_calls=[{"repeat": 1, "path": "sparse", "kind": "compile", "kernel": "state_output_kernel", "count": 3,
                      "seconds": 9.8}],
        clean={"sparse": {"excluded": [1], "prefill": Spread.of([80.0, 81.0]).to_dict(),
                          "core": Spread.of([8.0, 8.1]).to_dict()}})
    run.save(examples / "compiled")
    at = goto(start(example="compiled"), "views/timings.py")
    warning = " ".join(w.value for w in at.warning)
    assert "Repeat 2 of 3 of SparseGDN included 3 compiles of 1 kernel (9.8 s: state_output_kernel x3): excluded " \
           "from the clean median." in warning, warning
    assert "SparseGDN without those repeats (clean median of 2): prefill 80.5 ms [80.0-81.0]" in warning
    goto(at, "views/run.py")
    assert any(c.value.startswith("Includes first-call work") for c in at.caption), [c.value for c in at.caption]
    # A run without any (the demo example): no such word.
    at = goto(start(example="demo"), "views/timings.py")
    assert not any("first-call work" in w.value for w in at.warning)
