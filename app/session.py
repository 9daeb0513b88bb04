"""Streamlit glue: the per-process caches and the per-session state of the explorer.

Shared by every browser session of a process (st.cache_resource): each loaded
model (read-only), the run store and the prepared examples. Per session (st.session_state,
never shared): the current document, the current run, the session's run history, the view.
"""
from __future__ import annotations

import ctypes
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

from analysis.documents import DocumentError, example_document, list_samples, load_document, load_pasted_text
from analysis.errors import ConfigError
from analysis.models import ModelError, list_models, load_model, resolve_device
from analysis.pipeline import AnalysisError, ProgressUpdate, RunConfig, analyze
from app import runs, viewstate
from app.settings import Settings, load_settings

EXAMPLE_PREFIX = "example:"


# ---- shared by all sessions of this process ------------------------------------------------


def settings() -> Settings:
    """Read per script run (cheap); the caches below take what they depend on as arguments."""
    return load_settings()


def check_settings() -> None:
    """ValueError naming the SPARSEGDN_* variable that is wrong, before any page uses it."""
    config = settings()
    try:
        device()
    except ModelError as error:
        raise ValueError(f"SPARSEGDN_DEVICE: {error}") from None
    server_cap = st.get_option("server.maxUploadSize")
    if server_cap < config.max_upload_mb:
        raise ValueError(f"SPARSEGDN_MAX_UPLOAD_MB is {config.max_upload_mb} but the server takes uploads of at "
                         f"most {server_cap} MB (server.maxUploadSize); raise that too")


@st.cache_resource
def _device(setting: str) -> str:
    return resolve_device(setting)


def device() -> str:
    return _device(settings().device)


@st.cache_resource
def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _roots_key() -> tuple[str, ...] | None:
    roots = settings().model_roots
    return None if roots is None else tuple(str(root) for root in roots)


@st.cache_resource(show_spinner="Loading the model (once per server process)…", max_entries=2)
def _model(spec: str, device_name: str, roots: tuple[str, ...] | None):
    # The device map is a setting of the server process (SPARSEGDN_DEVICE_MAP), fixed for its life.
    return load_model(spec, device=device_name, roots=None if roots is None else list(roots),
                      device_map=settings().device_map)


def get_model(spec: str, device_name: str):
    """The loaded model for `spec`, shared read-only by every session (never mutate it)."""
    return _model(spec, device_name, _roots_key())


@st.cache_resource
def _run_store(capacity: int, directory: Path | None, kept: int) -> runs.RunStore:
    return runs.RunStore(capacity=capacity, directory=directory, kept_on_disk=kept)


def run_store() -> runs.RunStore:
    config = settings()
    return _run_store(config.run_cache_size, config.runs_dir, config.runs_kept)


@st.cache_resource
def run_lock() -> threading.Lock:
    """One analysis at a time per process: runs share the model and the device."""
    return threading.Lock()


@st.cache_resource(max_entries=8)
def _example(directory: Path) -> runs.StoredRun:
    return runs.load_saved_run(directory, EXAMPLE_PREFIX + directory.name, document=example_document(directory.name))


def load_example(name: str) -> runs.StoredRun:
    return _example(settings().examples_dir / name)


@st.cache_data(max_entries=64, show_spinner="Counting tokens…")
def _token_count(spec: str, device_name: str, roots: tuple[str, ...] | None, text: str, limit: int) -> int:
    return _model(spec, device_name, roots).tokenizer.count_up_to(text, limit)


def token_count(spec: str, device_name: str, text: str, limit: int) -> int:
    """The token count when it is at most `limit`, else some number above it (the text is not
    tokenised further than needed to know)."""
    return _token_count(spec, device_name, _roots_key(), text, limit)


def model_choices():
    return list_models(roots=settings().model_roots)


def samples():
    return list_samples()


def examples() -> list[str]:
    directory = settings().examples_dir
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if (p / "summary.json").is_file())


# ---- per session -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Document:
    name: str
    text: str
    # "sample" (a bundled sample), "upload" or "paste": where the run page took it from. Anything but
    # a bundled sample is private to its session (see `run_scope`), so that is the default.
    origin: str = "paste"

    @property
    def bundled(self) -> bool:
        """A bundled sample's text is public: its runs are shared by every session."""
        return self.origin == "sample"

    @property
    def hash(self) -> str:
        return runs.document_hash(self.text)


@dataclass(frozen=True)
class HistoryEntry:
    key: str
    label: str
    source: str  # "computed", "cached", "saved" (loaded from a link) or "example"
    document: str
    model: str
    spec: str = "default"  # the load_model spec, to run another configuration on the same model
    config: RunConfig | None = None  # None for a saved run whose configuration this version cannot read
    seconds: float | None = None
    when: float = field(default_factory=time.time)
    document_hash: str | None = None  # sha256 of the document's text; None when the run kept neither


def init() -> None:
    """First script run of a session: read the view from the URL and open what it names."""
    state = st.session_state
    if "view" in state:
        return
    view = viewstate.parse_view(st.query_params.to_dict())
    state["view"] = view
    state["run_scope"] = secrets.token_hex(16)
    state["history"] = []
    state["current"] = None
    state["document"] = None
    state["missing_link"] = None
    if view.run:
        stored = run_store().get(view.run)
        if stored is not None:
            _open(stored, "saved", label=_label(stored.result.summary, document_of(stored)[0]))
        else:
            state["missing_link"] = f"the run {view.run}"
    example = view.example or settings().demo
    if state["current"] is None and example:
        if example == "1" and examples():
            example = examples()[0]
        if example in examples():
            open_example(example)
        elif view.example:
            state["missing_link"] = f"the prepared example {view.example}"


def missing_link() -> str | None:
    """What the link this session opened with named and the server did not have (a run that has left its cache,
    an example it does not ship), in words; None when the link named nothing missing."""
    return None if current() is not None else st.session_state.get("missing_link")


def opens_on_result() -> bool:
    """Whether this session opened on a result (demo mode, or a link naming a run or an example)."""
    entry = current()
    return entry is not None and entry.source in ("example", "saved")


def view() -> viewstate.View:
    return st.session_state["view"]


def set_view(**changes) -> viewstate.View:
    st.session_state["view"] = view().with_(**changes)
    return st.session_state["view"]


def put_view(new: viewstate.View) -> viewstate.View:
    st.session_state["view"] = new
    return new


def sync_url() -> None:
    """Write the session's view into the address bar, so the link reopens this view."""
    params = viewstate.view_to_params(view())
    if st.query_params.to_dict() != params:
        st.query_params.from_dict(params)


def run_scope(doc: Document) -> str:
    """What a run key is scoped to. Runs of uploaded or pasted text are this session's alone: another
    session with the same text computes its own (no "cached" notice, no instant answer, no guessable
    link tells it that someone analysed that text); only a link this session shares opens the run.
    Bundled samples are public, so their runs are shared by every session."""
    return "bundled" if doc.bundled else st.session_state["run_scope"]


def current() -> HistoryEntry | None:
    return st.session_state.get("current")


def current_run() -> runs.StoredRun | None:
    entry = current()
    if entry is None:
        return None
    return stored_run(entry.key)


def stored_run(key: str) -> runs.StoredRun | None:
    if key.startswith(EXAMPLE_PREFIX):
        name = key[len(EXAMPLE_PREFIX):]
        return load_example(name) if name in examples() else None
    return run_store().get(key)


def history() -> list[HistoryEntry]:
    return st.session_state.setdefault("history", [])


def document() -> Document | None:
    return st.session_state.get("document")


def set_document(doc: Document | None) -> None:
    st.session_state["document"] = doc


def options_label(summary: dict) -> str:
    """A run's SparseGDN options in a few words. The `all` selector keeps every event (dense semantics through
    the sparse code path), whatever the budget, so its label names no budget."""
    band = summary.get("band", "?")
    if summary.get("selector") == "all":
        return f"all events (dense semantics), band {band}"
    seed = (summary.get("config") or {}).get("seed")
    seeded = f", seed {seed}" if summary.get("selector") == "random" and seed is not None else ""
    return f"{summary.get('selector', '?')}, ρ={summary.get('budget', '?')}, band {band}{seeded}"


def _label(summary: dict, document_name: str = "") -> str:
    document = document_name or summary.get("document")
    return (f"{document}: " if document else "") + f"{options_label(summary)} · {summary.get('n_tokens', '?')} tokens"


def document_of(stored: runs.StoredRun) -> tuple[str, str | None]:
    """The name and text hash of the document a run ran on: its summary's (runs made since the summary
    names them), else a prepared example's sample, else "document" and the hash of its kept text."""
    summary = stored.result.summary
    name = summary.get("document")
    if not name and stored.key.startswith(EXAMPLE_PREFIX):
        example = stored.key[len(EXAMPLE_PREFIX):]
        name = next((s.name for s in samples() if s.example == example), None)
    digest = summary.get("document_sha256") or (runs.document_hash(stored.text) if stored.text else None)
    return name or "document", digest


def _saved_config(summary: dict) -> RunConfig | None:
    try:
        return RunConfig.from_dict(summary.get("config") or {})
    except ConfigError:
        return None


def _open(stored: runs.StoredRun, source: str, label: str, seconds: float | None = None) -> HistoryEntry:
    summary = stored.result.summary
    document_name, document_hash = document_of(stored)
    entry = HistoryEntry(
        key=stored.key,
        label=label,
        source=source,
        document=document_name,
        model=str(summary.get("model", "")),
        config=_saved_config(summary),
        seconds=seconds,
        document_hash=document_hash,
    )
    st.session_state["current"] = entry
    history().append(entry)
    is_example = stored.key.startswith(EXAMPLE_PREFIX)
    set_view(run=None if is_example else stored.key,
             example=stored.key[len(EXAMPLE_PREFIX):] if is_example else None)
    return entry


def open_example(name: str) -> HistoryEntry:
    stored = load_example(name)
    return _open(stored, "example", label=f"example {name} · {_label(stored.result.summary, document_of(stored)[0])}")


def open_entry(entry: HistoryEntry) -> None:
    """Show an earlier run of this session again (it may have left the store)."""
    if stored_run(entry.key) is None:
        raise LookupError("that run is no longer in the server's cache; run it again")
    st.session_state["current"] = entry
    is_example = entry.key.startswith(EXAMPLE_PREFIX)
    set_view(run=None if is_example else entry.key,
             example=entry.key[len(EXAMPLE_PREFIX):] if is_example else None)


class RunFailed(Exception):
    """A run could not finish; the message says why and what to do."""


def execute(spec: str, doc: Document, config: RunConfig, progress=None, make_current: bool = True) -> HistoryEntry:
    """Run (or reuse) the analysis of `doc` under `config`; raise RunFailed with a plain message."""
    device_name = device()
    try:
        loaded = get_model(spec, device_name)
    except ModelError as error:
        raise RunFailed(str(error)) from error
    key = runs.run_key(f"{loaded.name}@{device_name}", doc.text, config, scope=run_scope(doc))
    started = time.perf_counter()

    def compute():
        lock = run_lock()
        if not lock.acquire(blocking=False):
            if progress is not None:
                progress(ProgressUpdate("waiting", None, 0, 0, 0, 0.0,
                                        "Waiting for another session's run to finish (one run at a time)…"))
            lock.acquire()
        try:
            return analyze(loaded, doc.text, config, progress=progress, document_name=doc.name), doc.text
        finally:
            return_freed_memory()
            lock.release()

    try:
        stored, cached = run_store().get_or_compute(key, compute)
    except AnalysisError as error:
        _free_device_memory()
        raise RunFailed(str(error)) from error
    except Exception as error:
        if _is_out_of_memory(error):
            _free_device_memory()
            raise RunFailed(
                "The GPU ran out of memory during the run. Try a shorter document, a smaller "
                "segment size, or turn off 'compare with dense' (it keeps a second copy of the outputs)."
            ) from error
        raise
    seconds = time.perf_counter() - started
    entry = HistoryEntry(key=key, label=_label(stored.result.summary, doc.name),
                         source="cached" if cached else "computed", document=doc.name, model=loaded.name, spec=spec, config=config, seconds=seconds,
                         document_hash=doc.hash)
    history().append(entry)
    if make_current:
        st.session_state["current"] = entry
        set_view(run=key, example=None)
    return entry


def return_freed_memory() -> None:
    """Hand the heap a run has freed back to the system. glibc keeps it for reuse, so a server's
    resident memory would wander by hundreds of MB from run to run (measured: 564-886 MB over 20 runs
    of a 5.6K-token document) while what it holds stays flat (568 MB); trimmed, the figure is honest."""
    try:
        trim = ctypes.CDLL(None).malloc_trim   # glibc only; elsewhere there is nothing to do
    except (OSError, AttributeError):
        return
    trim(0)


def _is_out_of_memory(error: BaseException) -> bool:
    try:
        import torch
    except ImportError:
        return False
    return isinstance(error, torch.cuda.OutOfMemoryError)


def _free_device_memory() -> None:
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def read_upload(name: str, data: bytes) -> Document:
    """A Document from an uploaded file (kept in memory only); DocumentError says what is wrong. The last accepted
    upload is kept for the session (kept_upload): the uploader forgets its file when another page runs."""
    text = load_document(name, data, max_bytes=settings().max_upload_bytes)
    doc = Document(Path(name).name, text, origin="upload")
    st.session_state["kept_upload"] = doc
    return doc


def kept_upload() -> Document | None:
    """The session's last accepted upload, kept apart from the document of the next run (`document`), which a
    source that offers nothing to run clears."""
    return st.session_state.get("kept_upload")


def read_paste(text: str) -> Document:
    """A Document from pasted text, under the rules and the size limit of an upload."""
    return Document("pasted text", load_pasted_text(text, max_bytes=settings().max_upload_bytes), origin="paste")


__all__ = [
    "AnalysisError", "Document", "DocumentError", "HistoryEntry", "ModelError", "RunConfig", "RunFailed",
]
