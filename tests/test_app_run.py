"""The run page under AppTest with the real embedded default model: upload, run, cache, failures."""
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest
from test_analysis_support import blank_pdf

HOME = str(Path(__file__).resolve().parents[1] / "app" / "Home.py")
TEXT = ("The harbour master wrote the names of three trawlers in the ledger and sent the clerk to check "
        "the moorings on the east pier, where eleven iron rings had rusted through. ") * 2


def start() -> AppTest:
    at = AppTest.from_file(HOME, default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def upload(at: AppTest, name: str, data: bytes, mime: str = "text/plain") -> AppTest:
    at.radio(key="doc_source").set_value("Upload").run()
    at.file_uploader(key="doc_upload").set_value((name, data, mime)).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def run(at: AppTest, budget: float = 0.29) -> AppTest:
    at.slider(key="budget").set_value(budget)
    at.button(key="run_button").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_upload_run_then_the_same_run_is_cached(fresh):
    at = upload(start(), "harbour.txt", TEXT.encode())
    tokens = next(m for m in at.metric if m.label == "Tokens / chunks")
    import app.session

    n_tokens = len(app.session.get_model("default", "cpu").tokenizer.encode(TEXT))  # the app's shared model
    assert tokens.value == f"{n_tokens:,} / {-(-n_tokens // 64):,}"
    run(at)
    assert any(s.value.startswith("Run finished") for s in at.success), [s.value for s in at.success]
    assert any(h.value == "Current result" for h in at.subheader)
    assert at.query_params["run"]
    run(at)
    assert any(s.value.startswith("Cached result") for s in at.success)
    at.switch_page("views/events.py")
    at.run()
    assert not at.exception
    assert len(at.get("plotly_chart")) == 2


@pytest.mark.parametrize("name,data,problem", [
    ("empty.txt", b"", "is empty"),
    ("blank.md", b" \n\t \n", "only whitespace"),
    ("image.txt", bytes(range(256)) * 4, "binary"),
    ("latin1.txt", "Café déjà vu, à bientôt".encode("latin-1"), "not UTF-8"),
    ("scan.pdf", blank_pdf(), "no text layer"),
])
def test_bad_uploads_say_what_is_wrong_and_keep_the_result(fresh, name, data, problem):
    at = run(upload(start(), "good.txt", TEXT.encode()))
    upload(at, name, data, "application/pdf" if name.endswith(".pdf") else "text/plain")
    errors = [e.value for e in at.error]
    assert any(name in e and problem in e for e in errors), errors
    assert any(h.value == "Current result" for h in at.subheader), "the previous result stays on screen"


def test_a_refused_upload_is_not_named_as_the_next_run(fresh):
    """After a bundled sample was chosen, a refused upload leaves nothing to run: the sidebar names no next document
    and the run button is off (it had gone on naming the sample)."""
    at = start()
    at.radio(key="doc_source").set_value("Bundled sample").run()
    assert any("Next run:" in c.value for c in at.sidebar.caption), [c.value for c in at.sidebar.caption]
    upload(at, "empty.txt", b"")
    assert any("empty.txt" in e.value for e in at.error)
    assert not any("Next run:" in c.value for c in at.sidebar.caption), [c.value for c in at.sidebar.caption]
    assert at.button(key="run_button").disabled


def test_an_upload_is_kept_while_another_source_offers_nothing(fresh):
    """Upload a good file, look at an empty Paste box (nothing to run: no next document), come back to Upload: the
    uploader has forgotten its file, the session has not, and Run is offered on it again."""
    at = upload(start(), "harbour.txt", TEXT.encode())
    assert at.button(key="run_button").label == "Run on harbour.txt"
    at.radio(key="doc_source").set_value("Paste").run()
    assert at.button(key="run_button").disabled and at.session_state["document"] is None
    at.run()        # AppTest keeps a refilled slot's old extra lines until the next run (a browser drops them)
    assert not any("Next run:" in c.value for c in at.sidebar.caption), [c.value for c in at.sidebar.caption]
    at.radio(key="doc_source").set_value("Upload").run()
    assert not at.exception, [e.value for e in at.exception]
    if at.file_uploader(key="doc_upload").value is None:    # AppTest may keep the widget's file; a browser does not
        assert any("uploaded earlier in this session" in c.value for c in at.caption)
    assert at.button(key="run_button").label == "Run on harbour.txt" and not at.button(key="run_button").disabled


def test_too_large_and_too_long_documents_are_refused(fresh, monkeypatch):
    at = run(upload(start(), "good.txt", TEXT.encode()))
    monkeypatch.setenv("SPARSEGDN_MAX_UPLOAD_MB", "1")
    upload(at, "big.txt", b"a" * (1024 * 1024 + 1))
    assert any("over the 1.0 MB limit" in e.value for e in at.error), [e.value for e in at.error]
    assert any(h.value == "Current result" for h in at.subheader), "the previous result stays on screen"
    monkeypatch.setenv("SPARSEGDN_MAX_TOKENS", "10")
    upload(at, "long.txt", TEXT.encode())
    assert any("at most 10." in e.value and "SPARSEGDN_MAX_TOKENS" in e.value for e in at.error), \
        [e.value for e in at.error]
    assert at.button(key="run_button").disabled
    assert any(h.value == "Current result" for h in at.subheader), "the previous result stays on screen"


def test_a_document_longer_than_the_model_maximum_is_refused(fresh, monkeypatch):
    """The model's own limit (max_position_embeddings), below the server's SPARSEGDN_MAX_TOKENS."""
    import dataclasses

    import app.session

    at = run(upload(start(), "good.txt", TEXT.encode()))
    real = app.session.get_model
    # A copy with a short context: the shared model itself is never mutated.
    monkeypatch.setattr(app.session, "get_model",
                        lambda spec, device: dataclasses.replace(real(spec, device), max_tokens=12))
    upload(at, "long.txt", TEXT.encode())
    assert any("at most 12." in e.value and "long.txt" in e.value for e in at.error), [e.value for e in at.error]
    assert at.button(key="run_button").disabled
    assert any(h.value == "Current result" for h in at.subheader), "the previous result stays on screen"
    assert at.session_state["current"].document == "good.txt"


def test_out_of_memory_is_a_message_and_the_app_keeps_working(fresh, monkeypatch):
    import app.session

    real = app.session.analyze

    def out_of_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(app.session, "analyze", out_of_memory)
    at = run(upload(start(), "harbour.txt", TEXT.encode()))
    assert any("ran out of memory" in e.value and "shorter document" in e.value for e in at.error)
    monkeypatch.setattr(app.session, "analyze", real)
    run(at)
    assert any(s.value.startswith("Run finished") for s in at.success)


def test_compare_runs_configuration_b_on_the_same_document(fresh):
    at = run(upload(start(), "harbour.txt", TEXT.encode()))
    at.switch_page("views/compare.py")
    at.run()
    at.slider(key="compare_budget").set_value(0.6)
    at.selectbox(key="compare_selector").set_value("uniform")
    next(b for b in at.form_submit_button if b.label == "Run B on harbour.txt").click().run()
    assert not at.exception, [e.value for e in at.exception]
    subheaders = [h.value for h in at.subheader]
    assert any(h.startswith("A: score, ρ=0.29, band 1") for h in subheaders), subheaders
    assert any(h.startswith("B: uniform, ρ=0.6, band 1") for h in subheaders), subheaders
    assert len(at.get("plotly_chart")) == 4  # two overviews, error per layer, core time per layer
    assert at.session_state["current"].config.sparse.budget == 0.29, "running B leaves A the current run"


def test_the_controls_offer_the_library_options_on_both_pages(fresh):
    """The run page's and the compare page's controls are generated from sparsegdn.OPTIONS (the backends:
    those that can run on this machine's device)."""
    import sparsegdn
    from analysis.models import resolve_device
    from sparsegdn.config import usable_sparse_backends

    at = run(upload(start(), "harbour.txt", TEXT.encode()))
    backends = usable_sparse_backends(resolve_device("auto"))
    assert set(backends) <= set(sparsegdn.SPARSE_BACKENDS) and {"auto", "torch"} <= set(backends)
    for prefix in ("", "compare_"):
        if prefix:
            at.switch_page("views/compare.py")
            at.run()
        assert tuple(at.selectbox(key=prefix + "selector").options) == sparsegdn.SELECTORS
        assert tuple(at.selectbox(key=prefix + "backend").options) == backends
        assert tuple(int(o) for o in at.select_slider(key=prefix + "band").options) == sparsegdn.BANDS
        budget = at.slider(key=prefix + "budget")
        assert (budget.min, budget.max) == (0.01, 1.0)
        assert at.number_input(key=prefix + "seed").value == 0


def test_a_budget_travels_from_the_slider_to_the_kernel_call_as_one_config(fresh, monkeypatch):
    """What the core receives is the SparseConfig the controls made, not a chain of loose options."""
    import sparsegdn
    from analysis import recorder

    calls = []
    real = sparsegdn.sparse_gated_delta_rule

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(recorder.sparsegdn, "sparse_gated_delta_rule", spy)
    run(upload(start(), "harbour.txt", TEXT.encode()), budget=0.47)
    assert calls, "the sparse core was never called"
    for kwargs in calls:
        assert kwargs["config"] == sparsegdn.SparseConfig(budget=0.47, backend="torch")
        assert not {"budget", "selector", "band", "backend", "seed"} & set(kwargs)


def test_a_bundled_sample_shows_its_counts_and_runs(fresh, monkeypatch):
    import json

    import analysis.documents

    samples = fresh / "samples"
    samples.mkdir()
    (samples / "tides.txt").write_text(TEXT, encoding="utf-8")
    (samples / "index.json").write_text(json.dumps(
        [{"file": "tides.txt", "title": "Tides", "description": "A short test sample."}]), encoding="utf-8")
    monkeypatch.setattr(analysis.documents, "SAMPLES_DIR", samples)
    at = start()
    at.radio(key="doc_source").set_value("Bundled sample").run()
    assert at.selectbox(key="doc_sample").options == [f"Tides ({len(TEXT.encode()) / 1e3:.0f} KB)"]
    assert any(c.value == "A short test sample." for c in at.caption)
    run(at)
    assert any(s.value.startswith("Run finished") for s in at.success)
    assert at.session_state["document"].name == "tides.txt"


def test_choices_survive_another_page(fresh):
    """Budget, selector and document stay as chosen when another page ran in between."""
    at = upload(start(), "harbour.txt", TEXT.encode())
    at.slider(key="budget").set_value(0.34).run()
    at.selectbox(key="selector").set_value("random").run()
    at.switch_page("views/results.py")
    at.run()
    at.switch_page("views/run.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.slider(key="budget").value == 0.34 and at.selectbox(key="selector").value == "random"
    assert at.radio(key="doc_source").value == "Upload"
    assert at.button(key="run_button").label == "Run on harbour.txt"      # the upload kept, by name
    run(at, budget=0.34)
    assert at.session_state["current"].document == "harbour.txt"
    assert at.session_state["current"].config.sparse.selector == "random"


# ---- issue 11: pasted text under the upload rules; long text counted without tokenising it all ----

def paste(at: AppTest, text: str) -> AppTest:
    at.radio(key="doc_source").set_value("Paste").run()
    at.text_area(key="doc_paste").set_value(text).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.parametrize("text, problem", [
    ("Harbour log\x00\x00 with NUL bytes from a binary file. " * 3, "holds NUL characters"),
    ("\x1b[2J\x1b[31m" * 40 + "escape sequences from a terminal", "looks like a binary file"),
], ids=["nul", "escapes"])
def test_pasted_binary_is_refused_like_an_upload(fresh, text, problem):
    at = paste(run(upload(start(), "good.txt", TEXT.encode())), text)
    assert any(e.value.startswith("The pasted text") and problem in e.value for e in at.error), \
        [e.value for e in at.error]
    assert at.button(key="run_button").disabled
    assert at.session_state["current"].document == "good.txt", "the previous result stays current"


def test_pasted_text_over_the_upload_limit_is_refused(fresh, monkeypatch):
    monkeypatch.setenv("SPARSEGDN_MAX_UPLOAD_MB", "1")
    at = paste(start(), "A long paste. " * 80_000)          # 1.1 MB
    assert any("over the 1.0 MB limit" in e.value for e in at.error), [e.value for e in at.error]
    assert at.button(key="run_button").disabled


def test_a_long_paste_is_refused_without_tokenising_all_of_it(fresh, monkeypatch):
    import app.session
    from analysis.models import PIECE_CHARS

    monkeypatch.setenv("SPARSEGDN_MAX_TOKENS", "1000")
    tokenizer = app.session.get_model("default", "cpu").tokenizer     # the model every session shares
    seen, real = [], tokenizer.encode
    monkeypatch.setattr(tokenizer, "encode", lambda text: seen.append(len(text)) or real(text))
    text = TEXT * 6000                                                 # ~2 MB, under the upload limit
    at = paste(start(), text)
    assert any("more than 1,000 tokens" in e.value for e in at.error), [e.value for e in at.error]
    assert at.button(key="run_button").disabled
    assert sum(seen) <= 2 * PIECE_CHARS, f"{sum(seen):,} of {len(text):,} characters tokenised"
