"""The records of one analysed prefill: tidy polars tables + a summary dict, saved as Parquet/JSON.

One table per kind of fact (column names from docs/CONTRACT.md):
- events: one row per recurrent event (layer, head_pair, chunk) with its score and whether it was
  selected, and the chunk's output error for that head pair versus dense (null without dense);
- heads:  one row per (layer, head_pair): events selected, output and state error versus dense;
- layers: one row per GDN layer: core time dense / sparse (ms, summed over segments) and error;
- chunks: one row per chunk: its token span and the character span of the document it covers;
- timings: one row per timed repeat and path ("dense", "sparse") of the whole prefill (scope
  "prefill"), of each layer's GDN core (scope "core", with its layer) and of each stage of the sparse
  core (scope "stage", with its stage name), in ms summed over segments (and layers for stages).
  Runs recorded before repeated timing have none (an empty table).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import polars as pl

SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "events": {"layer": pl.Int32, "head_pair": pl.Int32, "chunk": pl.Int32, "token_start": pl.Int64,
               "token_end": pl.Int64, "score": pl.Float32, "selected": pl.Boolean, "rel_err_o": pl.Float64},
    "heads": {"layer": pl.Int32, "head_pair": pl.Int32, "events_selected": pl.Int64,
              "rel_err_o": pl.Float64, "rel_err_state": pl.Float64},
    "layers": {"layer": pl.Int32, "core_ms_dense": pl.Float64, "core_ms_sparse": pl.Float64,
               "rel_err_o": pl.Float64},
    "chunks": {"chunk": pl.Int32, "token_start": pl.Int64, "token_end": pl.Int64,
               "char_start": pl.Int64, "char_end": pl.Int64},
    "timings": {"repeat": pl.Int32, "path": pl.String, "scope": pl.String, "layer": pl.Int32,
                "stage": pl.String, "ms": pl.Float64},
}
TABLES = tuple(SCHEMAS)
OPTIONAL_TABLES = ("timings",)   # absent from runs saved before they existed: loaded as empty

SUMMARY_KEYS = (
    "model", "n_tokens", "n_chunks", "budget", "selector", "band", "backend", "device",
    "prefill_ms_dense", "prefill_ms_sparse", "kl_mean", "top1_agreement", "ppl_dense", "ppl_sparse",
    "random_weights", "created", "config",
)


def empty(table: str) -> pl.DataFrame:
    return pl.DataFrame(schema=SCHEMAS[table])


def conform(table: str, frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with exactly the documented columns, in order, cast to the documented types."""
    schema = SCHEMAS[table]
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

    def __post_init__(self):
        for table in TABLES:
            setattr(self, table, conform(table, getattr(self, table)))

    def save(self, directory) -> Path:
        """Write events/heads/layers/chunks.parquet, summary.json and document.txt into `directory`."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for table in TABLES:
            getattr(self, table).write_parquet(directory / f"{table}.parquet")
        (directory / "summary.json").write_text(json.dumps(self.summary, indent=2, allow_nan=False) + "\n",
                                                encoding="utf-8")
        if self.document is not None:
            (directory / "document.txt").write_text(self.document, encoding="utf-8")
        return directory

    @classmethod
    def load(cls, directory) -> "RunResult":
        directory = Path(directory)
        frames = {table: pl.read_parquet(directory / f"{table}.parquet") for table in TABLES
                  if table not in OPTIONAL_TABLES or (directory / f"{table}.parquet").is_file()}
        summary = json.loads((directory / "summary.json").read_text(encoding="utf-8"))
        document_file = directory / "document.txt"
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
