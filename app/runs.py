"""The run store: finished analyses shared by every browser session of one server process.

A run is identified by its key, a hash of (model, document text, RunConfig); the same
document and configuration from any session reuse one result. Results are read-only once
stored (pages only read frames). The store keeps the newest `capacity` runs in memory and,
when given a directory, also saves each run there (RunResult.save) so links survive restarts.
No Streamlit here: `app/session.py` holds the one store per process.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from analysis.records import RunResult, document_hash

DOCUMENT_FILE = "document.txt"
# What run_key makes: a key that is not lower-case hex could name a path outside the store's directory.
_KEY = re.compile(r"^[0-9a-f]{8,64}$")


def is_run_key(value: str) -> bool:
    """Whether `value` has the form run_key makes (lower-case hex): anything else, from a link or a
    folder name, could name a path outside the store's directory and is never looked up."""
    return bool(_KEY.match(value))


def run_key(model: str, text: str, config, scope: str = "") -> str:
    """Key of a run: the same model, text, configuration and scope give the same key in any process.

    The scope keeps runs apart that must not be shared (the app scopes private text to its session:
    with a secret scope the key can neither be guessed from the text nor matched by another session).
    """
    payload = json.dumps(
        {"model": model, "document": document_hash(text), "config": config.to_dict(), "scope": scope},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:24]


@dataclass(frozen=True)
class StoredRun:
    key: str
    result: RunResult
    text: str


class RunStore:
    """Thread-safe LRU of finished runs, optionally persisted under `directory/<key>/`."""

    def __init__(self, capacity: int = 16, directory: Path | None = None, kept_on_disk: int = 200):
        if capacity < 1 or kept_on_disk < 1:
            raise ValueError(f"capacity and kept_on_disk must be >= 1, got {capacity} and {kept_on_disk}")
        self.capacity = capacity
        self.kept_on_disk = kept_on_disk
        self.directory = Path(directory) if directory is not None else None
        self._runs: OrderedDict[str, StoredRun] = OrderedDict()
        self._lock = threading.Lock()
        # One lock per key so two sessions asking for the same run compute it once.
        self._key_locks: dict[str, threading.Lock] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._runs)

    def get(self, key: str) -> StoredRun | None:
        with self._lock:
            stored = self._runs.get(key)
            if stored is not None:
                self._runs.move_to_end(key)
                return stored
        return self._load(key)

    def put(self, key: str, result: RunResult, text: str) -> StoredRun:
        stored = StoredRun(key, result, text)
        self._save(stored)
        self._remember(stored)
        return stored

    def get_or_compute(self, key: str, compute: Callable[[], tuple[RunResult, str]]) -> tuple[StoredRun, bool]:
        """The stored run for `key`, computing it (once, across threads) if absent.

        Returns (run, cached) where cached tells a stored result from a fresh one.
        """
        stored = self.get(key)
        if stored is not None:
            return stored, True
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            stored = self.get(key)
            if stored is not None:
                return stored, True
            result, text = compute()
            stored = self.put(key, result, text)
        with self._lock:
            self._key_locks.pop(key, None)
        return stored, False

    def _remember(self, stored: StoredRun) -> None:
        with self._lock:
            self._runs[stored.key] = stored
            self._runs.move_to_end(stored.key)
            while len(self._runs) > self.capacity:
                self._runs.popitem(last=False)

    def _save(self, stored: StoredRun) -> None:
        if self.directory is None:
            return
        target = self.directory / stored.key
        if target.exists():
            return
        result = stored.result if stored.result.document is not None else replace(stored.result, document=stored.text)
        try:
            result.save(target)   # whole or not at all: a crash never leaves a half-written run to load
        except FileExistsError:
            return                # another thread saved the same run first
        self._prune()

    def _prune(self) -> None:
        """Delete the oldest saved runs beyond `kept_on_disk`, so a long-lived server stays bounded."""
        saved = [p for p in self.directory.iterdir() if p.is_dir() and not p.name.startswith(".")]
        if len(saved) <= self.kept_on_disk:
            return
        saved.sort(key=lambda p: p.stat().st_mtime)
        for old in saved[: len(saved) - self.kept_on_disk]:
            shutil.rmtree(old, ignore_errors=True)

    def _load(self, key: str) -> StoredRun | None:
        if self.directory is None or not is_run_key(key):
            return None
        source = self.directory / key
        if not (source / "summary.json").is_file():
            return None
        stored = load_saved_run(source, key)
        self._remember(stored)
        return stored


def load_saved_run(directory: Path, key: str, document: str | None = None) -> StoredRun:
    """A run saved by RunResult.save (an example or a persisted run) with its document text: the
    saved copy, else `document` (a prepared example's text lives with the bundled samples)."""
    result = RunResult.load(directory)
    if result.document is None:
        result.document = document
    return StoredRun(key, result, result.document or "")
