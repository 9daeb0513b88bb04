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
    # issue 11: these printed tracebacks, two lines, or the wrong limit
    (["--doc", "{doc}", "--max-mb", "nan"], "--max-mb must be a positive number"),
    (["--doc", "{doc}", "--max-mb", "inf"], "--max-mb must be a positive number"),
    (["--doc", "{doc}", "--max-mb", "-1"], "--max-mb must be a positive number"),
    (["--doc", "{doc}", "--device", "mps"], "Unknown device 'mps'"),
    (["--doc", "{doc}", "--device", "meta"], "Unknown device 'meta'"),
    (["--doc", "{doc}", "--device", "nonsense"], "Unknown device 'nonsense'"),
    (["--doc", "{newline}"], "bad\\nname.txt is empty"),       # the name's newline is escaped
    (["--doc", "{just_over_20_mb}", "--max-mb", "20"], "over the 20.0 MB limit"),
])
def test_bad_input_exits_non_zero_with_one_line(args, message, doc, tmp_path, capsys):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "binary.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    (tmp_path / "blank.md").write_bytes(b" \n\t\r\n  ")
    (tmp_path / "latin1.txt").write_bytes("Caf\u00e9 d\u00e9j\u00e0 vu".encode("latin-1"))
    (tmp_path / "scan.pdf").write_bytes(blank_pdf())
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (tmp_path / "bad\nname.txt").write_bytes(b"")
    with (tmp_path / "big.txt").open("wb") as handle:
        handle.truncate(20 * 1024 * 1024 + 1)
    paths = {"missing": tmp_path / "missing.txt", "empty": tmp_path / "empty.txt",
             "binary": tmp_path / "binary.txt", "doc": doc, "blank": tmp_path / "blank.md",
             "latin1": tmp_path / "latin1.txt", "scan": tmp_path / "scan.pdf", "image": tmp_path / "image.png",
             "newline": tmp_path / "bad\nname.txt",
             "just_over_20_mb": tmp_path / "big.txt"}
    argv = ["run", "--out", str(tmp_path / "out"), "--device", "cpu", "--quiet"]
    argv += [a.format(**{k: str(v) for k, v in paths.items()}) for a in args]
    assert exit_code(argv) == cli.EXIT_INPUT
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def exit_code(argv) -> int:
    """cli.main's status, whether it returns it or argparse exits with it."""
    try:
        return cli.main(argv)
    except SystemExit as exit:
        return exit.code


def test_the_module_entry_point_reports_without_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "analysis", "run", "--doc", str(tmp_path / "nope.txt"),
                             "--out", str(tmp_path / "out")], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == cli.EXIT_INPUT
    assert result.stderr.strip().startswith("error:") and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1


def test_pdf_readers_warnings_never_reach_the_terminal(tmp_path):
    """pypdf logs "incorrect startxref pointer" to stderr while it recovers; the CLI prints its one line.

    In a child process: under pytest, logging output is captured and the warning would not show.
    """
    blank = blank_pdf()
    warned = tmp_path / "warned.pdf"
    warned.write_bytes(blank[:blank.rfind(b"startxref")] + b"startxref\n9\n%%EOF\n")
    result = subprocess.run([sys.executable, "-m", "analysis", "run", "--doc", str(warned), "--out",
                             str(tmp_path / "out")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == cli.EXIT_INPUT
    assert result.stderr.startswith("error: warned.pdf has no text layer") and result.stderr.count("\n") == 1, \
        result.stderr


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
    assert f"more than {limit:,} tokens" in err and f"limited to {limit:,}" in err and err.count("\n") == 1
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


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path, capsys):
    """A 2 GB sparse file: refused from its size, without reading it into memory."""
    import tracemalloc

    huge = tmp_path / "huge.txt"
    with huge.open("wb") as handle:
        handle.truncate(2 << 30)
    tracemalloc.start()
    try:
        code = cli.main(["run", "--doc", str(huge), "--out", str(tmp_path / "out"), "--device", "cpu", "--quiet"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == cli.EXIT_INPUT and "over the 20.0 MB limit" in capsys.readouterr().err
    assert peak < 16 << 20, f"{peak / 2 ** 20:.0f} MB allocated to refuse the file"


def test_triton_on_a_machine_that_cannot_run_it_is_refused_before_the_run(doc, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)   # the kernels then need a GPU; the model is on the CPU
    code = cli.main(["run", "--doc", str(doc), "--out", str(tmp_path / "out"), "--device", "cpu", "--quiet",
                     "--backend", "triton"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_INPUT and "backend: 'triton' needs a CUDA GPU" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def run_cli(doc, out, *extra) -> int:
    return exit_code(["run", "--doc", str(doc), "--out", str(out), "--device", "cpu", "--quiet",
                      "--backend", "torch", *extra])


def test_an_existing_run_is_replaced_only_when_asked(doc, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(doc, out, "--budget", "0.5") == 0
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    assert run_cli(doc, out, "--budget", "0.25") == cli.EXIT_INPUT
    err = capsys.readouterr().err
    assert "already holds a saved run" in err and "--overwrite" in err and err.count("\n") == 1
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before, "the old run was touched"
    assert run_cli(doc, out, "--budget", "0.25", "--overwrite") == 0
    assert json.loads((out / "summary.json").read_text())["budget"] == 0.25
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.txt", "out"], "a staging folder was left behind"


@pytest.mark.parametrize("make_out, message", [
    (lambda tmp: "", "--out is empty"),
    (lambda tmp: tmp / "doc.txt", "exists and is not a folder"),
    (lambda tmp: tmp, "holds other files, not a saved run"),
])
def test_an_out_that_is_not_a_folder_for_records_is_refused_even_with_overwrite(make_out, message, doc, tmp_path,
                                                                               capsys):
    before = sorted(tmp_path.rglob("*"))
    assert run_cli(doc, make_out(tmp_path), "--overwrite") == cli.EXIT_INPUT
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert sorted(tmp_path.rglob("*")) == before
    assert doc.read_text(encoding="utf-8").startswith("A short document")


def test_a_save_that_fails_leaves_nothing_behind(doc, tmp_path, capsys, monkeypatch):
    import errno

    real = pl.DataFrame.write_parquet
    written = []

    def disk_full_on_the_third_table(frame, path, *args, **kwargs):
        written.append(path)
        if len(written) == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(frame, path, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "write_parquet", disk_full_on_the_third_table)
    assert run_cli(doc, tmp_path / "out") == cli.EXIT_INPUT
    assert "No space left on device" in capsys.readouterr().err
    assert len(written) == 3 and sorted(p.name for p in tmp_path.iterdir()) == ["doc.txt"]


@pytest.mark.parametrize("damage, message", [
    ("missing weight", "lacks 1 weight(s) the model needs (model.norm.weight)"),
    ("config of another model", "weights do not match config.json's sizes"),
])
def test_a_damaged_checkpoint_exits_2_with_one_line(damage, message, doc, tmp_path, capsys, monkeypatch):
    from test_analysis_models import drop_weight, write_checkpoint

    directory = write_checkpoint(tmp_path / "models" / "damaged",
                                 extra_config={"hidden_size": 64} if damage.startswith("config") else None)
    if damage == "missing weight":
        drop_weight(directory, "model.norm.weight")
    monkeypatch.setenv("SPARSEGDN_MODEL_ROOTS", str(tmp_path / "models"))
    capsys.readouterr()   # writing the checkpoint drew a progress bar
    code = cli.main(["run", "--model", str(directory), "--doc", str(doc), "--out", str(tmp_path / "out"),
                     "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_INPUT and message in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()
