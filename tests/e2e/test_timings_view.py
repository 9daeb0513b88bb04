"""Timings a person can trust (issue 15, items 3 and 4), on two made examples whose repeated timings are
known: ranges that overlap (a change inside the noise: said in words, never coloured) and ranges apart
(a real difference: the coloured delta). Prepared examples say where and how they were measured."""
import re

from browser_support import shot, visit


def metric(page, label: str):
    return page.get_by_test_id("stMetric").filter(has=page.get_by_text(label, exact=True))


def open_timings(page, server, example: str) -> None:
    visit(page, f"{server}/timings?example={example}", "Prefill timings")


def test_a_change_inside_the_noise_is_said_not_coloured(server, fresh_page):
    page, _ = fresh_page()
    open_timings(page, server, "timing-noise")
    shot(page, "timings-noise")
    sparse = metric(page, "Whole prefill, sparse")
    sparse.get_by_test_id("stMetricValue").wait_for()      # the metric is drawn (its code loads on first use)
    assert sparse.get_by_test_id("stMetricDelta").count() == 0, "a change inside the noise has no red/green delta"
    assert page.get_by_text(re.compile(r"within the noise: no difference shown")).count() >= 1
    assert page.get_by_text(re.compile(r"^range [\d,.]+–[\d,.]+ ms, 3 repeats$")).count() >= 2


def test_a_change_outside_the_noise_is_shown(server, fresh_page):
    page, _ = fresh_page()
    open_timings(page, server, "timing-apart")
    delta = metric(page, "Whole prefill, sparse").get_by_test_id("stMetricDelta").first
    assert re.fullmatch(r"-\d+\.\d%", delta.inner_text().strip()), delta.inner_text()


def test_a_prepared_example_says_where_and_how_it_was_measured(server, fresh_page):
    page, _ = fresh_page()
    open_timings(page, server, "harbour-log")
    shot(page, "timings-example")
    page.get_by_text(re.compile(r"^A prepared example\. Measured on cpu \(CPU\) on .*: each figure is the median of 3 "
                                r"interleaved repeats.*not compared with this session's runs")).wait_for()
    page.get_by_text("Measured elsewhere or at another time").wait_for()
