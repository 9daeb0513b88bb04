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
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Mapping, Optional

import numpy as np
import polars as pl
import torch

from sparsegdn import CHUNK_SIZE, SparseConfig, num_chunks
from sparsegdn.config import resolve_dense_backend
from sparsegdn.validation import ResultOverflowError

from .documents import DocumentError
from .errors import AnalysisError, ConfigError, DocumentTooLongError, NonFiniteError, OutOfMemoryError
from .models import LoadedModel
from .patching import dense_core, swap_gdn_core
from .recorder import Recorder, event_columns
from .records import RunResult
from .timing import Timer

__all__ = ["AnalysisError", "ProgressUpdate", "RunConfig", "analyze"]

LOGIT_SLICE = 512   # positions per lm_head slice: bounds the [slice, vocab] float32 logits


@dataclass(frozen=True)
class RunConfig:
    """One analysis run: SparseGDN's options (`sparse`, checked where it was made) and how the
    document is prefilled. Bad values raise ConfigError."""

    sparse: SparseConfig = field(default_factory=SparseConfig)
    compare_dense: bool = True
    segment_tokens: int = 8192
    max_tokens: Optional[int] = None

    def __post_init__(self):
        if not isinstance(self.sparse, SparseConfig):
            raise ConfigError(f"sparse must be a sparsegdn.SparseConfig, got {type(self.sparse).__name__}.")
        if self.segment_tokens <= 0 or self.segment_tokens % CHUNK_SIZE:
            raise ConfigError(f"segment_tokens must be a positive multiple of {CHUNK_SIZE}, got {self.segment_tokens}.")
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise ConfigError(f"max_tokens must be positive, got {self.max_tokens}.")

    def to_dict(self) -> dict:
        """One flat dict: the sparse options, then the run's (the `config` of a run's summary)."""
        return {**self.sparse.to_dict(), "compare_dense": self.compare_dense,
                "segment_tokens": self.segment_tokens, "max_tokens": self.max_tokens}

    @classmethod
    def from_dict(cls, values: Mapping) -> "RunConfig":
        """The RunConfig of a `to_dict` (a saved run's summary); missing keys take their defaults."""
        run = {name: values[name] for name in ("compare_dense", "segment_tokens", "max_tokens") if name in values}
        try:
            sparse = SparseConfig.from_dict(values)
        except ValueError as error:
            raise ConfigError(f"{error}.") from None
        return cls(sparse=sparse, **run)


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


def analyze(loaded: LoadedModel, text: str, config: RunConfig = RunConfig(), progress: Progress = None) -> RunResult:
    """Prefill `text` dense and with SparseGDN; return the records (see records.py)."""
    if not isinstance(config, RunConfig):
        raise ConfigError("config must be a RunConfig")
    if not text or not text.strip():
        raise DocumentError("The document is empty; choose a file with text in it.")
    _resolve(config, next(loaded.model.parameters()).device)    # a backend that cannot run: before any work
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


@dataclass
class _Prefill:
    """What one analysed prefill measured, before it becomes records (`_records`)."""

    loaded: LoadedModel
    text: str
    offsets: list                    # (char_start, char_end) of every token
    config: RunConfig
    sparse: SparseConfig             # config.sparse with its backend resolved for the device
    dense_backend: str
    device: torch.device
    segments: list                   # [(token_start, token_end)] of each segment
    recorder: Recorder
    metrics: "_Metrics"
    dense_core_ms: dict = field(default_factory=dict)   # layer -> [Interval] of the dense core
    dense_ms: list = field(default_factory=list)        # [Interval] of each dense segment prefill
    sparse_ms: list = field(default_factory=list)       # [Interval] of each sparse segment prefill

    @property
    def n_tokens(self) -> int:
        return len(self.offsets)

    @property
    def n_chunks(self) -> int:
        return num_chunks(self.n_tokens)


def _resolve(config: RunConfig, device) -> tuple[SparseConfig, str]:
    """The sparse options with their backend resolved for `device`, and the dense backend."""
    try:
        return config.sparse.resolved(device), resolve_dense_backend("auto", device)
    except ValueError as error:
        raise ConfigError(f"{error}.") from None


def _analyze(loaded, text, ids, offsets, config, progress) -> RunResult:
    from transformers import DynamicCache

    model = loaded.model
    device = next(model.parameters()).device
    sparse, dense_backend = _resolve(config, device)
    timer = Timer(device)

    def new_recorder() -> Recorder:
        return Recorder(sparse, compare_dense=config.compare_dense, dense_backend=dense_backend, timer=timer)

    run = _Prefill(loaded=loaded, text=text, offsets=offsets, config=config, sparse=sparse,
                   dense_backend=dense_backend, device=device,
                   segments=_segments(len(ids), config.segment_tokens), recorder=new_recorder(),
                   metrics=_Metrics(device))
    segments, passes = run.segments, 2 if config.compare_dense else 1

    def timed_dense(call):
        with timer.interval() as interval:
            result = dense_core(dense_backend)(call)
        run.dense_core_ms.setdefault(call.layer, []).append(interval)
        return result

    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    if progress:
        progress(ProgressUpdate("tokenize", None, loaded.n_layers, 0, len(segments), 0.0,
                                f"{run.n_tokens:,} tokens, {run.n_chunks:,} chunks, {len(segments)} segment(s)"))
    # Without a warm-up the first timed calls hold one-off costs: Triton/FLA compilation on a GPU (the
    # whole first segment, so every kernel shape is compiled), lazy initialisation on the CPU, where a
    # short prefix is enough (an idle 2-core CPU, 5.6K tokens: layer times then within 80-107 ms).
    warm_up_end = segments[0][1] if device.type == "cuda" else min(segments[0][1], 128)
    _warm_up(model, input_ids[:, :warm_up_end], run.recorder, timed_dense, config.compare_dense)
    run.dense_core_ms.clear()
    run.recorder = recorder = new_recorder()

    cache_dense = DynamicCache(config=model.config) if config.compare_dense else None
    cache_sparse = DynamicCache(config=model.config)
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
                    run.dense_ms.append(interval)
                tracker.stage, tracker.pass_index = "sparse", passes - 1
                recorder.segment_start = start
                with swap_gdn_core(model, recorder.core), timer.interval() as interval:
                    hidden_sparse = model.model(input_ids=segment_ids, past_key_values=cache_sparse,
                                                use_cache=True).last_hidden_state
                run.sparse_ms.append(interval)
                for name, hidden in (("dense", hidden_dense), ("SparseGDN", hidden_sparse)):
                    if hidden is not None and not bool(torch.isfinite(hidden).all()):
                        raise NonFiniteError(f"The {name} prefill produced NaN/inf hidden states in segment "
                                             f"{index + 1}; try float32 or another model.")
                run.metrics.update(model.lm_head, hidden_dense, hidden_sparse, input_ids[0, start + 1:end + 1])
                recorder.flush()
                if progress:
                    progress(ProgressUpdate("segment", None, loaded.n_layers, index, len(segments),
                                            (index + 1) / len(segments), f"segment {index + 1}/{len(segments)} done"))
    finally:
        tracker.remove()
    timer.resolve()
    if recorder.any_nonfinite():
        raise NonFiniteError("A GDN core produced NaN/inf outputs; try float32 or another model.")

    result = _records(run)
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


def _relative(numerator: str, denominator: str) -> pl.Expr:
    """sqrt(numerator / denominator), null where the denominator is 0 (undefined, never NaN)."""
    return (pl.when(pl.col(denominator) > 0).then((pl.col(numerator) / pl.col(denominator)).sqrt())
            .otherwise(None))


def _events(run: _Prefill) -> tuple[pl.DataFrame, int]:
    """The events table (with its diff_sq / ref_sq sums still attached) and the count of non-finite errors."""
    columns = event_columns(run.recorder.rows, run.n_tokens)
    diff_sq, ref_sq = columns.pop("diff_sq"), columns.pop("ref_sq")
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_err = np.sqrt(diff_sq / ref_sq)
    # Undefined (0/0) or non-finite errors become null, never NaN in a record.
    nonfinite = int((~np.isfinite(rel_err) & np.isfinite(ref_sq) & (ref_sq > 0)).sum())
    rel_err = np.where(np.isfinite(rel_err), rel_err, np.nan)
    events = pl.DataFrame({**columns, "rel_err_o": rel_err, "diff_sq": diff_sq, "ref_sq": ref_sq},
                          nan_to_null=True).sort("layer", "head_pair", "chunk")
    return events, nonfinite


def _heads(run: _Prefill, events: pl.DataFrame) -> pl.DataFrame:
    heads = events.group_by("layer", "head_pair").agg(
        pl.col("selected").sum().alias("events_selected"),
        pl.col("diff_sq").sum().alias("diff_sq"), pl.col("ref_sq").sum().alias("ref_sq"),
    ).sort("layer", "head_pair")
    state_rows = [{"layer": r["layer"], "head_pair": h, "state_diff_sq": float(r["state_diff_sq"][h]),
                   "state_ref_sq": float(r["state_ref_sq"][h])}
                  for r in run.recorder.rows if "state_diff_sq" in r for h in range(len(r["state_diff_sq"]))]
    if state_rows:
        states = pl.DataFrame(state_rows).group_by("layer", "head_pair").agg(pl.all().sum())
        heads = heads.join(states.with_columns(pl.col("layer").cast(heads.schema["layer"]),
                                               pl.col("head_pair").cast(heads.schema["head_pair"])),
                           on=["layer", "head_pair"], how="left")
    else:
        heads = heads.with_columns(pl.lit(None, pl.Float64).alias("state_diff_sq"),
                                   pl.lit(None, pl.Float64).alias("state_ref_sq"))
    if not run.config.compare_dense:
        return heads.with_columns(pl.lit(None, pl.Float64).alias("rel_err_o"),
                                  pl.lit(None, pl.Float64).alias("rel_err_state"))
    return heads.with_columns(_relative("diff_sq", "ref_sq").alias("rel_err_o"),
                              _relative("state_diff_sq", "state_ref_sq").alias("rel_err_state"))


def _layers(run: _Prefill, events: pl.DataFrame) -> pl.DataFrame:
    def summed(intervals: dict, layer: int):
        return sum(i.ms for i in intervals[layer]) if layer in intervals else None

    gdn_layers = run.loaded.gdn_layers
    layers = pl.DataFrame({
        "layer": gdn_layers,
        "core_ms_dense": [summed(run.dense_core_ms, layer) for layer in gdn_layers],
        "core_ms_sparse": [summed(run.recorder.sparse_ms, layer) for layer in gdn_layers],
    }, schema_overrides={"core_ms_dense": pl.Float64, "core_ms_sparse": pl.Float64})
    errors = events.group_by("layer").agg(pl.col("diff_sq").sum(), pl.col("ref_sq").sum())
    layers = layers.join(errors.with_columns(pl.col("layer").cast(pl.Int64)), on="layer", how="left")
    return layers.with_columns(_relative("diff_sq", "ref_sq").alias("rel_err_o") if run.config.compare_dense
                               else pl.lit(None, pl.Float64).alias("rel_err_o"))


def _chunks(run: _Prefill) -> pl.DataFrame:
    chunk_index = np.arange(run.n_chunks)
    token_start = chunk_index * CHUNK_SIZE
    token_end = np.minimum(token_start + CHUNK_SIZE, run.n_tokens)
    starts = np.array([span[0] for span in run.offsets])
    ends = np.array([span[1] for span in run.offsets])
    return pl.DataFrame({"chunk": chunk_index, "token_start": token_start, "token_end": token_end,
                         "char_start": starts[token_start], "char_end": np.maximum.reduceat(ends, token_start)})


def _summary(run: _Prefill, events: pl.DataFrame, layers: pl.DataFrame, nonfinite_errors: int) -> dict:
    compare_dense, device = run.config.compare_dense, run.device
    compare_total = sum(i.ms for i in run.recorder.compare_ms)
    model_metrics = run.metrics.summary(compare_dense)
    nonfinite_metrics = [k for k, v in model_metrics.items() if v is not None and not math.isfinite(v)]
    return {
        "model": run.loaded.name,
        "n_tokens": run.n_tokens,
        "n_chunks": run.n_chunks,
        "budget": run.sparse.budget,
        "selector": run.sparse.selector,
        "band": run.sparse.band,
        "backend": run.sparse.backend,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        "prefill_ms_dense": sum(i.ms for i in run.dense_ms) if compare_dense else None,
        "prefill_ms_sparse": sum(i.ms for i in run.sparse_ms) - compare_total,
        **{k: _finite_or_none(v) for k, v in model_metrics.items()},
        "random_weights": run.loaded.random_weights,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": run.config.to_dict(),
        # Extras (documented in analysis/README.md).
        "dense_backend": run.dense_backend,
        "dtype": run.loaded.dtype,
        "n_segments": len(run.segments),
        "events_selected": int(events["selected"].sum()),
        "events_total": events.height,
        "core_ms_dense_total": layers["core_ms_dense"].sum() if compare_dense else None,
        "core_ms_sparse_total": layers["core_ms_sparse"].sum(),
        "non_finite": nonfinite_errors + len(nonfinite_metrics),
        # The sparse core's stages (sparsegdn.STAGES, the same names on every backend), summed over
        # layers and segments.
        "stages": run.recorder.stages.totals_ms(),
    }


def _records(run: _Prefill) -> RunResult:
    events, nonfinite = _events(run)
    layers = _layers(run, events)
    return RunResult(events=events, heads=_heads(run, events), layers=layers, chunks=_chunks(run),
                     summary=_summary(run, events, layers, nonfinite), document=run.text)
