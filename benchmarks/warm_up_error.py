"""How far the warm-up segments move the outputs (GPU only): the Triton path with whole commit chains (exact, the
default) against the same call with the chains cut into segments that walk their entering state from a warm-up
(forward.COMMIT_SEGMENT, forward.WARM_UP; with the split outputs and the stored chunk vectors, the fastest
arrangement measured, analysis/results/kernel_bench.notes.md), on the kernel benchmark's inputs, budget 0.29,
`score`. For scale, both against the torch backend where the length allows (its own rounding is the yardstick).

    python benchmarks/warm_up_error.py [--tokens 32768 131072] [--bands 1 3] [--reference-max-tokens 32768]

Prints one JSON line a case: rel_err of o and of the final state against the exact path (and the torch
backend's), and the largest absolute difference of o. The warm-up's bound (state_pass.warm_up_begin) holds for
band 3; for bands 0-2 only measurement such as this one says how far it is.
"""
import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import kernel_bench                          # noqa: E402
import sparsegdn                             # noqa: E402
from sparsegdn.triton import forward         # noqa: E402


def rel_err(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def run(inputs, band, backend="triton", events=None):
    """(o, final state, events) of the public call; `events` given: those events (the torch backend's reference
    commits the same chunks as the Triton path it is compared with)."""
    config = sparsegdn.SparseConfig(budget=0.29, band=band, selector="score", backend=backend)
    o, state, info = kernel_bench.public_call(inputs, config, **({} if events is None else {"events": events}))
    return o, state, info.events


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[32768, 131072])
    parser.add_argument("--bands", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--segments", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--warm-up", type=float, default=20.0)
    parser.add_argument("--reference-max-tokens", type=int, default=32768)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("warm_up_error.py measures the GPU path: it needs a CUDA device")
    for tokens in args.tokens:
        inputs = kernel_bench.make_inputs(tokens)
        for band in args.bands:
            exact = run(inputs, band)
            reference = run(inputs, band, "torch", exact[2]) if tokens <= args.reference_max_tokens else None
            for segment in args.segments:
                saved = (forward.COMMIT_SEGMENT, forward.WARM_UP, forward.SPLIT_OUTPUTS, forward.STORE_VECTORS)
                forward.COMMIT_SEGMENT, forward.WARM_UP = segment, args.warm_up
                forward.SPLIT_OUTPUTS = forward.STORE_VECTORS = True
                try:
                    fast = run(inputs, band)
                finally:
                    forward.COMMIT_SEGMENT, forward.WARM_UP, forward.SPLIT_OUTPUTS, forward.STORE_VECTORS = saved
                row = {"tokens": tokens, "band": band, "segment": segment, "warm_up": args.warm_up,
                       "same_events": bool(torch.equal(fast[2], exact[2])),
                       "o_rel_err_vs_exact": rel_err(fast[0], exact[0]),
                       "o_max_abs_diff_vs_exact": (fast[0].float() - exact[0].float()).abs().max().item(),
                       "state_rel_err_vs_exact": rel_err(fast[1], exact[1])}
                if reference is not None:
                    row.update(exact_o_rel_err_vs_torch=rel_err(exact[0], reference[0]),
                               warm_up_o_rel_err_vs_torch=rel_err(fast[0], reference[0]),
                               exact_state_rel_err_vs_torch=rel_err(exact[1], reference[1]),
                               warm_up_state_rel_err_vs_torch=rel_err(fast[1], reference[1]))
                print(json.dumps(row), flush=True)
            del exact, reference
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
