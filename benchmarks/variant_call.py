"""The backend entry under one config_probe variant, a few calls: a process for a profiler to attach to.

    ncu -k regex:state_output_kernel --launch-skip 1 --launch-count 1 --metrics ... \
        python benchmarks/variant_call.py overlap-bv16 --tokens 32768

Applies the variant (benchmarks/config_probe.py) with autotuning off (SPARSEGDN_AUTOTUNE=0 unless set: every
kernel launches its first config, or the variant's forced one, and no autotuner benchmark launch comes between the
calls) and calls the Triton backend's entry on the kernel benchmark's inputs (budget 0.29, band 1, `score`, final
state returned) `--calls` times, synchronising after each. Prints nothing of its own but the variant and length:
what it measures is the profiler's.
"""
import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("SPARSEGDN_AUTOTUNE", "0")       # read when sparsegdn is imported
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main():
    import config_probe
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variant", choices=sorted(config_probe.VARIANTS))
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--calls", type=int, default=2)
    args = parser.parse_args()
    unset = config_probe.unset_settings(args.variant)
    if unset:
        parser.error(f"{args.variant} needs {unset} in this process's environment")

    import torch
    import kernel_bench
    from sparsegdn import SparseConfig
    from sparsegdn.triton import forward
    config_probe.apply_variant(args.variant)
    inputs = kernel_bench.make_inputs(args.tokens)
    config = SparseConfig(budget=0.29, band=1, selector="score", backend="triton")
    kernel_bench.set_design((forward.STORE_INVERSE, forward.COMMIT_SEGMENT))
    for _ in range(args.calls):
        kernel_bench.backend_entry(inputs, config)
        torch.cuda.synchronize()
    print(f"{args.variant} at {args.tokens} tokens: {args.calls} calls", flush=True)


if __name__ == "__main__":
    main()
