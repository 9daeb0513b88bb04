"""The records of one analysed prefill: tidy polars tables + a summary dict, saved as Parquet/JSON.

One table per kind of fact (column names from docs/CONTRACT.md):
- events: one row per recurrent event (layer, head_pair, chunk) with its score and whether it was
  selected, and the chunk's output error for that head pair versus dense (null without dense);
- heads:  one row per (layer, head_pair): events selected, output and state error versus dense;
- layers: one row per GDN layer: the device it ran on ("cuda:1"; null in runs saved before it was
  recorded), core time dense / sparse (ms, summed over segments) and error;
- chunks: one row per chunk: its token span and the character span of the document it covers;
- timings: one row per timed repeat and path ("dense", "sparse") of the whole prefill (scope
  "prefill"), of each layer's GDN core (scope "core", with its layer) and of each stage of the sparse
  core (scope "stage", with its stage name), in ms summed over segments (and layers for stages); where
  the core's calls take launch plans (the Triton backend on a GPU) the stage rows come from one more sparse
  prefill after the timed ones (its repeat is `repeats`), since a call that reports its stages takes none;
  `first_calls` on every row of a repeat: how many Triton compiles and autotune benchmarks ran inside
  it (0 for a clean repeat; which kernels and how long: the summary's timing.first_calls; null in runs
  recorded before repeats were watched). Runs recorded before repeated timing have none (an empty table).
- tokens: one row per token of the document: its id and character span, and the most likely next
  token (top-1 of the next-token distribution at this position) of the dense and of the sparse
  prefill, as an id and as text (null dense columns without the dense pass). The prediction at
  position p is the model's guess of token p + 1, so a passkey at the end is retrieved when the
  predictions before its tokens are its tokens. Runs recorded before it have none (an empty table).
"""
from __future__ import annotations

import errno
import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import polars as pl

SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "events": {"layer": pl.Int32, "head_pair": pl.Int32, "chunk": pl.Int32, "token_start": pl.Int64,
               "token_end": pl.Int64, "score": pl.Float32, "selected": pl.Boolean, "rel_err_o": pl.Float64},
    "heads": {"layer": pl.Int32, "head_pair": pl.Int32, "events_selected": pl.Int64,
              "rel_err_o": pl.Float64, "rel_err_state": pl.Float64},
    "layers": {"layer": pl.Int32, "device": pl.String, "core_ms_dense": pl.Float64, "core_ms_sparse": pl.Float64,
               "rel_err_o": pl.Float64},
    "chunks": {"chunk": pl.Int32, "token_start": pl.Int64, "token_end": pl.Int64,
               "char_start": pl.Int64, "char_end": pl.Int64},
    "timings": {"repeat": pl.Int32, "path": pl.String, "scope": pl.String, "layer": pl.Int32,
                "stage": pl.String, "ms": pl.Float64, "first_calls": pl.Int32},
    "tokens": {"position": pl.Int64, "token": pl.Int64, "char_start": pl.Int64, "char_end": pl.Int64,
               "predicted_dense": pl.Int64, "predicted_sparse": pl.Int64,
               "predicted_dense_text": pl.String, "predicted_sparse_text": pl.String},
}
TABLES = tuple(SCHEMAS)
OPTIONAL_TABLES = ("timings", "tokens")   # absent from runs saved before they existed: loaded as empty
# Absent from runs saved before they existed: loaded as null.
OPTIONAL_COLUMNS = {"layers": ("device",), "timings": ("first_calls",)}

SUMMARY_KEYS = (
    "model", "n_tokens", "n_chunks", "budget", "selector", "band", "backend", "device",
    "prefill_ms_dense", "prefill_ms_sparse", "kl_mean", "top1_agreement", "ppl_dense", "ppl_sparse",
    "random_weights", "created", "config",
)


DOCUMENT_FILE = "document.txt"
RUN_FILES = frozenset([f"{table}.parquet" for table in TABLES] + ["summary.json", DOCUMENT_FILE])


def destination_problem(directory, *, replace: bool = False) -> str | None:
    """Why records cannot be saved as `directory`, or None.

    A new path or an empty folder takes them. A folder holding a saved run (summary.json and only
    record files) is replaced only when asked; a file, or a folder with anything else in it, never.
    """
    target = Path(directory)
    if str(directory).strip() == "":
        return "no folder given for the records"
    if not target.exists() and not target.is_symlink():
        return None
    if not target.is_dir() or target.is_symlink():
        return f"{target} exists and is not a folder"
    names = {entry.name for entry in target.iterdir()}
    if not names:
        return None
    if "summary.json" not in names or not names <= RUN_FILES:
        return f"{target} holds other files, not a saved run; choose a new or empty folder"
    return None if replace else f"{target} already holds a saved run"


def _move_into_place(staging: Path, target: Path, replace: bool) -> None:
    """Rename the finished `staging` folder to `target`; an old run there is renamed away first and
    deleted after, so `target` holds either the old run or the new one whole, never a mix."""
    problem = destination_problem(target, replace=replace)   # again: something may have appeared
    if problem:
        raise FileExistsError(errno.EEXIST, problem, str(target))
    if target.is_dir() and any(target.iterdir()):
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.replaced-", dir=target.parent))
        target.rename(old / "run")
        staging.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        staging.rename(target)   # onto a missing path or an empty folder


def empty(table: str) -> pl.DataFrame:
    return pl.DataFrame(schema=SCHEMAS[table])


def conform(table: str, frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with exactly the documented columns, in order, cast to the documented types."""
    schema = SCHEMAS[table]
    frame = frame.with_columns(pl.lit(None, schema[name]).alias(name) for name in OPTIONAL_COLUMNS.get(table, ())
                               if name not in frame.columns)
    missing = [name for name in schema if name not in frame.columns]
    if missing:
        raise ValueError(f"{table}: missing columns {missing}")
    return frame.select([pl.col(name).cast(dtype) for name, dtype in schema.items()])


@dataclass
class RunResult:
    events: pl.DataFrame
    heads: pl.DataFrame
    layers: pl.DataFrame
    chunks: pl.DataFrame
    summary: dict
    document: Optional[str] = None
    extra: dict = field(default_factory=dict)
    timings: pl.DataFrame = field(default_factory=lambda: empty("timings"))
    tokens: pl.DataFrame = field(default_factory=lambda: empty("tokens"))

    def __post_init__(self):
        for table in TABLES:
            setattr(self, table, conform(table, getattr(self, table)))

    def save(self, directory, *, replace: bool = False) -> Path:
        """Write each table's parquet (events, heads, layers, chunks, timings, tokens), summary.json and document.txt
        as `directory`, whole.

        The files go into a hidden folder beside `directory` that is renamed into place at the end, so
        a kill or a full disk never leaves a half-written run where a run is expected (a kill leaves
        only the hidden `.NAME.partial-*` folder). An existing `directory` must be empty, or hold a
        saved run and `replace` be set (see `destination_problem`); FileExistsError otherwise.
        """
        target = Path(directory)
        problem = destination_problem(target, replace=replace)
        if problem:
            raise FileExistsError(errno.EEXIST, problem, str(target))
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
        try:
            for table in TABLES:
                getattr(self, table).write_parquet(staging / f"{table}.parquet")
            (staging / "summary.json").write_text(json.dumps(self.summary, indent=2, allow_nan=False) + "\n",
                                                  encoding="utf-8")
            if self.document is not None:
                (staging / DOCUMENT_FILE).write_text(self.document, encoding="utf-8")
            _move_into_place(staging, target, replace)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return target

    @classmethod
    def load(cls, directory) -> "RunResult":
        directory = Path(directory)
        frames = {table: pl.read_parquet(directory / f"{table}.parquet") for table in TABLES
                  if table not in OPTIONAL_TABLES or (directory / f"{table}.parquet").is_file()}
        summary = json.loads((directory / "summary.json").read_text(encoding="utf-8"))
        document_file = directory / DOCUMENT_FILE
        document = document_file.read_text(encoding="utf-8") if document_file.is_file() else None
        return cls(summary=summary, document=document, **frames)

    def chunk_text(self, chunk: int) -> str:
        """The document text of one chunk (needs the document)."""
        if self.document is None:
            raise ValueError("this result was saved without its document")
        row = self.chunks.filter(pl.col("chunk") == chunk).row(0, named=True)
        return self.document[row["char_start"]:row["char_end"]]


def document_hash(text: str) -> str:
    """sha256 of a document's text: two runs are of the same document when theirs are equal."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
