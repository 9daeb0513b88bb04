"""Saving records: a run appears whole or not at all, even when the process is killed while it saves."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from analysis.records import RunResult, destination_problem
from test_app_support import synthetic_result

REPO = Path(__file__).resolve().parents[1]
# Saves a run of N chunks as OUT and is killed (SIGKILL, no clean-up of any kind) while writing its
# third table: what the folder holds afterwards is what a kill at that moment leaves.
KILLED_WHILE_SAVING = """
import os, signal, sys
sys.path[:0] = [{repo!r}, {tests!r}]
import polars as pl
from test_app_support import synthetic_result

out, n_chunks, replace = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "replace"
real, written = pl.DataFrame.write_parquet, []

def write_then_die(frame, path, *args, **kwargs):
    written.append(path)
    if len(written) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(frame, path, *args, **kwargs)

pl.DataFrame.write_parquet = write_then_die
result = synthetic_result(n_chunks=n_chunks, seed=n_chunks)
result.save(out, replace=True) if replace else result.save(out)
"""


def save_and_get_killed(out: Path, n_chunks: int, replace: bool) -> None:
    script = KILLED_WHILE_SAVING.format(repo=str(REPO), tests=str(REPO / "tests"))
    finished = subprocess.run([sys.executable, "-c", script, str(out), str(n_chunks),
                               "replace" if replace else "new"], capture_output=True, timeout=120)
    assert finished.returncode == -9, finished.stderr.decode()[-2000:]


def test_a_kill_while_saving_a_new_run_leaves_no_run(tmp_path):
    out = tmp_path / "run"
    save_and_get_killed(out, n_chunks=7, replace=False)
    assert not out.exists(), f"a half-written run was left: {sorted(p.name for p in out.iterdir())}"


def test_a_kill_while_replacing_a_run_leaves_the_old_run_whole(tmp_path):
    out = tmp_path / "run"
    synthetic_result(n_chunks=4, seed=4).save(out)
    save_and_get_killed(out, n_chunks=7, replace=True)
    old = RunResult.load(out)
    assert old.summary["n_chunks"] == 4 and old.chunks.height == 4
    assert old.events["chunk"].max() == 3, "the events of another run were mixed in"


def test_a_saved_run_is_replaced_whole_only_when_asked(tmp_path):
    out = tmp_path / "run"
    synthetic_result(n_chunks=4).save(out)
    with pytest.raises(FileExistsError, match="already holds a saved run"):
        synthetic_result(n_chunks=6).save(out)
    synthetic_result(n_chunks=6).save(out, replace=True)
    assert RunResult.load(out).chunks.height == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.parametrize("name, make, problem", [
    ("empty string", lambda tmp: "", "no folder given"),
    ("a file", lambda tmp: (tmp / "notes.txt", tmp.joinpath("notes.txt").write_text("x"))[0], "not a folder"),
    ("a folder of other files", lambda tmp: (tmp, tmp.joinpath("notes.txt").write_text("x"))[0],
     "holds other files"),
    ("a run with an extra file", lambda tmp: _run_with_extra_file(tmp), "holds other files"),
])
def test_what_is_never_replaced(name, make, problem, tmp_path):
    target = make(tmp_path)
    assert problem in destination_problem(target, replace=True), name


def _run_with_extra_file(tmp: Path) -> Path:
    synthetic_result(n_chunks=4).save(tmp / "run")
    (tmp / "run" / "thesis.tex").write_text("months of work")
    return tmp / "run"


def test_a_new_path_and_an_empty_folder_take_a_run(tmp_path):
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "new" / "deeper", tmp_path / "empty"):
        assert destination_problem(target) is None
        synthetic_result(n_chunks=4).save(target)
        assert RunResult.load(target).chunks.height == 4
