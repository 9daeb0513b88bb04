"""Is the public call bounded by its longest commit chain or by its total work? (issue 14; a probe, not a test)

    python benchmarks/chain_probe.py [--tokens 32768 131072] [--segments 512] [--out DIR]

On kernel_bench's inputs (head pairs with decay speeds from fast to slow), for each length and selection it
records the commit chains the selector made (events per head pair: the longest, the mean, the number of head
pairs that kept every chunk) and times the public call (median of kernel_bench.ROUNDS interleaved do_bench
rounds) with its stage times (the stage hook; serialized, so indicative). The selections:

- `score` at budgets 0.15, 0.29 and 0.5: the library's default selector; the shared budget lets slow head pairs
  keep every chunk, so the longest chain may not shrink with the budget.
- `uniform` at 0.29: the same number of events, spread evenly over the head pairs, so that no chain is longer
  than 0.29 of the chunks.
- `score` at 0.29 with the chains beside the lists cut into segments of each --segments size (forward.LISTS_SEGMENT,
  each segment's entering state from a warm-up): the longest chain's walk shortened, the total work grown.

Reading (batch 34): the chain pass's stage time follows the longest chain, but `uniform` is not the same work with
short chains: every head pair then has commits, so every chunk's output reads a state and the outputs grow (2.66
against 0.99 ms at 128K); compare the chain pass's stage times, not the calls. Segments that shorten the chain pass
without shortening the call say that something beside the chains holds it. Writes chain_probe.json under --out (one
row per length and selection).
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_bench                                   # noqa: E402
from kernel_bench import DESIGNS, make_inputs, public_call, set_design, stage_times, timed_rounds   # noqa: E402
from sparsegdn import SparseConfig                    # noqa: E402
from sparsegdn.config import num_chunks               # noqa: E402
from sparsegdn.triton import forward                  # noqa: E402

SEGMENTS = (512,)


def selections(segments=SEGMENTS):
    """(name, SparseConfig, forward.LISTS_SEGMENT) of every selection the probe times."""
    def config(budget, selector):
        return SparseConfig(budget=budget, band=1, selector=selector, backend="triton")
    return [("score 0.15", config(0.15, "score"), 0), ("score 0.29", config(0.29, "score"), 0),
            ("score 0.5", config(0.5, "score"), 0), ("uniform 0.29", config(0.29, "uniform"), 0),
            *((f"score 0.29 segments {size}", config(0.29, "score"), size) for size in segments)]


def chains(inputs, config) -> dict:
    """The commit chains of one public call: events per head pair (B = 1)."""
    _, _, info = public_call(inputs, config)
    per_head = info.budget_per_head.flatten().tolist()
    n_chunks = num_chunks(inputs[0].shape[1])
    return {"chunks": n_chunks, "events": sum(per_head), "longest_chain": max(per_head),
            "mean_chain": statistics.fmean(per_head), "whole_chains": sum(1 for n in per_head if n == n_chunks),
            "per_head": per_head}


def with_segment(segment, fn):
    def run():
        forward.LISTS_SEGMENT = segment
        return fn()
    return run


def probe(tokens, segments=SEGMENTS) -> list[dict]:
    inputs = make_inputs(tokens)
    by_band = DESIGNS["by_band"]
    set_design(by_band)
    kept = forward.LISTS_SEGMENT
    runs = {name: with_segment(segment, lambda config=config: public_call(inputs, config))
            for name, config, segment in selections(segments)}
    for fn in runs.values():               # compile and autotune before any timing
        fn()
    torch.cuda.synchronize()
    times, _ = timed_rounds(runs)
    rows = []
    for name, config, segment in selections(segments):
        forward.LISTS_SEGMENT = segment
        row = {"T": tokens, "selection": name, "budget": config.budget, "selector": config.selector,
               "lists_segment": segment, "api_ms": statistics.median(times[name]), "api_ms_runs": times[name],
               **chains(inputs, config), "stage_ms": stage_times(inputs, config, by_band)}
        rows.append(row)
        print(f"T={tokens:6d} {name:26s} api {row['api_ms']:7.3f} ms  chains: longest {row['longest_chain']:5d} "
              f"of {row['chunks']}, mean {row['mean_chain']:7.1f}, whole {row['whole_chains']:2d}  "
              + " ".join(f"{s}={t:.3f}" for s, t in row["stage_ms"].items()), flush=True)
    forward.LISTS_SEGMENT = kept
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[32768, 131072])
    parser.add_argument("--segments", type=int, nargs="*", default=list(SEGMENTS),
                        help="segment sizes (commits) of the chains beside the lists to time `score` 0.29 at")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if any(size <= 0 for size in args.segments):
        parser.error("--segments: commits a segment, > 0 (whole chains are timed anyway)")
    if not torch.cuda.is_available():
        raise SystemExit("chain_probe.py times the GPU path: no CUDA device here")
    print(torch.cuda.get_device_name(), "sources", kernel_bench.sources_digest(), flush=True)
    rows = [row for tokens in args.tokens for row in probe(tokens, args.segments)]
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "chain_probe.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
