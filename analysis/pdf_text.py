"""The text layer of a PDF, extracted in a child process bounded in time, memory and work.

A PDF is a program: an 11 KB file can hold one compressed content stream of a million text
operators, shared by every page, that keeps pypdf busy for minutes. So the parent never parses a
PDF itself. `extract` runs this module as a child (`python -m analysis.pdf_text`), sends the bytes on
stdin and reads one JSON object from stdout; the child is killed after `seconds`. Inside the child:
- address space capped (MEMORY_BYTES) and CPU time capped (a backstop to the parent's timeout);
- at most MAX_PAGES pages;
- a work budget checked before any text is extracted: the decompressed content streams of all pages
  together (a stream counted once for every page that draws it) may hold at most
  max(CONTENT_FLOOR_BYTES, CONTENT_PER_FILE_BYTE * file size), and never more than CONTENT_MAX_BYTES;
  ordinary PDFs compress their content streams 2-10x, a bomb by hundreds;
- extraction stops once the text is longer than the caller's byte limit.
pypdf's own warnings go to the child's stderr, which is discarded: the caller prints one message.
Imports nothing but the standard library and pypdf (no torch), so the child starts in a fraction of a
second.
"""
from __future__ import annotations

import io
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SECONDS = 20.0
MEMORY_BYTES = 2 << 30
MAX_PAGES = 2000
CONTENT_FLOOR_BYTES = 4 << 20
CONTENT_PER_FILE_BYTE = 50
CONTENT_MAX_BYTES = 64 << 20
REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Outcome:
    """What the child found: `text`, or `problem` (one of PROBLEMS) with a `detail` for the message."""

    text: str | None = None
    problem: str | None = None
    detail: str = ""


PROBLEMS = ("encrypted", "unreadable", "too_many_pages", "too_much_content", "text_too_long", "too_slow",
            "crashed")


def extract(data: bytes, *, max_text_bytes: int, seconds: float | None = None,
            content_budget: int | None = None) -> Outcome:
    """Run the child on `data`; by default SECONDS and the work budget of the module docstring."""
    seconds = SECONDS if seconds is None else seconds
    budget = content_budget if content_budget is not None else \
        min(CONTENT_MAX_BYTES, max(CONTENT_FLOOR_BYTES, CONTENT_PER_FILE_BYTE * len(data)))
    command = [sys.executable, "-m", "analysis.pdf_text", str(max_text_bytes), str(budget), str(seconds)]
    try:
        finished = subprocess.run(command, input=data, capture_output=True, timeout=seconds, cwd=REPO_ROOT)
    except subprocess.TimeoutExpired:
        return Outcome(problem="too_slow", detail=f"{seconds:g} s")
    try:
        answer = json.loads(finished.stdout.decode("utf-8"))
    except ValueError:   # killed by a limit (memory, CPU) or a crash inside pypdf
        return Outcome(problem="crashed", detail=f"exit status {finished.returncode}")
    return Outcome(text=answer.get("text"), problem=answer.get("problem"), detail=answer.get("detail", ""))


# ---------------------------------------------------------------------------------- the child

def _limit_resources(seconds: float) -> None:
    try:
        import resource
    except ImportError:      # not on this platform: the parent's timeout still applies
        return
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    cpu = int(seconds) + 2
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))


def _content_bytes(page) -> int:
    """Decompressed bytes of a page's content streams (pypdf caches the decoded data for extraction)."""
    contents = page.get("/Contents")
    if contents is None:
        return 0
    contents = contents.get_object()
    streams = contents if isinstance(contents, list) else [contents]
    return sum(len(stream.get_object().get_data()) for stream in streams)


def _extract(data: bytes, max_text_bytes: int, budget: int) -> dict:
    import pypdf

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            return {"problem": "encrypted"}
        pages = reader.pages
        if len(pages) > MAX_PAGES:
            return {"problem": "too_many_pages", "detail": f"{len(pages):,} pages, at most {MAX_PAGES:,}"}
        content = 0
        for page in pages:
            content += _content_bytes(page)
            if content > budget:
                return {"problem": "too_much_content",
                        "detail": f"over {budget / (1 << 20):.1f} MB of page content in a {len(data):,}-byte file"}
        texts, length = [], 0
        for page in pages:
            texts.append((page.extract_text() or "").strip("\n"))
            length += len(texts[-1])
            if length > max_text_bytes:     # characters > bytes limit means UTF-8 bytes > limit too
                return {"problem": "text_too_long"}
    except RecursionError:
        return {"problem": "unreadable", "detail": "RecursionError"}
    except Exception as error:  # noqa: BLE001 - pypdf raises many kinds on damaged files
        return {"problem": "unreadable", "detail": type(error).__name__}
    # Lone surrogates from a broken font map cannot be UTF-8 encoded later: make them visible instead.
    return {"text": "\n\n".join(texts).encode("utf-8", "replace").decode("utf-8")}


def main(argv: list[str]) -> None:
    max_text_bytes, budget, seconds = int(argv[0]), int(argv[1]), float(argv[2])
    _limit_resources(seconds)
    data = sys.stdin.buffer.read()
    try:
        answer = _extract(data, max_text_bytes, budget)
    except MemoryError:
        answer = {"problem": "crashed", "detail": "out of memory"}
    sys.stdout.buffer.write(json.dumps(answer, ensure_ascii=False).encode("utf-8"))


if __name__ == "__main__":
    main(sys.argv[1:])
