"""One analysed prefill of one document: dense and SparseGDN runs side by side, recorded.

For each segment of `segment_tokens` tokens (the recurrent states and the attention KV cache
carried in each run's own cache):
1. dense pass (if compare_dense): the model with sparsegdn's dense core ('auto': FLA on a GPU when
   installed, else the torch reference); per-layer core time recorded;
2. sparse pass: the model with the recording SparseGDN core (recorder.py), which also runs the
   dense core on the same layer inputs and carried state to measure the core's own error;
3. model-level metrics on the segment's next-token distributions (KL, top-1 agreement, NLL),
   computed from the final hidden states in slices so the vocabulary never meets the full length.

prefill_ms_sparse is the sparse pass time minus the measured time of the dense comparisons inside it.
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Callable, Optional

import numpy as np
import polars as pl
import torch

import sparsegdn
from sparsegdn.reference import CHUNK
from sparsegdn.validation import ResultOverflowError

from .documents import DocumentError
from .errors import AnalysisError, ConfigError, DocumentTooLongError, NonFiniteError, OutOfMemoryError
from .models import LoadedModel
from .patching import dense_core, swap_gdn_core
from .recorder import Recorder, event_columns
from .records import RunResult
from .timing import Timer

__all__ = ["AnalysisError", "ProgressUpdate", "RunConfig", "analyze"]

SPARSE_BACKENDS = ("auto", "torch", "triton")
LOGIT_SLICE = 512   # positions per lm_head slice: bounds the [slice, vocab] float32 logits


@dataclass(frozen=True)
class RunConfig:
    budget: float = 0.29
    selector: str = "score"
    band: int = 1
    backend: str = "auto"
    compare_dense: bool = True
    segment_tokens: int = 8192
    max_tokens: Optional[int] = None

    def __post_init__(self):
        if not (isinstance(self.budget, (int, float)) and 0 < self.budget <= 1):
            raise ConfigError(f"budget must be in (0, 1], got {self.budget}.")
        if self.selector not in sparsegdn.SELECTORS:
            raise ConfigError(f"selector must be one of {', '.join(sparsegdn.SELECTORS)}, got {self.selector!r}.")
        if self.band not in (0, 1, 2, 3):
            raise ConfigError(f"band must be 0, 1, 2 or 3, got {self.band}.")
        if self.backend not in SPARSE_BACKENDS:
            raise ConfigError(f"backend must be one of {', '.join(SPARSE_BACKENDS)}, got {self.backend!r}.")
        if self.segment_tokens <= 0 or self.segment_tokens % CHUNK:
            raise ConfigError(f"segment_tokens must be a positive multiple of {CHUNK}, got {self.segment_tokens}.")
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise ConfigError(f"max_tokens must be positive, got {self.max_tokens}.")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ProgressUpdate:
    stage: str                 # "tokenize" | "dense" | "sparse" | "segment" | "done"
    layer: Optional[int]
    n_layers: int
    segment: int
    n_segments: int
    fraction: float            # of the whole run, 0..1
    message: str


Progress = Optional[Callable[[ProgressUpdate], None]]


def resolve_sparse_backend(backend: str, device: torch.device) -> str:
    """The backend a run uses on `device`; ConfigError when 'triton' cannot run there."""
    try:
        from sparsegdn import triton as triton_backend
        available = triton_backend.is_available()
    except (ImportError, AttributeError):
        available = False
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if backend == "triton" and not (available and (device.type == "cuda" or interpreted)):
        raise ConfigError(f"backend 'triton' needs a CUDA GPU and triton installed (the model is on "
                          f"{device.type}); use --backend torch or auto.")
    if backend != "auto":
        return backend
    return "triton" if device.type == "cuda" and available else "torch"


def resolve_dense_backend(device: torch.device) -> str:
    try:
        import fla.ops.gated_delta_rule  # noqa: F401
        has_fla = True
    except ImportError:
        has_fla = False
    return "fla" if device.type == "cuda" and has_fla else "torch"


def _segments(n_tokens: int, segment_tokens: int) -> list[tuple[int, int]]:
    return [(start, min(start + segment_tokens, n_tokens)) for start in range(0, n_tokens, segment_tokens)]


class _LayerProgress:
    """Forward hooks on the decoder layers that report per-layer progress."""

    def __init__(self, model, progress: Progress, n_segments: int, passes: int):
        self.progress, self.n_segments, self.passes = progress, n_segments, passes
        self.layers = list(model.model.layers)
        self.stage, self.segment, self.pass_index = "", 0, 0
        self.handles = [layer.register_forward_hook(self._hook(i)) for i, layer in enumerate(self.layers)] \
            if progress else []

    def _hook(self, index):
        def hook(module, args, output):
            n = len(self.layers)
            done = ((self.segment * self.passes + self.pass_index) * n + index + 1)
            self.progress(ProgressUpdate(
                self.stage, index, n, self.segment, self.n_segments, done / (self.n_segments * self.passes * n),
                f"{self.stage} prefill: segment {self.segment + 1}/{self.n_segments}, layer {index + 1}/{n}"))
        return hook

    def remove(self):
        for handle in self.handles:
            handle.remove()


class _Metrics:
    """Running sums of KL(dense || sparse), top-1 agreement and next-token NLL of each run."""

    def __init__(self, device):
        zero = lambda: torch.zeros((), dtype=torch.float64, device=device)  # noqa: E731
        self.kl, self.agree, self.nll_dense, self.nll_sparse = zero(), zero(), zero(), zero()
        self.positions = 0
        self.targets = 0

    def update(self, lm_head, hidden_dense, hidden_sparse, targets: torch.Tensor):
        """hidden [1, L, D]; targets [L'] with L' = L or L - 1 (the document's last token has none)."""
        length = hidden_sparse.shape[1]
        for start in range(0, length, LOGIT_SLICE):
            end = min(start + LOGIT_SLICE, length)
            log_sparse = torch.log_softmax(lm_head(hidden_sparse[0, start:end]).float(), -1)
            n_targets = max(0, min(end, targets.shape[0]) - start)
            target = targets[start:start + n_targets]
            self.nll_sparse -= log_sparse[torch.arange(n_targets), target].double().sum()
            if hidden_dense is not None:
                log_dense = torch.log_softmax(lm_head(hidden_dense[0, start:end]).float(), -1)
                # Clamped at 0: identical distributions give tiny negative values from rounding.
                kl = (log_dense.exp() * (log_dense - log_sparse)).sum(-1).clamp_min(0)
                self.kl += kl.double().sum()
                self.agree += (log_dense.argmax(-1) == log_sparse.argmax(-1)).double().sum()
                self.nll_dense -= log_dense[torch.arange(n_targets), target].double().sum()
            self.targets += n_targets
        self.positions += length

    def summary(self, compare_dense: bool) -> dict:
        def ppl(nll):
            return math.exp(nll.item() / self.targets) if self.targets else None

        return {
            "kl_mean": self.kl.item() / self.positions if compare_dense else None,
            "top1_agreement": self.agree.item() / self.positions if compare_dense else None,
            "ppl_dense": ppl(self.nll_dense) if compare_dense else None,
            "ppl_sparse": ppl(self.nll_sparse),
        }


def _finite_or_none(value):
    return value if value is None or math.isfinite(value) else None


def _ratio_sqrt(numerator: float, denominator: float):
    return math.sqrt(numerator / denominator) if denominator > 0 and math.isfinite(numerator) else None


def analyze(loaded: LoadedModel, text: str, config: RunConfig = RunConfig(), progress: Progress = None) -> RunResult:
    """Prefill `text` dense and with SparseGDN; return the records (see records.py)."""
    if not isinstance(config, RunConfig):
        raise ConfigError("config must be a RunConfig")
    if not text or not text.strip():
        raise DocumentError("The document is empty; choose a file with text in it.")
    resolve_sparse_backend(config.backend, next(loaded.model.parameters()).device)
    limit = min(loaded.max_tokens, config.max_tokens or loaded.max_tokens)
    # Counted against the limit before the whole text is tokenised (with offsets, the costly form).
    if loaded.tokenizer.count_up_to(text, limit) > limit:
        raise DocumentTooLongError(
            f"The document has more than {limit:,} tokens; {loaded.name} is limited to {limit:,} here. "
            "Use a shorter document or raise the token limit.")
    ids, offsets = loaded.tokenizer.encode_with_offsets(text)
    n_tokens = len(ids)
    if n_tokens == 0:
        raise DocumentError("The document produced no tokens; choose a file with text in it.")
    try:
        return _analyze(loaded, text, ids, offsets, config, progress)
    except torch.OutOfMemoryError:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        raise OutOfMemoryError(
            f"Out of GPU memory prefilling {n_tokens:,} tokens with {loaded.name}; try a shorter document, "
            f"a smaller segment_tokens (now {config.segment_tokens}), or compare_dense off.") from None
    except ResultOverflowError as error:
        raise NonFiniteError(f"A GDN core overflowed to NaN/inf from finite inputs ({error}); "
                             "try float32 or another model.") from None


def _analyze(loaded, text, ids, offsets, config, progress) -> RunResult:
    from transformers import DynamicCache

    model = loaded.model
    device = next(model.parameters()).device
    n_tokens = len(ids)
    n_chunks = -(-n_tokens // CHUNK)
    segments = _segments(n_tokens, config.segment_tokens)
    passes = 2 if config.compare_dense else 1
    timer = Timer(device)
    sparse_backend = resolve_sparse_backend(config.backend, device)
    dense_backend = resolve_dense_backend(device)

    def new_recorder() -> Recorder:
        return Recorder(budget=config.budget, selector=config.selector, band=config.band,
                        backend=sparse_backend, compare_dense=config.compare_dense,
                        dense_backend=dense_backend, timer=timer)

    recorder = new_recorder()
    dense_core_ms: dict[int, list] = {}

    def timed_dense(call):
        with timer.interval() as interval:
            result = dense_core(dense_backend)(call)
        dense_core_ms.setdefault(call.layer, []).append(interval)
        return result

    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    if progress:
        progress(ProgressUpdate("tokenize", None, loaded.n_layers, 0, len(segments), 0.0,
                                f"{n_tokens:,} tokens, {n_chunks:,} chunks, {len(segments)} segment(s)"))
    # Without a warm-up the first timed calls hold one-off costs: Triton/FLA compilation on a GPU (the
    # whole first segment, so every kernel shape is compiled), lazy initialisation on the CPU, where a
    # short prefix is enough (an idle 2-core CPU, 5.6K tokens: layer times then within 80-107 ms).
    warm_up_end = segments[0][1] if device.type == "cuda" else min(segments[0][1], 128)
    _warm_up(model, input_ids[:, :warm_up_end], recorder, timed_dense, config.compare_dense)
    dense_core_ms.clear()
    recorder = new_recorder()

    cache_dense = DynamicCache(config=model.config) if config.compare_dense else None
    cache_sparse = DynamicCache(config=model.config)
    metrics = _Metrics(device)
    dense_ms, sparse_ms = [], []
    tracker = _LayerProgress(model, progress, len(segments), passes)
    try:
        with torch.inference_mode():
            for index, (start, end) in enumerate(segments):
                segment_ids = input_ids[:, start:end]
                tracker.segment = index
                hidden_dense = None
                if config.compare_dense:
                    tracker.stage, tracker.pass_index = "dense", 0
                    with swap_gdn_core(model, timed_dense), timer.interval() as interval:
                        hidden_dense = model.model(input_ids=segment_ids, past_key_values=cache_dense,
                                                   use_cache=True).last_hidden_state
                    dense_ms.append(interval)
                tracker.stage, tracker.pass_index = "sparse", passes - 1
                recorder.segment_start = start
                with swap_gdn_core(model, recorder.core), timer.interval() as interval:
                    hidden_sparse = model.model(input_ids=segment_ids, past_key_values=cache_sparse,
                                                use_cache=True).last_hidden_state
                sparse_ms.append(interval)
                for name, hidden in (("dense", hidden_dense), ("SparseGDN", hidden_sparse)):
                    if hidden is not None and not bool(torch.isfinite(hidden).all()):
                        raise NonFiniteError(f"The {name} prefill produced NaN/inf hidden states in segment "
                                             f"{index + 1}; try float32 or another model.")
                metrics.update(model.lm_head, hidden_dense, hidden_sparse, input_ids[0, start + 1:end + 1])
                recorder.flush()
                if progress:
                    progress(ProgressUpdate("segment", None, loaded.n_layers, index, len(segments),
                                            (index + 1) / len(segments), f"segment {index + 1}/{len(segments)} done"))
    finally:
        tracker.remove()
    timer.resolve()
    if recorder.any_nonfinite():
        raise NonFiniteError("A GDN core produced NaN/inf outputs; try float32 or another model.")

    result = _build_result(loaded, text, offsets, config, n_tokens, n_chunks, segments, recorder,
                           dense_core_ms, dense_ms, sparse_ms, metrics, sparse_backend, dense_backend, device)
    if progress:
        progress(ProgressUpdate("done", None, loaded.n_layers, len(segments) - 1, len(segments), 1.0, "done"))
    return result


def _warm_up(model, input_ids, recorder, timed_dense, compare_dense):
    """Compile/autotune the kernels once (Triton, FLA) so the first timed segment is not a JIT run."""
    from transformers import DynamicCache

    with torch.inference_mode():
        if compare_dense:
            with swap_gdn_core(model, timed_dense):
                model.model(input_ids=input_ids, past_key_values=DynamicCache(config=model.config), use_cache=True)
        with swap_gdn_core(model, recorder.core):
            model.model(input_ids=input_ids, past_key_values=DynamicCache(config=model.config), use_cache=True)
    if input_ids.device.type == "cuda":
        torch.cuda.synchronize()


def _build_result(loaded, text, offsets, config, n_tokens, n_chunks, segments, recorder, dense_core_ms,
                  dense_ms, sparse_ms, metrics, sparse_backend, dense_backend, device) -> RunResult:
    columns = event_columns(recorder.rows, n_tokens)
    diff_sq, ref_sq = columns.pop("diff_sq"), columns.pop("ref_sq")
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_err = np.sqrt(diff_sq / ref_sq)
    # Undefined (0/0) or non-finite errors become null, never NaN in a record.
    nonfinite_values = int((~np.isfinite(rel_err) & np.isfinite(ref_sq) & (ref_sq > 0)).sum())
    rel_err = np.where(np.isfinite(rel_err), rel_err, np.nan)
    events = pl.DataFrame({**columns, "rel_err_o": rel_err, "diff_sq": diff_sq, "ref_sq": ref_sq},
                          nan_to_null=True).sort("layer", "head_pair", "chunk")

    state_rows = [{"layer": r["layer"], "head_pair": h, "state_diff_sq": float(r["state_diff_sq"][h]),
                   "state_ref_sq": float(r["state_ref_sq"][h])}
                  for r in recorder.rows if "state_diff_sq" in r for h in range(len(r["state_diff_sq"]))]
    heads = events.group_by("layer", "head_pair").agg(
        pl.col("selected").sum().alias("events_selected"),
        pl.col("diff_sq").sum().alias("diff_sq"), pl.col("ref_sq").sum().alias("ref_sq"),
    ).sort("layer", "head_pair")
    if state_rows:
        states = pl.DataFrame(state_rows).group_by("layer", "head_pair").agg(pl.all().sum())
        heads = heads.join(states.with_columns(pl.col("layer").cast(heads.schema["layer"]),
                                               pl.col("head_pair").cast(heads.schema["head_pair"])),
                           on=["layer", "head_pair"], how="left")
    else:
        heads = heads.with_columns(pl.lit(None, pl.Float64).alias("state_diff_sq"),
                                   pl.lit(None, pl.Float64).alias("state_ref_sq"))

    def rel(numerator, denominator):
        return (pl.when(pl.col(denominator) > 0).then((pl.col(numerator) / pl.col(denominator)).sqrt())
                .otherwise(None))

    heads = heads.with_columns(rel("diff_sq", "ref_sq").alias("rel_err_o"),
                               rel("state_diff_sq", "state_ref_sq").alias("rel_err_state"))
    if not config.compare_dense:
        heads = heads.with_columns(pl.lit(None, pl.Float64).alias("rel_err_o"),
                                   pl.lit(None, pl.Float64).alias("rel_err_state"))

    layer_errors = events.group_by("layer").agg(pl.col("diff_sq").sum(), pl.col("ref_sq").sum())
    layers = pl.DataFrame({
        "layer": loaded.gdn_layers,
        "core_ms_dense": [sum(i.ms for i in dense_core_ms[layer]) if layer in dense_core_ms else None
                          for layer in loaded.gdn_layers],
        "core_ms_sparse": [sum(i.ms for i in recorder.sparse_ms[layer]) if layer in recorder.sparse_ms else None
                           for layer in loaded.gdn_layers],
    }, schema_overrides={"core_ms_dense": pl.Float64, "core_ms_sparse": pl.Float64})
    layers = layers.join(layer_errors.with_columns(pl.col("layer").cast(pl.Int64)), on="layer", how="left")
    layers = layers.with_columns(rel("diff_sq", "ref_sq").alias("rel_err_o") if config.compare_dense
                                 else pl.lit(None, pl.Float64).alias("rel_err_o"))

    chunk_index = np.arange(n_chunks)
    token_start = chunk_index * CHUNK
    token_end = np.minimum(token_start + CHUNK, n_tokens)
    starts = np.array([span[0] for span in offsets])
    ends = np.array([span[1] for span in offsets])
    chunks = pl.DataFrame({"chunk": chunk_index, "token_start": token_start, "token_end": token_end,
                           "char_start": starts[token_start],
                           "char_end": np.maximum.reduceat(ends, token_start)})

    compare_total = sum(i.ms for i in recorder.compare_ms)
    model_metrics = metrics.summary(config.compare_dense)
    nonfinite_metrics = [k for k, v in model_metrics.items() if v is not None and not math.isfinite(v)]
    summary = {
        "model": loaded.name,
        "n_tokens": n_tokens,
        "n_chunks": n_chunks,
        "budget": config.budget,
        "selector": config.selector,
        "band": config.band,
        "backend": sparse_backend,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        "prefill_ms_dense": sum(i.ms for i in dense_ms) if config.compare_dense else None,
        "prefill_ms_sparse": sum(i.ms for i in sparse_ms) - compare_total,
        **{k: _finite_or_none(v) for k, v in model_metrics.items()},
        "random_weights": loaded.random_weights,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": config.to_dict(),
        # Extras (documented in analysis/README.md).
        "dense_backend": dense_backend,
        "dtype": loaded.dtype,
        "n_segments": len(segments),
        "events_selected": int(events["selected"].sum()),
        "events_total": events.height,
        "core_ms_dense_total": layers["core_ms_dense"].sum() if config.compare_dense else None,
        "core_ms_sparse_total": layers["core_ms_sparse"].sum(),
        "non_finite": nonfinite_values + len(nonfinite_metrics),
        # The sparse core's own stages (Triton passes on a GPU, selection / chunk form on the CPU),
        # summed over layers and segments.
        "stages": recorder.stages.totals_ms(),
    }
    return RunResult(events=events, heads=heads, layers=layers, chunks=chunks, summary=summary, document=text)
