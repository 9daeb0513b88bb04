"""One analysed prefill of one document: dense and SparseGDN runs side by side, recorded and timed.

1. Warm-up (not timed): a dense and a sparse prefill of the document's start with the cores the
   timing passes use, so that compilation, autotuning and first use are paid before any timed call
   (one segment of each kind the timing passes prefill on a GPU, see `_warm_up_pieces`; 128 tokens on
   the CPU). Its time is kept as the first-call cost, shown apart.
2. Analysis pass, for each segment of `segment_tokens` tokens (the recurrent states and the
   attention KV cache carried in each run's own cache): the dense prefill (if compare_dense, with
   sparsegdn's dense core: 'auto' = FLA on a GPU when installed, else the torch path), then the
   sparse prefill with the recording SparseGDN core (recorder.py), which also runs the dense core on
   the same layer inputs and carried state to measure the core's own error; model-level metrics on the
   segment's next-token distributions (KL, top-1 agreement, NLL), computed from the final hidden
   states in slices so the vocabulary never meets the full length. Nothing of this pass is timed.
3. Timing passes: `repeats` whole prefills of the document with the plain dense and sparse cores
   (nothing recorded), dense and sparse interleaved (alternating which goes first), each whole
   prefill and each layer's core timed, the sparse core's stages too: inside the timed prefills, or,
   where the core's calls take launch plans (the Triton backend on a GPU), from one more sparse prefill
   after them (`_timed_prefill(staged=True)`), since a call that reports its stages takes no launch plan
   (sparsegdn/triton/call_plans.py) and so is not the call a caller gets. The records keep every repeat
   (the `timings` table); the summary and the layers table give medians, with the range beside them.
   Each repeat is watched for first-call work that still landed in it (timing.FirstCallWatch: Triton
   compiling or autotuning); the records say which repeats held some, and the summary gives each path's
   medians without them beside the medians over all.
"""
from __future__ import annotations

import math
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Mapping, Optional

import numpy as np
import polars as pl
import torch

from sparsegdn import CHUNK_SIZE, SparseConfig, num_chunks
from sparsegdn.config import resolve_dense_backend
from sparsegdn.validation import DeferredChecks, ResultOverflowError

from .documents import DocumentError
from .errors import AnalysisError, ConfigError, DocumentTooLongError, NonFiniteError, OutOfMemoryError
from . import placement
from .models import LoadedModel, segment_inputs
from .patching import dense_core, sparse_core, swap_gdn_core
from .recorder import Recorder, event_columns, raise_if_nonfinite
from .records import SCHEMAS, RunResult, document_hash
from .timing import PATH_NAMES, FirstCallWatch, Spread, StageClock, Timer, group_first_calls

__all__ = ["AnalysisError", "ProgressUpdate", "RunConfig", "analyze"]

LOGIT_SLICE = 512   # positions per lm_head slice: bounds the [slice, vocab] float32 logits
MAX_REPEATS = 20    # timing repeats a run may ask for
CPU_WARM_UP_TOKENS = 128


@dataclass(frozen=True)
class RunConfig:
    """One analysis run: SparseGDN's options (`sparse`, checked where it was made) and how the
    document is prefilled. Bad values raise ConfigError."""

    sparse: SparseConfig = field(default_factory=SparseConfig)
    compare_dense: bool = True
    segment_tokens: int = 8192
    max_tokens: Optional[int] = None
    repeats: int = 3          # timed prefills of each path, after the warm-up and the analysis pass

    def __post_init__(self):
        if not isinstance(self.sparse, SparseConfig):
            raise ConfigError(f"sparse must be a sparsegdn.SparseConfig, got {type(self.sparse).__name__}.")
        if self.segment_tokens <= 0 or self.segment_tokens % CHUNK_SIZE:
            raise ConfigError(f"segment_tokens must be a positive multiple of {CHUNK_SIZE}, got {self.segment_tokens}.")
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise ConfigError(f"max_tokens must be positive, got {self.max_tokens}.")
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or not 1 <= self.repeats <= MAX_REPEATS:
            raise ConfigError(f"repeats must be an integer from 1 to {MAX_REPEATS}, got {self.repeats!r}.")

    def to_dict(self) -> dict:
        """One flat dict: the sparse options, then the run's (the `config` of a run's summary)."""
        return {**self.sparse.to_dict(), "compare_dense": self.compare_dense,
                "segment_tokens": self.segment_tokens, "max_tokens": self.max_tokens, "repeats": self.repeats}

    @classmethod
    def from_dict(cls, values: Mapping) -> "RunConfig":
        """The RunConfig of a `to_dict` (a saved run's summary); missing keys take their defaults."""
        run = {name: values[name] for name in ("compare_dense", "segment_tokens", "max_tokens", "repeats")
               if name in values}
        try:
            sparse = SparseConfig.from_dict(values)
        except ValueError as error:
            raise ConfigError(f"{error}.") from None
        return cls(sparse=sparse, **run)


@dataclass(frozen=True)
class ProgressUpdate:
    stage: str                 # "tokenize" | "warmup" | "dense" | "sparse" | "segment" | "timing" | "done"
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
    """Forward hooks on the decoder layers that report progress as a share of the whole run's work
    (layer forwards weighted by the tokens they prefill), whatever phase the run is in."""

    def __init__(self, model, progress: Progress, total_units: float, n_segments: int):
        self.progress, self.total, self.n_segments = progress, max(total_units, 1e-9), n_segments
        self.layers = list(model.model.layers)
        self.done = 0.0
        self.stage, self.label, self.weight, self.segment, self.tokens = "", "", 1.0, 0, 0
        self.handles = [layer.register_forward_hook(self._hook(i)) for i, layer in enumerate(self.layers)] \
            if progress else []

    def begin(self, stage: str, label: str, segment: int, tokens: int, weight: float = 1.0) -> None:
        """The next model forward: its phase, what to call it, its segment and length."""
        self.stage, self.label, self.segment, self.tokens, self.weight = stage, label, segment, tokens, weight
        if self.progress:
            self.progress(ProgressUpdate(stage, None, len(self.layers), segment, self.n_segments, self.fraction,
                                         label))

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total)

    def _hook(self, index):
        def hook(module, args, output):
            n = len(self.layers)
            self.done += self.weight * self.tokens / n
            self.progress(ProgressUpdate(self.stage, index, n, self.segment, self.n_segments, self.fraction,
                                         f"{self.label}, layer {index + 1}/{n}"))
        return hook

    def remove(self):
        for handle in self.handles:
            handle.remove()


class _Metrics:
    """Running sums of KL(dense || sparse), top-1 agreement and next-token NLL of each run, and each
    run's top-1 next token at every position (the `tokens` record)."""

    def __init__(self, device):
        zero = lambda: torch.zeros((), dtype=torch.float64, device=device)  # noqa: E731
        self.kl, self.agree, self.nll_dense, self.nll_sparse = zero(), zero(), zero(), zero()
        self.positions = 0
        self.targets = 0
        self.predicted = {"dense": [], "sparse": []}   # [slice] int64 tensors on the CPU

    def update(self, lm_head, hidden_dense, hidden_sparse, targets: torch.Tensor):
        """hidden [1, L, D]; targets [L'] with L' = L or L - 1 (the document's last token has none)."""
        length = hidden_sparse.shape[1]
        targets = targets.to(self.kl.device)   # the lm_head's GPU, when the model is spread over several
        for start in range(0, length, LOGIT_SLICE):
            end = min(start + LOGIT_SLICE, length)
            log_sparse = torch.log_softmax(lm_head(hidden_sparse[0, start:end]).float(), -1)
            top_sparse = log_sparse.argmax(-1)
            self.predicted["sparse"].append(top_sparse.cpu())
            n_targets = max(0, min(end, targets.shape[0]) - start)
            target = targets[start:start + n_targets]
            self.nll_sparse -= log_sparse[torch.arange(n_targets), target].double().sum()
            if hidden_dense is not None:
                log_dense = torch.log_softmax(lm_head(hidden_dense[0, start:end]).float(), -1)
                # Clamped at 0: identical distributions give tiny negative values from rounding.
                kl = (log_dense.exp() * (log_dense - log_sparse)).sum(-1).clamp_min(0)
                self.kl += kl.double().sum()
                top_dense = log_dense.argmax(-1)
                self.predicted["dense"].append(top_dense.cpu())
                self.agree += (top_dense == top_sparse).double().sum()
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


def analyze(loaded: LoadedModel, text: str, config: RunConfig = RunConfig(), progress: Progress = None, *,
            document_name: Optional[str] = None) -> RunResult:
    """Prefill `text` dense and with SparseGDN; return the records (see records.py). `document_name`
    (a file name) is kept in the summary, so a run names the document it ran on."""
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
        return _analyze(loaded, text, ids, offsets, config, progress, document_name)
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
    ids: list                        # the document's token ids
    offsets: list                    # (char_start, char_end) of every token
    config: RunConfig
    sparse: SparseConfig             # config.sparse with its backend resolved for the device
    dense_backend: str
    device: torch.device
    devices: list                    # every device holding part of the model (one, or the GPUs of a map)
    segments: list                   # [(token_start, token_end)] of each segment
    recorder: Recorder
    metrics: "_Metrics"
    document_name: Optional[str] = None
    warm_up: dict = field(default_factory=dict)          # {"tokens", "pieces", "dense_ms", "sparse_ms"}
    timed: list = field(default_factory=list)            # [_TimedPrefill] of every timing pass

    @property
    def n_tokens(self) -> int:
        return len(self.offsets)

    @property
    def n_chunks(self) -> int:
        return num_chunks(self.n_tokens)


@dataclass
class _TimedPrefill:
    """One timed whole prefill of one path: its segments' intervals, each layer's core intervals, the stage
    clock (sparse, where the timed prefills carry it, or the staged prefill), the first-call work seen while it
    ran and (sparse) how many of its core calls replayed a launch plan."""

    repeat: int
    path: str                        # "dense" | "sparse"
    whole: list = field(default_factory=list)
    cores: dict = field(default_factory=lambda: defaultdict(list))
    stages: Optional[StageClock] = None
    first_calls: list = field(default_factory=list)     # [timing.FirstCall]: compiles, autotune benchmarks
    staged: bool = False        # the extra sparse prefill for the stage times only (not a timed repeat)
    replays: int = 0            # its core calls launched from a recorded plan (call_plans.replays' change)


def _resolve(config: RunConfig, device) -> tuple[SparseConfig, str]:
    """The sparse options with their backend resolved for `device`, and the dense backend."""
    try:
        return config.sparse.resolved(device), resolve_dense_backend("auto", device)
    except ValueError as error:
        raise ConfigError(f"{error}.") from None


def _paths(config: RunConfig) -> tuple[str, ...]:
    return ("dense", "sparse") if config.compare_dense else ("sparse",)


def _analyze(loaded, text, ids, offsets, config, progress, document_name) -> RunResult:
    from transformers import DynamicCache

    model = loaded.model
    device = next(model.parameters()).device       # the inputs' device: the first GPU of a device map
    devices = list(dict.fromkeys(parameter.device for parameter in model.parameters()))
    sparse, dense_backend = _resolve(config, device)
    timer = Timer(devices)
    for gpu in timer.devices:
        torch.cuda.reset_peak_memory_stats(gpu)    # the summary's peak memory per GPU is this run's
    run = _Prefill(loaded=loaded, text=text, ids=ids, offsets=offsets, config=config, sparse=sparse,
                   dense_backend=dense_backend, device=device, devices=devices,
                   segments=_segments(len(ids), config.segment_tokens),
                   recorder=Recorder(sparse, compare_dense=config.compare_dense, dense_backend=dense_backend),
                   metrics=_Metrics(model.lm_head.weight.device), document_name=document_name)
    segments, paths, recorder = run.segments, _paths(config), run.recorder
    warm_up_pieces = _warm_up_pieces(segments, device)
    # Work, in layer forwards times tokens: warm-up, the analysis pass (its sparse core runs the dense
    # core too when comparing), the timing passes.
    analysis_weight = 3 if config.compare_dense else 1
    staged_weight = 1 if _stages_apart(run) else 0
    total = (len(paths) * _warm_up_rounds(run) * warm_up_pieces[-1][1]
             + run.n_tokens * (analysis_weight + config.repeats * len(paths) + staged_weight))

    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    if progress:
        progress(ProgressUpdate("tokenize", None, loaded.n_layers, 0, len(segments), 0.0,
                                f"{run.n_tokens:,} tokens, {run.n_chunks:,} chunks, {len(segments)} segment(s)"))
    tracker = _LayerProgress(model, progress, total, len(segments))
    try:
        run.warm_up = _warm_up(model, input_ids, warm_up_pieces, run, tracker, timer)
        cache_dense = DynamicCache(config=model.config) if config.compare_dense else None
        cache_sparse = DynamicCache(config=model.config)
        with torch.inference_mode():
            for index, (start, end) in enumerate(segments):
                segment_ids = input_ids[:, start:end]
                positions = segment_inputs(model.config, start, end, input_ids.device)
                where = f"segment {index + 1}/{len(segments)}"
                hidden_dense = None
                if config.compare_dense:
                    tracker.begin("dense", f"dense prefill, {where}", index, end - start)
                    with swap_gdn_core(model, dense_core(dense_backend)):
                        hidden_dense = model.model(input_ids=segment_ids, past_key_values=cache_dense,
                                                   use_cache=True, **positions).last_hidden_state
                tracker.begin("sparse", f"SparseGDN prefill, recording events and errors, {where}", index,
                              end - start, weight=2 if config.compare_dense else 1)
                recorder.segment_start = start
                with swap_gdn_core(model, recorder.core):
                    hidden_sparse = model.model(input_ids=segment_ids, past_key_values=cache_sparse,
                                                use_cache=True, **positions).last_hidden_state
                for name, hidden in (("dense", hidden_dense), ("SparseGDN", hidden_sparse)):
                    if hidden is not None and not bool(torch.isfinite(hidden).all()):
                        raise NonFiniteError(f"The {name} prefill produced NaN/inf hidden states in segment "
                                             f"{index + 1}; try float32 or another model.")
                run.metrics.update(model.lm_head, hidden_dense, hidden_sparse, input_ids[0, start + 1:end + 1])
                recorder.flush()
                if progress:
                    progress(ProgressUpdate("segment", None, loaded.n_layers, index, len(segments),
                                            tracker.fraction, f"{where} analysed"))
        if recorder.any_nonfinite():
            raise NonFiniteError("A GDN core produced NaN/inf outputs; try float32 or another model.")
        del cache_dense, cache_sparse
        for repeat in range(config.repeats):
            # Alternate which path goes first, so neither always runs on the other's leftovers.
            for path in (paths if repeat % 2 == 0 else paths[::-1]):
                run.timed.append(_timed_prefill(model, input_ids, segments, run, path, repeat, timer, tracker))
        if _stages_apart(run):
            run.timed.append(_timed_prefill(model, input_ids, segments, run, "sparse", config.repeats, timer,
                                            tracker, staged=True))
        timer.resolve()
    finally:
        tracker.remove()

    result = _records(run)
    if progress:
        progress(ProgressUpdate("done", None, loaded.n_layers, len(segments) - 1, len(segments), 1.0, "done"))
    return result


def _plans_taken(run: _Prefill) -> bool:
    """Whether the sparse core's calls can take launch plans: the Triton backend on a GPU
    (sparsegdn/triton/call_plans.py; a call with the stage hook takes none)."""
    return run.device.type == "cuda" and run.sparse.backend == "triton"


def _stages_apart(run: _Prefill) -> bool:
    """Whether the sparse core's stage times come from a prefill of their own after the timed ones (where
    calls take launch plans, which a call with the stage hook does not) or from the timed prefills."""
    return _plans_taken(run)


def _warm_up_rounds(run: _Prefill) -> int:
    """Warm-up rounds over the pieces: two where calls take launch plans (a key's first call compiles, its
    first compile-free call records the plan that later calls replay), else one."""
    return 2 if _plans_taken(run) else 1


def _plan_replays() -> int:
    """Planned calls replayed so far in this process (0 where the Triton backend was never imported)."""
    module = sys.modules.get("sparsegdn.triton.call_plans")
    return module.replays if module is not None else 0


def _plain_core(run: _Prefill, path: str, checks: DeferredChecks, stages: Optional[StageClock]):
    """The core a timing pass times (nothing recorded) and the warm-up runs first: one call for both.
    Non-finite inputs it refuses are a NonFiniteError, as in the analysis pass."""
    plain = dense_core(run.dense_backend) if path == "dense" else sparse_core(run.sparse, checks, stages)

    def core(call):
        try:
            return plain(call)
        except ValueError:
            raise_if_nonfinite(call)
            raise

    return core


def _check_values(checks: DeferredChecks) -> None:
    """Read the deferred GPU value checks of a prefill; what they found is a NonFiniteError."""
    try:
        checks.check()
    except ValueError as error:
        raise NonFiniteError(f"{error}; try float32 or another model.") from None


def _timed_prefill(model, input_ids, segments, run: _Prefill, path: str, repeat: int, timer: Timer,
                   tracker: _LayerProgress, staged: bool = False) -> _TimedPrefill:
    """One whole prefill of `path` with the plain core (nothing recorded), every segment and every core
    call timed; the sparse core's stages on a StageClock where they are taken from the timed prefills, or in
    the `staged` prefill after them (`_stages_apart`). GPU value checks are read once, at the end. Any
    Triton compiling or autotuning while it runs is kept in `first_calls`."""
    from transformers import DynamicCache

    clocked = path == "sparse" and (staged or not _stages_apart(run))
    timed = _TimedPrefill(repeat, path, stages=StageClock(timer.cuda) if clocked else None, staged=staged)
    checks = DeferredChecks()
    plain = _plain_core(run, path, checks, timed.stages)

    def core(call):
        with timer.interval(call.v.device) as interval:    # on the layer's own GPU
            result = plain(call)
        timed.cores[call.layer].append(interval)
        return result

    cache = DynamicCache(config=model.config)
    replays = _plan_replays()
    with FirstCallWatch() as watch, torch.inference_mode(), swap_gdn_core(model, core):
        for index, (start, end) in enumerate(segments):
            what = "stage times" if staged else f"timing {repeat + 1}/{run.config.repeats}"
            tracker.begin("timing", f"{what}: {PATH_NAMES[path]} prefill, segment {index + 1}/{len(segments)}",
                          index, end - start)
            with timer.interval() as interval:
                model.model(input_ids=input_ids[:, start:end], past_key_values=cache, use_cache=True,
                            **segment_inputs(model.config, start, end, input_ids.device))
            timed.whole.append(interval)
        _check_values(checks)
    timed.first_calls = watch.calls
    timed.replays = _plan_replays() - replays
    return timed


def _warm_up_pieces(segments: list, device: torch.device) -> list[tuple[int, int]]:
    """The token spans the warm-up prefills, one after another in one cache, from the document's start.

    On a GPU, one of each kind of segment the timing passes prefill, so that Triton meets every
    specialisation there first (it compiles per value of its constexprs, e.g. HAS_INITIAL, and per int
    argument divisible by 16 or equal to 1, e.g. a length or a chunk count; it autotunes per tuning key):
    the first segment (no carried state), a full segment carried from it (three or more segments), and a
    piece of the last segment's length carried (two or more). At most three segments of prefill, paid
    once; the analysis pass meets these shapes too, but through another call (the recording core, CUDA
    graphs), so it does not stand in for the warm-up. On the CPU nothing compiles and first use is what is
    paid: the first CPU_WARM_UP_TOKENS tokens, the last quarter carried (an idle 2-core CPU, 5.6K tokens:
    layer times then within 80-107 ms)."""
    first_end = segments[0][1]
    if device.type != "cuda":
        end = min(first_end, CPU_WARM_UP_TOKENS)
        return [(0, end)] if len(segments) == 1 else [(0, end - end // 4), (end - end // 4, end)]
    pieces = list(segments[:2])
    last = segments[-1][1] - segments[-1][0]
    if len(segments) >= 3 and last != segments[1][1] - segments[1][0]:   # a last segment as long as a full one: met
        pieces.append((segments[2][0], segments[2][0] + last))
    return pieces


def _warm_up(model, input_ids, pieces: list, run: _Prefill, tracker, timer: Timer) -> dict:
    """Compile/autotune the kernels once (Triton, FLA) and touch everything once, so that no timed call
    is a first call: each path's plain core, as `_timed_prefill` calls it (deferred checks; the stage clock
    where the timed prefills carry it), over `pieces` (`_warm_up_pieces`) with the state carried,
    `_warm_up_rounds` times. Returns the tokens, the pieces, the rounds and the wall time of each path's
    warm-up (ms)."""
    from transformers import DynamicCache

    tokens = pieces[-1][1]
    rounds = _warm_up_rounds(run)
    times = {"tokens": tokens, "pieces": [list(piece) for piece in pieces], "rounds": rounds}
    label = f"warming up on the first {tokens:,} tokens (compiling, first use; not timed)"
    clocked = not _stages_apart(run)
    with torch.inference_mode():
        for path in _paths(run.config):
            checks = DeferredChecks()
            core = _plain_core(run, path, checks, StageClock(timer.cuda) if path == "sparse" and clocked else None)
            started = time.perf_counter()
            with swap_gdn_core(model, core):
                for round_ in range(rounds):
                    cache = DynamicCache(config=model.config)
                    for index, (start, end) in enumerate(pieces):
                        tracker.begin("warmup", f"{label}: the {path} path", index, end - start)
                        model.model(input_ids=input_ids[:, start:end], past_key_values=cache, use_cache=True,
                                    **segment_inputs(model.config, start, end, input_ids.device))
            _check_values(checks)
            timer.resolve()     # every GPU of the model
            times[f"{path}_ms"] = (time.perf_counter() - started) * 1e3
    return times


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


def _timings(run: _Prefill) -> pl.DataFrame:
    """Every timed repeat: whole prefills, each layer's core, the sparse core's stages (see records.py)."""
    rows = []
    for timed in run.timed:
        base = {"repeat": timed.repeat, "path": timed.path, "first_calls": len(timed.first_calls)}
        if timed.staged:        # a GPU's stage-time prefill: its stages only (its prefill is not a timed repeat)
            rows += [{**base, "scope": "stage", "layer": None, "stage": name, "ms": ms}
                     for name, ms in timed.stages.totals_ms().items()]
            continue
        rows.append({**base, "scope": "prefill", "layer": None, "stage": None, "ms": sum(i.ms for i in timed.whole)})
        rows += [{**base, "scope": "core", "layer": layer, "stage": None, "ms": sum(i.ms for i in intervals)}
                 for layer, intervals in sorted(timed.cores.items())]
        if timed.stages is not None:
            rows += [{**base, "scope": "stage", "layer": None, "stage": name, "ms": ms}
                     for name, ms in timed.stages.totals_ms().items()]
    return pl.DataFrame(rows, schema=SCHEMAS["timings"])


def _spread(timings: pl.DataFrame, path: str, scope: str) -> Optional[Spread]:
    """The spread over repeats of one path's whole prefill ("prefill") or GDN core summed over layers ("core")."""
    per_repeat = timings.filter((pl.col("path") == path) & (pl.col("scope") == scope)).group_by("repeat").agg(
        pl.col("ms").sum())
    return Spread.of(per_repeat["ms"].to_list())


def _layers(run: _Prefill, events: pl.DataFrame, timings: pl.DataFrame) -> pl.DataFrame:
    medians = (timings.filter(pl.col("scope") == "core").group_by("layer", "path").agg(pl.col("ms").median())
               .pivot(on="path", index="layer", values="ms"))
    # Each GDN layer's device, as its core calls saw it (a model spread over GPUs names the GPU).
    devices = {record["layer"]: record.get("device") for record in run.recorder.rows}
    layers = pl.DataFrame({"layer": run.loaded.gdn_layers,
                           "device": [devices.get(layer) for layer in run.loaded.gdn_layers]},
                          schema={"layer": pl.Int32, "device": pl.String}).join(medians, on="layer", how="left")
    for path in ("dense", "sparse"):
        column = layers[path].cast(pl.Float64) if path in layers.columns else pl.lit(None, pl.Float64)
        layers = layers.with_columns(column.alias(f"core_ms_{path}"))
    errors = events.group_by("layer").agg(pl.col("diff_sq").sum(), pl.col("ref_sq").sum())
    layers = layers.join(errors.with_columns(pl.col("layer").cast(pl.Int32)), on="layer", how="left")
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


def _tokens(run: _Prefill) -> pl.DataFrame:
    """Every token with its character span and each path's top-1 next token, as an id and as text."""
    columns = {"position": np.arange(run.n_tokens), "token": run.ids,
               "char_start": [span[0] for span in run.offsets], "char_end": [span[1] for span in run.offsets]}
    for path, slices in run.metrics.predicted.items():
        predicted = torch.cat(slices).tolist() if slices else [None] * run.n_tokens
        words = {token: run.loaded.tokenizer.decode([token]) for token in set(predicted) if token is not None}
        columns[f"predicted_{path}"] = predicted
        columns[f"predicted_{path}_text"] = [words.get(token) for token in predicted]
    return pl.DataFrame(columns, strict=False)


def _staged_summary(run: _Prefill) -> Optional[dict]:
    """The staged prefill's core time (ms, summed over layers and segments) and first-call work; None without one."""
    staged = [timed for timed in run.timed if timed.staged]
    if not staged:
        return None
    return {"core_ms": sum(i.ms for intervals in staged[0].cores.values() for i in intervals),
            "first_calls": group_first_calls(staged[0].first_calls)}


def _timing_summary(run: _Prefill, timings: pl.DataFrame) -> dict:
    """How the run was timed, the spread of each whole-prefill and core total over every repeat, the
    first-call work seen inside repeats and, for each path that had some, the spreads without those
    repeats (see records.py)."""
    paths = _paths(run.config)
    spreads = {f"{scope}_{path}": _spread(timings, path, scope) for path in paths for scope in ("prefill", "core")}
    first_calls = [{"repeat": timed.repeat, "path": timed.path, **row} for timed in run.timed if not timed.staged
                   for row in group_first_calls(timed.first_calls)]
    clean = {}
    for path in paths:
        excluded = sorted({row["repeat"] for row in first_calls if row["path"] == path})
        if excluded:
            kept = timings.filter(pl.col("first_calls") == 0)
            clean[path] = {"excluded": excluded, **{scope: _spread_dict(_spread(kept, path, scope))
                                                    for scope in ("prefill", "core")}}
    return {
        "repeats": run.config.repeats,
        "statistic": "median, with the range (min-max) of the repeats",
        "interleaved": True,
        "threads": torch.get_num_threads(),
        "warm_up": run.warm_up,
        # Where the stage times come from: a sparse prefill of their own after the timed ones (the Triton backend
        # on a GPU: a call with the stage hook takes no launch plan) or the timed prefills (anywhere else).
        "stages_apart": _stages_apart(run),
        # That prefill's own GDN core (summed over layers; it takes no launch plan) and any first-call work in it.
        "staged": _staged_summary(run),
        # Each timed sparse repeat's core calls and how many of them replayed a recorded launch plan.
        "planned_calls": [{"repeat": timed.repeat, "calls": sum(len(v) for v in timed.cores.values()),
                           "replayed": timed.replays} for timed in run.timed
                          if timed.path == "sparse" and not timed.staged],
        **{name: spread.to_dict() for name, spread in spreads.items() if spread is not None},
        # Triton compiles and autotune benchmarks inside timed repeats, per repeat, path, kind and kernel.
        "first_calls": first_calls,
        # Per path with such repeats: which were excluded, and the spreads over the others (null if none).
        "clean": clean,
    }


def _spread_dict(spread: Optional[Spread]) -> Optional[dict]:
    return spread.to_dict() if spread is not None else None


def _stage_medians(timings: pl.DataFrame) -> list[dict]:
    """[{stage, ms, share}]: each stage's median over the prefills that carried the stage clock (the timed
    repeats, or the one staged prefill where the stages are taken apart), summed over layers, segments and slabs."""
    stages = timings.filter(pl.col("scope") == "stage")
    order = list(dict.fromkeys(stages["stage"].to_list()))
    medians = dict(stages.group_by("stage").agg(pl.col("ms").median()).iter_rows())
    whole = sum(medians.values()) or 1.0
    return [{"stage": name, "ms": medians[name], "share": medians[name] / whole} for name in order]


def _summary(run: _Prefill, events: pl.DataFrame, timings: pl.DataFrame, nonfinite_errors: int) -> dict:
    compare_dense, device = run.config.compare_dense, run.device
    model_metrics = run.metrics.summary(compare_dense)
    nonfinite_metrics = [k for k, v in model_metrics.items() if v is not None and not math.isfinite(v)]
    timing = _timing_summary(run, timings)

    def median(name):
        return timing[name]["median"] if name in timing else None

    return {
        "model": run.loaded.name,
        "n_tokens": run.n_tokens,
        "n_chunks": run.n_chunks,
        "budget": run.sparse.budget,
        "selector": run.sparse.selector,
        "band": run.sparse.band,
        "backend": run.sparse.backend,
        "device": str(device),
        "device_name": _device_name(run.devices),
        "prefill_ms_dense": median("prefill_dense"),
        "prefill_ms_sparse": median("prefill_sparse"),
        **{k: _finite_or_none(v) for k, v in model_metrics.items()},
        "random_weights": run.loaded.random_weights,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": run.config.to_dict(),
        # Extras (documented in analysis/README.md).
        "document": run.document_name,
        "document_sha256": document_hash(run.text),
        "n_layers": run.loaded.n_layers,
        "gdn_layers": list(run.loaded.gdn_layers),
        "dense_backend": run.dense_backend,
        "dtype": run.loaded.dtype,
        "n_segments": len(run.segments),
        "events_selected": int(events["selected"].sum()),
        "events_total": events.height,
        "core_ms_dense_total": median("core_dense"),
        "core_ms_sparse_total": median("core_sparse"),
        "non_finite": nonfinite_errors + len(nonfinite_metrics),
        "timing": timing,
        # The sparse core's stages (sparsegdn.STAGES, the same names on every backend), summed over
        # layers, segments and slabs; the median over the timed repeats, or the staged prefill's sums.
        "stages": _stage_medians(timings),
        # Which layers sat on which device, the weights each held and (GPU) its peak memory in this run.
        "placement": {"device_map": run.loaded.device_map, "devices": placement.peak_memory(run.loaded.placement)},
    }


def _device_name(devices: list) -> str:
    """"NVIDIA H200", "2 x NVIDIA H200" for a model spread over two, or "CPU"."""
    gpus = [device for device in devices if device.type == "cuda"]
    if not gpus:
        return "CPU"
    names = list(dict.fromkeys(torch.cuda.get_device_name(gpu) for gpu in gpus))
    return names[0] if len(gpus) == 1 else f"{len(gpus)} x {' + '.join(names)}"


def _records(run: _Prefill) -> RunResult:
    events, nonfinite = _events(run)
    timings = _timings(run)
    layers = _layers(run, events, timings)
    return RunResult(events=events, heads=_heads(run, events), layers=layers, chunks=_chunks(run),
                     timings=timings, tokens=_tokens(run), summary=_summary(run, events, timings, nonfinite),
                     document=run.text)
