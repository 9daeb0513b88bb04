"""The run store: keys, LRU capacity, one computation per key across threads, saved runs reopen."""
import os
import threading
import time

import pytest
from polars.testing import assert_frame_equal

from analysis.pipeline import RunConfig
from sparsegdn import SparseConfig
from app.runs import RunStore, run_key
from test_app_support import synthetic_result


def test_run_key_depends_on_model_text_and_config():
    base = run_key("default", "some text", RunConfig())
    assert base == run_key("default", "some text", RunConfig())
    assert len({base, run_key("other", "some text", RunConfig()), run_key("default", "some text!", RunConfig()),
                run_key("default", "some text", RunConfig(SparseConfig(budget=0.3))),
                run_key("default", "some text", RunConfig(SparseConfig(band=3)))}) == 5


def test_capacity_evicts_the_least_recently_used():
    store = RunStore(capacity=2)
    for key in ("a", "b"):
        store.put(key, synthetic_result(n_chunks=4), "text")
    store.get("a")  # a is now the most recent
    store.put("c", synthetic_result(n_chunks=4), "text")
    assert store.keys() == ["a", "c"] and store.get("b") is None


def test_one_computation_per_key_across_threads():
    store = RunStore(capacity=4)
    calls = []

    def compute():
        calls.append(1)
        time.sleep(0.2)  # long enough for every thread to arrive while the first computes
        return synthetic_result(n_chunks=4), "text"

    outcomes = []
    threads = [threading.Thread(target=lambda: outcomes.append(store.get_or_compute("k", compute)[1]))
               for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert sorted(outcomes) == [False] + [True] * 5


def test_a_failed_computation_is_not_stored():
    store = RunStore(capacity=2)

    def fail():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        store.get_or_compute("k", fail)
    assert store.get("k") is None and len(store) == 0


def test_saved_runs_reopen_in_a_new_process(tmp_path):
    result = synthetic_result(n_chunks=6, seed=5)
    RunStore(capacity=2, directory=tmp_path).put("abc123abc123", result, result.document)
    reopened = RunStore(capacity=2, directory=tmp_path).get("abc123abc123")
    assert reopened is not None and reopened.text == result.document
    for table in ("events", "heads", "layers", "chunks"):
        assert_frame_equal(getattr(reopened.result, table), getattr(result, table))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no staging directory left behind"


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity and kept_on_disk"):
        RunStore(capacity=0)


def test_saved_runs_are_pruned_to_the_newest(tmp_path):
    store = RunStore(capacity=1, directory=tmp_path, kept_on_disk=2)
    for i, key in enumerate(("aaaaaaaa01", "aaaaaaaa02", "aaaaaaaa03")):
        store.put(key, synthetic_result(n_chunks=4), "text")
        os.utime(tmp_path / key, (1000 + i, 1000 + i))  # mtimes in put order, whatever the clock's resolution
    assert sorted(p.name for p in tmp_path.iterdir()) == ["aaaaaaaa02", "aaaaaaaa03"]
