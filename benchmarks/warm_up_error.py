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

With `--route lists` the same question beside the Gluon lists, the default's route from 16K tokens on: exact is the
lists' call with whole chains (LISTS_SEGMENT 0; the default cuts them in half since batch 42), warm-up the same call
with forward.LISTS_SEGMENT and WARM_UP (no split
run: the lists write every output). That route selects its own events (given events keep the one launch), so each
run selects again; a row says whether the route was taken (`lists`) and whether the runs kept the same events
(`same_events`).

    python benchmarks/warm_up_error.py [--tokens 32768 131072] [--bands 1 3] [--segments 128 256] \
        [--reference-max-tokens 32768] [--route one_launch|lists]

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

SWITCHES = ("COMMIT_SEGMENT", "WARM_UP", "SPLIT_OUTPUTS", "STORE_VECTORS", "OVERLAP", "LISTS_FROM", "LISTS_SEGMENT")
# The one launch for every run (LISTS_FROM 0: long calls would otherwise take the Gluon lists when they select their
# own events and the one launch when given them, mixing the two paths into the errors compared here).
EXACT = {"COMMIT_SEGMENT": 0, "WARM_UP": 0.0, "SPLIT_OUTPUTS": False, "STORE_VECTORS": False, "OVERLAP": True,
         "LISTS_FROM": 0, "LISTS_SEGMENT": 0}
# The lists' route (--route lists): the default's LISTS_FROM, everything else as EXACT.
LISTS = {**EXACT, "LISTS_FROM": forward.LISTS_FROM or 8192}


def run(inputs, band, events=None, backend="triton", base=EXACT, **switches):
    """(o, final state, events, whether the call took the lists) of the public call under forward's switches `base`
    updated by `switches` (restored after); `events` given: those events (every run of a case commits the same
    chunks)."""
    saved = {name: getattr(forward, name) for name in SWITCHES}
    for name, value in {**base, **switches}.items():
        setattr(forward, name, value)
    try:
        config = sparsegdn.SparseConfig(budget=0.29, band=band, selector="score", backend=backend)
        q, k, v = inputs[:3]
        lists = events is None and backend == "triton" and forward.lists_by_default(
            q, k, v, band, v.dtype, forward.selected_share(None, config.budget, config.selector))
        o, state, info = kernel_bench.public_call(inputs, config, **({} if events is None else {"events": events}))
        return o, state, info.events, lists
    finally:
        for name, value in saved.items():
            setattr(forward, name, value)


def errors_vs_torch(results, reference) -> dict:
    """Relative errors of o and the final state of each named run in `results` ((name, run's result) pairs) against
    the torch backend's `reference`."""
    return {f"{name}_{part}_rel_err_vs_torch": rel_err(result[index], reference[index])
            for name, result in results for part, index in (("o", 0), ("state", 1))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[32768, 131072])
    parser.add_argument("--bands", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--segments", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--warm-up", type=float, default=20.0)
    parser.add_argument("--reference-max-tokens", type=int, default=32768)
    parser.add_argument("--route", choices=("one_launch", "lists"), default="one_launch",
                        help="one_launch: the three arrangements in the one launch; lists: whole chains against "
                             "warm-up segments beside the Gluon lists")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("warm_up_error.py measures the GPU path: it needs a CUDA device")
    if args.route == "lists":
        return beside_lists(args)
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
                    row.update(errors_vs_torch((("exact", exact), ("split", split), ("warm_up", warm)), reference))
                print(json.dumps(row), flush=True)
            del exact, split, reference
            torch.cuda.empty_cache()


def beside_lists(args):
    """--route lists: one JSON line a case, whole chains against warm-up segments, both beside the lists."""
    for tokens in args.tokens:
        inputs = kernel_bench.make_inputs(tokens)
        n_chunks = sparsegdn.num_chunks(tokens)
        for band in args.bands:
            exact = run(inputs, band, base=LISTS)
            reference = run(inputs, band, exact[2], "torch") if tokens <= args.reference_max_tokens else None
            for segment in args.segments:
                warm = run(inputs, band, base=LISTS, LISTS_SEGMENT=segment, WARM_UP=args.warm_up)
                row = {"route": "lists", "tokens": tokens, "band": band, "segment": segment, "warm_up": args.warm_up,
                       "segmented": segmented_chains(segment, n_chunks, inputs[1].shape[-1], args.warm_up),
                       "lists": [exact[3], warm[3]], "same_events": bool(torch.equal(exact[2], warm[2])),
                       "warm_up_o_rel_err_vs_exact": rel_err(warm[0], exact[0]),
                       "warm_up_o_max_abs_diff_vs_exact": (warm[0].float() - exact[0].float()).abs().max().item(),
                       "warm_up_state_rel_err_vs_exact": rel_err(warm[1], exact[1])}
                if reference is not None:
                    row.update(errors_vs_torch((("exact", exact), ("warm_up", warm)), reference))
                print(json.dumps(row), flush=True)
            del exact, reference
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
