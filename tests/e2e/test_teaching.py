"""Teaching mode (issue 15): a plain-language note beside every view, and the guided tour through the
passkey example, step by step."""
import re

from app.teaching import NOTES, TOUR_STEPS
from browser_support import finished, open_page, rerun, shot, visit

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
    visit(page, f"{server}/?example=harbour-log", "Selected events")   # the root; test_links.py opens each path
    toggle = page.get_by_test_id("stSidebar").get_by_text("Teaching mode")
    toggle.wait_for()
    assert note(page, "events").count() == 0          # off until switched on
    with rerun(page):
        toggle.click()
    for label, key in VIEWS:
        open_page(page, label, HEADINGS.get(label))
        note(page, key).wait_for()
    page.wait_for_url("**teach=1**")      # a teacher's link opens the class in teaching mode


# What each step of the tour shows beside its words: a sentence made of the example's numbers, a chart.
TOUR_SHOWS = ((r"The passkey is in chunk \d+\.", "per head pair and chunk"),
              (r"head pairs kept the passkey's chunk; its best score ranks \d+ of \d+",
               "selector scores of the kept and the skipped events"),
              (r"picked the same next token as the dense one at [\d.]+% of positions", "Output error along the document"))


def test_the_guided_tour_walks_through_the_passkey_example(server, fresh_page):
    page, _ = fresh_page()
    page.goto(f"{server}/tour")
    page.get_by_role("heading", name="Guided tour").wait_for()
    button = "Start the tour on the passkey example"
    for step, ((title, _), (sentence, chart)) in enumerate(zip(TOUR_STEPS, TOUR_SHOWS)):
        with rerun(page):
            page.get_by_role("button", name=button).click()
        page.get_by_role("heading", name=f"{step + 1}. {title}").wait_for()
        finished(page)
        page.get_by_text(re.compile(sentence)).wait_for()
        chart_with_title(page, chart)
        shot(page, f"tour-{step + 1}")
        button = "Next ▶"
    assert f"step={len(TOUR_STEPS) - 1}" in page.url
