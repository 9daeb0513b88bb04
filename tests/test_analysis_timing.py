"""Timing a person can trust (analysis/timing.py): the spread of repeats, differences outside the noise
only, the stages summed by name, and a thread count that does not oversubscribe the machine."""
import pytest

from analysis.timing import Spread, StageClock, choose_threads, difference


def test_a_spread_is_the_median_and_range_of_the_repeats():
    spread = Spread.of([12.0, 10.0, 30.0, None])
    assert spread == Spread(median=12.0, low=10.0, high=30.0, n=3)
    assert Spread.from_dict(spread.to_dict()) == spread
    assert Spread.of([]) is None and Spread.from_dict(None) is None


@pytest.mark.parametrize("new, old, distinct, repeated", [
    ([10, 11, 12], [20, 21, 22], True, True),      # ranges apart: a difference
    ([10, 11, 21], [20, 21, 22], False, True),     # ranges overlap: inside the noise
    ([10], [20, 21, 22], False, False),            # one side measured once: no spread to judge by
])
def test_a_difference_counts_only_outside_the_noise(new, old, distinct, repeated):
    change = difference(Spread.of(new), Spread.of(old))
    assert (change.distinct, change.repeated) == (distinct, repeated)
    assert change.change == pytest.approx(Spread.of(new).median / Spread.of(old).median - 1)
    words = change.describe()
    assert ("within the noise" in words) == (repeated and not distinct)
    assert ("single measurement" in words) == (not repeated)


def test_the_stage_clock_sums_repeated_names_in_stage_order():
    """The torch backend reports intra_solve ... output once per slab after one selection: the totals
    are per name, in the order of sparsegdn.STAGES."""
    clock = StageClock(cuda=False)
    clock.start()
    for name in ["selection"] + ["intra_solve", "event_prepare", "state_pass", "output"] * 3:
        clock.hook(name)
    totals = clock.totals_ms()
    assert list(totals) == ["intra_solve", "selection", "event_prepare", "state_pass", "output"]
    assert all(len(clock.spans[name]) == 3 for name in totals if name != "selection")
    assert totals["output"] == pytest.approx(sum((b - a) * 1e3 for a, b in clock.spans["output"]))


@pytest.mark.parametrize("environ, cores, expected", [
    ({}, 2, 1),                                       # 2 cores: one thread, one core for the rest
    ({}, 16, 15),
    ({}, 1, 1),
    ({"OMP_NUM_THREADS": "2"}, 2, 2),                 # what the person asked for
    ({"SPARSEGDN_THREADS": "3", "OMP_NUM_THREADS": "2"}, 8, 3),
])
def test_the_thread_count_leaves_a_core_free_unless_asked(environ, cores, expected):
    threads, reason = choose_threads(environ, cores)
    assert threads == expected and reason


@pytest.mark.parametrize("raw", ["0", "two", "-1"])
def test_a_bad_thread_count_is_refused_naming_the_variable(raw):
    with pytest.raises(ValueError, match="^SPARSEGDN_THREADS"):
        choose_threads({"SPARSEGDN_THREADS": raw}, 4)
