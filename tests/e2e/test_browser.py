"""End to end in a real headless Chromium: start the app, upload a document, run it, read the views.

Needs Debian's `chromium` (apt-get install -y chromium) and Playwright's Python package; skips with
that reason only when the browser is absent. Screenshots go to test-artifacts/e2e/ (git-ignored).
"""
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "e2e"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
DOCUMENT = (ROOT / "data" / "samples" / "harbour-log.md").read_text(encoding="utf-8")[:1500]

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason="Debian chromium is not installed (apt-get install -y chromium)")
playwright = pytest.importorskip("playwright.sync_api", reason="Playwright's Python package is not installed")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`streamlit run <repo>/app/Home.py` started from another folder with no flag but the port: the
    app's own options (localhost, upload cap) apply; runs kept in a temp dir."""
    from streamlit_server import streamlit_server

    elsewhere = tmp_path_factory.mktemp("elsewhere")
    env = {"SPARSEGDN_RUNS_DIR": str(tmp_path_factory.mktemp("runs")), "SPARSEGDN_DEVICE": "cpu",
           "SPARSEGDN_DEMO": None, "HOME": str(elsewhere)}
    with streamlit_server(elsewhere, tmp_path_factory.mktemp("log") / "streamlit.log", env=env) as (url, port):
        yield url


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def chart_titles(page) -> list[str]:
    # SVG text has no innerText; textContent is what the chart shows.
    return page.locator(".js-plotly-plot .gtitle").evaluate_all("nodes => nodes.map(n => n.textContent)")


def open_page(page, label: str) -> None:
    page.get_by_test_id("stSidebarNav").get_by_text(label, exact=True).click()
    page.get_by_role("heading", name=label if label != "Compare" else "Compare two configurations").wait_for()


def open_and_upload(page, server, document) -> None:
    """Open the app's run page and upload `document`; returns once its token count shows."""
    page.set_default_timeout(120_000)
    page.goto(server)
    page.get_by_role("heading", name="SparseGDN Explorer").wait_for()
    page.get_by_text("Upload", exact=True).click()
    page.get_by_text("20MB per file").wait_for()   # the app's upload cap, not Streamlit's 200 MB
    page.locator("input[type=file]").set_input_files(str(document))
    page.get_by_text("Tokens / chunks").wait_for()


def test_upload_run_and_read_the_views(server, browser, tmp_path):
    document = tmp_path / "harbour.txt"
    document.write_text(DOCUMENT, encoding="utf-8")
    page = browser.new_page(viewport={"width": 1400, "height": 2400})  # tall: whole views in the shots
    open_and_upload(page, server, document)
    shot(page, "1-uploaded")
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_text("Run finished").wait_for()
    page.get_by_role("heading", name="Current result").wait_for()
    page.wait_for_url("**run=**")  # the address bar carries the run once the script finishes
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
    assert any(t.startswith("GDN-core time per layer on cpu") for t in titles), titles
    assert page.locator(".js-plotly-plot .bars path").count() >= 6  # dense and sparse bars per layer
    shot(page, "5-timings")

    open_page(page, "Budget allocation")
    page.locator(".js-plotly-plot").nth(2).wait_for()
    assert any("events per head pair" in t for t in chart_titles(page))
    shot(page, "5b-budget")

    open_page(page, "Compare")
    page.get_by_role("button", name="Run B on the same document").click()
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
    assert header == "layer,core_ms_dense,core_ms_sparse,rel_err_o", header
    shot(page, "5d-export")

    open_page(page, "Prefill timings")
    page.locator(".js-plotly-plot").nth(2).wait_for()

    # The link in the address bar reopens the same run in a fresh browser session. Streamlit clears the
    # query string on a page switch and the page script writes it back when it ends: wait for that.
    page.wait_for_url("**/timings?run=**")
    link = page.url
    other = browser.new_page(viewport={"width": 1400, "height": 1400})
    other.set_default_timeout(120_000)
    other.goto(link)
    other.bring_to_front()
    try:
        other.get_by_role("heading", name="Prefill timings").wait_for()
        other.locator(".js-plotly-plot").nth(2).wait_for()
        assert other.get_by_text("saved result (opened from a link)").count() >= 1
    finally:
        shot(other, "6-reopened-link")


def test_two_browser_sessions_run_at_once_and_a_bad_upload_keeps_the_result(server, browser, tmp_path):
    """Two separate browser contexts upload different documents and press Run together; each sees its
    own result. Then one uploads a non-UTF-8 file: the error shows and its result stays on screen."""
    pages, tokens = [], []
    for name, repeat in (("alpha", 3), ("beta", 5)):
        document = tmp_path / f"{name}.txt"
        document.write_text(f"{name.title()} session document. " + DOCUMENT[: 300 * repeat], encoding="utf-8")
        page = browser.new_context(viewport={"width": 1400, "height": 1600}).new_page()
        open_and_upload(page, server, document)
        tokens.append(page.get_by_test_id("stMetricValue").first.inner_text().split("/")[0].strip().replace(",", ""))
        pages.append(page)
    assert tokens[0] != tokens[1], tokens
    for page in pages:  # both runs are in flight before either is awaited
        page.get_by_role("button", name="Run", exact=True).click()
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
    pages[0].locator("input[type=file]").set_input_files(str(bad))
    pages[0].get_by_text("latin1.txt is not UTF-8 text").wait_for()
    assert pages[0].get_by_role("heading", name="Current result").count() == 1
    assert pages[0].get_by_text(f"{tokens[0]} tokens,").count() >= 1
    shot(pages[0], "8-bad-upload-keeps-result")
    for page in pages:
        page.context.close()
