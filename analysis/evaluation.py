"""RULER-style accuracy and held-out perplexity of a Qwen3.5 model, dense versus SparseGDN.

Each setting swaps the model's Gated DeltaNet core (analysis/patching.py) and runs the same seeded
samples (analysis/ruler.py) in one batched forward per (task, length). Work is ordered by priority
and stops at a time budget, so a short GPU run still yields the headline comparison (dense, and the
default budget and band for score, uniform and random at the short lengths) before the rest of the
grid. The records are plain dicts (one per measurement); analysis/ruler_report.py renders them and
analysis/ruler_eval.py is the command line.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from sparsegdn import SELECTORS, SparseConfig

from . import patching
from .ruler import LENGTHS, TASKS, RulerGenerator, RulerSample, span_hits

BUDGETS = (1.0, 0.5, 0.29, 0.15)
GRID_SELECTORS = tuple(s for s in SELECTORS if s != "all")    # "all" is budget 1, which the grid has
GRID_BANDS = (1, 3)
HEADLINE_SELECTORS = ("score", "uniform", "random")          # at SparseConfig's default budget and band
SHORT = 8192                                                 # lengths up to this come first


@dataclass(frozen=True)
class Setting:
    """One evaluated GDN core: `sparse` None is the model as trained (transformers' own core)."""

    sparse: SparseConfig | None = None

    @property
    def name(self) -> str:
        if self.sparse is None:
            return "dense"
        return f"sparse b={self.sparse.budget:g} {self.sparse.selector} band={self.sparse.band}"

    def fields(self) -> dict:
        """The setting's columns of a record."""
        if self.sparse is None:
            return {"config": self.name, "budget": None, "selector": None, "band": None}
        return {"config": self.name, "budget": self.sparse.budget, "selector": self.sparse.selector,
                "band": self.sparse.band}


DENSE = Setting()


def setting_grid(backend: str = "torch", budgets=BUDGETS, selectors=GRID_SELECTORS, bands=GRID_BANDS) -> list[Setting]:
    """Every sparse setting once; at budget 1 every event is kept, so only the band varies."""
    return [Setting(SparseConfig(budget=budget, selector=selector, band=band, backend=backend))
            for band in bands for budget in budgets for selector in (("score",) if budget >= 1 else selectors)]


def headline_settings(backend: str = "torch") -> list[Setting]:
    """The selectors compared at SparseConfig's default budget and band."""
    return [Setting(SparseConfig(selector=selector, backend=backend)) for selector in HEADLINE_SELECTORS]


def work_order(settings: list[Setting], lengths: tuple[int, ...]) -> list[tuple[Setting, int]]:
    """(setting, length) pairs, most important first: dense everywhere, the headline at short lengths,
    the rest of the grid at short lengths, then the long lengths."""
    short = [n for n in lengths if n <= SHORT]
    long = [n for n in lengths if n > SHORT]
    headline_names = {s.name for s in headline_settings()}
    head = [s for s in settings if s.name in headline_names]
    rest = [s for s in settings if s not in head]
    order = [(DENSE, n) for n in lengths]
    order += [(s, n) for n in short for s in head] + [(s, n) for n in short for s in rest]
    order += [(s, n) for n in long for s in head] + [(s, n) for n in long for s in rest]
    return order


def swapped(model, setting: Setting):
    """A context in which the model runs with `setting`'s GDN core."""
    core = patching.original_core if setting.sparse is None else patching.sparse_core(setting.sparse)
    return patching.swap_gdn_core(model, core)


@torch.no_grad()
def argmax_at(model, input_ids: torch.Tensor, positions: list[list[int]]) -> list[np.ndarray]:
    """The model's argmax next token at the given positions of each row (logits only where needed)."""
    hidden = model.model(input_ids=input_ids, use_cache=False).last_hidden_state
    out = []
    for row, pos in enumerate(positions):
        logits = model.lm_head(hidden[row, torch.as_tensor(pos, device=hidden.device)])
        out.append(logits.argmax(-1).cpu().numpy())
    return out


def score_batch(model, samples: list[RulerSample], device) -> list[float]:
    """Per sample: the fraction of its answer spans predicted exactly (teacher forcing)."""
    ids = torch.as_tensor(np.stack([s.input_ids for s in samples]), device=device)
    positions = [[t for a, b in s.answer_spans for t in range(a - 1, b - 1)] for s in samples]
    scores = []
    for sample, pos, guess in zip(samples, positions, argmax_at(model, ids, positions)):
        predicted = np.full(sample.length, -1, dtype=np.int64)
        predicted[pos] = guess
        scores.append(float(np.mean(span_hits(sample, predicted))))
    return scores


@torch.no_grad()
def mean_nll(model, windows: torch.Tensor, batch: int) -> float:
    """Mean next-token negative log-likelihood (nats) over all positions of the windows."""
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        ids = windows[i:i + batch]
        hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state
        logits = model.lm_head(hidden[:, :-1]).float()
        total += torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), reduction="sum").item()
        count += ids[:, 1:].numel()
    return total / count


def heldout_picks(heldout: dict[str, np.ndarray], length: int, count: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Which windows `heldout_windows` takes: per source, the sorted indices of `count` of its
    non-overlapping windows of `length` tokens (window i covers tokens i * length .. (i + 1) * length)."""
    rng = np.random.default_rng(seed)
    picks = {}
    for source, tokens in heldout.items():
        n = len(tokens) // length
        picks[source] = np.sort(rng.choice(n, size=min(count, n), replace=False))
    return picks


def heldout_windows(heldout: dict[str, np.ndarray], length: int, count: int, seed: int = 0) -> dict[str, np.ndarray]:
    """`count` non-overlapping windows of `length` tokens per held-out source, seeded."""
    return {source: np.stack([heldout[source][i * length:(i + 1) * length] for i in picks]).astype(np.int64)
            for source, picks in heldout_picks(heldout, length, count, seed).items()}


def wilson_interval(accuracy: float, samples: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of an accuracy measured on `samples` samples.

    A sample's score is the fraction of its answer spans retrieved (0 or 1 for one answer). Scores in
    [0, 1] with mean p vary at most as much as 0/1 outcomes with mean p, so the interval for p successes
    in `samples` trials is valid (conservative where samples have several answers).
    """
    if samples <= 0:
        return 0.0, 1.0
    centre = accuracy + z * z / (2 * samples)
    spread = z * math.sqrt(accuracy * (1 - accuracy) / samples + z * z / (4 * samples * samples))
    scale = 1 + z * z / samples
    return max(0.0, (centre - spread) / scale), min(1.0, (centre + spread) / scale)


def _quiet(message: str) -> None:
    """The default log: a library does not print; the command line passes `print`."""


@dataclass(frozen=True)
class Plan:
    """What one evaluation measures. `samples` per (task, length): one count, or a count per length."""

    settings: list[Setting] = field(default_factory=setting_grid)
    tasks: tuple[str, ...] = TASKS
    lengths: tuple[int, ...] = LENGTHS
    samples: dict[int, int] | int = 8
    ppl_length: int = 8192
    ppl_windows: int = 8
    time_budget_s: float = 120.0
    seed: int = 0

    def samples_at(self, length: int) -> int:
        return self.samples if isinstance(self.samples, int) else self.samples[length]


def evaluate(model, generator: RulerGenerator, heldout: dict[str, np.ndarray], plan: Plan, *, device,
             log: Callable[[str], None] = _quiet, on_progress=None) -> list[dict]:
    """Records of RULER accuracy and perplexity; starts no new work past the plan's time budget.

    A ruler record's `seconds` is the wall time of its batched forward (sample generation not counted).

    `on_progress(records)` is called after every (setting, length), so a crash keeps what was measured.
    """
    start = time.perf_counter()
    cache: dict[tuple[str, int], list[RulerSample]] = {}
    windows = {source: torch.as_tensor(w, device=device)
               for source, w in heldout_windows(heldout, plan.ppl_length, plan.ppl_windows, plan.seed).items()}
    records: list[dict] = []
    done_ppl: set[Setting] = set()
    model.eval()

    def perplexity(setting: Setting) -> None:
        with swapped(model, setting):
            for source, w in windows.items():
                nll = mean_nll(model, w, batch=max(1, 65536 // plan.ppl_length))
                records.append({"kind": "perplexity", "source": source, "length": plan.ppl_length,
                                "windows": len(w), **setting.fields(), "nll": nll, "perplexity": math.exp(nll)})
        done_ppl.add(setting)

    for setting, length in work_order(plan.settings, tuple(plan.lengths)):
        elapsed = time.perf_counter() - start
        if elapsed > plan.time_budget_s:
            log(f"[ruler] time budget reached at {elapsed:.0f}s; stopping before {setting.name} @ {length}")
            break
        if setting not in done_ppl and length == min(plan.lengths):
            perplexity(setting)
        t0 = time.perf_counter()
        accuracies = []
        for task in plan.tasks:
            key = (task, length)
            if key not in cache:
                cache[key] = [generator.sample(task, length, plan.seed + i) for i in range(plan.samples_at(length))]
            t_task = time.perf_counter()
            with swapped(model, setting):
                scores = score_batch(model, cache[key], device)
            seconds = time.perf_counter() - t_task
            accuracies.append(float(np.mean(scores)))
            low, high = wilson_interval(float(np.mean(scores)), len(scores))
            records.append({"kind": "ruler", "task": task, "length": length, **setting.fields(),
                            "samples": len(scores), "accuracy": float(np.mean(scores)), "ci_low": low, "ci_high": high,
                            "sample_scores": scores, "seconds": seconds})
        log(f"[ruler] {setting.name:34s} {length:6d}  mean acc {np.mean(accuracies):.3f}  "
            + " ".join(f"{a:.2f}" for a in accuracies) + f"  ({time.perf_counter() - t0:.1f}s)")
        if on_progress is not None:
            on_progress(records)
    return records


def checkpoint_digest(path: Path) -> str:
    """sha256 of a checkpoint file: ties an evaluation to the weights it measured."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def evaluate_to_file(model, tokenizer, plan: Plan, *, device, heldout_path: Path, out: Path, command: str,
                     model_name: str, checkpoint: Path | None = None, log: Callable[[str], None] = _quiet) -> dict:
    """Evaluate on the held-out split and write the results JSON to `out` (rewritten as records come in).

    `checkpoint`: the safetensors file of the weights evaluated; its sha256 goes into the results, so
    the model card can refuse to pair these numbers with other weights.
    """
    heldout = dict(np.load(heldout_path))
    generator = RulerGenerator(tokenizer, heldout["milton"])
    backends = sorted({s.sparse.backend for s in plan.settings if s.sparse is not None})
    results = {"model": model_name,
               "device": torch.cuda.get_device_name() if str(device).startswith("cuda") else "cpu",
               "date": time.strftime("%Y-%m-%d"), "command": command,
               "cpu_cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
               "samples": {str(n): plan.samples_at(n) for n in plan.lengths}, "seed": plan.seed,
               "ppl_length": plan.ppl_length,
               "haystack": "milton (held out)", "backend": ", ".join(backends), "records": []}
    if checkpoint is not None:
        results["checkpoint_sha256"] = checkpoint_digest(checkpoint)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(records):
        results["records"] = records
        out.write_text(json.dumps(results, indent=1) + "\n")

    save(evaluate(model, generator, heldout, plan, device=device, log=log, on_progress=save))
    return results
