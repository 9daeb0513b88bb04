"""SparseGDN: chunk-sparse prefill for Gated DeltaNet (the contract: docs/CONTRACT.md)."""
from .api import SelectionInfo, dense_gated_delta_rule, sparse_gated_delta_rule
from .config import (BANDS, CHUNK_SIZE, DENSE_BACKENDS, OPTIONS, SELECTORS, SPARSE_BACKENDS, STAGES, SparseConfig,
                     num_chunks)
from .selection import event_count

__all__ = ["BANDS", "CHUNK_SIZE", "DENSE_BACKENDS", "OPTIONS", "SELECTORS", "SPARSE_BACKENDS", "STAGES",
           "SelectionInfo", "SparseConfig", "dense_gated_delta_rule", "event_count", "num_chunks",
           "sparse_gated_delta_rule"]
