"""The browser tests' server and browser: `streamlit run` of the app, launched from a folder outside the
repository (the app's own settings must apply wherever it is started), and Debian's headless chromium.

The server's examples folder holds the bundled examples, two made here whose timings are known
exactly (their spreads overlap, or do not), so what the Timings page shows is decided, not measured, and
a made run of a hybrid model (attention layers between the GDN layers).
Needs Debian's `chromium` (apt-get install -y chromium) and Playwright's Python package; skips with
that reason only when the browser is absent. Screenshots go to test-artifacts/e2e/ (git-ignored).
"""
import shutil
from pathlib import Path

import pytest

from browser_support import APART, CHROMIUM, CHROMIUM_ARGS, COUNT_RUNS, HYBRID_EXAMPLE, HYBRID_GDN_LAYERS, NOISY, ROOT, shot


def pytest_collection_modifyitems(config, items):
    if not Path(CHROMIUM).exists():
        skip = pytest.mark.skip(reason="Debian chromium is not installed (apt-get install -y chromium)")
        for item in items:
            if "e2e" in item.nodeid:
                item.add_marker(skip)


def made_examples(directory: Path) -> None:
    from test_app_support import synthetic_result, with_timings

    for name in ("harbour-log", "passkey-haystack"):
        shutil.copytree(ROOT / "data" / "examples" / name, directory / name)
    for name, (dense, sparse) in (("timing-noise", NOISY), ("timing-apart", APART)):
        with_timings(synthetic_result(n_layers=3, head_pairs=4, n_chunks=20, seed=3), dense, sparse).save(
            directory / name)
    # a hybrid model's run (8 layers, GGGA GGGA), the layout of Qwen3.5: the GDN-only default has no attention
    # layer to show
    with_timings(synthetic_result(head_pairs=4, n_chunks=20, seed=4, gdn_layers=HYBRID_GDN_LAYERS, model_layers=8),
                 *APART).save(directory / HYBRID_EXAMPLE)


@pytest.fixture(scope="session")
def server_log(tmp_path_factory):
    return tmp_path_factory.mktemp("log") / "streamlit.log"


@pytest.fixture(scope="session")
def server(tmp_path_factory, server_log):
    """`streamlit run <repo>/app/Home.py` started from an empty folder with no flag but the port: the
    app's own options (localhost, upload cap, no file watcher) apply; runs kept in a temp dir."""
    from streamlit_server import streamlit_server

    examples = tmp_path_factory.mktemp("examples")
    made_examples(examples)
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    env = {"SPARSEGDN_RUNS_DIR": str(tmp_path_factory.mktemp("runs")), "SPARSEGDN_DEVICE": "cpu",
           "SPARSEGDN_EXAMPLES_DIR": str(examples), "SPARSEGDN_DEMO": None, "HOME": str(elsewhere)}
    with streamlit_server(elsewhere, server_log, env=env) as (url, _port):
        yield url


@pytest.fixture(scope="session")
def browser():
    playwright = pytest.importorskip("playwright.sync_api", reason="Playwright's Python package is not installed")
    with playwright.sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


class Requests:
    """Every URL a browser context asked for."""

    def __init__(self, context):
        self.urls: list[str] = []
        context.on("request", lambda request: self.urls.append(request.url))

    def outside(self, server: str) -> list[str]:
        return [u for u in self.urls if not u.startswith((server, "data:", "blob:", "about:"))]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.failed_call = report.failed
    return report


@pytest.fixture
def fresh_page(browser, server, request):
    """A page in a new browser context (a new Streamlit session) and the record of its requests; a test
    that fails leaves a screenshot of each of its pages in test-artifacts/e2e/."""
    contexts = []

    def make(width=1400, height=1800):
        context = browser.new_context(viewport={"width": width, "height": height})
        context.add_init_script(COUNT_RUNS)
        contexts.append(context)
        requests = Requests(context)
        page = context.new_page()
        page.set_default_timeout(120_000)
        return page, requests

    yield make
    for number, context in enumerate(contexts):
        if getattr(request.node, "failed_call", False):
            for page in context.pages:
                shot(page, f"failed-{request.node.name[:80]}-{number}")
        context.close()
