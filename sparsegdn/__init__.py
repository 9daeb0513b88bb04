"""SparseGDN: chunk-sparse prefill for Gated DeltaNet (see shared/SPEC.md for the contract)."""
from .api import SelectionInfo, dense_gated_delta_rule, sparse_gated_delta_rule
from .reference import CHUNK, num_chunks
from .selection import SELECTORS, event_count

__all__ = ["CHUNK", "SELECTORS", "SelectionInfo", "dense_gated_delta_rule", "event_count", "num_chunks",
           "sparse_gated_delta_rule"]
