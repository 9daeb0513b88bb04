"""RULER-style accuracy and held-out perplexity of a Qwen3.5 model, dense versus SparseGDN.

Each configuration swaps the model's Gated DeltaNet core (analysis/patching.py) and runs the same
seeded samples (analysis/ruler.py) in one batched forward per (task, length). Work is ordered by
priority and stops at a time budget, so a short GPU call still yields the headline comparison
(dense and budget 0.29 / band 1 for score, uniform, random at 4K and 8K) before the rest of the grid.

    python -m analysis.ruler_eval --model data/default-model --device cuda --out analysis/results/ruler.json
    python -m analysis.ruler_eval --report analysis/results/ruler.json   # writes ruler.md and ruler.html
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from analysis import patching
from sparsegdn import SparseConfig
from analysis.ruler import LENGTHS, TASKS, RulerGenerator, RulerSample, span_hits

BUDGETS = (1.0, 0.5, 0.29, 0.15)
SELECTORS = ("score", "uniform", "random", "oracle")
BANDS = (1, 3)
HEADLINE = (0.29, 1)  # the budget and band of the targets


@dataclass(frozen=True)
class Config:
    """`dense` is the model as trained (transformers' own GDN core); otherwise SparseGDN's settings."""

    name: str
    budget: float | None = None
    selector: str | None = None
    band: int | None = None

    @staticmethod
    def sparse(budget: float, selector: str, band: int) -> "Config":
        return Config(f"sparse b={budget:g} {selector} band={band}", budget, selector, band)


DENSE = Config("dense")


def config_grid(budgets=BUDGETS, selectors=SELECTORS, bands=BANDS) -> list[Config]:
    """Every sparse configuration once; at budget 1 every event is kept, so only the band varies."""
    grid = []
    for band in bands:
        for budget in budgets:
            for selector in (("score",) if budget >= 1 else selectors):
                grid.append(Config.sparse(budget, selector, band))
    return grid


def headline_configs() -> list[Config]:
    budget, band = HEADLINE
    return [Config.sparse(budget, s, band) for s in ("score", "uniform", "random")]


def work_order(configs: list[Config], lengths: tuple[int, ...]) -> list[tuple[Config, int]]:
    """(config, length) pairs, most important first: dense everywhere, the headline at short lengths,
    the rest of the grid at short lengths, then the long lengths."""
    short = [n for n in lengths if n <= 8192]
    long = [n for n in lengths if n > 8192]
    head = [c for c in headline_configs() if c in configs]
    rest = [c for c in configs if c not in head]
    order = [(DENSE, n) for n in lengths]
    order += [(c, n) for n in short for c in head] + [(c, n) for n in short for c in rest]
    order += [(c, n) for n in long for c in head] + [(c, n) for n in long for c in rest]
    return order


def swapped(model, config: Config, backend: str):
    """A context in which the model runs with `config`'s GDN core."""
    if config.budget is None:
        return patching.swap_gdn_core(model, patching.original_core)
    return patching.swap_gdn_core(model, patching.sparse_core(
        SparseConfig(budget=config.budget, selector=config.selector, band=config.band, backend=backend)))


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


def heldout_windows(heldout: dict[str, np.ndarray], length: int, count: int, seed: int = 0) -> dict[str, np.ndarray]:
    """`count` non-overlapping windows of `length` tokens per held-out source, seeded."""
    rng = np.random.default_rng(seed)
    out = {}
    for source, tokens in heldout.items():
        n = len(tokens) // length
        picks = np.sort(rng.choice(n, size=min(count, n), replace=False))
        out[source] = np.stack([tokens[i * length:(i + 1) * length] for i in picks]).astype(np.int64)
    return out


def evaluate(model, generator: RulerGenerator, heldout: dict[str, np.ndarray], *, device,
             tasks=TASKS, lengths=LENGTHS, samples: dict[int, int] | int = 8, configs: list[Config] | None = None,
             ppl_length: int = 8192, ppl_windows: int = 8, time_budget_s: float = 120.0,
             backend: str = "torch", seed: int = 0, log=print, on_progress=None) -> list[dict]:
    """Records (dicts) of RULER accuracy and perplexity; stops starting new work past the time budget.

    `on_progress(records)` is called after every (config, length), so a crash keeps what was measured.
    """
    start = time.perf_counter()
    configs = config_grid() if configs is None else configs
    per_length = samples if isinstance(samples, dict) else {n: samples for n in lengths}
    cache: dict[tuple[str, int], list[RulerSample]] = {}
    windows = {k: torch.as_tensor(v, device=device)
               for k, v in heldout_windows(heldout, ppl_length, ppl_windows, seed).items()}
    records: list[dict] = []
    done_ppl: set[Config] = set()
    model.eval()

    def perplexity(config: Config) -> None:
        with swapped(model, config, backend):
            for source, w in windows.items():
                nll = mean_nll(model, w, batch=max(1, 65536 // ppl_length))
                records.append({"kind": "perplexity", "source": source, "length": ppl_length,
                                "windows": len(w), **_config_fields(config), "nll": nll, "perplexity": math.exp(nll)})
        done_ppl.add(config)

    for config, length in work_order(configs, tuple(lengths)):
        elapsed = time.perf_counter() - start
        if elapsed > time_budget_s:
            log(f"[ruler] time budget reached at {elapsed:.0f}s; stopping before {config.name} @ {length}")
            break
        if config not in done_ppl and length == min(lengths):
            perplexity(config)
        t0 = time.perf_counter()
        accs = []
        for task in tasks:
            key = (task, length)
            if key not in cache:
                cache[key] = [generator.sample(task, length, seed + i) for i in range(per_length[length])]
            with swapped(model, config, backend):
                scores = score_batch(model, cache[key], device)
            accs.append(float(np.mean(scores)))
            records.append({"kind": "ruler", "task": task, "length": length, **_config_fields(config),
                            "samples": len(scores), "accuracy": float(np.mean(scores)), "sample_scores": scores})
        log(f"[ruler] {config.name:34s} {length:6d}  mean acc {np.mean(accs):.3f}  "
            + " ".join(f"{a:.2f}" for a in accs) + f"  ({time.perf_counter() - t0:.1f}s)")
        if on_progress is not None:
            on_progress(records)
    return records


def _config_fields(config: Config) -> dict:
    return {"config": config.name, "budget": config.budget, "selector": config.selector, "band": config.band}


# ---------------------------------------------------------------------------------- report

RESULTS = Path(__file__).resolve().parent / "results" / "ruler.json"


def records_frame(path: Path = RESULTS):
    """The committed results as one tidy polars table (one row per measurement; for the app).

    Columns: kind ('ruler' | 'perplexity'), config, budget, selector, band, length, task,
    samples, accuracy (ruler rows), source, windows, nll, perplexity (perplexity rows).
    """
    import polars as pl

    records = json.loads(Path(path).read_text())["records"]
    schema = {"kind": pl.Utf8, "config": pl.Utf8, "budget": pl.Float64, "selector": pl.Utf8, "band": pl.Int64,
              "length": pl.Int64, "task": pl.Utf8, "samples": pl.Int64, "accuracy": pl.Float64,
              "source": pl.Utf8, "windows": pl.Int64, "nll": pl.Float64, "perplexity": pl.Float64}
    rows = [{name: r.get(name) for name in schema} for r in records]
    return pl.DataFrame(rows, schema=schema)


def summary_rows(records: list[dict]) -> list[dict]:
    """One row per (config, length): mean accuracy over tasks, per task, and perplexity per source."""
    rows: dict[tuple[str, int], dict] = {}
    ppl = {}
    for r in records:
        if r["kind"] == "perplexity":
            ppl.setdefault(r["config"], {})[r["source"]] = r["perplexity"]
    for r in records:
        if r["kind"] != "ruler":
            continue
        row = rows.setdefault((r["config"], r["length"]), {
            "config": r["config"], "budget": r["budget"], "selector": r["selector"], "band": r["band"],
            "length": r["length"], "tasks": {}})
        row["tasks"][r["task"]] = r["accuracy"]
    out = []
    for row in rows.values():
        row["mean_accuracy"] = float(np.mean(list(row["tasks"].values())))
        row["perplexity"] = ppl.get(row["config"], {})
        out.append(row)
    return out


def markdown(results: dict, only: set[str] | None = None) -> str:
    """The results table; `only` keeps just those config names (e.g. the headline for a log)."""
    records = results["records"]
    rows = [r for r in summary_rows(records) if only is None or r["config"] in only]
    tasks = [t for t in TASKS if any(t in r["tasks"] for r in rows)]
    sources = sorted({r["source"] for r in records if r["kind"] == "perplexity"})
    lines = [f"# RULER-style evaluation of SparseGDN on the default model", "",
             f"Model: {results.get('model', '?')}. Device: {results.get('device', '?')}. "
             f"Date: {results.get('date', '?')}. Command: `{results.get('command', '?')}`.", "",
             "Accuracy: fraction of answer spans whose every token is the model's argmax given the text before it "
             "(teacher forcing; for one answer this is greedy decoding). Samples per cell: "
             f"{results.get('samples', '?')}. Haystacks: held-out text. Perplexity: held-out windows of "
             f"{results.get('ppl_length', '?')} tokens.", ""]
    dense = {r["length"]: r for r in rows if r["config"] == DENSE.name}
    lines += ["| config | length | mean acc | vs dense | " + " | ".join(tasks) + " | "
              + " | ".join(f"ppl {s}" for s in sources) + " |",
              "|---|---|---|---|" + "---|" * (len(tasks) + len(sources))]
    for row in sorted(rows, key=lambda r: (r["length"], r["config"] != DENSE.name, r["band"] or 0,
                                           -(r["budget"] or 2), r["selector"] or "")):
        base = dense.get(row["length"])
        ratio = row["mean_accuracy"] / base["mean_accuracy"] if base and base["mean_accuracy"] > 0 else float("nan")
        lines.append(f"| {row['config']} | {row['length']} | {row['mean_accuracy']:.3f} | {ratio:.3f} | "
                     + " | ".join(f"{row['tasks'].get(t, float('nan')):.2f}" for t in tasks) + " | "
                     + " | ".join(f"{row['perplexity'].get(s, float('nan')):.2f}" for s in sources) + " |")
    return "\n".join(lines) + "\n"


def figure_html(results: dict) -> str:
    """Top: RULER accuracy against budget per length (each selector, bands 1 and 3; dashed: dense).
    Bottom: held-out perplexity relative to dense against budget, per source. A standalone plotly page."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = summary_rows(results["records"])
    ppl = [r for r in results["records"] if r["kind"] == "perplexity"]
    lengths = sorted({r["length"] for r in rows})
    sources = sorted({r["source"] for r in ppl})
    cols = max(len(lengths), len(sources), 1)
    titles = [f"accuracy, {n // 1024}K tokens" for n in lengths] + [""] * (cols - len(lengths))
    titles += [f"perplexity / dense, {s}" for s in sources] + [""] * (cols - len(sources))
    fig = make_subplots(rows=2, cols=cols, subplot_titles=titles, vertical_spacing=0.18)
    colors = {"score": "#1f77b4", "uniform": "#ff7f0e", "random": "#2ca02c", "oracle": "#9467bd"}

    def curves(points, x, y, row, col, show):
        for band, dash in ((1, "solid"), (3, "dot")):
            full = [p for p in points if p["band"] == band and (p["budget"] or 0) >= 1]
            for selector, color in colors.items():
                pts = sorted([p for p in points if p["band"] == band and p["selector"] == selector
                              and (p["budget"] or 0) < 1] + full, key=lambda p: p["budget"])
                if len(pts) < 1:
                    continue
                fig.add_trace(go.Scatter(x=[p["budget"] for p in pts], y=[y(p) for p in pts],
                                         mode="lines+markers", line=dict(color=color, dash=dash),
                                         name=f"{selector}, band {band}", legendgroup=f"{selector}{band}",
                                         showlegend=show), row=row, col=col)

    for col, length in enumerate(lengths, start=1):
        at = [r for r in rows if r["length"] == length]
        curves(at, "budget", lambda r: r["mean_accuracy"], 1, col, col == 1)
        dense = [r for r in at if r["config"] == DENSE.name]
        if dense:
            fig.add_hline(y=dense[0]["mean_accuracy"], line=dict(color="black", dash="dash"), row=1, col=col)
        fig.update_yaxes(range=[0, 1.02], row=1, col=col)
    for col, source in enumerate(sources, start=1):
        at = [r for r in ppl if r["source"] == source]
        dense = next((r["perplexity"] for r in at if r["config"] == DENSE.name), None)
        if dense:
            curves(at, "budget", lambda r, d=dense: r["perplexity"] / d, 2, col, False)
            fig.add_hline(y=1.0, line=dict(color="black", dash="dash"), row=2, col=col)
    fig.update_xaxes(title_text="budget (fraction of events kept)", type="log")
    fig.update_layout(title="SparseGDN on the default model: RULER-style accuracy and held-out perplexity",
                      height=760, width=300 * cols + 220)
    return fig.to_html(include_plotlyjs="cdn", full_html=True)


def write_report(json_path: Path) -> None:
    results = json.loads(json_path.read_text())
    json_path.with_suffix(".md").write_text(markdown(results))
    json_path.with_suffix(".html").write_text(figure_html(results))


# ---------------------------------------------------------------------------------- CLI

def load_default(model_dir: Path, device: str):
    from transformers import PreTrainedTokenizerFast, Qwen3_5ForCausalLM

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    model = Qwen3_5ForCausalLM.from_pretrained(str(model_dir), dtype=dtype).to(device).eval()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(model_dir / "tokenizer.json"))
    return model, tokenizer


def checkpoint_digest(path: Path) -> str:
    """sha256 of a checkpoint file: ties an evaluation to the weights it measured."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run(model, tokenizer, *, device, heldout_path: Path, out: Path, command: str, model_name: str,
        lengths=LENGTHS, samples=None, time_budget_s=120.0, backend="torch", log=print,
        checkpoint: Path | None = None, **kwargs) -> dict:
    """Evaluate and write the JSON results file (also used by training/train.py after training).

    `checkpoint`: the safetensors file of the weights evaluated; its sha256 goes into the results, so the
    model card can refuse to pair these numbers with other weights.
    """
    heldout = dict(np.load(heldout_path))
    generator = RulerGenerator(tokenizer, heldout["milton"])
    samples = samples or {n: (16 if n <= 8192 else 8) for n in lengths}
    results = {"model": model_name, "device": torch.cuda.get_device_name() if str(device).startswith("cuda") else "cpu",
               "date": time.strftime("%Y-%m-%d"), "command": command, "samples": {str(k): v for k, v in samples.items()},
               "ppl_length": kwargs.get("ppl_length", 8192), "haystack": "milton (held out)", "backend": backend,
               "records": []}
    if checkpoint is not None:
        results["checkpoint_sha256"] = checkpoint_digest(checkpoint)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(records):
        results["records"] = records
        out.write_text(json.dumps(results, indent=1) + "\n")

    save(evaluate(model, generator, heldout, device=device, lengths=lengths, samples=samples,
                  time_budget_s=time_budget_s, backend=backend, log=log, on_progress=save, **kwargs))
    return results


def main(argv=None) -> None:
    import sys

    parser = argparse.ArgumentParser(description="RULER-style evaluation of SparseGDN")
    parser.add_argument("--model", type=Path, default=Path("data/default-model"))
    parser.add_argument("--heldout", type=Path, default=Path("data/corpus/heldout.npz"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=Path("analysis/results/ruler.json"))
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--samples", type=int, default=None, help="samples per (task, length)")
    parser.add_argument("--time-budget", type=float, default=600.0)
    parser.add_argument("--ppl-length", type=int, default=8192)
    parser.add_argument("--ppl-windows", type=int, default=8)
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--report", type=Path, default=None, help="only render an existing JSON to .md and .html")
    args = parser.parse_args(argv)
    if args.report:
        write_report(args.report)
        return
    model, tokenizer = load_default(args.model, args.device)
    run(model, tokenizer, device=args.device, heldout_path=args.heldout, out=args.out,
        command="python -m analysis.ruler_eval " + " ".join(sys.argv[1:] if argv is None else argv),
        model_name=str(args.model), lengths=tuple(args.lengths),
        samples={n: args.samples for n in args.lengths} if args.samples else None,
        time_budget_s=args.time_budget, backend=args.backend, ppl_length=args.ppl_length,
        ppl_windows=args.ppl_windows, checkpoint=args.model / "model.safetensors")
    write_report(args.out)


if __name__ == "__main__":
    main()
