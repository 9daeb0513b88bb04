"""The lists' route against the one launch on other shapes than the kernel benchmark's (batch rows, value heads).

    python benchmarks/route_shapes.py [--shapes 2x16x32x4096 1x16x16x8192 ...] [--out rows.json]

Each shape is BxHxHVxT (K = V = 128, bf16, kernel_bench's inputs otherwise: head pairs of slow to fast decay). For
each, the public call (budget 0.29, band 1, `score`, final state returned) in kernel_bench's designs `one_launch` and
`lists_any_length`, do_bench medians over three interleaved rounds, and which route each took (the lists' length
conditions are lifted in the second, the budget's and list_output's own conditions stay). Also the two routes'
outputs against each other (relative error of o and of the final state: the warm-up of the lists' cut chains and
the two paths' roundings differ, so not zero). Which calls the default sends where is forward.lists_by_default.
Needs a GPU.
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import kernel_bench  # noqa: E402
from sparsegdn import SparseConfig  # noqa: E402
from sparsegdn.config import num_chunks  # noqa: E402
from sparsegdn.reference import relative_error  # noqa: E402

DESIGNS = ("one_launch", "lists_any_length")
SHAPES = ("1x16x32x4096", "2x16x32x4096", "4x16x32x4096", "1x16x48x4096", "1x16x64x4096", "1x16x16x8192",
          "2x16x32x8192", "1x16x48x8192")


def parse_shape(text: str) -> tuple[int, int, int, int]:
    """'BxHxHVxT' as four positive ints, HV a multiple of H; anything else refused."""
    parts = text.split("x")
    if len(parts) != 4 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise ValueError(f"shape {text!r}: BxHxHVxT, four positive integers (e.g. 2x16x32x4096)")
    batch, heads, value_heads, tokens = map(int, parts)
    if value_heads % heads:
        raise ValueError(f"shape {text!r}: HV ({value_heads}) must be a multiple of H ({heads})")
    return batch, heads, value_heads, tokens


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    shapes = [parse_shape(text) for text in args.shapes]          # every shape checked before any GPU work
    config = SparseConfig(budget=0.29, band=1, selector="score", backend="triton")
    rows = []
    for batch, heads, value_heads, tokens in shapes:
        inputs = kernel_bench.make_inputs(tokens, batch=batch, heads=heads, value_heads=value_heads)
        calls, results, took = {}, {}, {}
        for design in DESIGNS:
            setting = kernel_bench.DESIGNS[design]
            call = lambda inputs=inputs: kernel_bench.public_call(inputs, config)  # noqa: E731
            calls[design] = kernel_bench.with_design(setting, call)
            o, state, _ = calls[design]()
            torch.cuda.synchronize()
            results[design] = (o.clone(), state.clone())
            took[design] = kernel_bench.takes_lists(inputs, config, setting)
        times = {design: [] for design in DESIGNS}
        for _ in range(args.rounds):
            for design in DESIGNS:
                times[design].append(triton.testing.do_bench(calls[design], warmup=25, rep=100, return_mode="median"))
        (o_one, s_one), (o_lists, s_lists) = results["one_launch"], results["lists_any_length"]
        median = {design: statistics.median(values) for design, values in times.items()}
        row = {"B": batch, "H": heads, "HV": value_heads, "T": tokens,
               "head_chunks": batch * value_heads * num_chunks(tokens),
               "one_launch_ms": median["one_launch"], "lists_ms": median["lists_any_length"], "runs": times,
               "lists_taken": took["lists_any_length"], "one_launch_took_lists": took["one_launch"],
               "change": median["lists_any_length"] / median["one_launch"] - 1,
               "o_rel_err": relative_error(o_lists, o_one), "state_rel_err": relative_error(s_lists, s_one),
               "device": torch.cuda.get_device_name(), "sources": kernel_bench.sources_digest()}
        rows.append(row)
        print(f"B={batch} H={heads} HV={value_heads} T={tokens:6d}  one launch {row['one_launch_ms']:.3f} ms  lists "
              f"{row['lists_ms']:.3f} ms ({100 * row['change']:+.1f}%, lists taken {row['lists_taken']})  o rel "
              f"{row['o_rel_err']:.1e}  state rel {row['state_rel_err']:.1e}", flush=True)
        kernel_bench.set_design(kernel_bench.DESIGNS["by_band"])
        del results
        torch.cuda.empty_cache()
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
