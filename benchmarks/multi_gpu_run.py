"""A model larger than one GPU, spread over several by transformers/accelerate, analysed on a long
document: the app's own pipeline (analysis.pipeline.analyze) with the SparseGDN core on every GDN
layer, wherever it lives, and the dense comparison.

    python benchmarks/multi_gpu_run.py --out runs/multi-gpu            # 2 GPUs, the 122B-A10B shape, 32K tokens

Defaults: `qwen3.5-122b-a10b-shape` (random weights, 227 GiB in bf16: more than one H200),
`--device-map balanced` over every visible GPU, a 32,768-token document (the bundled samples, one
after another, repeated and cut), prefilled in segments of 8,192 tokens, budget 0.29, `score`, band 1,
3 timed repeats of each path after the untimed warm-up. Writes into --out: `multi_gpu_run.json` (the
command, date, cards, versions, build, load time, the run's summary with its placement and timings,
and the per-layer table naming each layer's GPU), `multi_gpu_run.md` (the same as a short report) and
`run/` (the run's records, as `python -m analysis run` writes them).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse(argv=None) -> argparse.Namespace:
    from analysis.cli import add_sparse_options

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3.5-122b-a10b-shape")
    parser.add_argument("--device-map", default="balanced", help="auto | balanced")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs to spread over (default: every visible one)")
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--segment-tokens", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-dense", action="store_true", help="skip the dense comparison")
    add_sparse_options(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar (one line per phase instead)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--date", default=None, help="the date to record (default: now, UTC)")
    return parser.parse_args(argv)


def document(tokenizer, tokens: int) -> str:
    """The bundled samples, one after another, repeated until they hold `tokens` tokens, then cut
    after the token that reaches it (the text's count is exactly `tokens` for the byte tokenizer)."""
    from analysis.documents import list_samples

    samples = "\n\n".join(sample.read() for sample in list_samples())
    text = samples
    while tokenizer.count_up_to(text, tokens) <= tokens:
        text += "\n\n" + samples
    _, offsets = tokenizer.encode_with_offsets(text)
    return text[:offsets[tokens - 1][1]]


def build_name() -> str:
    try:
        from benchmarks.kernel_bench import build
    except Exception:  # noqa: BLE001 - the build name is a label; its absence must not stop a run
        return "not recorded"
    return build()


def versions() -> dict:
    import accelerate
    import torch
    import transformers

    from analysis.bench_prefill import fla_version

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "accelerate": accelerate.__version__, "python": platform.python_version(), "fla": fla_version()}


def markdown(report: dict) -> str:
    """The run's short report: a title, then what the README shows (analysis.measurements.multi_gpu_report)."""
    from analysis.measurements import multi_gpu_report

    summary = report["summary"]
    title = f"# {summary['model']} over {len(summary['placement']['devices'])} GPUs"
    return f"{title}\n\n{multi_gpu_report(report)}\n"


_last_phase = [None]


def phase_lines(update) -> None:
    """A progress callback that prints one line each time the run enters another phase or segment."""
    phase = (update.stage, update.segment) if update.stage != "warmup" else (update.stage, 0)
    if update.layer is None and phase != _last_phase[0]:
        _last_phase[0] = phase
        print(f"{time.strftime('%H:%M:%S')} {update.fraction:6.1%} {update.message}", flush=True)


def main(argv=None) -> int:
    args = parse(argv)
    from transformers.utils import logging as transformers_logging

    from analysis.cli import ProgressBar, sparse_options
    from analysis.errors import AnalysisError
    from analysis.models import load_model
    from analysis.pipeline import RunConfig, analyze
    from analysis.timing import use_threads

    transformers_logging.set_verbosity_error()
    use_threads()
    command = "python benchmarks/multi_gpu_run.py " + " ".join(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        started = time.perf_counter()
        loaded = load_model(args.model, device="auto", device_map=args.device_map, gpus=args.gpus)
        load_s = time.perf_counter() - started
        print(f"built {loaded.name} in {load_s:.0f} s: " + "; ".join(
            f"{row['device']} layers {len(row['layers'])}, {row['weights_gib']:.1f} GiB" for row in loaded.placement),
            flush=True)
        config = RunConfig(sparse_options(args), compare_dense=not args.no_dense, segment_tokens=args.segment_tokens,
                           repeats=args.repeats)
        text = document(loaded.tokenizer, args.tokens)
        bar = phase_lines if args.quiet else ProgressBar()
        started = time.perf_counter()
        try:
            result = analyze(loaded, text, config, progress=bar, document_name=f"bundled samples, {args.tokens} tokens")
        finally:
            if not args.quiet:
                bar.close()
        run_s = time.perf_counter() - started
    except AnalysisError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    result.save(args.out / "run", replace=True)
    report = {
        "meta": {"date": args.date or datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command,
                 "build": build_name(), "versions": versions(), "load_s": round(load_s, 1), "run_s": round(run_s, 1),
                 "description": loaded.description},
        "summary": result.summary,
        "layers": result.layers.to_dicts(),
    }
    (args.out / "multi_gpu_run.json").write_text(json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    text = markdown(report)
    (args.out / "multi_gpu_run.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
