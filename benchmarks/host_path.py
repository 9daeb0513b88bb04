"""The Triton entry's host work alone, on any machine: every kernel launch replaced by a no-op (a probe).

    python benchmarks/host_path.py [--tokens 4096] [--calls 200] [--plans] [--profile]

At 4K tokens the GPU call is bound by its host work (analysis/results/kernel_bench.notes.md), which a
CPU machine can measure without a GPU: this runs `sparsegdn.triton.forward.sparse_gdn_forward` on CPU
tensors of the benchmark's shape with each `launch.Launcher` handed a stand-in kernel, so what is timed
is our Python, the torch allocations and selection ops (CPU ones, cheaper than their CUDA launches) and
the fast launch path's own key and argument handling. `--plans` times the entry as a GPU call of a planned key
runs it (sparsegdn/triton/call_plans.py: the key, then the recorded launches; on the CPU, large allocations
cost more than the GPU's caching allocator charges). Prints ms per call; `--profile` adds the functions that
take the time. A guide for the host path between GPU sessions, not a GPU figure.
"""
import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import kernel_bench                                                                        # noqa: E402
from sparsegdn import SparseConfig                                                         # noqa: E402
from sparsegdn.triton import call_plans, forward, launch, segment_scan  # noqa: E402,F401 (every kernel module)

H, HV, K = 16, 32, 128          # the kernel benchmark's heads


class NoKernel:
    """Stands in for a compiled kernel and for the (autotuned) kernel that returns it."""

    function = packed_metadata = None
    best_config = type("Config", (), {"all_kwargs": lambda self: {"BV": 32, "GROUP": 1, "STATE_BV": 16}})()

    def __getitem__(self, grid):
        return lambda *args, **constants: self

    def run(self, *launch_args):
        pass


class HostDriver:
    class active:
        get_current_device = staticmethod(lambda: 0)
        get_current_stream = staticmethod(lambda device: 0)


def stub_launches():
    launch.FAST_LAUNCH = True
    launch.driver = HostDriver
    for launcher in launch.launchers():
        launcher.kernel, launcher.autotuned = NoKernel(), True
    call_plans._zero_kernels[None] = NoKernel()    # a planned call's clear (zero_words) on CPU tensors (device None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--plans", action="store_true", help="the entry through call_plans, as on a GPU")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    stub_launches()
    gen = torch.Generator().manual_seed(0)
    inputs = (torch.randn(1, args.tokens, H, K, generator=gen).bfloat16(),
              torch.randn(1, args.tokens, H, K, generator=gen).bfloat16(),
              torch.randn(1, args.tokens, HV, K, generator=gen).bfloat16(),
              -torch.rand(1, args.tokens, HV, generator=gen) * 0.1, torch.rand(1, args.tokens, HV, generator=gen))
    config = SparseConfig(budget=0.29, selector="score", band=1, backend="triton")

    def call():
        kernel_bench.backend_entry(inputs, config)

    if args.plans:        # forward.sparse_gdn_forward's GPU branch: the call through its key's plan
        q, k, v, g, beta = inputs
        tensors = dict(q=q, k=k, v=v, g=g, beta=beta, initial_state=None)
        options = dict(events=None, budget=config.budget, selector=config.selector, band=config.band,
                       scale=K ** -0.5, output_final_state=True, use_qk_l2norm_in_kernel=True, stage_hook=None)

        def call():    # noqa: F811
            call_plans.call(forward._forward, tensors, options, design=forward.design_switches())

    for _ in range(20):
        call()
    if args.plans and not call_plans._plans:
        raise SystemExit("no plan was made for this call: see call_plans.build")
    start = time.perf_counter()
    for _ in range(args.calls):
        call()
    print(f"T={args.tokens}: host work of the entry{' from its plan' if args.plans else ''} "
          f"{(time.perf_counter() - start) * 1e3 / args.calls:.3f} ms a call "
          f"(launches are no-ops; {torch.get_num_threads()} torch threads)")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(lambda: [call() for _ in range(args.calls)])
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
