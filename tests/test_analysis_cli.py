"""`python -m analysis run`: records written, bad input -> non-zero exit with one line, no traceback."""
from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from analysis import cli
from analysis.records import SCHEMAS
from test_analysis_documents import blank_pdf

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def keep_threads():
    """The CLI sets torch's thread count for its process (analysis.timing.use_threads): put it back."""
    import torch

    from analysis import timing

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
    timing._threads = None


@pytest.fixture
def doc(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text("A short document for the command line. " * 12, encoding="utf-8")
    return path


def default_token_count(path) -> int:
    from analysis.models import load_model
    return len(load_model("default").tokenizer.encode(path.read_text(encoding="utf-8")))


def test_run_writes_the_records_and_prints_a_summary(doc, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(["run", "--model", "default", "--doc", str(doc), "--budget", "0.5", "--selector", "uniform",
                     "--band", "1", "--backend", "torch", "--out", str(out), "--device", "cpu", "--repeats", "2"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    for table, schema in SCHEMAS.items():
        assert dict(pl.read_parquet(out / f"{table}.parquet").schema) == schema
    summary = json.loads((out / "summary.json").read_text())
    n_tokens = default_token_count(doc)
    assert summary["budget"] == 0.5 and summary["selector"] == "uniform" and summary["n_tokens"] == n_tokens
    assert f"doc.txt: {n_tokens} tokens" in captured.out and "KL" in captured.out
    assert summary["document"] == "doc.txt" and summary["timing"]["repeats"] == 2
    assert "100.0%" in captured.err          # the progress bar reached the end
    # Repeated timings with their spread: median [min-max] of each path, and how they were taken.
    lines = {line[:12].strip(): line[12:] for line in captured.out.splitlines()}
    assert re.fullmatch(r"dense [\d,.]+ ms \[[\d,.]+-[\d,.]+\] \(torch core\), sparse [\d,.]+ ms \[[\d,.]+-[\d,.]+\]; "
                        r"dense/sparse [\d.]+x \((within|outside) the noise\)", lines["prefill"]), lines["prefill"]
    assert re.fullmatch(r"dense [\d,.]+ ms \[.*\], sparse [\d,.]+ ms \[.*\]; dense/sparse .*", lines["GDN core"])
    assert lines["timing"].startswith("median [min-max] of 2 interleaved repeat(s)") and "warm-up" in lines["timing"]


@pytest.mark.parametrize("args, message", [
    (["--doc", "{missing}"], "no such file"),
    (["--doc", "{empty}"], "empty"),
    (["--doc", "{binary}"], "binary"),
    (["--doc", "{doc}", "--budget", "1.5"], "budget"),
    (["--doc", "{doc}", "--budget", "0"], "budget"),
    (["--doc", "{doc}", "--model", "gpt2"], "Unknown model"),
    (["--doc", "{doc}", "--selector", "best"], "selector"),
    (["--doc", "{doc}", "--max-tokens", "10"], "tokens"),
    (["--doc", "{doc}", "--budget", "lots"], "invalid float"),
    (["--doc", "{blank}"], "only whitespace"),
    (["--doc", "{latin1}"], "not UTF-8"),
    (["--doc", "{scan}"], "no text layer"),
    (["--doc", "{doc}", "--max-mb", "0.0001"], "over the"),
    (["--doc", "{image}"], "unsupported file type"),
])
def test_bad_input_exits_non_zero_with_one_line(args, message, doc, tmp_path, capsys):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "binary.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    (tmp_path / "blank.md").write_bytes(b" \n\t\r\n  ")
    (tmp_path / "latin1.txt").write_bytes("Caf\u00e9 d\u00e9j\u00e0 vu".encode("latin-1"))
    (tmp_path / "scan.pdf").write_bytes(blank_pdf())
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    paths = {"missing": tmp_path / "missing.txt", "empty": tmp_path / "empty.txt",
             "binary": tmp_path / "binary.txt", "doc": doc, "blank": tmp_path / "blank.md",
             "latin1": tmp_path / "latin1.txt", "scan": tmp_path / "scan.pdf", "image": tmp_path / "image.png"}
    argv = ["run", "--out", str(tmp_path / "out"), "--device", "cpu", "--quiet"]
    argv += [a.format(**{k: str(v) for k, v in paths.items()}) for a in args]
    with pytest.raises(SystemExit) if "invalid" in message else _nothing():
        code = cli.main(argv)
        assert code == cli.EXIT_INPUT
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_module_entry_point_reports_without_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "analysis", "run", "--doc", str(tmp_path / "nope.txt"),
                             "--out", str(tmp_path / "out")], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == cli.EXIT_INPUT
    assert result.stderr.strip().startswith("error:") and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_document_longer_than_the_model_maximum_is_refused(tmp_path, capsys):
    from analysis.models import load_model

    limit = load_model("default").max_tokens
    path = tmp_path / "long.txt"
    rng = random.Random(0)
    path.write_text(" ".join(str(rng.randrange(10)) for _ in range(limit + 4096)), encoding="utf-8")
    n_tokens = default_token_count(path)
    assert n_tokens > limit, "the test document must exceed the model's maximum"
    code = cli.main(["run", "--doc", str(path), "--out", str(tmp_path / "out"), "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_INPUT
    assert f"{n_tokens:,} tokens" in err and f"limited to {limit:,}" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("failure, message", [
    ("oom", "Out of GPU memory"),
    ("nan", "NaN/inf"),
])
def test_a_run_that_fails_on_the_machine_exits_3_with_one_line(failure, message, doc, tmp_path, capsys,
                                                              monkeypatch):
    """Out of memory (simulated: no GPU here) and non-finite values: status 3, a suggestion, no records."""
    import torch

    import analysis.pipeline
    from analysis.errors import NonFiniteError

    def failing(*args, **kwargs):
        if failure == "oom":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        raise NonFiniteError("A GDN core produced NaN/inf outputs; try float32 or another model.")

    monkeypatch.setattr(analysis.pipeline, "_analyze", failing)
    code = cli.main(["run", "--doc", str(doc), "--out", str(tmp_path / "out"), "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_RUN
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    if failure == "oom":
        assert "shorter document" in err and "segment_tokens" in err
    assert not (tmp_path / "out").exists()
