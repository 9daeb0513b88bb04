"""The recording SparseGDN core: runs the sparse core, and (optionally) the dense core on the same
layer inputs, keeping per-event and per-head-pair errors on the device until a segment ends.

Nothing here synchronises the GPU inside a prefill: errors stay device tensors; `flush` (called
between segments) moves one segment's records to the host. Nothing here is timed: the pipeline's
timing passes run the plain cores.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

import sparsegdn
from sparsegdn import CHUNK_SIZE, SparseConfig, num_chunks

from .errors import NonFiniteError
from .patching import CoreCall


def _chunk_sums(x: torch.Tensor) -> torch.Tensor:
    """[B=1, T, HV] per-token values -> [HV, NC] sums over each chunk's tokens."""
    tokens, heads = x.shape[1], x.shape[2]
    n_chunks = num_chunks(tokens)
    padded = torch.zeros(n_chunks * CHUNK_SIZE, heads, dtype=x.dtype, device=x.device)
    padded[:tokens] = x[0]
    return padded.view(n_chunks, CHUNK_SIZE, heads).sum(1).T


def raise_if_nonfinite(call: CoreCall) -> None:
    """After a core refused `call` with a ValueError: a NonFiniteError if that was because NaN/inf reached
    it (sparsegdn refuses non-finite inputs), said in the run's terms; checked only on failure."""
    inputs = [call.q, call.k, call.v, call.g, call.beta]
    if call.initial_state is not None:
        inputs.append(call.initial_state)
    if not all(bool(torch.isfinite(x).all()) for x in inputs):
        raise NonFiniteError(f"NaN/inf reached the GDN core of layer {call.layer}; "
                             "try float32 or another model.") from None


class Recorder:
    """The sparse core of `config` (its backend resolved), recording every call; see the module docstring."""

    def __init__(self, config: SparseConfig, *, compare_dense: bool, dense_backend: str):
        self.config = config
        self.compare_dense, self.dense_backend = compare_dense, dense_backend
        self.reset()

    def reset(self) -> None:
        """Forget every call so far (after a warm-up)."""
        self.segment_start = 0          # token offset of the segment being prefilled
        self.pending: list[dict] = []   # this segment's calls, tensors still on the device
        self.rows: list[dict] = []      # flushed records (numpy)
        self.nonfinite = {}             # {device: bool tensor}: any non-finite core output so far there

    def _flag(self, *tensors):
        # Kept per device: the layers of a model spread over GPUs flag on their own GPU, read once at the end.
        bad = torch.stack([~torch.isfinite(t).all() for t in tensors]).any()
        before = self.nonfinite.get(bad.device)
        self.nonfinite[bad.device] = bad if before is None else (before | bad)

    def core(self, call: CoreCall):
        try:
            o, state, info = sparsegdn.sparse_gated_delta_rule(
                call.q, call.k, call.v, call.g, call.beta, scale=call.scale, initial_state=call.initial_state,
                output_final_state=call.output_final_state or self.compare_dense,
                use_qk_l2norm_in_kernel=call.use_qk_l2norm_in_kernel, config=self.config)
        except ValueError:
            raise_if_nonfinite(call)
            raise
        record = {"layer": call.layer, "device": str(call.v.device), "start": self.segment_start,
                  "tokens": call.v.shape[1],
                  "events": info.events[0], "scores": info.scores[0] if info.scores is not None else None}
        if self.compare_dense:
            # Same layer inputs, same carried state: the error of this layer's core alone.
            o_dense, state_dense = sparsegdn.dense_gated_delta_rule(
                call.q, call.k, call.v, call.g, call.beta, scale=call.scale,
                initial_state=call.initial_state, output_final_state=True,
                use_qk_l2norm_in_kernel=call.use_qk_l2norm_in_kernel, backend=self.dense_backend)
            difference = (o.float() - o_dense.float()).square().sum(-1)          # [1, T, HV]
            record["diff_sq"] = _chunk_sums(difference)                           # [HV, NC]
            record["ref_sq"] = _chunk_sums(o_dense.float().square().sum(-1))
            record["state_diff_sq"] = (state[0] - state_dense[0]).square().sum((-1, -2))   # [HV]
            record["state_ref_sq"] = state_dense[0].square().sum((-1, -2))
            self._flag(o, o_dense, state, state_dense)
        else:
            self._flag(o)
        self.pending.append(record)
        return o, (state if call.output_final_state else None)

    def flush(self) -> None:
        """Move this segment's records to the host (synchronises; call between segments)."""
        for record in self.pending:
            self.rows.append({key: value.detach().cpu().numpy() if torch.is_tensor(value) else value
                              for key, value in record.items()})
        self.pending = []

    def any_nonfinite(self) -> bool:
        return any(bool(flag.item()) for flag in self.nonfinite.values())


def event_columns(rows: list[dict], n_tokens: int) -> dict[str, np.ndarray]:
    """The events table as columns, from flushed records (one record per layer per segment)."""
    columns = defaultdict(list)
    for record in rows:
        events = record["events"]                      # [HV, NC_segment]
        heads, n_chunks = events.shape
        first_chunk = record["start"] // CHUNK_SIZE
        chunk = np.broadcast_to(first_chunk + np.arange(n_chunks), (heads, n_chunks))
        columns["layer"].append(np.full(heads * n_chunks, record["layer"]))
        columns["head_pair"].append(np.repeat(np.arange(heads), n_chunks))
        columns["chunk"].append(chunk.reshape(-1))
        columns["token_start"].append(chunk.reshape(-1) * CHUNK_SIZE)
        columns["token_end"].append(np.minimum((chunk.reshape(-1) + 1) * CHUNK_SIZE, n_tokens))
        scores = record["scores"]
        columns["score"].append(scores.reshape(-1).astype(np.float32) if scores is not None
                                else np.full(heads * n_chunks, np.nan, dtype=np.float32))
        columns["selected"].append(events.reshape(-1).astype(bool))
        for key in ("diff_sq", "ref_sq"):
            value = record.get(key)
            columns[key].append(value.reshape(-1).astype(np.float64) if value is not None
                                else np.full(heads * n_chunks, np.nan))
    return {key: np.concatenate(parts) for key, parts in columns.items()}
