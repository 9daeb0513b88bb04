"""Tiny random Qwen3.5 models shared by the analysis tests (HV = 2H, 3 GDN + 1 attention layer)."""
from __future__ import annotations

import io

import torch

from analysis.models import ByteTokenizer, random_model, slow_gdn_decay, wrap_model


def tiny_config(layers: int = 4):
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(
        vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, max_position_embeddings=4096,
    )


def tiny_loaded(seed: int = 0, layers: int = 4):
    model = random_model(tiny_config(layers), seed=seed, device="cpu", dtype=torch.float32)
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
