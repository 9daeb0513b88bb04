"""Helpers of the browser tests (the fixtures are in conftest.py): where things are, how to wait for a
page, how to read it."""
import shutil
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "e2e"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# Timings of the made examples: dense and sparse whole prefills (ms) of three repeats each.
NOISY = ([10060.8967, 9800.5, 10400.25], [9950.1234, 9700.0, 10900.75])      # ranges overlap
APART = ([1000.0, 1010.0, 1020.0], [700.0, 705.0, 712.5])                    # ranges apart
# A made run of a hybrid model: 8 layers, attention at 3 and 7 (GGGA GGGA, Qwen3.5's layout).
HYBRID_EXAMPLE = "hybrid-layers"
HYBRID_GDN_LAYERS = [0, 1, 2, 4, 5, 6]


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def chart_titles(page) -> list[str]:
    # SVG text has no innerText; textContent is what the chart shows.
    return page.locator(".js-plotly-plot .gtitle").evaluate_all("nodes => nodes.map(n => n.textContent)")


def visit(page, url: str, heading: str) -> None:
    """Open `url` in `page` and wait until the page titled `heading` has finished its script run."""
    page.goto(url)
    page.get_by_role("heading", name=heading).wait_for()
    finished(page)


def open_page(page, label: str, heading: str | None = None) -> None:
    with rerun(page):
        page.get_by_test_id("stSidebarNav").get_by_text(label, exact=True).click()
    page.get_by_role("heading", name=heading or label).wait_for()


# Counts the script runs a page has seen end (Streamlit marks its root element while one runs), so a test
# can wait for the run its own action started rather than for a quiet moment. The root element may be
# replaced while a run goes on, so its state is read after every change of the page, not only its own.
COUNT_RUNS = """
window.__runsDone = 0;
let last = null;
new MutationObserver(records => {
  const sawRunning = records.some(r => r.type === 'attributes' && r.oldValue === 'running');
  const app = document.querySelector('[data-testid="stApp"]');
  const now = app ? app.getAttribute('data-test-script-state') : null;
  if ((sawRunning || last === 'running') && now !== 'running') window.__runsDone += 1;
  last = now;
}).observe(document, {subtree: true, childList: true, attributes: true, attributeOldValue: true,
                      attributeFilter: ['data-test-script-state']});
"""
RUN_SEEN_MS = 30_000   # an action whose run is not seen ending by then: go on to wait for a quiet page


@contextmanager
def rerun(page):
    """Do something that makes the app run its script (a widget, a button, a page): wait for that run to
    end. Assertions after it still wait for what they check (Playwright's expect and wait_for)."""
    done = page.evaluate("() => window.__runsDone")
    yield
    try:
        page.wait_for_function("n => window.__runsDone > n", arg=done, timeout=RUN_SEEN_MS)
    except Exception as error:   # playwright's TimeoutError: the run may have ended unseen
        if "Timeout" not in type(error).__name__:
            raise
    finished(page)


def finished(page) -> None:
    """Wait until the page's script run is over (Streamlit marks its root element while one runs)."""
    page.wait_for_function("() => document.querySelector('[data-testid=\"stApp\"]')"
                           "?.getAttribute('data-test-script-state') === 'notRunning'")


def no_page_not_found(page) -> None:
    """Streamlit's "Page not found" dialog, shown when a URL's path names no page, must not be there."""
    assert page.get_by_text("Page not found").count() == 0, f"'Page not found' dialog on {page.url}"
    assert page.get_by_text("does not seem to exist").count() == 0, page.url
