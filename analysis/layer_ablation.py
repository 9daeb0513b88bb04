"""Which layers carry a model's retrieval: the RULER tasks with the GDN cores' output removed.

    python -m analysis.layer_ablation [--lengths 4096] [--samples 16] [--tasks niah_single ...]

The committed analysis/results/layer_ablation.md is the embedded default's (data/default-model), made by
    python -m analysis.layer_ablation --lengths 4096 --samples 8 --tasks niah_single

Settings, on the evaluation's own samples (analysis/evaluation.py, same seeds): the model as trained
(dense, through sparsegdn's dense torch core: every event, exact solve; faster on the CPU than
transformers' own); SparseGDN with almost no events (`uniform` at budget 0.01: each head pair keeps
about one commit in a hundred, so little crosses from one chunk to the next); and every GDN layer's core
output replaced by zeros (the attention layers if any, the MLPs and the GDN layers' gates and
convolutions stay). If accuracy survives the second, the look-up does not pass through the GDN state
carried across chunks, so dropping events cannot lose it and the selectors cannot be told apart on these
tasks (so it was on the previous, hybrid default: its attention layers did the look-up); if it falls,
the needle crosses the chunks in the GDN state, which is what the selectors decide (the GDN-only
default). The third shows whether the GDN layers are needed at all. The report names the model's
layers. Runs on the CPU in a few minutes.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from sparsegdn import SparseConfig

from . import evaluation, patching
from .ruler import TASKS, RulerGenerator
from .ruler_eval import DEFAULT_HELDOUT, load_checkpoint


def zero_core(call: patching.CoreCall):
    """A GDN core that writes nothing: o = 0, and a zero final state when one is asked for."""
    batch, _, value_heads, value_dim = call.v.shape
    state = None
    if call.output_final_state:
        state = torch.zeros(batch, value_heads, call.k.shape[-1], value_dim, device=call.v.device)
    return torch.zeros_like(call.v), state


SETTINGS = {
    "dense (sparsegdn's dense core)": patching.dense_core("torch"),
    "sparse b=0.01 uniform band=1": patching.sparse_core(SparseConfig(budget=0.01, selector="uniform", band=1)),
    "GDN output zeroed": zero_core,
}


def reading(rows: list[tuple[str, int, dict]]) -> list[str]:
    """What the table says, per length: whether the look-up needs the GDN state carried across chunks (the
    starved setting against dense) and the GDN layers at all (the zeroed one)."""
    dense_name, starved_name, zeroed_name = SETTINGS
    means = {(name, length): float(np.mean(list(accuracy.values()))) for name, length, accuracy in rows}
    lines = []
    for length in sorted({length for _, length, _ in rows}):
        dense, starved, zeroed = (means[(name, length)] for name in (dense_name, starved_name, zeroed_name))
        if starved >= 0.9 * dense:
            state = ("the look-up does not pass through the GDN state carried across chunks, so skipping events "
                     "cannot lose it and the selectors cannot be told apart on these tasks")
        elif starved <= 0.5 * dense:
            state = ("the look-up passes through the GDN state carried across chunks, which is what the selectors "
                     "keep or skip")
        else:
            state = "part of the look-up passes through the GDN state carried across chunks"
        lines.append(f"At {length} tokens, with almost no events the mean goes from {dense:.3f} to {starved:.3f}: {state}. "
                     f"With the GDN output zeroed it is {zeroed:.3f}.")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("data/default-model"))
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096])
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--out", type=Path, default=Path("analysis/results/layer_ablation.md"))
    args = parser.parse_args(argv)
    device = "cpu"
    torch.set_grad_enabled(False)
    model, tokenizer = load_checkpoint(args.model, device)
    generator = RulerGenerator(tokenizer, dict(np.load(DEFAULT_HELDOUT))["milton"])
    rows = []
    for length in args.lengths:
        samples = {task: [generator.sample(task, length, seed) for seed in range(args.samples)] for task in args.tasks}
        for name, core in SETTINGS.items():
            accuracy = {}
            for task in args.tasks:
                with patching.swap_gdn_core(model, core):
                    accuracy[task] = float(np.mean(evaluation.score_batch(model, samples[task], device)))
                print(f"  {name} {length} {task} {accuracy[task]:.2f}", flush=True)
            rows.append((name, length, accuracy))
            print(f"{name:30s} {length:6d} " + " ".join(f"{task} {a:.2f}" for task, a in accuracy.items()), flush=True)
    kinds = ["GDN" if kind == "linear_attention" else "ATT" for kind in model.config.layer_types]
    layout = (f"all {len(kinds)} Gated DeltaNet, no attention layer" if "ATT" not in kinds else
              f"{kinds.count('GDN')} Gated DeltaNet and {kinds.count('ATT')} attention: `{' '.join(kinds)}`")
    lines = [
        "# Which layers carry the model's retrieval",
        "",
        f"`python -m analysis.layer_ablation --lengths {' '.join(map(str, args.lengths))} --samples {args.samples} "
        f"--tasks {' '.join(args.tasks)}` "
        f"(CPU, float32; {args.samples} samples per task and length, the evaluation's seeds), model `{args.model}`, "
        f"checkpoint sha256 `{evaluation.checkpoint_digest(args.model / 'model.safetensors')[:16]}`; layers: {layout}. "
        "Accuracy as in `ruler.md` (answer spans predicted exactly, teacher forcing), 95% Wilson interval in "
        "brackets.",
        "",
        "| setting | length | mean | " + " | ".join(args.tasks) + " |",
        "|---|---|---|" + "---|" * len(args.tasks),
    ]
    for name, length, accuracy in rows:
        cells = [f"{accuracy[task]:.2f} ({low:.2f}-{high:.2f})"
                 for task in args.tasks for low, high in [evaluation.wilson_interval(accuracy[task], args.samples)]]
        lines.append(f"| {name} | {length} | {np.mean(list(accuracy.values())):.3f} | " + " | ".join(cells) + " |")
    lines += [""] + reading(rows)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
