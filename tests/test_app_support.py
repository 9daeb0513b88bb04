"""Builders shared by the app tests: RunResults with the documented columns, from seeded random data.

No tests here. The frames follow the contract (docs/CONTRACT.md section 4): each layer keeps exactly
ceil(budget * head_pairs * n_chunks) events, chosen by score.
"""
from __future__ import annotations

import math
import time

import numpy as np
import polars as pl

from analysis.records import SCHEMAS, RunResult

WORDS = ("delta", "gate", "state", "chunk", "event", "budget", "decay", "key", "value", "query")


def synthetic_document(n_chunks: int, chars_per_chunk: int = 64, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    length = n_chunks * chars_per_chunk
    picks = rng.integers(len(WORDS), size=length // 2 + 1)  # every word is >= 3 chars with its space
    return " ".join(WORDS[i] for i in picks)[:length]


def synthetic_result(n_layers: int = 3, head_pairs: int = 4, n_chunks: int = 20, budget: float = 0.29,
                     seed: int = 0, compare_dense: bool = True, selector: str = "score",
                     with_document: bool = True, gdn_layers: list[int] | None = None,
                     model_layers: int | None = None) -> RunResult:
    """A RunResult over a byte-tokenised synthetic document (one token per character).

    `gdn_layers`: the model's layer ids of the GDN layers (default 0 .. n_layers - 1, and then n_layers is
    their count); the ids it skips, and those up to `model_layers`, are attention layers, which have no
    records (the summary's gdn_layers and n_layers say so, as the pipeline writes them)."""
    if gdn_layers is not None:
        n_layers = len(gdn_layers)
    rng = np.random.default_rng(seed)
    text = synthetic_document(n_chunks, seed=seed)
    n_tokens = len(text)
    chunk_ids = np.arange(n_chunks)
    token_start = chunk_ids * 64
    token_end = np.minimum(token_start + 64, n_tokens)
    keep = math.ceil(budget * head_pairs * n_chunks)
    scores = rng.random((n_layers, head_pairs, n_chunks)).astype(np.float32)
    selected = np.zeros((n_layers, head_pairs * n_chunks), dtype=bool)
    top = np.argsort(-scores.reshape(n_layers, -1), axis=1)[:, :keep]
    np.put_along_axis(selected, top, True, axis=1)
    selected = selected.reshape(n_layers, head_pairs, n_chunks)
    errors = np.where(selected, 0.0, rng.random(selected.shape) * 0.1) + 1e-4
    layer_ids, head_ids, chunk_grid = np.meshgrid(np.arange(n_layers), np.arange(head_pairs), chunk_ids, indexing="ij")
    events = pl.DataFrame({
        "layer": layer_ids.ravel(), "head_pair": head_ids.ravel(), "chunk": chunk_grid.ravel(),
        "token_start": token_start[chunk_grid.ravel()], "token_end": token_end[chunk_grid.ravel()],
        "score": scores.ravel(), "selected": selected.ravel(),
        "rel_err_o": errors.ravel() if compare_dense else pl.Series([None] * errors.size, dtype=pl.Float64),
    })
    heads = pl.DataFrame({
        "layer": layer_ids[:, :, 0].ravel(), "head_pair": head_ids[:, :, 0].ravel(),
        "events_selected": selected.sum(axis=2).ravel(),
        "rel_err_o": errors.mean(axis=2).ravel() if compare_dense else [None] * (n_layers * head_pairs),
        "rel_err_state": errors.max(axis=2).ravel() if compare_dense else [None] * (n_layers * head_pairs),
    }, strict=False)
    layers = pl.DataFrame({
        "layer": np.arange(n_layers), "core_ms_dense": 2.0 + np.arange(n_layers),
        "core_ms_sparse": 1.0 + 0.5 * np.arange(n_layers),
        "rel_err_o": errors.mean(axis=(1, 2)) if compare_dense else [None] * n_layers,
    }, strict=False)
    chunks = pl.DataFrame({"chunk": chunk_ids, "token_start": token_start, "token_end": token_end,
                           "char_start": token_start, "char_end": token_end})
    summary = {
        "model": "synthetic", "n_tokens": n_tokens, "n_chunks": n_chunks, "budget": budget,
        "selector": selector, "band": 1, "backend": "torch", "device": "cpu",
        "prefill_ms_dense": 100.0, "prefill_ms_sparse": 90.0,
        "kl_mean": 0.01 if compare_dense else None, "top1_agreement": 0.97 if compare_dense else None,
        "ppl_dense": 10.0 if compare_dense else None, "ppl_sparse": 10.2 if compare_dense else None,
        "random_weights": True, "created": time.time(),
        "config": {"budget": budget, "selector": selector, "band": 1, "backend": "torch",
                   "compare_dense": compare_dense},
    }
    if gdn_layers is not None:
        ids = dict(enumerate(gdn_layers))
        events, heads, layers = (frame.with_columns(pl.col("layer").replace_strict(ids, return_dtype=pl.Int64))
                                 for frame in (events, heads, layers))
        summary.update(gdn_layers=list(gdn_layers), n_layers=model_layers or max(gdn_layers) + 1)
    return RunResult(events=events, heads=heads, layers=layers, chunks=chunks, summary=summary,
                     document=text if with_document else None)


def with_timings(result: RunResult, dense_ms: list[float], sparse_ms: list[float]) -> RunResult:
    """`result` with repeated whole-prefill and core timings (the pipeline's `timings` table and the summary's
    `timing`), the core a fixed tenth of each prefill: a run whose spreads are known exactly."""
    from analysis.timing import Spread

    rows, layers = [], result.layers["layer"].to_list()
    for path, samples in (("dense", dense_ms), ("sparse", sparse_ms)):
        for repeat, ms in enumerate(samples):
            rows.append({"repeat": repeat, "path": path, "scope": "prefill", "layer": None, "stage": None, "ms": ms})
            rows += [{"repeat": repeat, "path": path, "scope": "core", "layer": layer, "stage": None,
                      "ms": ms / 10 / len(layers)} for layer in layers]
    result.timings = pl.DataFrame(rows, schema=SCHEMAS["timings"])
    spreads = {f"{scope}_{path}": Spread.of([ms * (0.1 if scope == "core" else 1.0) for ms in samples]).to_dict()
               for path, samples in (("dense", dense_ms), ("sparse", sparse_ms)) for scope in ("prefill", "core")}
    result.summary.update(
        prefill_ms_dense=spreads["prefill_dense"]["median"], prefill_ms_sparse=spreads["prefill_sparse"]["median"],
        core_ms_dense_total=spreads["core_dense"]["median"], core_ms_sparse_total=spreads["core_sparse"]["median"],
        timing={"repeats": len(dense_ms), "statistic": "median", "interleaved": True, "threads": 1,
                "warm_up": {"tokens": 128, "dense_ms": 50.0, "sparse_ms": 60.0}, **spreads})
    return result


def with_passkey(result: RunResult, passkey: str = "4229659", sparse_answer: str | None = None) -> RunResult:
    """`result` whose byte-tokenised document hides a passkey in its middle and asks for it at its end, with
    a `tokens` table whose dense predictions are the next characters (so dense retrieves the passkey) and
    whose sparse ones are too, except that the answer reads `sparse_answer` (same length) when given."""
    text = result.document
    needle = f" The special magic number for grey-gate is: {passkey}. "
    question = f" What is the special magic number for grey-gate? The special magic number for grey-gate is: {passkey}."
    middle = len(text) // 2
    text = text[:middle] + needle + text[middle + len(needle):len(text) - len(question)] + question
    codes = [ord(c) for c in text]
    dense = codes[1:] + [ord(" ")]
    sparse = list(dense)
    if sparse_answer is not None:
        start = len(text) - len(passkey) - 1                  # the answer's first digit
        sparse[start - 1:start - 1 + len(passkey)] = [ord(c) for c in sparse_answer]
    result.document = text
    result.tokens = pl.DataFrame({
        "position": range(len(text)), "token": codes, "char_start": range(len(text)),
        "char_end": range(1, len(text) + 1), "predicted_dense": dense, "predicted_sparse": sparse,
        "predicted_dense_text": [chr(c) for c in dense], "predicted_sparse_text": [chr(c) for c in sparse],
    }, schema=SCHEMAS["tokens"])
    return result
