"""Where a short call's time goes on each route: the public call's kernels on the GPU's timeline, per design.

    python benchmarks/route_timelines.py --tokens 4096 8192 [--designs one_launch lists_any_length] [--out rows.json]

On the kernel benchmark's inputs (kernel_bench.make_inputs; budget 0.29, band 1, `score`, final state returned), for
each length and each of kernel_bench's designs: one warm public call profiled (overlap_check.kernel_timeline: each
kernel's name, start and duration in us from the call's first kernel), printed as a table and kept as JSON rows.
The span is the last kernel's end; the gaps are the time between one kernel's end and the next's start where no
kernel ran (the host's launches, or a dependent launch waiting). A profiled call is slower than a timed one (the
profiler's own cost, and a first gap of a millisecond or more after the call's first small kernel in batch 48's run):
read each kernel's duration and the gaps after the early scan, not the span or the idle total, and time with
kernel_bench.py. Needs a GPU.
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import kernel_bench  # noqa: E402
from overlap_check import kernel_timeline  # noqa: E402
from sparsegdn import SparseConfig  # noqa: E402


def idle_us(kernels) -> float:
    """Time within the span when no kernel ran: the union of the kernels' intervals taken from the span."""
    busy, reach = 0.0, None
    for _, start, duration in sorted(kernels, key=lambda kernel: kernel[1]):
        end = start + duration
        if reach is None or start > reach:
            busy += duration
            reach = end
        elif end > reach:
            busy += end - reach
            reach = end
    span = max((start + duration for _, start, duration in kernels), default=0.0)
    return span - busy


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--designs", nargs="+", choices=sorted(kernel_bench.DESIGNS),
                        default=["one_launch", "lists_any_length"])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    config = SparseConfig(budget=0.29, band=1, selector="score", backend="triton")
    rows = []
    for tokens in args.tokens:
        inputs = kernel_bench.make_inputs(tokens)
        for design in args.designs:
            kernel_bench.set_design(kernel_bench.DESIGNS[design])
            kernels = kernel_timeline(lambda: kernel_bench.public_call(inputs, config))
            span = max((start + duration for _, start, duration in kernels), default=0.0)
            rows.append({"T": tokens, "design": design, "span_us": span, "idle_us": idle_us(kernels),
                         "kernels": kernels})
            print(f"T={tokens} {design}: span {span:.1f} us, idle {rows[-1]['idle_us']:.1f} us, "
                  f"{len(kernels)} kernels", flush=True)
            for name, start, duration in kernels:
                print(f"    {start:9.1f} {duration:9.1f}  {name}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
