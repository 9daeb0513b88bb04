"""Tiny random Qwen3.5 models shared by the analysis tests (HV = 2H, 3 GDN + 1 attention layer, or GDN only)."""
from __future__ import annotations

import io

import torch

from analysis.models import ByteTokenizer, random_model, slow_gdn_decay, wrap_model


def tiny_config(layers: int = 4, gdn_only: bool = False):
    """transformers' default layout (three GDN layers, then attention), or every layer GDN."""
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(
        vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, max_position_embeddings=4096,
        **({"layer_types": ["linear_attention"] * layers} if gdn_only else {}),
    )


def tiny_loaded(seed: int = 0, layers: int = 4, gdn_only: bool = False):
    model = random_model(tiny_config(layers, gdn_only), seed=seed, device="cpu", dtype=torch.float32)
    slow_gdn_decay(model)
    return wrap_model(model, ByteTokenizer(), name="tiny", description="tiny random Qwen3.5",
                      random_weights=True, device="cpu", dtype=torch.float32)


def random_ids(n_tokens: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (1, n_tokens), generator=torch.Generator().manual_seed(seed))


def blank_pdf() -> bytes:
    """A valid one-page PDF with no text layer (what a scan without OCR looks like to a loader)."""
    import pypdf

    writer = pypdf.PdfWriter()
    writer.add_blank_page(width=200, height=200)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def bomb_pdf(operators: int, pages: int = 1) -> bytes:
    """A PDF bomb: one compressed content stream of `operators` text-show operators, drawn by every page.

    A few KB on disk; pypdf extracts roughly 100k operators a second on one core of the team's machine.
    """
    import zlib

    stream = zlib.compress(b"BT /F1 12 Tf 20 100 Td " + b"(a) Tj " * operators + b" ET", 9)
    content, font = 3 + pages, 4 + pages
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % (3 + i) for i in range(pages)),
                                                             pages)]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 200] /Contents %d 0 R "
                b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (content, font)] * pages
    objects.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return pdf_file(objects)


def pdf_file(objects: list[bytes]) -> bytes:
    """A PDF from the bodies of objects 1, 2, ... (1 is the catalog), with its cross-reference table."""
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
