"""Command line of the RULER-style evaluation (analysis/evaluation.py) and its report (analysis/ruler_report.py).

    python -m analysis.ruler_eval --model data/default-model --device cuda --out analysis/results/ruler.json
    python -m analysis.ruler_eval --report analysis/results/ruler.json   # writes ruler.md and ruler.html

Needs the held-out corpus (`python training/build_corpus.py` builds data/corpus/).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from sparsegdn import SPARSE_BACKENDS

from .evaluation import Plan, evaluate_to_file, setting_grid
from .ruler import LENGTHS
from .ruler_report import write_report

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
    parser.add_argument("--samples", type=int, default=None,
                        help="samples per (task, length); default 16 up to 8K tokens, 8 beyond")
    parser.add_argument("--time-budget", type=float, default=600.0)
    parser.add_argument("--ppl-length", type=int, default=8192)
    parser.add_argument("--ppl-windows", type=int, default=8)
    parser.add_argument("--backend", default="torch", choices=SPARSE_BACKENDS, help="SparseGDN backend")
    parser.add_argument("--report", type=Path, default=None, help="only render an existing JSON to .md and .html")
    args = parser.parse_args(argv)
    if args.report:
        write_report(args.report)
        return
    if not args.heldout.is_file():
        parser.error(f"{args.heldout} is missing: build the corpus first (python training/build_corpus.py)")
    lengths = tuple(args.lengths)
    plan = Plan(settings=setting_grid(args.backend), lengths=lengths,
                samples={n: args.samples or (16 if n <= 8192 else 8) for n in lengths},
                ppl_length=args.ppl_length, ppl_windows=args.ppl_windows, time_budget_s=args.time_budget)
    model, tokenizer = load_checkpoint(args.model, args.device)
    evaluate_to_file(model, tokenizer, plan, device=args.device, heldout_path=args.heldout, out=args.out,
                     command="python -m analysis.ruler_eval " + " ".join(sys.argv[1:] if argv is None else argv),
                     model_name=str(args.model), checkpoint=args.model / "model.safetensors", log=print)
    write_report(args.out)


if __name__ == "__main__":
    main()
