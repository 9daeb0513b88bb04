"""`python -m analysis run ...`: the app's analysis from the command line, records written to --out.

Bad input exits with status 2 and one line on stderr (no traceback); a run that fails for a reason
of the machine (out of memory, non-finite values) exits with status 3.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

from sparsegdn import CHUNK_SIZE, OPTIONS, SparseConfig

from .errors import AnalysisError, ConfigError, DocumentTooLongError

DEFAULT_MAX_MB = 20
EXIT_INPUT, EXIT_RUN = 2, 3


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage block
        self.exit(EXIT_INPUT, f"error: {_one_line(message)} (see --help)\n")


def _one_line(message: str) -> str:
    """Control characters escaped (a file name may hold a newline): every error is one line."""
    from .documents import display_name

    return display_name(str(message))


def _megabytes(raw: str) -> float:
    value = float(raw)   # argparse reports a ValueError as "invalid _megabytes value"
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"--max-mb must be a positive number of megabytes, got {raw!r}")
    return value


def _folder(raw: str) -> Path:
    if not raw.strip():
        raise argparse.ArgumentTypeError("--out is empty; name a folder for the records")
    return Path(raw)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m analysis", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = commands.add_parser("run", help="prefill a document dense and with SparseGDN, write the records")
    run.add_argument("--model", default="default",
                     help="'default', 'qwen3.5-4b-shape', 'qwen3.5-122b-a10b-shape' (needs --device-map), "
                          "a checkpoint directory or a cached HF id")
    run.add_argument("--doc", required=True, type=Path, help=".txt, .md or .pdf file")
    add_sparse_options(run)
    run.add_argument("--out", required=True, type=_folder,
                     help="new (or empty) folder for the parquet/json records, written whole at the end")
    run.add_argument("--overwrite", action="store_true", help="replace the run already saved in --out")
    run.add_argument("--device", default="auto", help="auto | cpu | cuda")
    run.add_argument("--device-map", default="none",
                     help="none (the whole model on --device) | auto (accelerate's map over the GPUs) | balanced "
                          "(the layers cut into equal runs, one per GPU): spread a model larger than one GPU")
    run.add_argument("--gpus", type=int, default=None,
                     help="how many GPUs --device-map spreads over (default: every visible one)")
    run.add_argument("--dtype", default=None, help="bf16 | fp32 (default: bf16 on GPU, fp32 on CPU)")
    run.add_argument("--segment-tokens", type=int, default=8192, help=f"prefill segment length (multiple of {CHUNK_SIZE})")
    run.add_argument("--max-tokens", type=int, default=None, help="refuse documents longer than this")
    run.add_argument("--max-mb", type=_megabytes, default=DEFAULT_MAX_MB,
                     help="refuse files larger than this many megabytes (of 1,048,576 bytes)")
    run.add_argument("--repeats", type=int, default=3,
                     help="timed prefills of each path after the warm-up (the summary gives median and range)")
    run.add_argument("--no-dense", action="store_true", help="skip the dense comparison (no errors, no KL)")
    run.add_argument("--no-document", action="store_true",
                     help="leave the document's text out of --out (a prepared example reads it from data/samples)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def add_sparse_options(parser: argparse.ArgumentParser) -> None:
    """One flag per SparseConfig option (--budget, --selector, --band, --backend, --seed), from
    sparsegdn.OPTIONS; the values are checked when `sparse_options` makes the config."""
    defaults = SparseConfig()
    for option in OPTIONS:
        default = getattr(defaults, option.name)
        choices = f" ({' | '.join(map(str, option.choices))})" if option.choices else ""
        parser.add_argument(f"--{option.name}", type=type(default), default=default,
                            help=f"{option.help}{choices}; default {default}")


def sparse_options(args: argparse.Namespace) -> SparseConfig:
    """The SparseConfig of the flags of `add_sparse_options`; a bad value is a ConfigError."""
    try:
        return SparseConfig(**{option.name: getattr(args, option.name) for option in OPTIONS})
    except ValueError as error:
        raise ConfigError(f"{error}.") from None


class ProgressBar:
    """A one-line progress bar on stderr, redrawn in place."""

    WIDTH = 30

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.last = ""

    def __call__(self, update) -> None:
        filled = int(round(update.fraction * self.WIDTH))
        line = f"\r[{'#' * filled}{'.' * (self.WIDTH - filled)}] {update.fraction:6.1%}  {update.message}"
        if line != self.last:
            self.stream.write(line.ljust(len(self.last)))
            self.stream.flush()
            self.last = line

    def close(self) -> None:
        if self.last:
            self.stream.write("\n")
            self.stream.flush()


def _format_ms(value) -> str:
    return "-" if value is None else f"{value:,.1f} ms"


def _format(value, spec=".4g") -> str:
    return "-" if value is None else format(value, spec)


def _format_spread(spread: dict | None, median=None) -> str:
    """'1,234.5 ms [1,200.1-1,300.2]': the median and the range of the repeats (a run recorded before
    repeated timing has only its one figure)."""
    from .timing import spread_text

    return spread_text(spread) if spread else _format_ms(median)


def _timed(timing: dict, name: str, median=None) -> str:
    """The spread `name` ("prefill_sparse", "core_dense", ...) of the summary's timing (_format_spread),
    said to include first-call work when a repeat of its path did (timing.first_call_notes says which)."""
    path = name.split("_", 1)[1]
    affected = " (includes first-call work, see below)" if path in timing.get("clean", {}) else ""
    return _format_spread(timing.get(name), median) + affected


def _ratio(timing: dict, scope: str) -> str:
    """Dense's median over sparse's (above 1 sparse is faster), and whether that is outside the noise."""
    from .timing import Spread, difference

    sparse, dense = (Spread.from_dict(timing.get(f"{scope}_{path}")) for path in ("sparse", "dense"))
    change = difference(sparse, dense)
    if change is None:
        return ""
    verdict = "outside the noise" if change.distinct else "within the noise" if change.repeated else "one measurement"
    return f"; dense/sparse {dense.median / sparse.median:.2f}x ({verdict})"


def _placement_lines(summary: dict) -> list[str]:
    """One line per GPU of a model spread by --device-map: its layers, weights and peak memory."""
    from .placement import layer_ranges

    where = summary.get("placement") or {}
    if where.get("device_map", "none") == "none":
        return []
    return [f"placement   {row['device']} ({row['name']}): layers {layer_ranges(row['layers'])}, "
            f"{row['weights_gib']:,.1f} GiB of weights, peak {row.get('peak_gib', 0):,.1f} of "
            f"{row.get('total_gib') or 0:,.1f} GiB" for row in where.get("devices", [])]


def print_summary(summary: dict, out: Path, stream=None) -> None:
    stream = stream or sys.stdout
    s = summary
    timing = s.get("timing") or {}
    weights = " (RANDOM WEIGHTS: outputs mean nothing)" if s.get("random_weights") else ""
    lines = [
        f"model       {s['model']}{weights}",
        f"document    {s.get('document') or '?'}: {s['n_tokens']:,} tokens, {s['n_chunks']:,} chunks, "
        f"{s.get('n_segments', 1)} segment(s)",
        f"sparse      budget {s['budget']}, selector {s['selector']}, band {s['band']}, backend {s['backend']}"
        f" on {s['device']}; {s.get('events_selected', '?'):,} of {s.get('events_total', '?'):,} events",
        *_placement_lines(s),
        f"prefill     dense {_timed(timing, 'prefill_dense', s['prefill_ms_dense'])} "
        f"({s.get('dense_backend', '?')} core), "
        f"sparse {_timed(timing, 'prefill_sparse', s['prefill_ms_sparse'])}" + _ratio(timing, "prefill"),
        f"GDN core    dense {_timed(timing, 'core_dense', s.get('core_ms_dense_total'))}, "
        f"sparse {_timed(timing, 'core_sparse', s.get('core_ms_sparse_total'))}" + _ratio(timing, "core"),
    ]
    if timing:
        from .timing import first_call_notes, plan_text, warm_up_text

        lines.append(f"timing      median [min-max] of {timing['repeats']} interleaved repeat(s), {timing['threads']} "
                     f"thread(s); warm-up not counted: {warm_up_text(timing.get('warm_up', {}))}")
        lines += [f"first call  {note}" for note in first_call_notes(timing)]
        if plan_text(timing):
            lines.append(f"plans       {plan_text(timing)}")
    lines += [
        f"model       KL {_format(s['kl_mean'])}, top-1 agreement {_format(s['top1_agreement'], '.2%')}, "
        f"ppl dense {_format(s['ppl_dense'])} / sparse {_format(s['ppl_sparse'])}",
        f"records     {out}",
    ]
    if s.get("non_finite"):
        lines.append(f"warning     {s['non_finite']} non-finite value(s) recorded as null")
    stream.write("\n".join(lines) + "\n")


def run(args) -> int:
    from .documents import load_document
    from .pipeline import RunConfig

    config = RunConfig(sparse_options(args), compare_dense=not args.no_dense, segment_tokens=args.segment_tokens,
                       max_tokens=args.max_tokens, repeats=args.repeats)
    from .documents import MB, read_document_file
    from .records import destination_problem

    problem = destination_problem(args.out, replace=args.overwrite)
    if problem:   # before the run, not after it: nothing computed for records that cannot be saved
        advice = "pass --overwrite to replace it" if "saved run" in problem else "choose another --out"
        raise ConfigError(f"--out: {problem}; {advice}.")
    max_bytes = int(args.max_mb * MB)
    text = load_document(args.doc.name, read_document_file(args.doc, max_bytes=max_bytes), max_bytes=max_bytes)

    from transformers.utils import logging as transformers_logging

    from .models import load_model
    from .timing import use_threads

    # transformers warns that its torch GDN fallback is slow: irrelevant here, the core is swapped.
    transformers_logging.set_verbosity_error()
    from .pipeline import analyze

    use_threads()   # once per process, before any timed work (analysis/timing.py says how many and why)
    loaded = load_model(args.model, device=args.device, dtype=args.dtype, device_map=args.device_map, gpus=args.gpus)
    bar = None if args.quiet else ProgressBar()
    try:
        result = analyze(loaded, text, config, progress=bar, document_name=args.doc.name)
    finally:
        if bar is not None:
            bar.close()
    if args.no_document:
        result = dataclasses.replace(result, document=None)
    result.save(args.out, replace=args.overwrite)
    print_summary(result.summary, args.out)
    return 0


INPUT_ERRORS = (ConfigError, DocumentTooLongError)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except AnalysisError as error:
        from .documents import DocumentError
        from .models import ModelError

        print(f"error: {_one_line(error)}", file=sys.stderr)
        return EXIT_INPUT if isinstance(error, INPUT_ERRORS + (DocumentError, ModelError)) else EXIT_RUN
    except OSError as error:  # unreadable file, full disk for --out: nothing of the run is left there
        print(f"error: {_one_line(error.strerror or error)} ({_one_line(error.filename or '')})", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
