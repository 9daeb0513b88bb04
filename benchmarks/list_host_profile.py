"""Where the host's time of a call through the output lists goes: cProfile over calls of the backend entry.

    python benchmarks/list_host_profile.py [--tokens 32768] [--calls 50] [--overlap] [--top 40]

The kernel benchmark's inputs (budget 0.29, band 1, `score`), the two-launch form with the vectors stored and the
Gluon lists (Tinv solved by them), claims on, with or without the lists beside the chain pass. Each call is issued
after the GPU has drained (no overlap with the previous call's kernels), and the profile sorted by own time and by
cumulative time is printed: what a launch plan would have to take off the host.
"""
import argparse
import cProfile
import pstats
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import kernel_bench  # noqa: E402
import overlap_check  # noqa: E402
from sparsegdn import SparseConfig  # noqa: E402
from sparsegdn.triton import list_output  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--overlap", action="store_true")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    inputs = kernel_bench.make_inputs(args.tokens)
    config = SparseConfig(budget=0.29, band=1, selector="score", backend="triton")
    list_output.CLAIM = True
    overlap_check.configure(False, 0, 0.0, args.overlap)
    for _ in range(3):
        kernel_bench.backend_entry(inputs, config)
    torch.cuda.synchronize()
    profiler = cProfile.Profile()
    for _ in range(args.calls):
        torch.cuda.synchronize()
        profiler.enable()
        kernel_bench.backend_entry(inputs, config)
        profiler.disable()
    torch.cuda.synchronize()
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
