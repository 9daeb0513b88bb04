"""GDN-core time on the CPU: the dense torch core against the event-skipping fast path (one thread).

    OMP_NUM_THREADS=1 python benchmarks/cpu_core_bench.py --out analysis/results/cpu_core_bench.json \
        [--tokens 4096 16384] [--repeats 7] > analysis/results/cpu_core_bench.md

Run it once more with GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295
to see the figures without the page faults of freshly mapped memory (the report records the setting).

Contenders, each a whole call on the same inputs (bf16 q/k/v/beta, float32 g; checks, normalisation,
selection and output casts included), interleaved, warmed up once, then timed `--repeats` times:

    dense_reference     sparsegdn.dense_gated_delta_rule(backend="torch"): the reference, every
                        event, band 3 (what the torch backend runs today)
    sparse_reference    sparsegdn.sparse_gated_delta_rule(backend="torch"), budget 0.29, band 1
    sparse_fast         the same call with event_forward.event_chunk_forward as its core
    dense_fast          event_chunk_forward with every event and band 3 (the fair dense figure)
    sparse_fast_1slab   sparse_fast with all chunks in one slab (what slabs save)

Prints a Markdown report (median, min-max, ratios, machine load) and writes the JSON to --out.
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
from sparsegdn import api, event_forward, validation  # noqa: E402

SHAPES = {  # name: (H, HV, K, V)
    "default model (K=V=32)": None,     # read from data/default-model/config.json
    "K=V=128": (2, 4, 128, 128),
}
BUDGET, BAND = 0.29, 1


def default_model_shape(config_path="data/default-model/config.json"):
    config = json.loads(pathlib.Path(config_path).read_text())
    return (config["linear_num_key_heads"], config["linear_num_value_heads"],
            config["linear_key_head_dim"], config["linear_value_head_dim"])


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


def fast_call(q, k, v, g, beta, *, budget, band):
    """The torch path of sparse_gated_delta_rule with event_chunk_forward as its core; budget None:
    every event, no selection (as dense_gated_delta_rule)."""
    validation.check_inputs(q, k, v, g, beta, None)
    validation.check_values(q, k, v, g, beta, None)
    scale = q.shape[-1] ** -0.5
    prepared = api.prepare(q, k, v, g, beta, True)
    if budget is None:
        events = torch.ones(v.shape[0], v.shape[2], sparsegdn.num_chunks(v.shape[1]), dtype=torch.bool)
    else:
        events, _ = api.select_torch(*prepared, sparsegdn.SparseConfig(budget=budget, selector="score"), scale=scale)
    o, state, _ = event_forward.event_chunk_forward(*prepared, events, band=band, scale=scale)
    return o.to(v.dtype), state.float()


def one_slab_call(*inputs, **options):
    saved, event_forward.SLAB_VALUES = event_forward.SLAB_VALUES, 1 << 62
    try:
        return fast_call(*inputs, **options)
    finally:
        event_forward.SLAB_VALUES = saved


CONTENDERS = {
    "dense_reference": lambda *x: sparsegdn.dense_gated_delta_rule(*x, output_final_state=True, backend="torch"),
    "sparse_reference": lambda *x: sparsegdn.sparse_gated_delta_rule(
        *x, budget=BUDGET, band=BAND, output_final_state=True, backend="torch")[:2],
    "sparse_fast": lambda *x: fast_call(*x, budget=BUDGET, band=BAND),
    "dense_fast": lambda *x: fast_call(*x, budget=None, band=3),
    "sparse_fast_1slab": lambda *x: one_slab_call(*x, budget=BUDGET, band=BAND),
}


def relative_error(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def measure(inputs, repeats):
    """Interleaved repeats of every contender after one warm-up call each: {name: [ms, ...]}."""
    results = {name: contender(*inputs) for name, contender in CONTENDERS.items()}   # warm-up
    errors = {"sparse_fast vs sparse_reference": relative_error(results["sparse_fast"][0],
                                                                results["sparse_reference"][0]),
              "dense_fast vs dense_reference": relative_error(results["dense_fast"][0],
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


def markdown(report):
    lines = ["# GDN core on the CPU: dense torch core vs event-skipping fast path", "",
             f"{report['date']}, {report['machine']}, torch {report['torch']}, "
             f"{report['threads']} thread (OMP_NUM_THREADS={report['omp_num_threads']}). "
             f"GLIBC_TUNABLES={report['glibc_tunables'] or 'unset'}.",
             f"Command: `{report['command']}`",
             f"Load average (1 min) before / after: {report['load_before']:.2f} / {report['load_after']:.2f}. "
             f"Median of {report['repeats']} interleaved warm repeats, [min-max] beside it, ms; "
             f"budget {BUDGET}, band {BAND}, score selector; bf16 inputs, float32 compute.", "",
             "| shape | T | dense_reference | sparse_reference | sparse_fast | dense_fast | sparse_fast_1slab "
             "| dense_ref / sparse_fast | dense_fast / sparse_fast | rel. err (sparse, dense) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in report["rows"]:
        cells = [f"{row[name]['median_ms']:.1f} [{row[name]['min_ms']:.0f}-{row[name]['max_ms']:.0f}]"
                 for name in CONTENDERS]
        median = {name: row[name]["median_ms"] for name in CONTENDERS}
        errors = row["errors"]
        lines.append(f"| {row['shape']} | {row['T']} | " + " | ".join(cells) +
                     f" | {median['dense_reference'] / median['sparse_fast']:.2f}x"
                     f" | {median['dense_fast'] / median['sparse_fast']:.2f}x"
                     f" | {errors['sparse_fast vs sparse_reference']:.1e}, "
                     f"{errors['dense_fast vs dense_reference']:.1e} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", required=True, help="path of the JSON to write")
    args = parser.parse_args()
    torch.set_num_threads(1)
    shapes = {name: shape or default_model_shape() for name, shape in SHAPES.items()}

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
    print(markdown(report))


if __name__ == "__main__":
    main()
