"""How much a sparse setting's held-out perplexity change depends on which windows are measured.

    python -m analysis.perplexity_spread --model data/default-model --device cpu \
        --out analysis/results/perplexity_spread.json        # every window of every source; writes .md too
    python -m analysis.perplexity_spread --render analysis/results/perplexity_spread.json

The evaluation (analysis/evaluation.py) measures perplexity on a few seeded windows per held-out source
(8 of 8,192 tokens) and reports one change, sparse against dense. Here every non-overlapping window of
each source is measured dense and sparse, one window at a time, and the change is reported with a 95%
bootstrap interval over windows (windows resampled with replacement, dense and sparse of a window kept
together), beside the change on the evaluation's own window sample, so that a target such as "within 3%
of dense" can be read against the spread a window sample brings.

A source's change is exp(mean sparse NLL - mean dense NLL) - 1 over its windows (all windows have the same
length, so this is the perplexity ratio of all their tokens together).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from sparsegdn import SPARSE_BACKENDS, SparseConfig

from .evaluation import DENSE, Setting, checkpoint_digest, heldout_picks, mean_nll, swapped
from .ruler_eval import DEFAULT_HELDOUT, load_checkpoint
from .timing import use_threads

RESAMPLES = 4000
LEVEL = 0.95
REFERENCE_WINDOWS = (8, 4)     # the evaluation's sample (ruler_eval's --ppl-windows) and the fine-tune's check


def change(nll_dense: np.ndarray, nll_sparse: np.ndarray) -> float:
    """The perplexity change, sparse against dense, over equally long windows (a fraction: 0.03 is +3%)."""
    return math.expm1(float(np.mean(nll_sparse) - np.mean(nll_dense)))


def bootstrap_interval(nll_dense: np.ndarray, nll_sparse: np.ndarray, *, resamples: int = RESAMPLES,
                       level: float = LEVEL, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of `change` over windows resampled with replacement (pairs kept together)."""
    difference = np.asarray(nll_sparse, dtype=np.float64) - np.asarray(nll_dense, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = difference[rng.integers(0, len(difference), size=(resamples, len(difference)))].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return math.expm1(float(low)), math.expm1(float(high))


def window_nlls(model, tokens: np.ndarray, length: int, setting: Setting, device, log=print) -> np.ndarray:
    """Mean next-token NLL of every non-overlapping window of `length` tokens of one source, in order."""
    n = len(tokens) // length
    out = np.empty(n)
    with swapped(model, setting):
        for i in range(n):
            window = torch.as_tensor(tokens[i * length:(i + 1) * length][None].astype(np.int64), device=device)
            out[i] = mean_nll(model, window, batch=1)
            if (i + 1) % 10 == 0 or i + 1 == n:
                log(f"[spread] {setting.name}: {i + 1}/{n} windows")
    return out


def summarize(source: str, nll_dense: np.ndarray, nll_sparse: np.ndarray, picks: dict[int, np.ndarray]) -> dict:
    """One source's figures: the change over all windows with its interval, per-window changes, and the change
    on each reference sample of windows (`picks`: count -> window indices)."""
    low, high = bootstrap_interval(nll_dense, nll_sparse)
    per_window = np.expm1(np.asarray(nll_sparse) - np.asarray(nll_dense))
    return {"source": source, "windows": len(nll_dense), "change": change(nll_dense, nll_sparse),
            "interval": [low, high], "level": LEVEL, "resamples": RESAMPLES,
            "per_window_change_min": float(per_window.min()), "per_window_change_max": float(per_window.max()),
            "perplexity_dense": math.exp(float(np.mean(nll_dense))),
            "perplexity_sparse": math.exp(float(np.mean(nll_sparse))),
            "samples": {str(count): {"windows": [int(i) for i in chosen],
                                     "change": change(nll_dense[chosen], nll_sparse[chosen])}
                        for count, chosen in picks.items()},
            "nll_dense": [float(x) for x in nll_dense], "nll_sparse": [float(x) for x in nll_sparse]}


def render(report: dict) -> str:
    """The report as Markdown."""
    meta = report["meta"]
    lines = [f"# Held-out perplexity change and its spread over windows: {meta['setting']}", "",
             f"Model: {meta['model']} (model.safetensors sha256 {meta['checkpoint_sha256'][:12]}). Device: "
             f"{meta['device']}. Date: {meta['date']}. Command: `{meta['command']}`.", "",
             f"Every non-overlapping window of {meta['length']:,} tokens of each held-out source, dense and sparse. "
             f"Change: sparse perplexity over dense, minus 1, over the windows' tokens together. Interval: "
             f"{LEVEL:.0%} bootstrap over windows ({RESAMPLES} resamples). The evaluation's sample is "
             "the seeded windows `analysis.evaluation` measures (seed 0).", "",
             "| source | windows | dense ppl | sparse ppl | change | interval | one window: min / max | "
             + " | ".join(f"change on the {count}-window sample" for count in REFERENCE_WINDOWS) + " |",
             "|---|---|---|---|---|---|---|" + "---|" * len(REFERENCE_WINDOWS)]
    for row in report["sources"]:
        low, high = row["interval"]
        lines.append(f"| {row['source']} | {row['windows']} | {row['perplexity_dense']:.2f} | "
                     f"{row['perplexity_sparse']:.2f} | {row['change']:+.2%} | {low:+.2%} to {high:+.2%} | "
                     f"{row['per_window_change_min']:+.2%} / {row['per_window_change_max']:+.2%} | "
                     + " | ".join(f"{row['samples'][str(count)]['change']:+.2%}" for count in REFERENCE_WINDOWS)
                     + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("data/default-model"))
    parser.add_argument("--heldout", type=Path, default=DEFAULT_HELDOUT)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--length", type=int, default=8192, help="tokens a window (the evaluation's 8,192)")
    parser.add_argument("--budget", type=float, default=SparseConfig().budget)
    parser.add_argument("--selector", default=SparseConfig().selector)
    parser.add_argument("--band", type=int, default=SparseConfig().band)
    parser.add_argument("--backend", default="torch", choices=SPARSE_BACKENDS)
    parser.add_argument("--out", type=Path, default=Path("analysis/results/perplexity_spread.json"))
    parser.add_argument("--render", type=Path, default=None, help="only write the .md of an existing JSON")
    args = parser.parse_args(argv)
    if args.render:
        args.render.with_suffix(".md").write_text(render(json.loads(args.render.read_text())))
        return
    if not args.heldout.is_file():
        parser.error(f"{args.heldout} is missing: build the corpus first (python training/build_corpus.py)")
    try:
        sparse = Setting(SparseConfig(budget=args.budget, selector=args.selector, band=args.band, backend=args.backend))
    except ValueError as error:
        parser.error(str(error))
    if not str(args.device).startswith("cuda"):
        use_threads()
    model, _ = load_checkpoint(args.model, args.device)
    heldout = dict(np.load(args.heldout))
    references = {count: heldout_picks(heldout, args.length, count) for count in REFERENCE_WINDOWS}
    started = time.perf_counter()
    sources = []
    for source, tokens in heldout.items():
        dense = window_nlls(model, tokens, args.length, DENSE, args.device)
        sparse_nll = window_nlls(model, tokens, args.length, sparse, args.device)
        sources.append(summarize(source, dense, sparse_nll, {count: picks[source] for count, picks in references.items()}))
    meta = {"model": str(args.model), "checkpoint_sha256": checkpoint_digest(args.model / "model.safetensors"),
            "device": torch.cuda.get_device_name(args.device) if str(args.device).startswith("cuda") else "cpu",
            "date": datetime.date.today().isoformat(), "setting": sparse.name, "backend": args.backend,
            "length": args.length, "seconds": round(time.perf_counter() - started, 1),
            "command": "python -m analysis.perplexity_spread " + " ".join(sys.argv[1:] if argv is None else argv)}
    report = {"meta": meta, "sources": sources}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(render(report))
    print(render(report))


if __name__ == "__main__":
    main()
