"""Teaching mode (issue 15): a plain-language note beside every view, and the guided tour through the
passkey example, step by step."""
import re

from app.teaching import NOTES, TOUR_STEPS
from browser_support import finished, open_page, rerun, shot

VIEWS = (("Selected events", "events"), ("Budget allocation", "budget"), ("Error versus dense", "error"),
         ("Prefill timings", "timings"), ("Compare", "compare"), ("Export and share", "export"),
         ("Measured results", "results"), ("Model and document", "run"))
HEADINGS = {"Compare": "Compare two configurations", "Model and document": "SparseGDN Explorer"}


def chart_with_title(page, words: str) -> None:
    page.locator(".js-plotly-plot .gtitle").filter(has_text=words).first.wait_for()


def note(page, key: str):
    """The teaching note of a view: its first words, as the page shows them (markdown removed)."""
    words = re.sub(r"[*`]", "", NOTES[key])[:60]
    return page.get_by_test_id("stAlert").filter(has_text=words)


def test_teaching_mode_puts_a_note_beside_every_view(server, fresh_page):
    page, _ = fresh_page()
    page.goto(f"{server}/?example=harbour-log")   # the root: the links themselves are test_links.py's
    page.get_by_role("heading", name="Selected events").wait_for()
    finished(page)
    toggle = page.get_by_test_id("stSidebar").get_by_text("Teaching mode")
    toggle.wait_for()
    assert note(page, "events").count() == 0          # off until switched on
    with rerun(page):
        toggle.click()
    for label, key in VIEWS:
        open_page(page, label, HEADINGS.get(label))
        note(page, key).wait_for()
    page.wait_for_url("**teach=1**")      # a teacher's link opens the class in teaching mode


def test_the_guided_tour_walks_through_the_passkey_example(server, fresh_page):
    page, _ = fresh_page()
    page.goto(f"{server}/tour")
    page.get_by_role("heading", name="Guided tour").wait_for()
    with rerun(page):
        page.get_by_role("button", name="Start the tour on the passkey example").click()
    page.get_by_role("heading", name=f"1. {TOUR_STEPS[0][0]}").wait_for()
    finished(page)
    page.get_by_text(re.compile(r"The passkey is in chunk \d+\.")).wait_for()
    chart_with_title(page, "per head pair and chunk")
    shot(page, "tour-1")
    with rerun(page):
        page.get_by_role("button", name="Next ▶").click()
    page.get_by_role("heading", name=f"2. {TOUR_STEPS[1][0]}").wait_for()
    finished(page)
    page.get_by_text(re.compile(r"head pairs kept the passkey's chunk; its best score ranks \d+ of \d+")).wait_for()
    chart_with_title(page, "selector scores of the kept and the skipped events")
    shot(page, "tour-2")
    with rerun(page):
        page.get_by_role("button", name="Next ▶").click()
    page.get_by_role("heading", name=f"3. {TOUR_STEPS[2][0]}").wait_for()
    finished(page)
    page.get_by_text(re.compile(r"picked the same next token as the dense one at [\d.]+% of positions")).wait_for()
    chart_with_title(page, "Output error along the document")
    assert "step=2" in page.url
    shot(page, "tour-3")
