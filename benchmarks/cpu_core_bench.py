"""GDN-core time on the CPU: the public torch path (event_forward) against the reference (one thread).

    OMP_NUM_THREADS=1 python benchmarks/cpu_core_bench.py --out analysis/results/cpu_core_bench.json \
        [--tokens 4096 16384] [--repeats 9] > analysis/results/cpu_core_bench.md

Run it once more with GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295
to see the figures without the page faults of freshly mapped memory (the report records the setting).

Contenders, each a whole call on the same inputs (bf16 q/k/v/beta, float32 g; checks, normalisation,
selection and output casts included), interleaved, warmed up once, then timed `--repeats` times:

    dense_reference     the reference (sparsegdn/reference.py) with every event and band 3: what the
                        dense torch core ran before it moved to event_forward
    sparse_reference    the reference with the score selector's events, budget 0.29, band 1
    sparse_api          sparsegdn.sparse_gated_delta_rule(backend="torch"), budget 0.29, band 1: the
                        public torch path, event_forward.event_chunk_forward
    dense_api           sparsegdn.dense_gated_delta_rule(backend="torch"): event_forward with every
                        event and band 3 (the fair dense figure, and what the app's CPU runs compare)
    sparse_api_1slab    sparse_api with all chunks in one slab (what slabs save)

Writes the JSON to --out and prints the Markdown table of analysis/measurements.py (median, min-max, ratios,
machine load), the one the README shows.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import pathlib
import platform
import statistics
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import sparsegdn  # noqa: E402
from analysis import measurements  # noqa: E402
from sparsegdn import api, event_forward, reference, validation  # noqa: E402
from sparsegdn.reference import relative_error  # noqa: E402

SHAPES = {  # name: (H, HV, K, V); None: the default model's, read from data/default-model/config.json
    "default model": None,
    "H=4, HV=8, K=V=128": (4, 8, 128, 128),   # twice its heads: a quarter of a Qwen3.5-4B GDN layer
}
BUDGET, BAND = 0.29, 1


def default_model_shape(config_path="data/default-model/config.json"):
    config = json.loads(pathlib.Path(config_path).read_text())
    return (config["linear_num_key_heads"], config["linear_num_value_heads"],
            config["linear_key_head_dim"], config["linear_value_head_dim"])


def shapes_to_measure():
    """SHAPES with the default model's read from its config and named by its sizes."""
    shapes = {}
    for name, shape in SHAPES.items():
        if shape is None:
            shape = default_model_shape()
            name = f"{name} (H={shape[0]}, HV={shape[1]}, K={shape[2]}, V={shape[3]})"
        shapes[name] = shape
    return shapes


def gdn_inputs(tokens, key_heads, value_heads, key_dim, value_dim, seed=0):
    """Random inputs (never zeros); g follows -exp(A_log) * softplus(a + dt_bias), rates 1e-3..0.3."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, tokens, key_heads, key_dim, generator=gen).bfloat16()
    k = torch.randn(1, tokens, key_heads, key_dim, generator=gen).bfloat16()
    v = torch.randn(1, tokens, value_heads, value_dim, generator=gen).bfloat16()
    rate = torch.exp(math.log(1e-3) + torch.rand(value_heads, generator=gen) * math.log(300.0))
    g = -rate * torch.nn.functional.softplus(torch.randn(1, tokens, value_heads, generator=gen) * 0.5 + 0.55)
    beta = torch.sigmoid(torch.randn(1, tokens, value_heads, generator=gen)).bfloat16()
    return q, k, v, g, beta


def reference_call(q, k, v, g, beta, *, budget, band):
    """The public call's checks, normalisation and selection, then the reference's stages; budget None:
    every event, no selection (the dense operator)."""
    validation.check_inputs(q, k, v, g, beta, None)
    validation.check_values(q, k, v, g, beta, None)
    scale = q.shape[-1] ** -0.5
    prepared = api.prepare(q, k, v, g, beta, True)
    if budget is None:
        events = torch.ones(v.shape[0], v.shape[2], sparsegdn.num_chunks(v.shape[1]), dtype=torch.bool)
    else:
        events, _ = api.select_torch(*prepared, sparsegdn.SparseConfig(budget=budget, band=band), scale=scale)
    o, state, _ = reference.chunk_forward(*prepared, events, band=band, scale=scale)
    return o.to(v.dtype), state.float()


def sparse_api(*inputs):
    return sparsegdn.sparse_gated_delta_rule(*inputs, budget=BUDGET, band=BAND, output_final_state=True,
                                             backend="torch")[:2]


def one_slab_call(*inputs):
    saved, event_forward.SLAB_VALUES = event_forward.SLAB_VALUES, 1 << 62
    try:
        return sparse_api(*inputs)
    finally:
        event_forward.SLAB_VALUES = saved


CONTENDERS = {
    "dense_reference": lambda *x: reference_call(*x, budget=None, band=3),
    "sparse_reference": lambda *x: reference_call(*x, budget=BUDGET, band=BAND),
    "sparse_api": sparse_api,
    "dense_api": lambda *x: sparsegdn.dense_gated_delta_rule(*x, output_final_state=True, backend="torch"),
    "sparse_api_1slab": one_slab_call,
}


def measure(inputs, repeats):
    """Interleaved repeats of every contender after one warm-up call each: {name: [ms, ...]}."""
    results = {name: contender(*inputs) for name, contender in CONTENDERS.items()}   # warm-up
    errors = {"sparse_api vs sparse_reference": relative_error(results["sparse_api"][0],
                                                               results["sparse_reference"][0]),
              "dense_api vs dense_reference": relative_error(results["dense_api"][0],
                                                             results["dense_reference"][0])}
    samples = {name: [] for name in CONTENDERS}
    for _ in range(repeats):
        for name, contender in CONTENDERS.items():
            start = time.perf_counter()
            contender(*inputs)
            samples[name].append((time.perf_counter() - start) * 1e3)
    return samples, errors


def summary(ms):
    ordered = sorted(ms)
    return dict(median_ms=statistics.median(ordered), min_ms=ordered[0], max_ms=ordered[-1], samples_ms=ms)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", required=True, help="path of the JSON to write")
    args = parser.parse_args()
    torch.set_num_threads(1)
    shapes = shapes_to_measure()

    load_before = os.getloadavg()[0]
    rows = []
    for name, (key_heads, value_heads, key_dim, value_dim) in shapes.items():
        for tokens in args.tokens:
            inputs = gdn_inputs(tokens, key_heads, value_heads, key_dim, value_dim)
            samples, errors = measure(inputs, args.repeats)
            rows.append(dict(shape=name, B=1, T=tokens, H=key_heads, HV=value_heads, K=key_dim, V=value_dim,
                             errors=errors, **{c: summary(ms) for c, ms in samples.items()}))
            print(f"{name} T={tokens}: " + ", ".join(f"{c} {rows[-1][c]['median_ms']:.1f}" for c in CONTENDERS),
                  file=sys.stderr, flush=True)
    report = dict(
        date=datetime.date.today().isoformat(),
        machine=f"{os.cpu_count()}-core CPU ({platform.processor() or platform.machine()})",
        torch=torch.__version__, threads=torch.get_num_threads(),
        omp_num_threads=os.environ.get("OMP_NUM_THREADS"), glibc_tunables=os.environ.get("GLIBC_TUNABLES"),
        command=" ".join([f"{name}={os.environ[name]}" for name in ("GLIBC_TUNABLES", "OMP_NUM_THREADS")
                          if os.environ.get(name)] + ["python benchmarks/cpu_core_bench.py"] + sys.argv[1:]),
        load_before=load_before, load_after=os.getloadavg()[0], repeats=args.repeats,
        budget=BUDGET, band=BAND, rows=rows)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"# GDN core on the CPU: the public torch path (event_forward) against the reference\n\n"
          f"GLIBC_TUNABLES={report['glibc_tunables'] or 'unset'}; every contender's samples are in `{out.name}`.\n\n"
          + measurements.cpu_core_table(*measurements.cpu_core(out), out.name))


if __name__ == "__main__":
    main()
