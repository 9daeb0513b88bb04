"""Qwen3.5 with SparseGDN: model loading, GDN core swap, run records, CLI (`python -m analysis`)."""
