"""Where commits in pairs (commit_pairs.py) part from single commits, stage by stage, on this device.

    python benchmarks/pair_check.py [--device cuda]

For a few shapes: the lists of event_prepare, then (1) pair_prepare's rewrite of every second event against
torch's own w2' = d2 (c1 w2 - P w1), u2' = u2 - d2 P u1 (P = w2 k1^T, rounded as the kernel rounds it), and
(2) the paired chain's snapshots against the single-commit chain's, one by one: the first snapshot that
differs per head pair, and whether it follows the first or the second event of a pair. Prints one JSON line
per shape. The GPU run of 2026-12-01 found paired wrong at K = 128 (config_probe's paired-separate): this
says which stage.
"""
import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from gdn_inputs import random_events, random_inputs, rel_err  # noqa: E402

import sparsegdn  # noqa: E402
from sparsegdn.triton.chunk_loads import NUM_FLAGS  # noqa: E402
from sparsegdn.triton.commit_pairs import pair_prepare  # noqa: E402
from sparsegdn.triton.event_prepare import event_prepare  # noqa: E402
from sparsegdn.triton.intra_chunk import intra_chunk  # noqa: E402
from sparsegdn.triton.schedule import build_schedule  # noqa: E402
from sparsegdn.triton.state_pass import state_pass  # noqa: E402

SHAPES = [  # (B, T, H, HV, K, V, band, dtype); float32 lists are walked one commit at a time on a GPU (the
    # paired chain at K = V = 128 needs 294,928 B of shared memory: OutOfResources on the H200, 2026-12-01)
    (1, 1000, 3, 3, 128, 128, 2, torch.bfloat16), (1, 1000, 3, 3, 64, 128, 2, torch.bfloat16),
    (1, 1000, 3, 3, 128, 64, 2, torch.bfloat16),
]


def expected_pairs(w, u, k_commit, schedule, chunk_log_decay):
    """torch's rewrite of every second event (float32, P rounded to the lists' dtype)."""
    w2s, u2s = w.clone(), u.clone()
    batch, heads, n_chunks = schedule.events.shape
    for b in range(batch):
        for h in range(heads):
            count, first = int(schedule.per_head[b, h]), int(schedule.first_event[b, h])
            for pair in range(count // 2):
                s1, s2 = first + 2 * pair, first + 2 * pair + 1
                c1 = int(schedule.event_chunks[b, s1]) - h * n_chunks
                c2 = int(schedule.event_chunks[b, s2]) - h * n_chunks
                d2 = torch.exp(schedule.log_decay_since[b, h, c2].float())
                gamma1 = torch.exp(chunk_log_decay[b, h, c1].float())
                w1, k1, u1 = w[b, s1].float(), k_commit[b, s1].float(), u[b, s1].float()
                w2, u2 = w[b, s2].float(), u[b, s2].float()
                p = (w2 @ k1.T).to(w.dtype).float()
                w2s[b, s2] = (d2 * (gamma1 * w2 - p @ w1)).to(w.dtype)
                u2s[b, s2] = (u2 - d2 * (p @ u1)).to(u.dtype)
    return w2s, u2s


def check(shape, device):
    batch, tokens, key_heads, value_heads, key_dim, value_dim, band, dtype = shape
    q, k, v, g, beta, s0 = random_inputs(batch, tokens, key_heads, value_heads, key_dim, value_dim, dtype=dtype,
                                         seed=7, initial_state=True, device=device)
    n_chunks = sparsegdn.num_chunks(tokens)
    flags = torch.zeros(NUM_FLAGS, dtype=torch.int32, device=device)
    t_inv, chunk_log_decay, _, _, _ = intra_chunk(k, v, g, beta, flags, band=band, normalize=True,
                                               num_value_heads=value_heads, num_chunks=n_chunks, store_inverse=False)
    events = random_events(batch, value_heads, n_chunks, seed=3, p=0.5).to(device)
    events[0, 0] = True
    schedule = build_schedule(events, chunk_log_decay)
    w, u, k_commit = event_prepare(k, v, g, beta, t_inv, schedule.event_chunks, normalize=True,
                                   num_value_heads=value_heads, num_chunks=n_chunks, band=band)
    single, single_final = state_pass(w, u, k_commit, schedule, s0, flags, store_final=True)
    want_w, want_u = expected_pairs(w, u, k_commit, schedule, chunk_log_decay)
    pair_prepare(w, u, k_commit, schedule)
    report = {"shape": [batch, tokens, key_heads, value_heads, key_dim, value_dim, band, str(dtype)],
              "per_head": schedule.per_head.tolist(),
              "pair_prepare_w_err": rel_err(w, want_w), "pair_prepare_u_err": rel_err(u, want_u)}
    paired, paired_final = state_pass(w, u, k_commit, schedule, s0, flags, store_final=True,
                                      paired=True)
    report["final_state_err"] = rel_err(paired_final, single_final)
    firsts = []
    for b in range(batch):
        for h in range(value_heads):
            count, first = int(schedule.per_head[b, h]), int(schedule.first_event[b, h])
            base = first + h
            errs = [rel_err(paired[b, base + j], single[b, base + j]) for j in range(count + 1)]
            bad = [j for j, e in enumerate(errs) if not e <= 2e-2]
            firsts.append({"row": [b, h], "count": count, "first_bad_snapshot": bad[0] if bad else None,
                           "bad": len(bad), "worst": max(errs)})
    report["snapshots"] = firsts
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    for shape in SHAPES:
        print(json.dumps(check(shape, args.device)), flush=True)


if __name__ == "__main__":
    main()
