"""Documents to prefill: uploaded bytes -> text (.txt, .md, .pdf), and the bundled samples.

Every refusal is a `DocumentError` whose message names the problem and what to do about it.
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

from .errors import AnalysisError

SAMPLES_DIR = Path(__file__).resolve().parents[1] / "data" / "samples"
TEXT_SUFFIXES = (".txt", ".md")
SUFFIXES = TEXT_SUFFIXES + (".pdf",)
# Control characters other than tab, newline, carriage return and form feed: a text file has
# (almost) none; more than this fraction means the bytes are not text.
MAX_CONTROL_FRACTION = 0.01
ALLOWED_CONTROLS = {"\t", "\n", "\r", "\f"}


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
    return f"{n_bytes / 1e6:.1f} MB" if n_bytes >= 1e6 else f"{n_bytes / 1e3:.0f} KB"


def load_document(filename: str, data: bytes, *, max_bytes: int) -> str:
    """The text of an uploaded .txt, .md or .pdf file; raises DocumentError."""
    suffix = Path(filename or "").suffix.lower()
    if suffix not in SUFFIXES:
        raise DocumentError(f"{filename or 'The file'}: unsupported file type {suffix or '(none)'!r}; "
                            "use a .txt, .md or .pdf file.")
    if len(data) > max_bytes:
        raise DocumentError(f"{filename} is {_size(len(data))}, over the {_size(max_bytes)} limit; "
                            "use a shorter document.")
    if not data:
        raise DocumentError(f"{filename} is empty; choose a file with text in it.")
    text = _pdf_text(filename, data) if suffix == ".pdf" else _plain_text(filename, data)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise DocumentError(f"{filename} contains only whitespace; choose a file with text in it.")
    return text


def _plain_text(filename: str, data: bytes) -> str:
    if b"\x00" in data:
        raise DocumentError(f"{filename} looks like a binary file, not text; use a plain-text .txt or .md file.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DocumentError(f"{filename} is not UTF-8 text; re-save it as UTF-8 and upload it again.") from None
    _refuse_binary(filename, text)
    return text


def _refuse_binary(filename: str, text: str) -> None:
    controls = sum(1 for char in text if (ord(char) < 32 or 0x7F <= ord(char) < 0xA0) and char not in ALLOWED_CONTROLS)
    if controls > MAX_CONTROL_FRACTION * len(text):
        raise DocumentError(f"{filename} looks like a binary file, not text; use a plain-text .txt or .md file.")


def _pdf_text(filename: str, data: bytes) -> str:
    if not data.lstrip()[:5] == b"%PDF-":
        raise DocumentError(f"{filename} is not a PDF file (no %PDF header); upload a real PDF or a .txt file.")
    import pypdf

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise DocumentError(f"{filename} is an encrypted PDF; remove the password and upload it again.")
        pages = [page.extract_text() or "" for page in reader.pages]
    except DocumentError:
        raise
    except Exception as error:  # noqa: BLE001 - pypdf raises many kinds on damaged files
        raise DocumentError(f"{filename} could not be read as a PDF ({type(error).__name__}); "
                            "export it again or upload its text as .txt.") from None
    text = "\n\n".join(page.strip("\n") for page in pages)
    if not text.strip():
        raise DocumentError(f"{filename} has no text layer (a scanned PDF?); run OCR on it or upload a .txt file.")
    _refuse_binary(filename, text)
    return text


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
