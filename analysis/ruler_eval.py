"""Command line of the RULER-style evaluation (analysis/evaluation.py) and its report (analysis/ruler_report.py).

    python -m analysis.ruler_eval --model data/default-model --device cuda --out analysis/results/ruler.json
    python -m analysis.ruler_eval --report analysis/results/ruler.json   # writes ruler.md and ruler.html
    python -m analysis.ruler_eval --budgets 0.29 0.15 --bands 1 --lengths 4096   # part of the grid
    python -m analysis.ruler_eval --merge runs/more/ruler.json --out analysis/results/ruler.json  # add a later run

--budgets, --selectors and --bands restrict the grid of sparse settings (analysis/evaluation.py's
setting_grid; dense is always evaluated). On the CPU torch computes with one thread less than the
cores (analysis/timing.py's use_threads; SPARSEGDN_THREADS overrides it).

Needs the held-out corpus (`python training/build_corpus.py` builds data/corpus/).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from sparsegdn import BANDS, SPARSE_BACKENDS

from .evaluation import BUDGETS, GRID_BANDS, GRID_SELECTORS, Plan, evaluate_to_file, setting_grid
from .ruler import LENGTHS
from .ruler_merge import MergeError, merge_files
from .ruler_report import write_report
from .timing import use_threads

DEFAULT_HELDOUT = Path("data/corpus/heldout.npz")
DEFAULT_TOKENIZER = Path(__file__).resolve().parents[1] / "data" / "default-model" / "tokenizer.json"


def load_checkpoint(model_dir: Path, device: str):
    """The Qwen3.5 checkpoint in `model_dir` (bf16 on a GPU, fp32 on the CPU) and its tokenizer (the
    folder's own, else the default model's, which training/train.py's checkpoints share)."""
    from transformers import PreTrainedTokenizerFast, Qwen3_5ForCausalLM

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    model = Qwen3_5ForCausalLM.from_pretrained(str(model_dir), dtype=dtype).to(device).eval()
    tokenizer_file = model_dir / "tokenizer.json"
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file if tokenizer_file.exists() else DEFAULT_TOKENIZER))
    return model, tokenizer


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="RULER-style evaluation of SparseGDN")
    parser.add_argument("--model", type=Path, default=Path("data/default-model"))
    parser.add_argument("--heldout", type=Path, default=DEFAULT_HELDOUT)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=Path("analysis/results/ruler.json"))
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--samples", type=int, nargs="+", default=None,
                        help="samples per (task, length): one count, or one per --lengths; default 16 up to 8K tokens, 8 beyond")
    parser.add_argument("--time-budget", type=float, default=600.0)
    parser.add_argument("--ppl-length", type=int, default=8192)
    parser.add_argument("--ppl-windows", type=int, default=8)
    parser.add_argument("--backend", default="torch", choices=SPARSE_BACKENDS, help="SparseGDN backend")
    parser.add_argument("--budgets", type=float, nargs="+", default=list(BUDGETS), help="sparse budgets of the grid")
    parser.add_argument("--selectors", nargs="+", default=list(GRID_SELECTORS), choices=GRID_SELECTORS,
                        help="selectors of the grid (budget 1 always runs score: every event is kept)")
    parser.add_argument("--bands", type=int, nargs="+", default=list(GRID_BANDS), choices=BANDS, help="bands of the grid")
    parser.add_argument("--report", type=Path, default=None, help="only render an existing JSON to .md and .html")
    parser.add_argument("--merge", type=Path, default=None, metavar="JSON",
                        help="merge this later evaluation of the same checkpoint into --out, then render the report "
                             "(analysis/ruler_merge.py)")
    args = parser.parse_args(argv)
    if args.report:
        write_report(args.report)
        return
    if args.merge:
        for path in (args.merge, args.out):
            if not path.is_file():
                parser.error(f"{path} is missing")
        try:
            added, left_out = merge_files(args.out, args.merge)
        except MergeError as error:
            parser.error(f"--merge: {error}")
        print(f"{added} records added to {args.out}, {left_out} left out (already measured there)")
        write_report(args.out)
        return
    if not args.heldout.is_file():
        parser.error(f"{args.heldout} is missing: build the corpus first (python training/build_corpus.py)")
    try:
        settings = setting_grid(args.backend, budgets=args.budgets, selectors=args.selectors, bands=args.bands)
    except ValueError as error:      # SparseConfig names the bad option
        parser.error(str(error))
    lengths = tuple(args.lengths)
    if args.samples is not None and len(args.samples) not in (1, len(lengths)):
        parser.error(f"--samples: one count or one per length ({len(lengths)}), got {len(args.samples)}")
    counts = [16 if n <= 8192 else 8 for n in lengths] if args.samples is None else args.samples * (len(lengths) // len(args.samples))
    if not str(args.device).startswith("cuda"):
        use_threads()
    plan = Plan(settings=settings, lengths=lengths,
                samples=dict(zip(lengths, counts)),
                ppl_length=args.ppl_length, ppl_windows=args.ppl_windows, time_budget_s=args.time_budget)
    model, tokenizer = load_checkpoint(args.model, args.device)
    evaluate_to_file(model, tokenizer, plan, device=args.device, heldout_path=args.heldout, out=args.out,
                     command="python -m analysis.ruler_eval " + " ".join(sys.argv[1:] if argv is None else argv),
                     model_name=str(args.model), checkpoint=args.model / "model.safetensors", log=print)
    write_report(args.out)


if __name__ == "__main__":
    main()
