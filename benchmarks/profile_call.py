"""Where the public call's time goes on the GPU: every kernel and host-side op, per call (a profile, not a test).

    python benchmarks/profile_call.py --tokens 4096 32768 --out runs/profile

For each length, the public sparse_gated_delta_rule call and the Triton backend entry alone (the
kernel benchmark's shape and inputs, budget 0.29, band 1, `score`) run 20 times each under
torch.profiler after a warm-up. Printed and written (profile_call.json): per call, the device time of
every kernel (name, launches, ms) and the host's wall time, so launch gaps show as host time above the
summed device time, and the wall time per call of 5 x 50 calls with no profiler attached
(plain_wall_ms). Uses benchmarks/kernel_bench.py's inputs and its current design;
SPARSEGDN_FAST_LAUNCH=0 sends every launch through Triton's own path (to measure launch.py).
`--host N` adds a cProfile of N calls at `--host-tokens` (default: the first length), of the backend entry
each followed by a device sync and of the public call (host_profile_entry.txt, host_profile_public.txt): which
Python functions the host spends its time in, when the call is bound by the host; and, for the public call,
when the host reaches each stage's end (a stage hook that only reads the host's clock), so that a stage
launched later than the GPU could start it shows (host_stages in profile_call.json).
"""
import argparse
import cProfile
import io
import pstats
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import kernel_bench                                # noqa: E402
from sparsegdn import SparseConfig                 # noqa: E402
from sparsegdn.triton import forward, launch       # noqa: E402

CALLS = 20


def calls(inputs, config):
    return {"public": lambda: kernel_bench.public_call(inputs, config),
            "entry": lambda: kernel_bench.backend_entry(inputs, config)}


def warm_up(fn):
    """Three calls, then wait for the device: compiled, autotuned and allocated before anything is timed."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()


def profile_one(fn):
    """(host wall ms per call, [(kernel, launches per call, device ms per call)] longest first)."""
    warm_up(fn)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) * 1e3 / CALLS
    kernels = [(e.key, e.count / CALLS, e.device_time_total / 1e3 / CALLS)
               for e in prof.key_averages() if e.device_time_total > 0 and e.device_type == torch.autograd.DeviceType.CUDA]
    if not kernels:     # older profilers attribute device time to the host op that launched it
        kernels = [(e.key, e.count / CALLS, e.device_time_total / 1e3 / CALLS)
                   for e in prof.key_averages() if e.device_time_total > 0 and not e.key.startswith("aten::")]
    return wall, sorted(kernels, key=lambda row: -row[2])


def plain_wall(fn, loops=5, n=50):
    """ms per call of `loops` runs of n back-to-back calls with no profiler attached (the device queue
    overlaps the host's next launches unless the call itself syncs): each loop's figure, in order."""
    warm_up(fn)
    return kernel_bench.loop_walls(fn, loops, n)


def host_profile(fn, n, path, what):
    """cProfile of n calls of fn, each followed by a device sync (as the public call ends): the host functions by
    own and total time."""
    warm_up(fn)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(n):
        fn()
        torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(40)
    path.write_text(f"{n} calls of {what}, each followed by a device sync\n" + text.getvalue())
    print(text.getvalue()[:6000])


def host_stages(inputs, config, n=50):
    """Median ms from the public call's start to the host's reaching each stage's end (its launches queued, not
    run), and to the call's return; the hook reads only the host's clock (no event, no sync). A stage hook keeps the
    call off the CUDA graphs (graphs.wanted), so at their lengths (8K and below) this times the launched path."""
    marks = {}

    def hook(name):
        marks.setdefault(name, []).append(time.perf_counter() - start)
    warm_up(lambda: kernel_bench.public_call(inputs, config, stage_hook=lambda name: None))
    marks.clear()
    for _ in range(n):
        start = time.perf_counter()
        kernel_bench.public_call(inputs, config, stage_hook=hook)
        marks.setdefault("returned", []).append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1e3 for name, values in marks.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 32768])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "profile")
    parser.add_argument("--host", type=int, default=0, help="cProfile this many calls of each (0: none)")
    parser.add_argument("--host-tokens", type=int, default=None, help="the length of --host (default: the first)")
    args = parser.parse_args()
    if args.host_tokens is not None and args.host_tokens not in args.tokens:
        parser.error(f"--host-tokens {args.host_tokens} is not one of --tokens {args.tokens}")
    args.out.mkdir(parents=True, exist_ok=True)
    config = SparseConfig(budget=0.29, band=1, selector="score", backend="triton")
    results = []
    for tokens in args.tokens:
        inputs = kernel_bench.make_inputs(tokens)
        for name, fn in calls(inputs, config).items():
            wall, kernels = profile_one(fn)
            plain = plain_wall(fn)
            device_ms = sum(ms for _, _, ms in kernels)
            launches = sum(n for _, n, _ in kernels)
            results.append({"T": tokens, "call": name, "host_wall_ms": wall, "plain_wall_ms": plain,
                            "device_ms": device_ms, "launches": launches, "kernels": kernels,
                            "design": {"store_inverse": forward.STORE_INVERSE, "commit_segment": forward.COMMIT_SEGMENT,
                                       "fast_launch": launch.FAST_LAUNCH}})
            print(f"T={tokens} {name}: wall {wall:.3f} ms/call under the profiler, "
                  f"{min(plain):.3f}-{max(plain):.3f} without; device {device_ms:.3f} ms in {launches:.0f} launches")
            for kernel, count, ms in kernels:
                print(f"    {ms:8.4f} ms  x{count:4.1f}  {kernel[:90]}")
        if args.host and tokens == (args.host_tokens or args.tokens[0]):
            for name, fn in calls(inputs, config).items():
                host_profile(fn, args.host, args.out / f"host_profile_{name}.txt", f"the {name} call at T={tokens}")
            stages = host_stages(inputs, config)
            results.append({"T": tokens, "call": "public", "host_stages_ms": stages})
            print(f"T={tokens} public call, host reaches each stage's end (ms from its start): "
                  + ", ".join(f"{name} {ms:.3f}" for name, ms in stages.items()))
        del inputs
    (args.out / "profile_call.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
