"""Document loaders: every refusal is a DocumentError with a plain message; good text comes back intact."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.documents import DocumentError, list_samples, load_document
from test_analysis_support import blank_pdf

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 1 << 20
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text a person could type: any character except control characters (tab/newline allowed) and
# surrogates, with at least one visible character.
typed_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), whitelist_characters="\t\n"), min_size=1,
).filter(lambda s: s.strip())


@FAST
@given(data=st.binary(max_size=2048), name=st.sampled_from(["a.txt", "b.md", "c.pdf", "d.TXT"]))
def test_arbitrary_bytes_give_text_or_a_document_error(data, name):
    try:
        text = load_document(name, data, max_bytes=LIMIT)
    except DocumentError as error:
        message = str(error)
        assert message and "\n" not in message and name in message
    else:
        assert isinstance(text, str) and text.strip() and "\x00" not in text


@FAST
@given(text=typed_text, name=st.sampled_from(["notes.txt", "readme.md"]))
def test_utf8_text_round_trips(text, name):
    loaded = load_document(name, text.encode("utf-8"), max_bytes=LIMIT)
    assert loaded == text.replace("\r\n", "\n").replace("\r", "\n")


@FAST
@given(text=typed_text)
def test_byte_order_mark_and_crlf_are_normalised(text):
    raw = "\ufeff" + text.replace("\n", "\r\n")
    assert load_document("x.txt", raw.encode("utf-8"), max_bytes=LIMIT) == text.replace("\r", "\n")


@FAST
@given(size=st.integers(1, 400), limit=st.integers(1, 400))
def test_size_limit_is_exact(size, limit):
    data = b"a" * size
    if size > limit:
        with pytest.raises(DocumentError, match="limit"):
            load_document("a.txt", data, max_bytes=limit)
    else:
        assert load_document("a.txt", data, max_bytes=limit) == "a" * size


@FAST
@given(whitespace=st.text(alphabet=" \t\n\r\u00a0\u2003", min_size=1, max_size=50))
def test_whitespace_only_is_refused(whitespace):
    with pytest.raises(DocumentError, match="whitespace"):
        load_document("w.txt", whitespace.encode("utf-8"), max_bytes=LIMIT)


@pytest.mark.parametrize("name, data, expected", [
    ("e.txt", b"", "empty"),
    ("b.txt", b"PK\x03\x04\x00\x00binary zip", "binary"),
    ("c.txt", bytes(range(1, 32)) * 10, "binary"),
    ("l.txt", "caf\u00e9 cr\u00e8me".encode("latin-1"), "UTF-8"),
    ("x.docx", b"hello", "unsupported file type"),
    ("noext", b"hello", "unsupported file type"),
    ("p.pdf", b"just text, not a pdf", "not a PDF"),
    ("p.pdf", b"%PDF-1.4\n garbage garbage", "could not be read"),
])
def test_named_refusals(name, data, expected):
    with pytest.raises(DocumentError, match=expected):
        load_document(name, data, max_bytes=LIMIT)


def text_pdf(text: str) -> bytes:
    """A minimal one-page PDF with a text layer (Helvetica), written by hand."""
    stream = f"BT /F1 12 Tf 20 100 Td ({text}) Tj ET".encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 200] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def test_pdf_without_text_layer_is_refused():
    with pytest.raises(DocumentError, match="no text layer"):
        load_document("scan.pdf", blank_pdf(), max_bytes=LIMIT)


def test_pdf_text_layer_is_extracted():
    assert "Gated DeltaNet prefill" in load_document("doc.pdf", text_pdf("Gated DeltaNet prefill"), max_bytes=LIMIT)


def test_bundled_samples_load():
    samples = list_samples()
    assert len(samples) >= 3
    assert sum(s.n_bytes for s in samples) < 400_000
    for sample in samples:
        text = sample.read()
        assert len(text) > 1000 and sample.title and sample.description


VALID_PDF = text_pdf("Gated DeltaNet prefill of a long document")


@FAST
@given(cut=st.integers(0, len(VALID_PDF)), at=st.integers(0, len(VALID_PDF) - 1), junk=st.binary(max_size=64),
       how=st.sampled_from(["truncate", "overwrite", "insert"]))
def test_damaged_pdfs_give_text_or_a_document_error(cut, at, junk, how):
    """A real PDF truncated, overwritten or padded anywhere: pypdf's many exceptions become one message."""
    if how == "truncate":
        data = VALID_PDF[:cut]
    elif how == "overwrite":
        data = VALID_PDF[:at] + junk + VALID_PDF[at + len(junk):]
    else:
        data = VALID_PDF[:at] + junk + VALID_PDF[at:]
    try:
        text = load_document("damaged.pdf", data, max_bytes=LIMIT)
    except DocumentError as error:
        assert "\n" not in str(error) and "damaged.pdf" in str(error)
    else:
        assert isinstance(text, str) and text.strip()


def test_prepared_examples_read_their_document_from_the_bundled_sample():
    """data/examples/<name>/ keeps no copy of its document: the sample naming it in index.json is the one copy,
    and the example's chunks cover exactly that text."""
    from analysis.documents import example_document
    from analysis.records import RunResult

    examples = sorted(p for p in (ROOT / "data" / "examples").iterdir() if (p / "summary.json").is_file())
    assert examples
    for directory in examples:
        assert not (directory / "document.txt").exists(), directory
        text = example_document(directory.name)
        assert text is not None, f"no bundled sample names the example {directory.name}"
        chunks = RunResult.load(directory).chunks
        assert chunks["char_end"].max() == len(text) and chunks["char_start"].min() == 0
