"""Documents to prefill: uploaded bytes -> text (.txt, .md, .pdf), and the bundled samples.

Every refusal is a `DocumentError` whose message names the problem and what to do about it.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from . import pdf_text
from .errors import AnalysisError

SAMPLES_DIR = Path(__file__).resolve().parents[1] / "data" / "samples"
TEXT_SUFFIXES = (".txt", ".md")
SUFFIXES = TEXT_SUFFIXES + (".pdf",)
# Control characters other than tab, newline, carriage return and form feed: a text file has
# (almost) none; more than this fraction means the bytes are not text.
MAX_CONTROL_FRACTION = 0.01
CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")   # all but \t \n \f \r
MB = 1 << 20   # the megabyte of every limit here, as Streamlit's server.maxUploadSize counts it
PASTED = "The pasted text"


class DocumentError(AnalysisError):
    """The document cannot be used; the message says why and what to do."""


@dataclass(frozen=True)
class Sample:
    name: str          # file name in data/samples/
    title: str
    description: str
    path: Path
    n_bytes: int
    example: str | None = None   # the prepared example (data/examples/<example>/) that ran on this sample

    def read(self) -> str:
        return load_document(self.path.name, self.path.read_bytes(), max_bytes=max(self.n_bytes, 1))


def _size(n_bytes: int) -> str:
    if n_bytes >= MB:
        return f"{n_bytes / MB:.1f} MB"
    return f"{n_bytes / 1024:.0f} KB" if n_bytes >= 1024 else f"{n_bytes} bytes"


def display_name(filename: str) -> str:
    """The file name as a message shows it: control characters escaped, so a name holding a newline
    cannot split a one-line error."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in filename)


def read_document_file(path: Path, *, max_bytes: int) -> bytes:
    """The bytes of a document on disk, refused by size before they are read (never more than
    max_bytes + 1 bytes are read, even from a file that grows or misreports its size)."""
    shown = display_name(str(path))
    if not path.is_file():
        raise DocumentError(f"{shown}: no such file." if not path.exists() else f"{shown} is not a regular file.")
    with path.open("rb") as handle:
        size = path.stat().st_size
        if size > max_bytes:
            raise DocumentError(f"{shown} is {_size(size)}, over the {_size(max_bytes)} limit; use a shorter document.")
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise DocumentError(f"{shown} is over the {_size(max_bytes)} limit; use a shorter document.")
    return data


def load_document(filename: str, data: bytes, *, max_bytes: int) -> str:
    """The text of an uploaded .txt, .md or .pdf file; raises DocumentError."""
    shown = display_name(filename or "")
    suffix = Path(filename or "").suffix.lower()
    if suffix not in SUFFIXES:
        raise DocumentError(f"{shown or 'The file'}: unsupported file type {suffix or '(none)'!r}; "
                            "use a .txt, .md or .pdf file.")
    _check_size(shown, len(data), max_bytes)
    if not data:
        raise DocumentError(f"{shown} is empty; choose a file with text in it.")
    if suffix == ".pdf":
        text = _pdf_text(shown, data, max_bytes)
    else:
        text = _decode(shown, data)
    return _checked_text(shown, text)


def load_pasted_text(text: str, *, max_bytes: int) -> str:
    """Pasted text under the same rules as an uploaded .txt file (size, binary, whitespace)."""
    _check_size(PASTED, len(text.encode("utf-8", "surrogatepass")), max_bytes)
    if "\x00" in text:
        raise DocumentError(f"{PASTED} holds NUL characters: it is binary data, not text; paste plain text.")
    return _checked_text(PASTED, text)


def _check_size(shown: str, n_bytes: int, max_bytes: int) -> None:
    if n_bytes > max_bytes:
        raise DocumentError(f"{shown} is {_size(n_bytes)}, over the {_size(max_bytes)} limit; use a shorter document.")


def _decode(shown: str, data: bytes) -> str:
    if b"\x00" in data:
        raise DocumentError(f"{shown} looks like a binary file, not text; use a plain-text .txt or .md file.")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DocumentError(f"{shown} is not UTF-8 text; re-save it as UTF-8 and upload it again.") from None


def _checked_text(shown: str, text: str) -> str:
    """Line ends normalised; refused when it is binary-looking or only whitespace."""
    if len(CONTROL_CHARACTERS.findall(text)) > MAX_CONTROL_FRACTION * len(text):
        raise DocumentError(f"{shown} looks like a binary file, not text; use a plain-text .txt or .md file.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:     # lone surrogates: not text any tokenizer can take
        raise DocumentError(f"{shown} is not valid Unicode text; re-save it as UTF-8.") from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        remedy = "paste some text" if shown == PASTED else "choose a file with text in it"
        raise DocumentError(f"{shown} contains only whitespace; {remedy}.")
    return text


PDF_PROBLEMS = {
    "encrypted": "is an encrypted PDF; remove the password and upload it again.",
    "unreadable": "could not be read as a PDF ({detail}); export it again or upload its text as .txt.",
    "too_many_pages": "has too many pages ({detail}); split it or upload its text as .txt.",
    "too_much_content": "asks for too much work to extract ({detail}); upload its text as .txt.",
    "text_too_long": "holds more text than the {limit} limit; use a shorter document.",
    "too_slow": "took longer than {detail} to extract; upload its text as .txt.",
    "crashed": "could not be read as a PDF (the extractor stopped: {detail}); upload its text as .txt.",
}


def _pdf_text(shown: str, data: bytes, max_bytes: int) -> str:
    if not data.lstrip()[:5] == b"%PDF-":
        raise DocumentError(f"{shown} is not a PDF file (no %PDF header); upload a real PDF or a .txt file.")
    outcome = pdf_text.extract(data, max_text_bytes=max_bytes)
    if outcome.problem is not None:
        problem = PDF_PROBLEMS[outcome.problem].format(detail=outcome.detail, limit=_size(max_bytes))
        raise DocumentError(f"{shown} {problem}")
    if not outcome.text.strip():
        raise DocumentError(f"{shown} has no text layer (a scanned PDF?); run OCR on it or upload a .txt file.")
    return outcome.text


def list_samples() -> list[Sample]:
    """The bundled sample documents (data/samples/, described in index.json)."""
    index_file = SAMPLES_DIR / "index.json"
    if not index_file.is_file():
        return []
    samples = []
    for entry in json.loads(index_file.read_text(encoding="utf-8")):
        path = SAMPLES_DIR / entry["file"]
        if path.is_file():
            samples.append(Sample(entry["file"], entry["title"], entry["description"], path, path.stat().st_size,
                                  entry.get("example")))
    return samples


def example_document(example: str) -> str | None:
    """The text of the bundled sample that the prepared example `example` ran on (index.json's
    "example" field), or None. Examples keep no copy of their document."""
    sample = next((s for s in list_samples() if s.example == example), None)
    return sample.read() if sample is not None else None
