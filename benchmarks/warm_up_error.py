"""How far the warm-up segments move the outputs (GPU only), each effect apart, on the kernel benchmark's inputs,
budget 0.29, `score`, the same events in every run of a case:

    exact      whole commit chains, outputs in the one launch, vectors computed
    split      whole chains, the split outputs with the stored chunk vectors (forward.SPLIT_OUTPUTS, STORE_VECTORS):
               the own outputs round otherwise (beta folded into M), nothing else changes
    warm-up    as split, with the chains cut into segments that walk their entering state from a warm-up
               (forward.COMMIT_SEGMENT, WARM_UP): the fastest arrangement measured (kernel_bench.notes.md)

The warm-up's own error is warm-up against split; against the torch backend (where the length allows) all three.
A case whose chains are not cut (segments not shorter than the chunk count: state_pass.segmented_chains) reports
`segmented: false`, and its warm-up row equals its split row.

    python benchmarks/warm_up_error.py [--tokens 32768 131072] [--bands 1 3] [--segments 128 256] \
        [--reference-max-tokens 32768]

Prints one JSON line a case. The warm-up's bound (state_pass.warm_up_begin) holds for band 3; for bands 0-2 only
measurement such as this one says how far it is.
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
from sparsegdn.reference import relative_error as rel_err   # noqa: E402 (no polars on a GPU machine)
import sparsegdn                             # noqa: E402
from sparsegdn.triton import forward         # noqa: E402
from sparsegdn.triton.state_pass import segmented_chains   # noqa: E402

SWITCHES = ("COMMIT_SEGMENT", "WARM_UP", "SPLIT_OUTPUTS", "STORE_VECTORS", "OVERLAP", "LISTS_FROM")
# The one launch for every run (LISTS_FROM 0: long calls would otherwise take the Gluon lists when they select their
# own events and the one launch when given them, mixing the two paths into the errors compared here).
EXACT = {"COMMIT_SEGMENT": 0, "WARM_UP": 0.0, "SPLIT_OUTPUTS": False, "STORE_VECTORS": False, "OVERLAP": True,
         "LISTS_FROM": 0}


def run(inputs, band, events=None, backend="triton", **switches):
    """(o, final state, events) of the public call under forward's switches EXACT updated by `switches` (restored
    after); `events` given: those events (every run of a case commits the same chunks)."""
    saved = {name: getattr(forward, name) for name in SWITCHES}
    for name, value in {**EXACT, **switches}.items():
        setattr(forward, name, value)
    try:
        config = sparsegdn.SparseConfig(budget=0.29, band=band, selector="score", backend=backend)
        o, state, info = kernel_bench.public_call(inputs, config, **({} if events is None else {"events": events}))
        return o, state, info.events
    finally:
        for name, value in saved.items():
            setattr(forward, name, value)


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
        n_chunks = sparsegdn.num_chunks(tokens)
        for band in args.bands:
            exact = run(inputs, band)
            events = exact[2]
            split = run(inputs, band, events, SPLIT_OUTPUTS=True, STORE_VECTORS=True)
            reference = run(inputs, band, events, "torch") if tokens <= args.reference_max_tokens else None
            for segment in args.segments:
                warm = run(inputs, band, events, SPLIT_OUTPUTS=True, STORE_VECTORS=True, COMMIT_SEGMENT=segment,
                           WARM_UP=args.warm_up)
                row = {"tokens": tokens, "band": band, "segment": segment, "warm_up": args.warm_up,
                       "segmented": segmented_chains(segment, n_chunks, inputs[1].shape[-1], args.warm_up),
                       "split_o_rel_err_vs_exact": rel_err(split[0], exact[0]),
                       "warm_up_o_rel_err_vs_split": rel_err(warm[0], split[0]),
                       "warm_up_o_max_abs_diff_vs_split": (warm[0].float() - split[0].float()).abs().max().item(),
                       "warm_up_state_rel_err_vs_split": rel_err(warm[1], split[1]),
                       "warm_up_o_rel_err_vs_exact": rel_err(warm[0], exact[0])}
                if reference is not None:
                    row.update({f"{name}_{part}_rel_err_vs_torch": rel_err(result[index], reference[index])
                                for name, result in (("exact", exact), ("split", split), ("warm_up", warm))
                                for part, index in (("o", 0), ("state", 1))})
                print(json.dumps(row), flush=True)
            del exact, split, reference
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
