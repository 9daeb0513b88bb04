"""Train the embedded default model: a small Qwen3.5 (qwen3_5_text, 3 GDN : 1 attention) that can retrieve.

The data is the corpus of training/build_corpus.py mixed with a random-token repeat drill (induction)
and RULER-style retrieval tasks (analysis/ruler.py) whose haystacks are training text; sequence length
follows a curriculum from 256 to 8K tokens. Training stops at a wall-clock budget, then the RULER
evaluation runs (analysis/ruler_eval.py) on the held-out split, dense and SparseGDN.

    python training/train.py --out runs/default --budget-s 510 --no-eval   # GPU: 8.5 min of training
    python -m analysis.ruler_eval --model runs/default/default-model      # then the evaluation
    python training/train.py --tiny --out runs/tiny        # CPU smoke test, under a minute

Writes under --out: default-model/ (config.json, model.safetensors in bf16), train_log.json
(loss curve), ruler.json (evaluation records). A checkpoint is written periodically: the last wins.
The recipes tried so far and why: training/RETRIEVAL_NOTES.md.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import math
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.ruler import RulerGenerator  # noqa: E402

TOKENIZER = ROOT / "data" / "default-model" / "tokenizer.json"
TRAIN_TOKENS = ROOT / "data" / "corpus" / "train.npz"
HELDOUT_TOKENS = ROOT / "data" / "corpus" / "heldout.npz"

# (share of sequences, task, needles range, queries range); None = plain corpus text
MIXTURE_FIRST_RUN = (
    (0.15, None, None, None),
    (0.15, "niah_single", None, None),
    (0.15, "niah_multikey", (2, 8), None),
    (0.25, "niah_multiquery", (2, 8), (2, 4)),
    (0.12, "niah_multivalue", (2, 6), None),
    (0.18, "variable_tracking", (2, 6), None),
)
MIXTURE_RETRIEVAL = (
    (0.10, None, None, None),
    (0.35, "niah_single", None, None),
    (0.20, "niah_multikey", (2, 4), None),
    (0.15, "niah_multiquery", (2, 4), (1, 2)),
    (0.10, "niah_multivalue", (2, 3), None),
    (0.10, "variable_tracking", (2, 3), None),
)
# "copy": a corpus span seen earlier is repeated at the end (every token of the repeat after its first is
# predictable only by looking back): a dense signal for the look-up-and-copy circuit the needles need.
MIXTURE_COPY = (
    (0.10, None, None, None),
    (0.25, "copy", (16, 64), None),
    (0.25, "niah_single", None, None),
    (0.15, "niah_multikey", (2, 4), None),
    (0.10, "niah_multiquery", (2, 4), (1, 2)),
    (0.075, "niah_multivalue", (2, 3), None),
    (0.075, "variable_tracking", (2, 3), None),
)
# a diagnostic: only the copy drill and single needles
MIXTURE_DRILL = ((0.5, "copy", (16, 64), None), (0.5, "niah_single", None, None))
# "repeat": random-token spans written twice (an induction drill with no language shortcut)
MIXTURE_REPEAT = ((0.4, "repeat", (8, 32), None), (0.4, "niah_single", None, None), (0.2, None, None, None))
# "induction" (the default from the third run): the random-token repeat drill for a quarter of the
# sequences, so that the look-up-and-copy circuit has a signal no language statistics can stand in for,
# then single needles, and the harder tasks at smaller shares. The "copy" run (corpus spans repeated)
# was the second recipe; neither it nor the first formed the circuit on the CPU.
MIXTURE_INDUCTION = (
    (0.10, None, None, None),
    (0.25, "repeat", (16, 64), None),
    (0.10, "copy", (16, 64), None),
    (0.25, "niah_single", None, None),
    (0.10, "niah_multikey", (2, 4), None),
    (0.08, "niah_multiquery", (2, 4), (1, 2)),
    (0.07, "niah_multivalue", (2, 3), None),
    (0.05, "variable_tracking", (2, 3), None),
)
MIXTURE = MIXTURE_INDUCTION
MIXTURES = {"first-run": MIXTURE_FIRST_RUN, "retrieval": MIXTURE_RETRIEVAL, "copy": MIXTURE_COPY,
            "drill": MIXTURE_DRILL, "repeat": MIXTURE_REPEAT, "induction": MIXTURE_INDUCTION}
# (start of the phase as a fraction of the time budget, sequence length); tokens per step are constant.
# Long at short lengths: the look-up circuit has to form first (cheap steps, many answers per token);
# the first run went on to 2K after 12% and never left the answer-loss plateau. Ends at 8K, the
# longest length the targets ask for.
CURRICULUM_FIRST_RUN = ((0.0, 1024), (0.12, 2048), (0.3, 4096), (0.55, 8192), (0.85, 16384))
CURRICULUM_SECOND = ((0.0, 512), (0.35, 1024), (0.55, 2048), (0.72, 4096), (0.87, 8192))
# third: a quarter of the budget at 256 tokens (the most answers per second while the circuit forms)
CURRICULUM = ((0.0, 256), (0.25, 512), (0.42, 1024), (0.57, 2048), (0.71, 4096), (0.85, 8192))
TINY_CURRICULUM = ((0.0, 256), (0.5, 512))


def parse_curriculum(text: str) -> tuple[tuple[float, int], ...]:
    """'0:1024,0.3:2048' -> ((0.0, 1024), (0.3, 2048)): phase starts (fraction of the budget) and lengths."""
    phases = tuple((float(a), int(b)) for a, b in (item.split(":") for item in text.split(",")))
    if not phases or phases[0][0] != 0.0 or list(phases) != sorted(phases):
        raise argparse.ArgumentTypeError(f"curriculum must start at 0 and be sorted: {text!r}")
    return phases


def model_config(vocab_size: int, eos_id: int, tiny: bool = False):
    """Qwen3.5 text stack: 3 GDN layers then 1 gated attention layer, repeated; HV = 2H, head dims 32."""
    from transformers import Qwen3_5TextConfig

    hidden, layers, ffn = (64, 4, 128) if tiny else (256, 8, 512)
    return Qwen3_5TextConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
        layer_types=(["linear_attention"] * 3 + ["full_attention"]) * (layers // 4),
        num_attention_heads=4, num_key_value_heads=2, head_dim=64 if not tiny else 16,
        linear_num_key_heads=2 if tiny else 4, linear_num_value_heads=4 if tiny else 8,
        linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4,
        max_position_embeddings=65536, tie_word_embeddings=True,
        # Qwen3.5's rotary setting: a quarter of each head rotates, base 1e7 (the rest is position-free,
        # which is what lets retrieval reach past the trained length). Base 1e4 was tried on the CPU: it
        # learns a look-up at a fixed distance sooner, but not the content look-up that retrieval needs
        # (training/RETRIEVAL_NOTES.md, third round), so the real model's setting stays.
        rope_parameters={"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25},
        bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id, use_cache=False,
    )


def gdn_core_backend() -> str:
    """Which function transformers' Qwen3.5 GDN layers call for the chunked core (FLA or its torch fallback)."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m

    fn = m.torch_chunk_gated_delta_rule
    for cell in fn.__closure__ or ():
        target = cell.cell_contents
        if callable(target) and getattr(target, "__name__", "") == "chunk_gated_delta_rule":
            return f"{target.__module__}.{target.__name__}"
    return f"{fn.__module__}.{fn.__name__} (torch fallback)"


@contextmanager
def training_core(chunk_size: int):
    """Train through transformers' own torch chunk core, in fp32, with longer chunks.

    The fallback when FLA cannot train (no FLA, a CPU, or a failed gradient check; FLA 0.6.0 itself
    refuses its gated backward on Hopper with Triton 3.4-3.7.0, which training/fla_hopper_fix.py
    works around). The torch core is exact but loops over chunks in Python, so longer chunks (fewer
    loop steps) are faster; its exponents are all <= 0 (masked before exp), so 128 is as safe as 64.
    """
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m

    installed = m.torch_chunk_gated_delta_rule
    reference = inspect.unwrap(installed)

    def core(*args, **kwargs):
        kwargs.pop("chunk_size", None)
        device_type = args[0].device.type
        with torch.autocast(device_type, enabled=False):  # the recurrence stays in fp32
            return reference(*args, chunk_size=chunk_size, **kwargs)

    m.torch_chunk_gated_delta_rule = core
    try:
        yield f"{reference.__module__}.{reference.__name__} (torch, fp32, chunk {chunk_size})"
    finally:
        m.torch_chunk_gated_delta_rule = installed


def choose_core(args) -> str:
    """'fla' when asked (or 'auto') on a GPU with FLA whose patched gradients match the torch core; else 'torch'."""
    if args.gdn_core == "torch" or not args.device.startswith("cuda"):
        return "torch"
    from training import fla_hopper_fix

    if not fla_hopper_fix.install():
        if args.gdn_core == "fla":
            raise SystemExit("--gdn-core fla: flash-linear-attention is not importable")
        return "torch"
    try:
        error = fla_hopper_fix.gradient_error(args.device)
    except Exception as failure:  # noqa: BLE001 - any FLA failure means: train on the torch core
        print(f"[train] FLA gradient check failed ({failure!r}): training with the torch core", flush=True)
        return "torch"
    print(f"[train] FLA (patched backward) vs torch core: max relative gradient error {error:.2e}", flush=True)
    if error > 2e-2:
        print("[train] gradients disagree: training with the torch core instead", flush=True)
        return "torch"
    return "fla"


class SequenceSource:
    """Training sequences: plain corpus windows and retrieval tasks over corpus haystacks."""

    def __init__(self, tokenizer, tokens: np.ndarray, seed: int, mixture=MIXTURE):
        self.mixture = mixture
        self.tokens = tokens.astype(np.int64)
        self.generator = RulerGenerator(tokenizer, self.tokens)
        self.vocab_size = len(tokenizer)
        self.lowest_word = 256  # above the special and single-byte tokens
        self.rng = np.random.default_rng(seed)
        self.shares = np.array([m[0] for m in mixture]) / sum(m[0] for m in mixture)

    def task_names(self) -> list[str]:
        """One name per mixture entry, in mixture order (the labels of `labelled_batch`)."""
        return [task or "text" for _, task, _, _ in self.mixture]

    def sequence(self, length: int) -> tuple[np.ndarray, np.ndarray]:
        """ids int64 [length] and a bool mask of the answer tokens (the targets to retrieve)."""
        return self.draw(length, int(self.rng.choice(len(self.mixture), p=self.shares)))

    def draw(self, length: int, entry: int) -> tuple[np.ndarray, np.ndarray]:
        """A sequence of mixture entry `entry` (ids, answer mask)."""
        _, task, needles, queries = self.mixture[entry]
        mask = np.zeros(length, dtype=bool)
        if task is None:
            return self.corpus_window(length), mask
        n = int(self.rng.integers(needles[0], needles[1] + 1)) if needles else None
        if task == "copy":
            return self.copy_sequence(length, min(n, length // 4))
        if task == "repeat":
            return self.repeat_sequence(length, min(n, length // 4))
        q = int(self.rng.integers(queries[0], min(queries[1], n) + 1)) if queries else None
        try:
            sample = self.generator.sample(task, length, int(self.rng.integers(1 << 20, 1 << 40)),
                                           needles=n, queries=q)
        except ValueError:  # too many needles for a short sequence: plain text instead
            return self.corpus_window(length), mask
        for a, b in sample.answer_spans:
            mask[a:b] = True
        return sample.input_ids, mask

    def corpus_window(self, length: int) -> np.ndarray:
        """A random window of `length` training tokens (a view: copy before writing into it)."""
        start = int(self.rng.integers(0, len(self.tokens) - length))
        return self.tokens[start:start + length]

    @staticmethod
    def tail_mask(length: int, span: int) -> np.ndarray:
        """Answer mask of a repeat that ends the sequence: its first token cannot be known in advance."""
        mask = np.zeros(length, dtype=bool)
        mask[length - span + 1:] = True
        return mask

    def copy_sequence(self, length: int, span: int) -> tuple[np.ndarray, np.ndarray]:
        """Corpus text whose last `span` tokens repeat a span from earlier in the same sequence."""
        ids = self.corpus_window(length).copy()
        source = int(self.rng.integers(0, length - 2 * span))
        ids[length - span:] = ids[source:source + span]
        return ids, self.tail_mask(length, span)

    def repeat_sequence(self, length: int, span: int) -> tuple[np.ndarray, np.ndarray]:
        """Corpus text with a span of random vocabulary tokens written twice, the second time at the end.

        Nothing but a look-back predicts the second copy (random tokens carry no language), so every
        token of it after the first is a clean training signal for the induction (look-up-and-copy)
        circuit that needle retrieval needs.
        """
        ids = self.corpus_window(length).copy()
        pattern = self.rng.integers(self.lowest_word, self.vocab_size, size=span)
        source = int(self.rng.integers(0, length - 2 * span))
        ids[source:source + span] = pattern
        ids[length - span:] = pattern
        return ids, self.tail_mask(length, span)

    def batch(self, length: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids, mask, _ = self.labelled_batch(length, size)
        return ids, mask

    def labelled_batch(self, length: int, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """ids [size, length], answer mask [size, length], mixture entry of each row [size]."""
        entries = self.rng.choice(len(self.mixture), size=size, p=self.shares)
        pairs = [self.draw(length, int(e)) for e in entries]
        return (torch.from_numpy(np.stack([p[0] for p in pairs])), torch.from_numpy(np.stack([p[1] for p in pairs])),
                torch.from_numpy(entries.astype(np.int64)))


class BatchStream(torch.utils.data.IterableDataset):
    """Endless training batches at the length the main process asks for (a shared integer).

    Run in DataLoader worker processes, so building batches (numpy and the tokenizer, ~60 ms for
    128 x 256 tokens on one core) never waits on the GIL or holds up a fast GPU step.
    """

    def __init__(self, source: SequenceSource, tokens_per_step: int, length):
        self.source, self.tokens_per_step, self.length = source, tokens_per_step, length

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is not None:  # each worker draws its own sequences
            self.source.rng = np.random.default_rng([int(self.source.rng.integers(1 << 31)), info.id])
        while True:
            length = int(self.length.value)
            yield (length, *self.source.labelled_batch(length, max(1, self.tokens_per_step // length)))


def batch_stream(source: SequenceSource, tokens_per_step: int, first_length: int, workers: int):
    """(shared length, iterator of (length, ids, mask, entries)); workers=0 builds batches in this process."""
    import multiprocessing

    length = multiprocessing.get_context("fork").Value("i", first_length, lock=False)
    loader = torch.utils.data.DataLoader(
        BatchStream(source, tokens_per_step, length), batch_size=None, num_workers=workers,
        prefetch_factor=4 if workers else None, persistent_workers=bool(workers),
        multiprocessing_context="fork" if workers else None)
    return length, iter(loader)


def phase_length(progress: float, curriculum) -> int:
    return [length for start, length in curriculum if progress >= start][-1]


def learning_rate(step: int, progress: float, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak by the end of the time budget."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def task_accuracy(row_hits: torch.Tensor, mask: torch.Tensor, entries: torch.Tensor, names: list[str]) -> dict:
    """Answer-token accuracy per task in one batch (tasks with answers in it only), rounded for the log."""
    answers = mask[:, 1:].sum(1).cpu()
    hits = row_hits.cpu()
    result = {}
    for entry, name in enumerate(names):
        rows = entries == entry
        total = int(answers[rows].sum())
        if total:
            result[name] = round(float(hits[rows].sum()) / total, 4)
    return result


def loss_terms(model, ids: torch.Tensor, answer_mask: torch.Tensor, per_row: bool = False):
    """(mean LM loss over all tokens, mean loss over answer tokens, answer-token accuracy), and with
    per_row the number of correctly predicted answer tokens of each row."""
    hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state
    logits = model.lm_head(hidden[:, :-1])                         # [B, T-1, vocab]
    targets = ids[:, 1:]
    per_token = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")
    mask = answer_mask[:, 1:].flatten()
    lm = per_token.mean()
    if per_row:  # one argmax over all positions serves the per-row counts and the accuracy
        hits = ((logits.argmax(-1) == targets) & answer_mask[:, 1:]).sum(1)
    if not mask.any():
        zero = torch.zeros((), device=ids.device)
        return (lm, zero, zero, hits) if per_row else (lm, zero, zero)
    answer = per_token[mask].mean()
    if per_row:
        return lm, answer, hits.sum() / mask.sum(), hits
    accuracy = (logits.flatten(0, 1)[mask].argmax(-1) == targets.flatten()[mask]).float().mean()  # answers only
    return lm, answer, accuracy


class RetrievalProbe:
    """Greedy needle accuracy on fixed held-out samples (Milton haystacks), to watch retrieval form."""

    TASKS = ("niah_single", "niah_multikey")

    def __init__(self, tokenizer, samples: int):
        heldout = np.load(HELDOUT_TOKENS)
        self.generator = RulerGenerator(tokenizer, heldout["milton"])
        self.samples = samples

    @torch.no_grad()
    def __call__(self, model, length: int, device) -> dict[str, float]:
        from analysis.ruler_eval import score_batch

        was_training = model.training
        model.eval()
        result = {}
        for task in self.TASKS:
            # seeds far from the training draws (those come from 1 << 20 .. 1 << 40)
            needles = (2 if length < 512 else 4) if task == "niah_multikey" else None  # 4 do not fit 128 tokens
            batch = [self.generator.sample(task, length, 7 + i, needles=needles)
                     for i in range(self.samples)]
            result[task] = float(np.mean(score_batch(model, batch, device)))
        model.train(was_training)
        return result


def save_checkpoint(model, directory: Path) -> None:
    """bf16 safetensors + config (the last call wins); the tokenizer lives in data/default-model."""
    directory.mkdir(parents=True, exist_ok=True)
    frozen = copy.deepcopy(model).to(torch.bfloat16)
    frozen.config.use_cache = True
    frozen.save_pretrained(str(directory), safe_serialization=True)


def train(args) -> tuple[torch.nn.Module, list[dict]]:
    from transformers import PreTrainedTokenizerFast, Qwen3_5ForCausalLM

    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER))
    eos_id = tokenizer.backend_tokenizer.token_to_id("<|endoftext|>")
    tokens = np.load(TRAIN_TOKENS)["tokens"]
    source = SequenceSource(tokenizer, tokens, args.seed, MIXTURES[args.mixture])
    probe = RetrievalProbe(tokenizer, args.probe_samples) if args.probe_every else None
    config = model_config(len(tokenizer), eos_id, tiny=args.tiny)
    model = Qwen3_5ForCausalLM(config).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"[train] {n_params / 1e6:.2f} M parameters; GDN core installed by transformers: {gdn_core_backend()}; "
          f"corpus {len(tokens) / 1e6:.2f} M tokens", flush=True)

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")
    curriculum = args.curriculum
    workers = args.workers if args.workers is not None else (min(6, max(0, (os.cpu_count() or 1) - 2))
                                                              if device.type == "cuda" else 0)
    wanted, batches = batch_stream(source, args.tokens_per_step, phase_length(0.0, curriculum), workers)
    log: list[dict] = []
    start = time.perf_counter()
    last_save = start
    step = 0
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    while True:
        elapsed = time.perf_counter() - start
        progress = elapsed / args.budget_s
        if progress >= 1.0 or (args.max_steps and step >= args.max_steps):
            break
        length = phase_length(progress, curriculum)
        wanted.value = length
        got, ids, mask, entries = next(batches)
        while got != length:  # batches built before a phase change: skip them
            got, ids, mask, entries = next(batches)
        size = ids.shape[0]
        ids, mask = ids.to(device, non_blocking=True), mask.to(device, non_blocking=True)
        lr = learning_rate(step, progress, args.lr, args.warmup)
        for group in optimizer.param_groups:
            group["lr"] = lr
        logging = (step + 1) % args.log_every == 0 or step == 0  # per-task counts only where they are logged
        with autocast:
            lm, answer, accuracy, *row_hits = loss_terms(model, ids, mask, per_row=logging)
            loss = lm + args.answer_weight * answer
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        if logging:
            entry = {"step": step, "seconds": round(time.perf_counter() - start, 2), "length": length,
                     "batch": size, "tokens": step * args.tokens_per_step, "lr": lr, "lm_loss": lm.item(),
                     "answer_loss": answer.item(), "answer_token_accuracy": accuracy.item(),
                     "grad_norm": grad_norm.item(),
                     "task_accuracy": task_accuracy(row_hits[0], mask, entries, source.task_names())}
            if probe is not None and (step % args.probe_every == 0):
                entry["probe_accuracy"] = probe(model, length, device)
            log.append(entry)
            print(f"[train] step {step:5d} {entry['seconds']:7.1f}s len {length:5d}x{size:<3d} "
                  f"lm {entry['lm_loss']:.3f} ans {entry['answer_loss']:.3f} acc {entry['answer_token_accuracy']:.3f} "
                  f"lr {lr:.2e} gn {entry['grad_norm']:.2f}"
                  + " | " + " ".join(f"{k} {v:.2f}" for k, v in entry["task_accuracy"].items())
                  + (f" probe {entry['probe_accuracy']}" if "probe_accuracy" in entry else ""), flush=True)
        if time.perf_counter() - last_save > args.save_every_s:
            save_checkpoint(model, args.out / "default-model")
            write_log(args, log, n_params, step, time.perf_counter() - start)
            last_save = time.perf_counter()
    seconds = time.perf_counter() - start
    print(f"[train] done: {step} steps in {seconds:.0f}s ({step * args.tokens_per_step / seconds / 1e6:.2f} M tokens/s)",
          flush=True)
    save_checkpoint(model, args.out / "default-model")
    write_log(args, log, n_params, step, seconds)
    return model, log


def write_log(args, log, n_params, steps, seconds) -> None:
    (args.out / "train_log.json").write_text(json.dumps({
        "parameters": n_params, "steps": steps, "seconds": round(seconds, 1), "tokens_per_step": args.tokens_per_step,
        "command": "python training/train.py " + " ".join(sys.argv[1:]),
        "peak_lr": args.lr, "warmup": args.warmup, "answer_weight": args.answer_weight, "budget_s": args.budget_s,
        "curriculum": args.curriculum, "mixture_name": args.mixture,
        "mixture": [{"share": s, "task": t or "plain text", "needles": n, "queries": q}
                    for s, t, n, q in MIXTURES[args.mixture]],
        "gdn_core": args.core_name, "log": log}, indent=1) + "\n")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "default")
    parser.add_argument("--tiny", action="store_true", help="CPU smoke test: tiny model, short sequences")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--budget-s", type=float, default=None, help="training wall-clock budget")
    parser.add_argument("--eval-budget-s", type=float, default=None, help="evaluation wall-clock budget")
    parser.add_argument("--max-steps", type=int, default=0)
    parser.add_argument("--tokens-per-step", type=int, default=None)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--answer-weight", type=float, default=2.0)
    parser.add_argument("--save-every-s", type=float, default=90.0)
    parser.add_argument("--log-every", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gdn-core", choices=("auto", "fla", "torch"), default="auto",
                        help="GDN core in training: FLA (fast, GPU) or transformers' torch chunk core")
    parser.add_argument("--chunk-size", type=int, default=128, help="chunk of the torch GDN core in training")
    parser.add_argument("--mixture", choices=sorted(MIXTURES), default="induction", help="task mixture")
    parser.add_argument("--curriculum", type=parse_curriculum, default=None,
                        help="length phases 'start:length,...' (start = fraction of the budget)")
    parser.add_argument("--probe-every", type=int, default=None,
                        help="every N steps (a multiple of --log-every): greedy held-out needle accuracy")
    parser.add_argument("--probe-samples", type=int, default=16)
    parser.add_argument("--no-eval", action="store_true")
    parser.add_argument("--workers", type=int, default=None,
                        help="batch-building processes (default: up to 6 on a GPU, none on a CPU)")
    args = parser.parse_args(argv)
    tiny = args.tiny
    args.budget_s = args.budget_s or (20.0 if tiny else 300.0)
    args.eval_budget_s = args.eval_budget_s or (60.0 if tiny else 150.0)
    # a quarter of the first run's 131072: four times the optimizer steps (472 steps were too few)
    args.tokens_per_step = args.tokens_per_step or (2048 if tiny else 32768)
    args.warmup = args.warmup or (5 if tiny else 60)
    args.probe_every = (0 if tiny else 100) if args.probe_every is None else args.probe_every
    args.log_every = args.log_every or (5 if tiny else 20)
    args.curriculum = args.curriculum or (TINY_CURRICULUM if tiny else CURRICULUM)
    args.out.mkdir(parents=True, exist_ok=True)

    if choose_core(args) == "fla":
        args.core_name = f"{gdn_core_backend()} (FLA, gated dq/dk/dw/dg backward in torch: training/fla_hopper_fix.py)"
        print(f"[train] training GDN core: {args.core_name}", flush=True)
        model, _ = train(args)
    else:
        with training_core(args.chunk_size) as core_name:
            print(f"[train] training GDN core: {core_name}", flush=True)
            args.core_name = core_name
            model, _ = train(args)
    if args.no_eval:
        return
    from analysis import ruler_eval
    from transformers import PreTrainedTokenizerFast

    model = model.to(torch.bfloat16 if args.device.startswith("cuda") else torch.float32).eval()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER))
    lengths = (512, 1024) if tiny else ruler_eval.LENGTHS
    try:
        results = ruler_eval.run(
            model, tokenizer, device=args.device, heldout_path=HELDOUT_TOKENS, out=args.out / "ruler.json",
            command="python training/train.py " + " ".join(sys.argv[1:] if argv is None else argv),
            model_name="default (trained by training/train.py)", lengths=lengths,
            samples={n: 2 for n in lengths} if tiny else None, time_budget_s=args.eval_budget_s,
            ppl_length=1024 if tiny else 8192, ppl_windows=2 if tiny else 8,
            checkpoint=args.out / "default-model" / "model.safetensors")
    except Exception:  # the checkpoint is saved already; keep the log readable and the partial records
        import traceback
        traceback.print_exc()
        return
    headline = {ruler_eval.DENSE.name} | {c.name for c in ruler_eval.headline_configs()}
    print(ruler_eval.markdown(results, only=headline), flush=True)


if __name__ == "__main__":
    main()
