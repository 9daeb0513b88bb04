"""Where the public call's time goes beyond its kernels' launches: the flag read-back (a probe, not a test).

    python benchmarks/public_call_probe.py --tokens 4096 32768 --out runs/probe

profile_call.py showed the public call at 4K taking 0.6 ms more than the backend entry alone once the
launches were fast (0.99-1.10 against 0.40-0.42 ms), with no extra kernel. This times, per call and
with no profiler, the same entry followed by each way of waiting for its flags: none, a device
synchronize, the public call's `flags.tolist()`, a copy into pinned memory with an event, and the
public call itself; for each, the host's launch time (until the entry returns), its wait, and the
wall time per call (medians of `--calls` calls after a warm-up). Uses benchmarks/kernel_bench.py's
inputs (budget 0.29, band 1, `score`). `public` is the public call without the early checks (it waits for its
last kernel), `public+early` with them (forward.EARLY_CHECKS: it waits for pass 1's flags only), in the same
process; the entry cases run under the process's setting (SPARSEGDN_EARLY_CHECKS, on by default: the entry's copy
of the early flags included).

Each case also counts, over its wall-time calls, the caching allocator's calls into the driver (torch.cuda.memory_stats:
`num_device_alloc`, `num_device_free`, `num_alloc_retries`, per call): a cudaMalloc or cudaFree inside a call costs
host time and synchronizes the device, which would show as host share that moves from process to process (the public
call's share over its kernels read +2.3% to +7.2% at 128K in different processes, batches 28-29) while the kernels do
not move.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import kernel_bench                                # noqa: E402
from sparsegdn import SparseConfig                 # noqa: E402
from sparsegdn import validation                   # noqa: E402
from sparsegdn.triton import call_plans, forward, graphs, launch   # noqa: E402
from sparsegdn.triton.chunk_loads import NUM_FLAGS       # noqa: E402


def waits(flags_pinned):
    """Ways to wait for one entry call's flags: name -> function of the flags tensor."""
    def pinned(flags):
        flags_pinned.copy_(flags, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        done.synchronize()
        return flags_pinned.tolist()
    return {"none": lambda flags: None, "synchronize": lambda flags: torch.cuda.synchronize(),
            "tolist": lambda flags: flags.tolist(), "pinned_event": pinned}


def time_calls(call, wait, calls):
    """Medians (launch ms, wait ms), wall ms per call over `calls` calls after 5 untimed ones, and the allocator's
    driver calls per call during the wall-time calls (kernel_bench.allocator_counts)."""
    launch_ms, wait_ms = [], []
    for i in range(calls + 5):
        start = time.perf_counter()
        flags = call()
        launched = time.perf_counter()
        wait(flags)
        end = time.perf_counter()
        if i >= 5:
            launch_ms.append((launched - start) * 1e3)
            wait_ms.append((end - launched) * 1e3)
    torch.cuda.synchronize()
    before = kernel_bench.allocator_counts()
    start = time.perf_counter()
    for _ in range(calls):
        wait(call())
    torch.cuda.synchronize()
    wall = (time.perf_counter() - start) * 1e3 / calls
    after = kernel_bench.allocator_counts()
    per_call = {name: (after[name] - before[name]) / calls for name in kernel_bench.ALLOCATOR_COUNTS}
    return statistics.median(launch_ms), statistics.median(wait_ms), wall, per_call


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 32768])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "probe")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    config = SparseConfig(budget=0.29, band=1, selector="score", backend="triton")
    pinned = torch.zeros(NUM_FLAGS, dtype=torch.int32, pin_memory=True)
    rows = []
    for tokens in args.tokens:
        inputs = kernel_bench.make_inputs(tokens)

        def entry():
            return kernel_bench.backend_entry(inputs, config)[-1]       # its flags, for the waits

        def public():
            kernel_bench.public_call(inputs, config)

        cases = {f"entry+{name}": (entry, wait) for name, wait in waits(pinned).items()}
        cases["public"] = (public, lambda flags: None)
        cases["public+early"] = (public, lambda flags: None)     # with forward.EARLY_CHECKS ("public": without)
        for name, (call, wait) in cases.items():
            process_early = forward.EARLY_CHECKS
            forward.EARLY_CHECKS = {"public": False, "public+early": True}.get(name, process_early)
            returns = validation.early_returns
            try:
                launch_ms, wait_ms, wall, driver = time_calls(call, wait, args.calls)
            finally:
                early, forward.EARLY_CHECKS = forward.EARLY_CHECKS, process_early
            rows.append({"T": tokens, "case": name, "launch_ms": launch_ms, "wait_ms": wait_ms, "wall_ms": wall,
                         "early_checks": early, "returned_early": validation.early_returns > returns,
                         "fast_launch": launch.FAST_LAUNCH, "call_plans": call_plans.CALL_PLANS,
                         "cuda_graph": graphs.CUDA_GRAPH and tokens <= graphs.MAX_TOKENS,
                         **{f"{key}_per_call": value for key, value in driver.items()}})
            print(f"T={tokens} {name:22s} launch {launch_ms:.3f}  wait {wait_ms:.3f}  wall/call {wall:.3f} ms  "
                  f"cudaMalloc/call {driver['num_device_alloc']:.2f}  cudaFree/call {driver['num_device_free']:.2f}  "
                  f"retries/call {driver['num_alloc_retries']:.2f}")
        inputs = None       # freed before the next length (the closures above read it only while it runs)
    (args.out / "public_call_probe.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
