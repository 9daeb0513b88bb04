"""How many steps a Qwen3.5 configuration needs to learn to copy: the induction test behind the recipe.

Each batch holds 32 rows of random word tokens whose last 48 also stand earlier in the row; the loss is
the cross-entropy of that repeat (after its first token), which nothing but looking back can predict.
With --gap 0 the distance back is fixed (a positional look-up solves it); with --gap G the first copy
starts anywhere in G + 1 positions, and only a content look-up can: the induction circuit that needle
retrieval needs. Before the circuit forms, accuracy sits near 0 and the loss near the unigram floor (ln
of the number of tokens drawn); it forms within a few dozen steps once it starts.

    python training/induction_probe.py --default                       # the default model's config
    python training/induction_probe.py --default --rope-theta 1e4       # ... with another rotary base
    python training/induction_probe.py --layers GGGA --head-dim 32 --draw 7936 --gap 96 --steps 600
                                                                       # small: 3 GDN + 1 attention

CPU, one thread: ~0.8-1.5 s a step for the small configurations, ~3 s for --default. The runs and what
they showed: training/RETRIEVAL_NOTES.md, third round.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.patching import swap_gdn_core, torch_reference_core  # noqa: E402
from training import train  # noqa: E402
from training.compact_adamw import CompactAdamW  # noqa: E402

FIRST_WORD = 256  # above the special and single-byte tokens of the 8192-token BPE


def probe_config(args):
    """The model config under test: train.py's default, or the tiny one reshaped by the flags."""
    config = train.model_config(8192, 0, tiny=not args.default)
    if not args.default:
        config.layer_types = ["full_attention" if c == "A" else "linear_attention" for c in args.layers]
        config.num_hidden_layers = len(args.layers)
        config.head_dim, config.num_attention_heads, config.num_key_value_heads = args.head_dim, 2, 2
    rope = dict(config.rope_parameters)
    if args.rope_theta is not None:
        rope["rope_theta"] = args.rope_theta
    if args.rotary is not None:
        rope["partial_rotary_factor"] = args.rotary
    config.rope_parameters = rope
    return config


def repeat_batch(batch: int, span: int, gap: int, draw: int, generator: torch.Generator):
    """Rows of 2 * span + gap random word tokens whose last `span` also stand earlier, starting anywhere in
    the first gap + 1 positions (so the distance back varies by up to `gap`); the mask marks the tail after
    its first token. Returns (ids [batch, 2 * span + gap], mask)."""
    if gap == 0:  # drawn as the runs in training/RETRIEVAL_NOTES.md drew it, so their numbers reproduce
        half = torch.randint(FIRST_WORD, FIRST_WORD + draw, (batch, span), generator=generator)
        ids = torch.cat([half, half], dim=1)
    else:
        ids = torch.randint(FIRST_WORD, FIRST_WORD + draw, (batch, 2 * span + gap), generator=generator)
        starts = torch.randint(0, gap + 1, (batch,), generator=generator)
        ids[torch.arange(batch)[:, None], starts[:, None] + torch.arange(span)] = ids[:, -span:]
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, -span + 1:] = True
    return ids, mask


def run(args) -> list[dict]:
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(args.seed)
    config = probe_config(args)
    model = Qwen3_5ForCausalLM(config)
    if args.optimizer == "compact":   # train.py's optimizer; decay on matrices only, at AdamW's default 0.01
        optimizer = CompactAdamW(model, betas=(0.9, 0.95), weight_decay=0.01)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95))
    print(f"layers {''.join('A' if t == 'full_attention' else 'G' for t in config.layer_types)}, attention head dim "
          f"{config.head_dim}, rotary {config.rope_parameters['partial_rotary_factor']:g} at base "
          f"{config.rope_parameters['rope_theta']:g}; {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters",
          flush=True)
    generator = torch.Generator().manual_seed(args.seed + 1)
    log, start = [], time.perf_counter()
    with swap_gdn_core(model, torch_reference_core(64)):
        for step in range(1, args.steps + 1):
            ids, mask = repeat_batch(args.batch, args.span, args.gap, args.draw, generator)
            lm, answer, accuracy = train.loss_terms(model, ids, mask)
            loss = lm + args.lm_answer_weight * answer if args.lm_answer_weight else answer
            if args.optimizer == "compact":
                optimizer.zero_grad()
                loss.backward()
                optimizer.clip_grad_norm(1.0)
                optimizer.step(args.lr)
            else:
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            if step % args.log_every == 0:
                entry = {"step": step, "seconds": round(time.perf_counter() - start, 1),
                         "answer_loss": round(answer.item(), 4), "accuracy": round(accuracy.item(), 4)}
                log.append(entry)
                print(f"step {step:4d} {entry['seconds']:7.1f}s answer loss {entry['answer_loss']:.3f} "
                      f"accuracy {entry['accuracy']:.3f}", flush=True)
                if args.stop_at and accuracy.item() >= args.stop_at:
                    break
    return log


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--default", action="store_true", help="train.py's default model config (else tiny)")
    parser.add_argument("--layers", default="GGGA", help="G = GDN, A = attention (not with --default)")
    parser.add_argument("--head-dim", type=int, default=32, help="attention head dim (not with --default)")
    parser.add_argument("--rope-theta", type=float, default=None, help="rotary base (default: the config's)")
    parser.add_argument("--rotary", type=float, default=None, help="rotating share of each head")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--span", type=int, default=48)
    parser.add_argument("--draw", type=int, default=512, help="how many word tokens the random spans use")
    parser.add_argument("--gap", type=int, default=0,
                        help="random tokens between the copies, the first copy placed anywhere in them: 0 keeps the "
                             "distance fixed (a positional look-up can solve it), > 0 needs a content look-up")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--optimizer", choices=("adamw", "compact"), default="adamw",
                        help="torch's AdamW (the runs in the notes) or train.py's CompactAdamW (moments in bf16)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--stop-at", type=float, default=0.0, help="stop once accuracy reaches this")
    parser.add_argument("--lm-answer-weight", type=float, default=0.0,
                        help="train on LM loss (all tokens) + this x answer loss, as train.py does (0: answers only)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or args.span < 2 or not 1 <= args.draw <= 8192 - FIRST_WORD:
        parser.error("--steps, --batch >= 1, --span >= 2, 1 <= --draw <= 7936")
    run(args)


if __name__ == "__main__":
    main()
