"""End to end in a real headless Chromium: start the app, upload a document, run it, read the views.

The server, the browser and the helpers are in conftest.py.
"""
import re
from pathlib import Path

from browser_support import ROOT, chart_titles, open_page, rerun, shot

DOCUMENT = (ROOT / "data" / "samples" / "harbour-log.md").read_text(encoding="utf-8")[:1500]


def open_and_upload(page, server, document) -> None:
    """Open the app's run page and upload `document`; returns once its token count shows."""
    page.set_default_timeout(120_000)
    page.goto(server)
    page.get_by_role("heading", name="SparseGDN Explorer").wait_for()
    page.get_by_text("Upload", exact=True).click()
    page.get_by_text("20MB per file").wait_for()   # the app's upload cap, not Streamlit's 200 MB
    page.locator("input[type=file]").set_input_files(str(document))
    page.get_by_text("Tokens / chunks").wait_for()


def test_upload_run_and_read_the_views(server, fresh_page, tmp_path):
    document = tmp_path / "harbour.txt"
    document.write_text(DOCUMENT, encoding="utf-8")
    page, _ = fresh_page(height=2400)  # tall: whole views in the shots
    open_and_upload(page, server, document)
    shot(page, "1-uploaded")
    page.get_by_role("button", name="Run on harbour.txt", exact=True).click()
    page.get_by_text("Run finished").wait_for()
    page.get_by_role("heading", name="Current result").wait_for()
    page.wait_for_url("**run=**")  # the address bar carries the run once the script finishes
    # The run's phases: the warm-up is reported (and not timed), then the analysis and the timing repeats.
    page.get_by_text("How this run went").click()
    page.get_by_text("warm-up (not timed)").wait_for()
    page.get_by_text(re.compile(r"^timing repeats: [\d.]+ s$")).wait_for()
    shot(page, "2-run-finished")

    open_page(page, "Selected events")
    page.locator(".js-plotly-plot .heatmaplayer image").first.wait_for()
    titles = chart_titles(page)
    assert any(t.startswith("Events selected, all layers") for t in titles), titles
    assert any(t.startswith("Layer 0: selected per head pair and chunk") for t in titles), titles
    assert page.locator(".js-plotly-plot .heatmaplayer image").count() == 2
    # Click the document strip under the layer heatmap: the chunk's text opens and the URL follows.
    page.locator(".js-plotly-plot").nth(1).locator(".scatterlayer .point").nth(5).click(force=True)
    page.wait_for_url("**chunk=5**")
    page.get_by_text("Chunk 5: tokens 320–383").wait_for()
    shot(page, "3-events")

    open_page(page, "Error versus dense")
    page.locator(".js-plotly-plot").nth(2).wait_for()
    titles = chart_titles(page)
    assert any("Relative output error versus dense, per layer" in t for t in titles), titles
    assert any("Output error along the document" in t for t in titles), titles
    assert page.get_by_text("Top-1 agreement").count() >= 1
    shot(page, "4-error")

    open_page(page, "Prefill timings")
    page.locator(".js-plotly-plot").nth(2).wait_for()
    titles = chart_titles(page)
    assert any(t.startswith("GDN-core time per layer on cpu") and "(median of 3 repeats" in t for t in titles), titles
    assert page.locator(".js-plotly-plot .bars path").count() >= 6  # dense and sparse bars per layer
    # Repeated, warm timings with their spread, and which code ran the cores on the CPU.
    page.get_by_text(re.compile(r"the median of 3 interleaved repeats .* taken after a warm-up")).wait_for()
    assert page.get_by_text(re.compile(r"^range [\d,.]+–[\d,.]+ ms, 3 repeats$")).count() >= 2
    page.get_by_text(re.compile(r"Sparse core: SparseGDN's torch path \(sparsegdn/event_forward.py")).wait_for()
    page.get_by_text(re.compile(r"^First call \(warm-up, not counted above\)")).wait_for()
    shot(page, "5-timings")

    open_page(page, "Budget allocation")
    page.locator(".js-plotly-plot").nth(2).wait_for()
    assert any("events per head pair" in t for t in chart_titles(page))
    shot(page, "5b-budget")

    open_page(page, "Compare", "Compare two configurations")
    page.get_by_role("button", name="Run B on harbour.txt").click()
    page.get_by_role("heading", name="B: uniform, ρ=0.1, band 1").wait_for()
    page.locator(".js-plotly-plot").nth(3).wait_for()
    assert any("Relative output error per layer" in t for t in chart_titles(page))
    shot(page, "5c-compare")

    open_page(page, "Export and share")
    page.get_by_role("button", name="everything (.zip)").wait_for()
    with page.expect_download() as download:
        page.get_by_role("button", name=re.compile(r"^layers \(\d+ rows\)$")).click()
    assert download.value.suggested_filename.endswith("-layers.csv")
    header = Path(download.value.path()).read_text().splitlines()[0]
    assert header == "layer,device,core_ms_dense,core_ms_sparse,rel_err_o", header   # record columns keep their names
    shot(page, "5d-export")

    open_page(page, "Prefill timings")
    page.locator(".js-plotly-plot").nth(2).wait_for()

    # The link in the address bar reopens the same run in a fresh browser session. Streamlit clears the
    # query string on a page switch and the page script writes it back when it ends: wait for that.
    page.wait_for_url("**/timings?run=**")
    link = page.url
    other, _ = fresh_page(height=1400)
    other.goto(link)
    other.bring_to_front()
    try:
        other.get_by_role("heading", name="Prefill timings").wait_for()
        other.locator(".js-plotly-plot").nth(2).wait_for()
        assert other.get_by_text("saved result (opened from a link)").count() >= 1
        # The reopened run still names its document: in the sidebar and in the run's caption.
        other.get_by_test_id("stSidebar").get_by_text(re.compile(r"^harbour\.txt: score")).wait_for()
        other.get_by_text(re.compile(r"^harbour\.txt · default")).wait_for()
    finally:
        shot(other, "6-reopened-link")


def test_two_browser_sessions_run_at_once_and_a_bad_upload_keeps_the_result(server, fresh_page, tmp_path):
    """Two separate browser contexts upload different documents and press Run together; each sees its
    own result. Then one uploads a non-UTF-8 file: the error shows and its result stays on screen."""
    pages, tokens = [], []
    for name, repeat in (("alpha", 3), ("beta", 5)):
        document = tmp_path / f"{name}.txt"
        document.write_text(f"{name.title()} session document. " + DOCUMENT[: 300 * repeat], encoding="utf-8")
        page, _ = fresh_page(height=1600)
        open_and_upload(page, server, document)
        tokens.append(page.get_by_test_id("stMetricValue").first.inner_text().split("/")[0].strip().replace(",", ""))
        pages.append(page)
    assert tokens[0] != tokens[1], tokens
    for page, name in zip(pages, ("alpha", "beta")):  # both runs are in flight before either is awaited
        page.get_by_role("button", name=f"Run on {name}.txt", exact=True).click()
    keys = []
    for page, n_tokens in zip(pages, tokens):
        page.get_by_text("Run finished").wait_for()
        page.wait_for_url("**run=**")
        page.get_by_text(f"{n_tokens} tokens,").first.wait_for()  # the result caption: this session's document
        keys.append(re.search(r"run=([0-9a-f]+)", page.url).group(1))
    assert keys[0] != keys[1]
    shot(pages[1], "7-second-session")

    bad = tmp_path / "latin1.txt"
    bad.write_bytes("Caf\u00e9 d\u00e9j\u00e0 vu".encode("latin-1"))
    # Count only once the upload's script run has ended: while it runs, the error drawn above the result
    # shifts the page, and Streamlit keeps the previous run's heading on screen beside the new one until then
    # (a fresh-clone CI run counted two).
    with rerun(pages[0]):
        pages[0].locator("input[type=file]").set_input_files(str(bad))
    pages[0].get_by_text("latin1.txt is not UTF-8 text").wait_for()
    assert pages[0].get_by_role("heading", name="Current result").count() == 1
    assert pages[0].get_by_text(f"{tokens[0]} tokens,").count() >= 1
    shot(pages[0], "8-bad-upload-keeps-result")
