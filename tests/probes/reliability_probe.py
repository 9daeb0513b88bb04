"""Reliability probe: hostile and careless input on every surface, each outcome classified.

    python tests/probes/reliability_probe.py            # from the repository root; a few minutes on 2 cores
    python tests/probes/reliability_probe.py --list     # and one line per case

Every case says what should happen (a bad input refused; a good one accepted) and the probe reports
what did happen, in one of four outcomes:
- refused:        bad input met the documented refusal (library: ValueError starting with the
                  argument's name; loader: DocumentError; CLI: exit 2/3, one line, nothing written;
                  app: one error message, no exception; a killed save: the old run or nothing);
- accepted:       good input worked (the controls);
- silently wrong: bad input accepted, a wrong result or a wrong message, a half-written run;
- crashed:        anything else (another exception, a traceback, several lines, a timeout).
docs/RELIABILITY.md quotes the table this prints. The probe asserts nothing: it measures.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]
os.environ.setdefault("TRITON_INTERPRET", "1")

OUTCOMES = ("refused", "accepted", "silently wrong", "crashed")


@dataclass(frozen=True)
class Result:
    outcome: str     # one of OUTCOMES
    detail: str


@dataclass(frozen=True)
class Case:
    surface: str
    name: str
    probe: Callable[[], Result]


def judge(expect_refusal: bool, observed: str, detail: str, problem: str | None = None) -> Result:
    """observed: 'refused' | 'accepted' | 'crashed'; problem: what is wrong with an observed refusal
    or acceptance (a wrong message, a wrong result), or None."""
    if observed == "crashed":
        return Result("crashed", detail)
    if problem:
        return Result("silently wrong", f"{problem} ({detail})")
    if observed == "refused":
        return Result("refused" if expect_refusal else "silently wrong", detail)
    return Result("silently wrong" if expect_refusal else "accepted", detail)


# ------------------------------------------------------------------------------------- library

def library_cases() -> list[Case]:
    import torch

    import sparsegdn
    from gdn_inputs import random_inputs

    q, k, v, g, beta, s0 = random_inputs(1, 70, 2, 4, dtype=torch.float32, seed=0, initial_state=True)
    base = dict(q=q, k=k, v=v, g=g, beta=beta)

    def with_(**changes):
        return {**base, **changes}

    def call(tensors, dense=False, **options):
        names = ("q", "k", "v", "g", "beta")
        options.setdefault("backend", "torch")
        if dense:
            return sparsegdn.dense_gated_delta_rule(*(tensors[n] for n in names), **options)
        return sparsegdn.sparse_gated_delta_rule(*(tensors[n] for n in names), **options)

    def refused_naming(name, tensors, dense=False, **options):
        def probe():
            try:
                out = call(tensors, dense, **options)
            except ValueError as error:
                if str(error).startswith(name):
                    return judge(True, "refused", str(error)[:90])
                return judge(True, "crashed", f"ValueError naming another argument: {error}"[:120])
            except Exception as error:  # noqa: BLE001 - the probe classifies every outcome
                return judge(True, "crashed", f"{type(error).__name__}: {error}"[:120])
            finite = all(bool(torch.isfinite(x).all()) for x in out[:2] if isinstance(x, torch.Tensor))
            return judge(True, "accepted", "returned " + ("finite" if finite else "NaN/inf") + " outputs")
        return probe

    def accepted(tensors, dense=False, check=None, **options):
        def probe():
            try:
                out = call(tensors, dense, **options)
            except Exception as error:  # noqa: BLE001
                return judge(False, "crashed", f"{type(error).__name__}: {error}"[:120])
            finite = all(bool(torch.isfinite(x).all()) for x in out[:2] if isinstance(x, torch.Tensor))
            problem = None if finite else "NaN/inf in the outputs"
            return judge(False, "accepted", "finite outputs", problem or (check(out) if check else None))
        return probe

    chunk_of_huge_decays = g.clone()
    chunk_of_huge_decays[0, :64, 1] = -1e38
    nan_q = q.clone()
    nan_q[0, 3, 1, 2] = float("nan")
    key = torch.zeros(1, 70, 2, 16, dtype=torch.float16)
    key[..., 0] = 1
    loud_half = dict(q=key, k=key, v=torch.full((1, 70, 4, 16), 6e4, dtype=torch.float16),
                     g=torch.zeros(1, 70, 4), beta=torch.ones(1, 70, 4, dtype=torch.float16))
    bad_tensors = {
        "q wrong rank": ("q", with_(q=q[0])), "k shape differs from q": ("k", with_(k=k[:, :, :1])),
        "v with another T": ("v", with_(v=v[:, :69])), "HV not a multiple of H": ("v", with_(v=torch.randn(1, 70, 3, 16))),
        "g wrong shape": ("g", with_(g=g[..., :2])), "beta wrong rank": ("beta", with_(beta=beta[None])),
        "T = 0": ("q", {n: x[:, :0] for n, x in base.items()}), "NaN in q": ("q", with_(q=nan_q)),
        "inf in v": ("v", with_(v=torch.full_like(v, float("inf")))), "positive g": ("g", with_(g=g.abs() + 0.1)),
        "NaN beta": ("beta", with_(beta=torch.full_like(beta, float("nan")))), "integer k": ("k", with_(k=k.long())),
        "q a list": ("q", with_(q=q.tolist())), "v a numpy array": ("v", with_(v=v.numpy())),
        "float8 q": ("q", with_(q=q.to(torch.float8_e4m3fn))), "sparse COO k": ("k", with_(k=k.to_sparse())),
        "meta q": ("q", with_(q=q.to("meta"))), "meta v": ("v", with_(v=v.to("meta"))),
        "g = -1e38 over a chunk": ("g", with_(g=chunk_of_huge_decays)), "beta x 1e30": ("beta", with_(beta=beta * 1e30)),
        "negative beta": ("beta", with_(beta=-beta)),
    }
    cases = [Case("library", f"sparse: {label}", refused_naming(name, tensors))
             for label, (name, tensors) in bad_tensors.items()]
    cases += [Case("library", f"dense: {label}", refused_naming(name, tensors, dense=True))
              for label, (name, tensors) in list(bad_tensors.items())[::3]]
    bad_options = {
        "budget 0": ("budget", dict(budget=0.0)), "budget 1.5": ("budget", dict(budget=1.5)),
        "budget NaN": ("budget", dict(budget=float("nan"))), "budget None": ("budget", dict(budget=None)),
        "budget 'half'": ("budget", dict(budget="half")), "budget True": ("budget", dict(budget=True)),
        "band 4": ("band", dict(band=4)), "band 1.5": ("band", dict(band=1.5)), "band None": ("band", dict(band=None)),
        "selector 'best'": ("selector", dict(selector="best")), "selector None": ("selector", dict(selector=None)),
        "backend 'cuda'": ("backend", dict(backend="cuda")), "backend None": ("backend", dict(backend=None)),
        "seed 'abc'": ("seed", dict(seed="abc")), "seed 1.5": ("seed", dict(seed=1.5)),
        "seed 2**70": ("seed", dict(seed=2 ** 70)), "seed -1": ("seed", dict(seed=-1)),
        "use_qk_l2norm_in_kernel 'no'": ("use_qk_l2norm_in_kernel", dict(use_qk_l2norm_in_kernel="no")),
        "output_final_state 'no'": ("output_final_state", dict(output_final_state="no")),
        "scale -1": ("scale", dict(scale=-1.0)), "scale 1e300": ("scale", dict(scale=1e300)),
        "events of the wrong shape": ("events", dict(events=torch.ones(1, 4, 3, dtype=torch.bool))),
        "events not bool": ("events", dict(events=torch.ones(1, 4, 2))),
        "float16 output beyond 65504": ("o", dict(scale=2.0)),
    }
    for label, (name, options) in bad_options.items():
        tensors = loud_half if label.startswith("float16") else base
        cases.append(Case("library", f"sparse: {label}", refused_naming(name, tensors, **options)))
    cases.append(Case("library", "dense: float16 output beyond 65504", refused_naming("o", loud_half, dense=True, scale=2.0)))
    cases.append(Case("library", "dense: backend None", refused_naming("backend", base, dense=True, backend=None)))

    three = random_inputs(3, 200, 1, 2, dtype=torch.float32, seed=5)
    batch = dict(zip(("q", "k", "v", "g", "beta"), three[:5]))

    def rows_independent(out):
        for row in range(3):
            alone = call({n: x[row:row + 1] for n, x in batch.items()}, selector="random", seed=7, budget=0.4)
            if not torch.equal(out[2].events[row:row + 1], alone[2].events):
                return f"row {row} selects other events in the batch than alone"
        return None

    cases += [
        Case("library", "control: defaults", accepted(base)),
        Case("library", "control: oracle, band 3, initial state", accepted(with_(), selector="oracle", band=3,
                                                                          initial_state=s0, output_final_state=True)),
        Case("library", "control: float16 inputs", accepted({n: x.half() if n != "g" else x for n, x in base.items()})),
        Case("library", "control: dense", accepted(base, dense=True)),
        Case("library", "control: random rows independent of the batch",
             accepted(batch, check=rows_independent, selector="random", seed=7, budget=0.4)),
    ]
    return cases


# ------------------------------------------------------------------------------------- documents

def document_cases(scratch: Path) -> list[Case]:
    from analysis.documents import DocumentError, load_document, load_pasted_text, read_document_file
    from test_analysis_documents import text_pdf
    from test_analysis_support import blank_pdf, bomb_pdf

    limit = 1 << 20

    def loader(call, expect_refusal=True, message=None):
        def probe():
            try:
                text = call()
            except DocumentError as error:
                shown = str(error)
                problem = None
                if "\n" in shown:
                    problem = "the message spans several lines"
                elif message and message not in shown:
                    problem = f"the message lacks {message!r}"
                return judge(expect_refusal, "refused", shown[:90], problem)
            except Exception as error:  # noqa: BLE001
                return judge(expect_refusal, "crashed", f"{type(error).__name__}: {error}"[:120])
            return judge(expect_refusal, "accepted", f"{len(text):,} characters")
        return probe

    blank = blank_pdf()
    warned = blank[:blank.rfind(b"startxref")] + b"startxref\n9\n%%EOF\n"
    huge = scratch / "huge.txt"
    with huge.open("wb") as handle:
        handle.truncate(2 << 30)

    def sparse_two_gigabytes():
        tracemalloc.start()
        try:
            read_document_file(huge, max_bytes=20 << 20)
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            if peak > 16 << 20:
                raise AssertionError(f"read {peak / 2 ** 20:.0f} MB to refuse it")

    def refused_without_reading():
        try:
            sparse_two_gigabytes()
        except DocumentError as error:
            return judge(True, "refused", str(error)[:90])
        except AssertionError as error:
            return judge(True, "refused", "refused", str(error))
        except Exception as error:  # noqa: BLE001
            return judge(True, "crashed", f"{type(error).__name__}: {error}"[:120])
        return judge(True, "accepted", "read")

    files = {
        "empty .txt": ("e.txt", b"", None), "whitespace only": ("w.md", b" \n\t ", None),
        "zip bytes as .txt": ("z.txt", b"PK\x03\x04\x00\x00binary zip", None),
        "control bytes": ("c.txt", bytes(range(1, 32)) * 10, None),
        "Latin-1": ("l.txt", "café crème".encode("latin-1"), None), ".docx": ("x.docx", b"hello", None),
        "no suffix": ("noext", b"hello", None), "not a PDF": ("p.pdf", b"just text", None),
        "broken PDF": ("p.pdf", b"%PDF-1.4\n garbage", None), "PDF without text layer": ("scan.pdf", blank, None),
        "PDF that makes pypdf warn": ("warned.pdf", warned, None),
        "PDF bomb (11 KB, 900k operators, 5 pages)": ("bomb.pdf", bomb_pdf(900_000, pages=5), "too much work"),
        "PDF text over a 4 KB limit (3 KB file)": ("long.pdf", bomb_pdf(20_000), "more text than"),
        "file name with a newline": ("bad\nname.txt", b"", "bad\\nname.txt"),
        "20 MB + 1 byte under --max-mb 20": ("big.txt", b"a" * ((20 << 20) + 1), "20.0 MB limit"),
    }
    cases = []
    for label, (name, data, message) in files.items():
        max_bytes = 20 << 20 if label.startswith("20 MB") else 4096 if "4 KB" in label else limit
        cases.append(Case("documents", label, loader(lambda n=name, d=data, m=max_bytes: load_document(n, d, max_bytes=m),
                                                     message=message)))
    cases.append(Case("documents", "2 GB sparse file (refused without reading it)", refused_without_reading))
    pastes = {"paste with NUL": "a\x00b " * 10, "paste of escape sequences": "\x1b[31m" * 20 + "red",
              "paste over the limit": "x" * (limit + 1), "paste of whitespace": " \n ",
              "paste with a lone surrogate": "\ud800 text"}
    cases += [Case("documents", label, loader(lambda t=text: load_pasted_text(t, max_bytes=limit)))
              for label, text in pastes.items()]
    cases += [
        Case("documents", "control: UTF-8 text", loader(lambda: load_document("a.txt", "héllo wörld".encode(), max_bytes=limit),
                                                         expect_refusal=False)),
        Case("documents", "control: PDF with text", loader(lambda: load_document("a.pdf", text_pdf("Gated DeltaNet"),
                                                                                  max_bytes=limit), expect_refusal=False)),
        Case("documents", "control: pasted text", loader(lambda: load_pasted_text("two\r\nlines", max_bytes=limit),
                                                          expect_refusal=False)),
    ]
    return cases


# ------------------------------------------------------------------------------------- CLI

def cli_cases(scratch: Path) -> list[Case]:
    from analysis import cli
    from test_analysis_models import drop_weight, write_checkpoint
    from test_analysis_support import blank_pdf

    doc = scratch / "doc.txt"
    doc.write_text("A short document for the command line. " * 12, encoding="utf-8")
    files = {"empty": b"", "binary": b"\x89PNG\r\n\x1a\n\x00\x00", "blank": b" \n\t ", "latin1": "Café".encode("latin-1")}
    for name, data in files.items():
        (scratch / f"{name}.txt").write_bytes(data)
    (scratch / "scan.pdf").write_bytes(blank_pdf())
    (scratch / "image.png").write_bytes(b"\x89PNG\r\n")
    (scratch / "bad\nname.txt").write_bytes(b"")
    with (scratch / "big.txt").open("wb") as handle:
        handle.truncate((20 << 20) + 1)
    (scratch / "long.txt").write_text(" ".join(str(i % 10) for i in range(70_000)), encoding="utf-8")
    models = scratch / "models"
    write_checkpoint(models / "partial")
    drop_weight(models / "partial", "model.norm.weight")
    write_checkpoint(models / "wrong-sizes", extra_config={"hidden_size": 64})
    write_checkpoint(models / "100k-layers", extra_config={"num_hidden_layers": 100000, "layer_types": None})
    write_checkpoint(models / "huge-vocab", extra_config={"vocab_size": 1e9})
    write_checkpoint(models / "complete")
    existing = scratch / "existing-run"
    not_a_run = scratch / "not-a-run"
    not_a_run.mkdir()
    (not_a_run / "thesis.tex").write_text("months of work")
    counter = iter(range(10 ** 6))

    def run_cli(args, expect_refusal=True, message=None, env=None, out=None, keep=None):
        def probe():
            target = out if out is not None else scratch / f"out-{next(counter)}"
            argv = ["run", "--doc", str(doc), "--device", "cpu", "--quiet", "--out", str(target), *args]
            before = _snapshot(keep) if keep else None
            err = io.StringIO()
            saved = {name: os.environ.get(name) for name in (env or {})}
            os.environ.update({name: value for name, value in (env or {}).items() if value is not None})
            for name in [n for n, value in (env or {}).items() if value is None]:
                os.environ.pop(name, None)
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    try:
                        code = cli.main(argv)
                    except SystemExit as exit:
                        code = exit.code
            except Exception as error:  # noqa: BLE001
                return judge(expect_refusal, "crashed", f"{type(error).__name__} escaped main: {error}"[:120])
            finally:
                for name, value in saved.items():
                    os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
            text = err.getvalue()
            if code == 0:
                return judge(expect_refusal, "accepted", "exit 0")
            one_line = text.startswith("error:") and text.count("\n") == 1 and "Traceback" not in text
            if code not in (2, 3) or not one_line:
                return judge(expect_refusal, "crashed", f"exit {code}: {text[-150:]!r}")
            problem = None
            if message and message not in text:
                problem = f"the message lacks {message!r}"
            elif out is None and target.exists():
                problem = "records written"
            elif keep and _snapshot(keep) != before:
                problem = f"{keep.name} changed"
            return judge(expect_refusal, "refused", text.strip()[:90], problem)
        return probe

    doc_args = {
        "missing file": ["--doc", str(scratch / "missing.txt")], "empty file": ["--doc", str(scratch / "empty.txt")],
        "binary file": ["--doc", str(scratch / "binary.txt")], "whitespace": ["--doc", str(scratch / "blank.txt")],
        "Latin-1 file": ["--doc", str(scratch / "latin1.txt")], "scanned PDF": ["--doc", str(scratch / "scan.pdf")],
        "PNG": ["--doc", str(scratch / "image.png")], "file name with a newline": ["--doc", str(scratch / "bad\nname.txt")],
        "budget 1.5": ["--budget", "1.5"], "budget 0": ["--budget", "0"], "budget 'lots'": ["--budget", "lots"],
        "selector 'best'": ["--selector", "best"], "band 7": ["--band", "7"], "backend 'cuda'": ["--backend", "cuda"],
        "model gpt2": ["--model", "gpt2"], "--max-tokens 10": ["--max-tokens", "10"],
        "--max-mb 0.0001": ["--max-mb", "0.0001"], "--max-mb nan": ["--max-mb", "nan"], "--max-mb inf": ["--max-mb", "inf"],
        "--max-mb -1": ["--max-mb", "-1"], "--device mps": ["--device", "mps"], "--device meta": ["--device", "meta"],
        "--device nonsense": ["--device", "nonsense"], "--segment-tokens 100": ["--segment-tokens", "100"],
        "document longer than the model's maximum": ["--doc", str(scratch / "long.txt")],
    }
    cases = [Case("CLI", label, run_cli(args, message="bad\\nname.txt" if "newline" in label else None))
             for label, args in doc_args.items()]
    cases += [
        Case("CLI", "20 MB + 1 byte under --max-mb 20", run_cli(["--doc", str(scratch / "big.txt"), "--max-mb", "20"],
                                                                message="20.0 MB limit")),
        Case("CLI", "--backend triton where it cannot run", run_cli(["--backend", "triton"], env={"TRITON_INTERPRET": None})),
        Case("CLI", "--out ''", run_cli([], out="")),
        Case("CLI", "--out an existing file", run_cli([], out=doc, keep=doc)),
        Case("CLI", "--out a folder of other files, --overwrite", run_cli(["--overwrite"], out=not_a_run, keep=not_a_run)),
        Case("CLI", "control: a run into a new folder", run_cli(["--backend", "torch"], expect_refusal=False, out=existing)),
        Case("CLI", "--out an existing run", run_cli([], out=existing, keep=existing)),
        Case("CLI", "control: --out an existing run with --overwrite",
             run_cli(["--overwrite", "--budget", "0.5"], expect_refusal=False, out=existing)),
    ]
    checkpoints = {"checkpoint missing a weight": "partial", "config sizes not those of the weights": "wrong-sizes",
                   "num_hidden_layers 100000": "100k-layers", "vocab_size 1e9": "huge-vocab"}
    cases += [Case("CLI", label, run_cli(["--model", str(models / name)], env={"SPARSEGDN_MODEL_ROOTS": str(models)}))
              for label, name in checkpoints.items()]
    cases.append(Case("CLI", "control: a complete checkpoint under the roots",
                      run_cli(["--model", str(models / "complete")], expect_refusal=False,
                              env={"SPARSEGDN_MODEL_ROOTS": str(models)})))
    cases.append(Case("CLI", "checkpoint outside the roots",
                      run_cli(["--model", str(models / "complete")], env={"SPARSEGDN_MODEL_ROOTS": str(scratch / "none")})))
    cases.append(Case("CLI", "PDF that makes pypdf warn (own process)", lambda: _cli_subprocess_with_warned_pdf(scratch)))
    return cases


def _snapshot(path: Path) -> dict:
    if path.is_file():
        return {path.name: path.read_bytes()}
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())} if path.is_dir() else {}


def _cli_subprocess_with_warned_pdf(scratch: Path) -> Result:
    from test_analysis_support import blank_pdf

    blank = blank_pdf()
    warned = scratch / "warned.pdf"
    warned.write_bytes(blank[:blank.rfind(b"startxref")] + b"startxref\n9\n%%EOF\n")
    finished = subprocess.run([sys.executable, "-m", "analysis", "run", "--doc", str(warned), "--out",
                               str(scratch / "warned-out")], cwd=REPO, capture_output=True, text=True, timeout=300)
    one_line = finished.stderr.startswith("error:") and finished.stderr.count("\n") == 1
    if finished.returncode == 2 and one_line:
        return judge(True, "refused", finished.stderr.strip()[:90])
    if finished.returncode == 2:
        return judge(True, "refused", "exit 2", f"stderr holds {finished.stderr.count(chr(10))} lines")
    return judge(True, "crashed", f"exit {finished.returncode}: {finished.stderr[-150:]!r}")


# ------------------------------------------------------------------------------------- kill trials

KILL_WHILE_SAVING = """
import os, signal, sys
from pathlib import Path
sys.path[:0] = [{repo!r}, {tests!r}]
import polars as pl
from test_app_support import synthetic_result

out, kill_at, replace = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "replace"
writes = []

def dying(real):
    def write(*args, **kwargs):
        writes.append(1)
        if len(writes) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return write

pl.DataFrame.write_parquet = dying(pl.DataFrame.write_parquet)
Path.write_text = dying(Path.write_text)
result = synthetic_result(n_chunks=7, seed=7)
result.save(out, replace=True) if replace else result.save(out)
"""


def kill_cases(scratch: Path) -> list[Case]:
    from analysis.records import RunResult
    from test_app_support import synthetic_result

    def trial(kill_at: int, replace: bool):
        def probe():
            out = scratch / f"killed-{kill_at}-{replace}"
            if replace:
                synthetic_result(n_chunks=4, seed=4).save(out)
            script = KILL_WHILE_SAVING.format(repo=str(REPO), tests=str(REPO / "tests"))
            finished = subprocess.run([sys.executable, "-c", script, str(out), str(kill_at),
                                       "replace" if replace else "new"], capture_output=True, timeout=300)
            if finished.returncode != -signal.SIGKILL:
                return judge(True, "crashed", f"exit {finished.returncode}: {finished.stderr[-150:]!r}")
            if not replace:
                left = sorted(p.name for p in out.iterdir()) if out.exists() else []
                return judge(True, "refused", "no run left", f"half-written run left: {left}" if out.exists() else None)
            try:
                old = RunResult.load(out)
            except Exception as error:  # noqa: BLE001
                return judge(True, "refused", "killed", f"the old run no longer loads: {type(error).__name__}")
            mixed = old.summary["n_chunks"] != 4 or old.events["chunk"].max() != 3
            return judge(True, "refused", "the old run whole", "a mix of two runs loads" if mixed else None)
        return probe

    return [Case("CLI kill while saving", f"{'replacing a run' if replace else 'new run'}, killed at write {kill_at}",
                 trial(kill_at, replace)) for replace in (False, True) for kill_at in range(1, 6)]


# ------------------------------------------------------------------------------------- app

def app_cases(scratch: Path) -> list[Case]:
    from streamlit.testing.v1 import AppTest

    from test_analysis_support import blank_pdf, bomb_pdf

    home = str(REPO / "app" / "Home.py")
    base_env = {"SPARSEGDN_EXAMPLES_DIR": str(scratch / "no-examples"), "SPARSEGDN_RUNS_DIR": "",
                "SPARSEGDN_DEVICE": "cpu", "SPARSEGDN_DEMO": None}
    text = ("The harbour master wrote the names of three trawlers in the ledger and sent the clerk to check "
            "the moorings on the east pier. ") * 2

    @contextlib.contextmanager
    def environment(changes):
        merged = {**base_env, **changes}
        saved = {name: os.environ.get(name) for name in merged}
        for name, value in merged.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
        try:
            yield
        finally:
            for name, value in saved.items():
                os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)

    def in_app(steps, expect_refusal=True, env=None, message=None, check=None, new_process=True):
        def probe():
            import app.session

            if new_process:   # otherwise the runs of the case before stay in the shared store
                app.session._run_store.clear()
            with environment(env or {}):
                try:
                    at = AppTest.from_file(home, default_timeout=300)
                    at.run()
                    for step in steps:
                        step(at)
                except Exception as error:  # noqa: BLE001
                    return judge(expect_refusal, "crashed", f"{type(error).__name__}: {error}"[:120])
                if at.exception:
                    return judge(expect_refusal, "crashed", f"exception on the page: {at.exception[0].value}"[:120])
                errors = [e.value for e in at.error]
                problem = check(at) if check else None
                if errors:
                    if message and not any(message in e for e in errors):
                        problem = problem or f"no message with {message!r}: {errors}"
                    elif any("\n" in e for e in errors):
                        problem = problem or "a message spans several lines"
                    return judge(expect_refusal, "refused", errors[0][:90], problem)
                return judge(expect_refusal, "accepted", "no error shown", problem)
        return probe

    def upload(name, data):
        def step(at):
            at.radio(key="doc_source").set_value("Upload").run()
            at.file_uploader(key="doc_upload").set_value((name, data, "application/octet-stream")).run()
        return step

    def paste(value):
        def step(at):
            at.radio(key="doc_source").set_value("Paste").run()
            at.text_area(key="doc_paste").set_value(value).run()
        return step

    def run(at):
        at.button(key="run_button").click().run()

    def finished(at):
        return None if any(s.value.startswith("Run finished") for s in at.success) else "no run finished"

    def fresh_not_cached(at):
        return "told that another session ran this text" if any("ran before" in s.value for s in at.success) else None

    blank = blank_pdf()
    uploads = {
        "empty upload": ("empty.txt", b""), "whitespace upload": ("blank.md", b" \n\t "),
        "binary upload": ("image.txt", bytes(range(256)) * 4), "Latin-1 upload": ("latin1.txt", "Café".encode("latin-1")),
        "scanned PDF": ("scan.pdf", blank), "PDF bomb": ("bomb.pdf", bomb_pdf(900_000, pages=5)),
        "PDF that makes pypdf warn": ("warned.pdf", blank[:blank.rfind(b"startxref")] + b"startxref\n9\n%%EOF\n"),
        "file name with a newline": ("bad\nname.txt", b""),
    }
    cases = [Case("app", label, in_app([upload(name, data)], message="bad\\nname.txt" if "newline" in label else None))
             for label, (name, data) in uploads.items()]
    cases += [
        Case("app", "upload over SPARSEGDN_MAX_UPLOAD_MB=1", in_app([upload("big.txt", b"a" * ((1 << 20) + 1))],
                                                                  env={"SPARSEGDN_MAX_UPLOAD_MB": "1"}, message="1.0 MB limit")),
        Case("app", "upload over SPARSEGDN_MAX_TOKENS=10", in_app([upload("long.txt", text.encode())],
                                                                env={"SPARSEGDN_MAX_TOKENS": "10"})),
        Case("app", "paste with NUL and escapes", in_app([paste("Log\x00\x1b[31m line. " * 20)])),
        Case("app", "paste over SPARSEGDN_MAX_UPLOAD_MB=1", in_app([paste("A long paste. " * 80_000)],
                                                                 env={"SPARSEGDN_MAX_UPLOAD_MB": "1"})),
        Case("app", "paste of 2 MB over SPARSEGDN_MAX_TOKENS=1000", in_app([paste(text * 6000)],
                                                                        env={"SPARSEGDN_MAX_TOKENS": "1000"})),
        Case("app", "control: paste and run", in_app([paste(text), run], expect_refusal=False, check=finished)),
        Case("app", "another session, the same pasted text", in_app([paste(text), run], expect_refusal=False,
                                                                    check=lambda at: finished(at) or fresh_not_cached(at),
                                                                    new_process=False)),
        Case("app", "control: upload and run", in_app([upload("good.txt", text.encode()), run], expect_refusal=False,
                                                      check=finished)),
    ]
    settings = {"SPARSEGDN_DEVICE": "nonsense", "SPARSEGDN_MAX_TOKENS": "lots", "SPARSEGDN_RUN_CACHE": "0",
                "SPARSEGDN_MAX_UPLOAD_MB": "-3", "SPARSEGDN_RUNS_DIR": str(Path(__file__)),
                "SPARSEGDN_RUNS_KEPT": "many"}
    cases += [Case("app settings", f"{name}={value if 'RUNS_DIR' not in name else '<a file>'}",
                   in_app([], env={name: value}, message=name)) for name, value in settings.items()]
    cases.append(Case("app settings", "SPARSEGDN_DEVICE=mps", in_app([], env={"SPARSEGDN_DEVICE": "mps"}, message="mps")))
    return cases


def link_cases(scratch: Path) -> list[Case]:
    from streamlit.testing.v1 import AppTest

    from test_analysis_models import write_checkpoint
    from test_app_support import synthetic_result

    home = str(REPO / "app" / "Home.py")
    outside = write_checkpoint(scratch / "elsewhere" / "tiny-qwen35")
    synthetic_result(n_chunks=4).save(scratch / "outside-run")
    runs = scratch / "link-runs"
    runs.mkdir()
    parameter_sets = {
        "model=<checkpoint outside the roots>": {"model": str(outside)},
        "spec=<checkpoint outside the roots>": {"spec": str(outside)},
        "run=<checkpoint path>": {"run": str(outside)}, "run=../outside-run": {"run": "../outside-run"},
        "run=..": {"run": ".."}, "run=/etc/passwd": {"run": "/etc/passwd"},
        "example=../x": {"example": "../x"}, "compare=example:..": {"compare": "example:.."},
        "doc=<a file path>": {"doc": str(Path(__file__))}, "run=<unknown hex key>": {"run": "0" * 24},
        "layer=-1&chunk=x&from=9&to=2": {"layer": "-1", "chunk": "x", "from": "9", "to": "2"},
    }

    def probe_for(params):
        def probe():
            import app.session

            app.session._run_store.clear()
            names = ("SPARSEGDN_MODEL_ROOTS", "SPARSEGDN_RUNS_DIR", "SPARSEGDN_EXAMPLES_DIR", "SPARSEGDN_DEVICE")
            saved = {name: os.environ.get(name) for name in names + ("SPARSEGDN_DEMO",)}
            os.environ.update(SPARSEGDN_MODEL_ROOTS=str(scratch / "roots"), SPARSEGDN_RUNS_DIR=str(runs),
                              SPARSEGDN_EXAMPLES_DIR=str(scratch / "no-examples"), SPARSEGDN_DEVICE="cpu")
            os.environ.pop("SPARSEGDN_DEMO", None)
            try:
                at = AppTest.from_file(home, default_timeout=120)
                at.query_params.update(params)
                at.run()
            except Exception as error:  # noqa: BLE001
                return judge(True, "crashed", f"{type(error).__name__}: {error}"[:120])
            finally:
                for name, value in saved.items():
                    os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
            if at.exception:
                return judge(True, "crashed", f"exception on the page: {at.exception[0].value}"[:120])
            offered = [option for box in at.selectbox if box.key == "model_spec" for option in box.options]
            if at.session_state["current"] is not None or any("tiny-qwen35" in option for option in offered):
                return judge(True, "accepted", "the link opened something outside the store or roots")
            return judge(True, "refused", "default view, nothing outside opened")
        return probe

    return [Case("links", label, probe_for(params)) for label, params in parameter_sets.items()]


# ------------------------------------------------------------------------------------- server

def server_cases(scratch: Path) -> list[Case]:
    def launched_elsewhere():
        from streamlit_server import listening_addresses, streamlit_server

        elsewhere = scratch / "elsewhere-launch"
        elsewhere.mkdir()
        try:
            with streamlit_server(elsewhere, scratch / "server.log", env={"HOME": str(elsewhere)}) as (url, port):
                addresses = listening_addresses(port)
        except Exception as error:  # noqa: BLE001
            return judge(True, "crashed", f"{type(error).__name__}: {error}"[:120])
        problem = None if addresses == {"127.0.0.1"} else f"listens on {sorted(addresses)}"
        return judge(True, "refused", "listens on 127.0.0.1 only", problem)

    def options_elsewhere():
        from test_app_security import LOAD_OPTIONS_AS_STREAMLIT_RUN

        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
        env["HOME"] = str(scratch)
        names = ["server.maxUploadSize", "browser.gatherUsageStats"]
        finished = subprocess.run([sys.executable, "-c", LOAD_OPTIONS_AS_STREAMLIT_RUN, str(REPO / "app" / "Home.py"),
                                   *names], cwd=scratch, env=env, capture_output=True, text=True, timeout=120)
        try:
            options = json.loads(finished.stdout)
        except ValueError:
            return judge(True, "crashed", finished.stderr[-150:])
        problem = None if options == {"server.maxUploadSize": 20, "browser.gatherUsageStats": False} else str(options)
        return judge(True, "refused", "upload cap 20 MB, no usage statistics", problem)

    return [Case("server", "started from another folder: address", launched_elsewhere),
            Case("server", "started from another folder: upload cap, usage statistics", options_elsewhere)]


# ------------------------------------------------------------------------------------- report

SURFACES = ("library", "documents", "CLI", "CLI kill while saving", "app", "app settings", "links", "server")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print every case and its outcome")
    parser.add_argument("--json", type=Path, help="also write the per-case results here")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(2)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="reliability-probe-") as folder:
        scratch = Path(folder)
        builders = [library_cases, lambda: document_cases(scratch), lambda: cli_cases(scratch), lambda: kill_cases(scratch),
                    lambda: app_cases(scratch), lambda: link_cases(scratch), lambda: server_cases(scratch)]
        results = []
        for build in builders:
            for case in build():
                result = case.probe()
                results.append((case, result))
                if args.list:
                    print(f"{case.surface:22} {result.outcome:15} {case.name}: {result.detail}", flush=True)
    counts = {surface: Counter(result.outcome for case, result in results if case.surface == surface)
              for surface in SURFACES}
    print(f"\n| surface | tried | refused | accepted (controls) | silently wrong | crashed |\n|---|---|---|---|---|---|")
    for surface in SURFACES:
        c = counts[surface]
        print(f"| {surface} | {sum(c.values())} | " + " | ".join(str(c[outcome]) for outcome in OUTCOMES) + " |")
    total = Counter(result.outcome for _, result in results)
    print(f"| **all** | **{len(results)}** | " + " | ".join(f"**{total[outcome]}**" for outcome in OUTCOMES) + " |")
    print(f"\n{len(results)} cases in {time.monotonic() - started:.0f} s")
    for case, result in results:
        if result.outcome in ("silently wrong", "crashed"):
            print(f"{result.outcome.upper()}: {case.surface}: {case.name}: {result.detail}")
    if args.json:
        args.json.write_text(json.dumps([{"surface": c.surface, "case": c.name, "outcome": r.outcome, "detail": r.detail}
                                         for c, r in results], indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
