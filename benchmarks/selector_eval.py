"""Output error of each selector at equal budget, on random and structured GDN inputs (CPU, torch backend).

    python benchmarks/selector_eval.py [--budget 0.29] [--seeds 3] [--tokens 4096] [--out analysis/results]

Writes selector_eval.json (one row per family x seed x selector) and selector_eval.md (means).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import pathlib
import statistics

import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import sparsegdn                                     # noqa: E402
from analysis.evaluation import GRID_SELECTORS       # noqa: E402
from sparsegdn.reference import relative_error       # noqa: E402


def gdn_inputs(family: str, seed: int, tokens: int, key_heads=4, value_heads=8, dim=64):
    """Inputs shaped like a GDN layer's; g follows the model's -exp(A_log) * softplus(a + dt_bias)."""
    gen = torch.Generator().manual_seed(seed)
    randn = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    rand = lambda *s: torch.rand(*s, generator=gen)  # noqa: E731
    q, k = randn(1, tokens, key_heads, dim), randn(1, tokens, key_heads, dim)
    v = randn(1, tokens, value_heads, dim)
    # per-head decay rate, log-uniform between 1e-3 and 0.3 per token, jittered per token
    rate = torch.exp(math.log(1e-3) + rand(value_heads) * math.log(300.0))
    g = -rate * torch.nn.functional.softplus(randn(1, tokens, value_heads) * 0.5 + 0.55)
    beta = torch.sigmoid(randn(1, tokens, value_heads))
    if family == "bursts":
        # weak writes everywhere, strong ones in a few chunks of each head pair
        beta = 0.03 * rand(1, tokens, value_heads)
        n_chunks = sparsegdn.num_chunks(tokens)
        for head in range(value_heads):
            for c in torch.randperm(n_chunks, generator=gen)[: max(1, n_chunks // 8)].tolist():
                start = c * sparsegdn.CHUNK_SIZE
                beta[0, start:start + sparsegdn.CHUNK_SIZE, head] = 0.6 + 0.4 * rand(min(sparsegdn.CHUNK_SIZE, tokens - start))
    elif family == "slow_fast":
        slow = torch.arange(value_heads) % 2 == 0
        g = torch.where(slow, torch.full_like(g, -2e-3), torch.full_like(g, -0.5)) * (0.5 + rand(g.shape))
    elif family == "value_scale":
        # head pairs whose values differ in magnitude by up to 30x
        v = v * torch.exp(rand(1, 1, value_heads, 1) * math.log(30.0))
    return q, k, v, g, beta


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=0.29)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--out", default="analysis/results")
    args = parser.parse_args()
    torch.set_num_threads(2)
    families = ("random", "bursts", "slow_fast", "value_scale")
    selectors = GRID_SELECTORS
    rows = []
    for family in families:
        for seed in range(args.seeds):
            q, k, v, g, beta = gdn_inputs(family, seed, args.tokens)
            o_dense, s_dense = sparsegdn.dense_gated_delta_rule(q, k, v, g, beta, output_final_state=True,
                                                                backend="torch")
            for band in (3, 1):
                for selector in selectors:
                    config = sparsegdn.SparseConfig(budget=args.budget, selector=selector, band=band, seed=seed,
                                                    backend="torch")
                    o, s, info = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, output_final_state=True,
                                                                   config=config)
                    rows.append(dict(family=family, seed=seed, band=band, selector=selector,
                                     budget=args.budget, events=int(info.events.sum()),
                                     rel_err_o=relative_error(o, o_dense),
                                     rel_err_state=relative_error(s, s_dense)))
                    print(f"{family:12s} seed {seed} band {band} {selector:8s} "
                          f"o {rows[-1]['rel_err_o']:.4f} state {rows[-1]['rel_err_state']:.4f}", flush=True)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = (f"python benchmarks/selector_eval.py --budget {args.budget} --seeds {args.seeds} "
               f"--tokens {args.tokens}")
    meta = dict(date=datetime.date.today().isoformat(), device="cpu", command=command,
                shape=dict(B=1, T=args.tokens, H=4, HV=8, K=64, V=64))
    (out / "selector_eval.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    lines = [f"# Selector error at budget {args.budget} (mean over {args.seeds} seeds)", "",
             f"{meta['date']}, CPU, torch backend, B=1 T={args.tokens} H=4 HV=8 K=V=64. Command: `{command}`", "",
             "Relative L2 error of o (and of the final state) versus the dense operator. Lower is better.", "",
             "| family | band | " + " | ".join(selectors) + " |", "|---|---|" + "---|" * len(selectors)]
    for family in families:
        for band in (3, 1):
            cells = []
            for selector in selectors:
                mine = [r for r in rows if (r["family"], r["band"], r["selector"]) == (family, band, selector)]
                cells.append(f"{statistics.mean(r['rel_err_o'] for r in mine):.4f} "
                             f"({statistics.mean(r['rel_err_state'] for r in mine):.3f})")
            lines.append(f"| {family} | {band} | " + " | ".join(cells) + " |")
    (out / "selector_eval.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
