"""One session state that every page reads (issue 15, item 1): choices survive leaving the run page, a
run names its document, Compare never pairs runs of two documents, the sidebar's picker follows the
current run, "Open example" puts its document in the Document panel."""
import re

from playwright.sync_api import expect

from browser_support import open_page, rerun, shot, visit


def select(page, label: str, option) -> None:
    """Pick `option` (text or pattern) in the selectbox labelled `label`."""
    page.get_by_role("combobox", name=label, exact=True).click()
    with rerun(page):
        page.get_by_role("option", name=option).click()


def selectbox(where, label: str):
    return where.get_by_role("combobox", name=label, exact=True)


def budget(page):
    return page.get_by_test_id("stSlider").filter(has_text="Budget").get_by_test_id("stSliderThumbValue")


def test_choices_survive_leaving_the_run_page(server, fresh_page):
    page, _ = fresh_page()
    visit(page, f"{server}/", "SparseGDN Explorer")   # the root opens the run page
    select(page, "Sample", re.compile(r"^Macbeth, Act I"))
    slider = page.get_by_test_id("stSlider").filter(has_text="Budget").get_by_role("slider")
    slider.focus()
    for _ in range(5):          # 0.29 + 5 steps of 0.01
        slider.press("ArrowRight")
    expect(budget(page)).to_have_text("0.34")
    select(page, "Selector policy", "random")
    expect(selectbox(page, "Selector policy")).to_have_value("random")
    shot(page, "state-chosen")

    open_page(page, "Measured results")
    open_page(page, "Model and document", "SparseGDN Explorer")
    shot(page, "state-back-on-run-page")
    expect(selectbox(page, "Sample")).to_have_value(re.compile(r"^Macbeth, Act I"))
    expect(budget(page)).to_have_text("0.34")
    expect(selectbox(page, "Selector policy")).to_have_value("random")
    # Run says which document it will analyse: the one the panel shows.
    page.get_by_role("button", name="Run on macbeth-act-1.txt", exact=True).wait_for()


def test_compare_never_pairs_runs_of_two_documents(server, fresh_page):
    """A link whose compare= names a run of another document: said loudly, not drawn side by side."""
    page, _ = fresh_page()
    visit(page, f"{server}/compare?example=harbour-log&compare=example:passkey-haystack",
          "Compare two configurations")
    shot(page, "compare-two-documents")
    page.get_by_text(re.compile(r"ran on passkey-haystack\.txt, A on harbour-log\.md: runs of different documents "
                                r"are not compared")).wait_for()
    assert page.get_by_role("heading", name=re.compile(r"^[AB]: ")).count() == 0
    assert "compare=" not in page.url


def test_the_run_picker_follows_the_current_run(server, fresh_page):
    page, _ = fresh_page()
    visit(page, f"{server}/?example=harbour-log", "Selected events")   # the root; test_links.py opens each path
    sidebar = page.get_by_test_id("stSidebar")
    with rerun(page):
        sidebar.get_by_role("button", name="Open example: passkey-haystack").click()
    expect(selectbox(sidebar, "This session's runs")).to_have_value(re.compile(r"^2\. example passkey-haystack"))
    select(page, "This session's runs", re.compile(r"^1\. example harbour-log"))
    sidebar.get_by_text(re.compile(r"^example harbour-log")).wait_for()         # picked: run 1 is the current run
    with rerun(page):
        sidebar.get_by_role("button", name="Open example: timing-apart").click()
    shot(page, "picker-follows")
    expect(selectbox(sidebar, "This session's runs")).to_have_value(re.compile(r"^3\. example timing-apart"))


def test_open_example_puts_its_document_in_the_document_panel(server, fresh_page):
    page, _ = fresh_page()
    visit(page, f"{server}/", "SparseGDN Explorer")   # the root opens the run page
    with rerun(page):
        page.get_by_test_id("stSidebar").get_by_role("button", name="Open example: harbour-log").click()
    page.get_by_role("heading", name="Current result").wait_for()
    shot(page, "open-example-document")
    expect(selectbox(page, "Sample")).to_have_value(re.compile(r"^The harbour master's log"))
    page.get_by_role("button", name="Run on harbour-log.md", exact=True).wait_for()
