"""The smaller items of issue 15: words and rounded numbers in tables, the heatmap's label as the control
says it, the attention layers explained, the zoom usable or explained, and a server log without the file
watcher's tracebacks."""
import json
import re

from browser_support import HYBRID_EXAMPLE, ROOT, chart_titles, finished, open_page, rerun, shot, visit

EXAMPLE = ROOT / "data" / "examples" / "harbour-log"


def test_tables_say_what_their_columns_are_and_round_their_numbers(server, fresh_page):
    page, _ = fresh_page()
    visit(page, f"{server}/?example=harbour-log", "Selected events")   # the root; test_links.py opens each path
    page.get_by_test_id("stDataFrame").first.scroll_into_view_if_needed()   # a table draws when it is in view
    page.locator("[role=columnheader]").first.wait_for(state="attached")   # the grid's accessible copy
    headers = page.locator("[role=columnheader]").all_inner_texts()
    assert {"head pair", "kept", "selector score", "output error"} <= set(headers), headers
    visit(page, f"{server}/timings?example=timing-noise", "Prefill timings")
    page.get_by_test_id("stDataFrame").first.scroll_into_view_if_needed()
    page.locator("[role=columnheader]").first.wait_for(state="attached")   # the grid's accessible copy
    headers = page.locator("[role=columnheader]").all_inner_texts()
    assert "prefill, sparse (ms)" in headers and not any("_" in h for h in headers), headers
    cells = page.locator("[role=gridcell]").all_inner_texts()
    assert not [c for c in cells if re.fullmatch(r"[\d,]+\.\d{2,}", c.strip())], cells   # 0.1 ms at most


def test_the_heatmap_says_output_error_as_the_control_does(server, fresh_page):
    page, _ = fresh_page()
    visit(page, f"{server}/?example=harbour-log", "Selected events")   # the root; test_links.py opens each path
    with rerun(page):
        page.get_by_test_id("stRadio").get_by_text("output error", exact=True).click()
    page.wait_for_url("**value=rel_err_o**")
    page.locator(".js-plotly-plot .gtitle").filter(has_text="Layer 0: output error per head pair and chunk").wait_for()
    titles = chart_titles(page)
    assert any(t.startswith("Layer 0: output error per head pair and chunk") for t in titles), titles
    colorbars = page.locator(".js-plotly-plot .cbtitle").evaluate_all("nodes => nodes.map(n => n.textContent)")
    assert "output error" in colorbars and "rel_err_o" not in " ".join(titles + colorbars)


def test_attention_layers_are_named_where_they_leave_a_gap(server, fresh_page):
    """On a hybrid model's run (made: the GDN-only default has no attention layer), layers 3 and 7."""
    page, _ = fresh_page()
    visit(page, f"{server}/timings?example={HYBRID_EXAMPLE}", "Prefill timings")
    shot(page, "attention-layers")
    page.get_by_text(re.compile(r"^Layers 3, 7: attention, not Gated DeltaNet")).wait_for()   # 8 layers, GGGA GGGA
    chart = page.locator(".js-plotly-plot").filter(has_text="GDN-core time per layer")
    chart.scroll_into_view_if_needed()
    chart.locator(".annotation-text").first.wait_for()
    annotations = chart.locator(".annotation-text").evaluate_all("ns => ns.map(n => n.textContent)")
    assert "attention layer" in annotations, annotations
    visit(page, f"{server}/timings?example=harbour-log", "Prefill timings")      # the GDN-only default: no gap
    chart = page.locator(".js-plotly-plot").filter(has_text="GDN-core time per layer")
    chart.scroll_into_view_if_needed()
    assert "attention layer" not in chart.inner_text()
    assert page.get_by_text(re.compile(r"attention, not Gated DeltaNet")).count() == 0


def test_the_zoom_is_offered_or_explained(server, fresh_page):
    n_chunks = json.loads((EXAMPLE / "summary.json").read_text())["n_chunks"]
    page, _ = fresh_page()
    visit(page, f"{server}/?example=harbour-log", "Selected events")   # the root; test_links.py opens each path
    page.get_by_text(f"All {n_chunks} chunks are shown at full resolution, one column per chunk").wait_for()
    page.get_by_role("button", name="next ▶").wait_for()       # the page's buttons are drawn
    assert page.get_by_role("button", name=re.compile("Full resolution|Zoom to")).count() == 0


def test_the_server_log_has_no_tracebacks(server, fresh_page, server_log):
    """The file watcher would walk transformers' lazy modules after every script run and log a traceback
    for each ("No module named torchvision"); the app's settings turn it off wherever it is launched."""
    page, _ = fresh_page()
    page.goto(f"{server}/")           # the run page: loads the model, so transformers is imported
    page.get_by_text("Tokens / chunks").wait_for()
    finished(page)
    open_page(page, "Selected events")
    finished(page)
    log = server_log.read_text()
    for sign in ("torchvision", "local_sources_watcher", "No module named"):
        assert sign not in log, log[log.find(sign) - 2000:log.find(sign) + 200]
