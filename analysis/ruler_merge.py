"""Merge a second evaluation of the same checkpoint into a RULER results file (analysis/ruler_eval.py).

An evaluation that its time budget stopped leaves settings unmeasured (ruler.md lists them); a later run
of only those (`--lengths`, `--budgets`, `--bands`, `--selectors`) is merged in here:

    python -m analysis.ruler_eval --merge runs/eval-32k/ruler.json --out analysis/results/ruler.json

The two files must describe the same measurement: the same checkpoint digest, seed, haystack and
perplexity length, and the same sample count at every length both have (RulerGenerator's samples are
seeded, so equal counts mean the same samples). A record of the second file whose setting the first
already has is left out (the first file's stands); the run's command, date and device are kept under
`merged` (with those of the runs merged into the second file before), and the ruler report names them.
"""
from __future__ import annotations

import json
from pathlib import Path

MATCHING = ("checkpoint_sha256", "seed", "haystack", "ppl_length")


class MergeError(ValueError):
    """The two files do not describe the same measurement."""


def record_key(record: dict) -> tuple:
    """What one record measured: its kind, setting, length and task or source."""
    return (record["kind"], record["config"], record["length"], record.get("task"), record.get("source"))


def merge(base: dict, extra: dict) -> tuple[dict, int, int]:
    """(merged results, records added, records left out as already measured). Raises MergeError."""
    for field in MATCHING:
        if base.get(field) != extra.get(field):
            raise MergeError(f"{field} differs: {base.get(field)!r} here, {extra.get(field)!r} in the file to merge")
    for length, count in extra.get("samples", {}).items():
        if length in base.get("samples", {}) and base["samples"][length] != count:
            raise MergeError(f"samples at {length} tokens differ: {base['samples'][length]} here, {count} in the "
                             "file to merge (different samples cannot share a table)")
    seen = {record_key(record) for record in base["records"]}
    added = [record for record in extra["records"] if record_key(record) not in seen]
    merged = {**base, "records": base["records"] + added,
              "samples": {**extra.get("samples", {}), **base.get("samples", {})},
              "merged": base.get("merged", []) + [{field: extra.get(field) for field in
                                                   ("command", "date", "device", "backend")}]
              + extra.get("merged", [])}      # a merged file brings the runs merged into it
    merged["samples"] = dict(sorted(merged["samples"].items(), key=lambda item: int(item[0])))
    return merged, len(added), len(extra["records"]) - len(added)


def merge_files(base_path: Path, extra_path: Path) -> tuple[int, int]:
    """Merge extra_path into base_path (rewritten); returns (added, left out)."""
    base = json.loads(base_path.read_text())
    extra = json.loads(extra_path.read_text())
    merged, added, left_out = merge(base, extra)
    base_path.write_text(json.dumps(merged, indent=1) + "\n")
    return added, left_out
