"""Every view's URL reopens it in a new browser session: no "Page not found" dialog, and no request to
anything but this server (the app works offline). Issue 15, item 2 and the offline part of item 5."""
import json
import re

import pytest

from browser_support import ROOT, finished, no_page_not_found, shot

# url path -> the heading the page opens with; "" is the root, which moves on to a view.
HEADINGS = {"run": "SparseGDN Explorer", "events": "Selected events", "budget": "Budget allocation",
            "error": "Error versus dense", "timings": "Prefill timings", "compare": "Compare two configurations",
            "export": "Export and share", "results": "Measured results", "tour": "Guided tour"}
EXAMPLE = "harbour-log"


def readme_links() -> list[str]:
    """The example links the READMEs give (`…/events?example=NAME`, `?example=NAME`), as paths."""
    links = []
    for name in ("README.md", "app/README.md"):
        text = (ROOT / name).read_text(encoding="utf-8")
        links += [f"/{path}?example={example}" for path, example in re.findall(r"(?:…|\.\.\.)?/?([a-z]*)\?example=([\w-]+)", text)]
    return sorted(set(links))


LINKS = ([f"/{path}?example={EXAMPLE}" for path in HEADINGS] + ["/", "/run", f"/?example={EXAMPLE}"]
         + readme_links())


def test_the_readmes_give_example_links():
    assert "/?example=passkey-haystack" in readme_links() and "/events?example=passkey-haystack" in readme_links()


@pytest.mark.parametrize("link", LINKS)
def test_a_link_reopens_its_view_without_a_dialog_and_nothing_leaves_the_machine(server, fresh_page, link):
    page, requests = fresh_page(height=1200)
    page.goto(server + link)
    path = link.split("?")[0].strip("/")
    # The root opens the events view on a link that names a result, the run page otherwise.
    heading = HEADINGS.get(path) or ("Selected events" if "example=" in link else HEADINGS["run"])
    page.get_by_role("heading", name=heading, exact=True).wait_for()
    finished(page)
    page.get_by_test_id("stSidebarNav").wait_for()
    shot(page, "link-" + re.sub(r"\W+", "-", link).strip("-"))
    no_page_not_found(page)
    assert not requests.outside(server), f"requests outside {server}: {requests.outside(server)}"
    if "example=" in link and path not in ("run", "results", "tour"):
        # The view shows the run the link names, with its document.
        example = link.split("example=")[1]
        assert page.get_by_text("prepared example (no model loaded)").count() >= 1
        sample = next(s["file"] for s in json.loads((ROOT / "data/samples/index.json").read_text())
                      if s.get("example") == example)
        page.get_by_text(re.compile(rf"^{re.escape(sample)} · ")).first.wait_for()
