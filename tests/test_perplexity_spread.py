"""The perplexity-change spread over held-out windows (analysis/perplexity_spread.py)."""
import json
import math

import numpy as np
import pytest

from analysis import perplexity_spread as spread
from analysis.evaluation import heldout_picks, heldout_windows


def test_change_is_the_perplexity_ratio_of_all_tokens():
    dense = np.array([2.0, 3.0, 4.0])
    sparse = np.array([2.1, 3.0, 4.2])
    expected = math.exp(np.mean(sparse)) / math.exp(np.mean(dense)) - 1
    assert spread.change(dense, sparse) == pytest.approx(expected)
    assert spread.change(dense, dense) == 0.0


def test_interval_holds_the_change_and_narrows_to_it_when_every_window_agrees():
    rng = np.random.default_rng(1)
    dense = rng.uniform(2, 5, size=40)
    sparse = dense + rng.normal(0.03, 0.02, size=40)
    low, high = spread.bootstrap_interval(dense, sparse)
    assert low < spread.change(dense, sparse) < high
    assert spread.bootstrap_interval(dense, sparse) == (low, high)          # seeded: the same interval again
    same = spread.bootstrap_interval(dense, dense + 0.02)
    assert same[0] == pytest.approx(math.expm1(0.02)) and same[1] == pytest.approx(math.expm1(0.02))


def test_a_wider_spread_of_windows_gives_a_wider_interval():
    rng = np.random.default_rng(2)
    dense = rng.uniform(2, 5, size=30)
    noise = rng.normal(0, 1, size=30)
    narrow = spread.bootstrap_interval(dense, dense + 0.03 + 0.01 * noise)
    wide = spread.bootstrap_interval(dense, dense + 0.03 + 0.05 * noise)
    assert wide[1] - wide[0] > 3 * (narrow[1] - narrow[0])


def test_picks_are_the_windows_the_evaluation_measures():
    rng = np.random.default_rng(3)
    heldout = {"a": rng.integers(0, 1000, size=1000), "b": rng.integers(0, 1000, size=650)}
    picks = heldout_picks(heldout, 64, 5, seed=0)
    windows = heldout_windows(heldout, 64, 5, seed=0)
    for source, chosen in picks.items():
        assert len(chosen) == 5 and np.all(np.diff(chosen) > 0)
        assert np.array_equal(windows[source], np.stack([heldout[source][i * 64:(i + 1) * 64] for i in chosen]))


def test_summary_reports_each_reference_sample_on_its_own_windows(tmp_path):
    dense = np.array([3.0, 3.0, 3.0, 3.0])
    sparse = np.array([3.0, 3.1, 3.0, 3.2])
    row = spread.summarize("src", dense, sparse, {2: np.array([0, 2]), 3: np.array([1, 2, 3])})
    assert row["samples"]["2"]["change"] == 0.0
    assert row["samples"]["3"]["change"] == pytest.approx(math.expm1(0.1))
    assert row["per_window_change_max"] == pytest.approx(math.expm1(0.2))
    assert row["windows"] == 4
    report = {"meta": {"setting": "sparse b=0.29 score band=1", "model": "m", "checkpoint_sha256": "ab" * 32,
                       "device": "cpu", "date": "2026-12-01", "command": "c", "length": 8192},
              "sources": [{**row, "samples": {"8": row["samples"]["2"], "4": row["samples"]["3"]}}]}
    path = tmp_path / "spread.json"
    path.write_text(json.dumps(report))
    spread.main(["--render", str(path)])
    table = path.with_suffix(".md").read_text()
    assert "| src | 4 |" in table and "+10.52%" in table
