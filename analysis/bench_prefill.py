"""End-to-end prefill of a Qwen3.5-4B-shape model (random weights): GDN core swapped, time and memory.

Cores compared in one process, interleaved, on the same random token ids:
- dense-fla:      FLA's chunk_gated_delta_rule (the production dense core);
- sparse-triton:  SparseGDN, Triton backend, budget 0.29, score selector, band 1;
- zero:           a core that returns zeros: the floor (everything in the prefill except the core);
- transformers:   transformers' own core call, unpatched path (FLA through transformers' wrapper,
                  without sparsegdn's input checks), only when FLA is installed.

Each measured prefill is `model(ids, use_cache=True, logits_to_keep=1)` (what serving does: logits
of the last token only), timed with CUDA events; peak memory is torch.cuda.max_memory_allocated
over that prefill. The GDN core's own time inside each prefill is also recorded (CUDA events
around every core call, no sync inside the prefill), and for the sparse core the time of each of its
stages (sparsegdn.STAGES) summed over its calls. Median over --repeats runs after --warmup.

The sparse core is timed without a stage hook, as a caller runs it: a call with a hook takes no launch plan
(sparsegdn/triton/call_plans.py) and its stage marks sit between its passes. Its stage times come from separate
prefills of the same core with the hook (--repeats of them, after the timed rounds), whose own core time is kept
beside them (`staged_core_ms_median`); until 2026-12-07 the timed prefills carried the hook.

GPU:  python -m analysis.bench_prefill --out analysis/results            (writes prefill_4b_32k.*)
CPU smoke test at a tiny shape:  python -m analysis.bench_prefill --tiny --out /tmp/bench
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

import torch

from sparsegdn.validation import DeferredChecks

from .cli import add_sparse_options, sparse_options
from .models import default_random_config, qwen35_4b_shape_config, random_model, segment_inputs, slow_gdn_decay
from .patching import dense_core, original_core, sparse_core, swap_gdn_core
from .timing import FLA_BACKENDS, StageClock, Timer

CHECKS = DeferredChecks()     # the sparse core's value checks, read back once per prefill (no sync per layer)


def zero_core(call):
    batch, tokens, heads, value_dim = call.v.shape
    state = (torch.zeros(batch, heads, call.k.shape[-1], value_dim, dtype=torch.float32, device=call.v.device)
             if call.output_final_state else None)
    return torch.zeros_like(call.v), state


def make_cores(args, clock: StageClock | None = None) -> dict:
    """The contenders by name. With `clock`, only the sparse one, marking its stages on it (the staged prefills)."""
    backend = "torch" if args.tiny else "triton"        # --tiny: the CPU stand-ins of the GPU contenders
    name = f"sparse-{backend}@{args.sparse.budget}"
    core = sparse_core(args.sparse.replace(backend=backend), checks=None if args.tiny else CHECKS, stages=clock)
    if clock is not None:
        return {name: core}
    if args.tiny:
        return {"dense-torch": dense_core("torch"), name: core, "zero": zero_core}
    cores = {"dense-fla": dense_core("fla"), name: core, "zero": zero_core}
    try:
        import fla  # noqa: F401
        cores["transformers"] = original_core
    except ImportError:
        pass
    return cores


class CoreTimer:
    """Wraps a core so every call is bracketed by timer intervals (summed per prefill)."""

    def __init__(self, core, timer: Timer):
        self.core, self.timer, self.intervals = core, timer, []

    def __call__(self, call):
        with self.timer.interval() as interval:
            result = self.core(call)
        self.intervals.append(interval)
        return result


def prefill_once(model, ids, core, timer: Timer, cuda: bool, segment_tokens=None,
                 clock: StageClock | None = None) -> dict:
    """One timed prefill; with `segment_tokens`, in segments carrying the model's cache (as analyze does).
    With `clock` (the sparse core's), also its stage times summed over the prefill's core calls."""
    from transformers import DynamicCache

    timed_core = CoreTimer(core, timer)
    if clock is not None:
        clock.spans.clear()
    step = segment_tokens or ids.shape[1]
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode(), swap_gdn_core(model, timed_core):
        with timer.interval() as whole:
            cache = DynamicCache(config=model.config)
            for start in range(0, ids.shape[1], step):
                end = min(start + step, ids.shape[1])
                output = model(input_ids=ids[:, start:end], past_key_values=cache, use_cache=True, logits_to_keep=1,
                               **segment_inputs(model.config, start, end, ids.device))
    timer.resolve()
    CHECKS.check()
    del cache
    result = {"prefill_ms": whole.ms, "core_ms": sum(i.ms for i in timed_core.intervals),
              "core_calls": len(timed_core.intervals),
              "finite": bool(torch.isfinite(output.logits).all())}
    if clock is not None and clock.spans:
        result["stage_ms"] = clock.totals_ms()
    if cuda:
        result["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
    del output
    return result


def run(args) -> dict:
    device = "cpu" if args.tiny else "cuda"
    cuda = device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA GPU; use --tiny for the CPU smoke test")
    dtype = torch.float32 if args.tiny else torch.bfloat16
    config = default_random_config() if args.tiny else qwen35_4b_shape_config()
    started = time.perf_counter()
    model = random_model(config, seed=0, device=device, dtype=dtype).eval()
    slow_gdn_decay(model)
    load_s = time.perf_counter() - started
    weights_gib = torch.cuda.memory_allocated() / 2**30 if cuda else None
    timer = Timer(device)
    clock = StageClock(cuda)
    cores = make_cores(args)
    staged_cores = make_cores(args, clock)
    results = {"meta": environment(args, device, dtype, load_s, weights_gib), "runs": []}
    for tokens in args.tokens:
        ids = torch.randint(0, config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(tokens)).to(device)
        samples = {name: [] for name in cores}
        errors = {}
        for name, core in cores.items():       # warm-up: Triton/FLA compile and autotune
            try:
                for _ in range(args.warmup):
                    prefill_once(model, ids, core, timer, cuda, args.segment_tokens)
            except Exception as error:  # noqa: BLE001 - one failing contender must not hide the others
                errors[name] = f"{type(error).__name__}: {error}"
                print(f"[{tokens}] {name} failed: {errors[name]}", file=sys.stderr)
                traceback.print_exc()
                if cuda:
                    torch.cuda.empty_cache()
        for repeat in range(args.repeats):     # interleaved: every core once per round
            for name, core in cores.items():
                if name not in errors:
                    samples[name].append(prefill_once(model, ids, core, timer, cuda, args.segment_tokens))
        staged = {name: [prefill_once(model, ids, core, timer, cuda, args.segment_tokens, clock)
                         for _ in range(args.repeats)]
                  for name, core in staged_cores.items() if name not in errors}
        for name in cores:
            row = {"tokens": tokens, "core": name, "error": errors.get(name)}
            if name not in errors:
                runs = samples[name]
                row.update({
                    "prefill_ms_median": statistics.median(r["prefill_ms"] for r in runs),
                    "prefill_ms_all": [round(r["prefill_ms"], 3) for r in runs],
                    "core_ms_median": statistics.median(r["core_ms"] for r in runs),
                    "core_calls": runs[0]["core_calls"],
                    "finite": all(r["finite"] for r in runs),
                })
                if staged.get(name) and "stage_ms" in staged[name][0]:   # the sparse core's hooked prefills
                    hooked = staged[name]
                    row["stage_ms_median"] = {stage: statistics.median(r["stage_ms"][stage] for r in hooked)
                                              for stage in hooked[0]["stage_ms"]}
                    row["staged_core_ms_median"] = statistics.median(r["core_ms"] for r in hooked)
                if cuda:
                    row["peak_mem_gib"] = max(r["peak_mem_gib"] for r in runs)
                    row["peak_mem_above_weights_gib"] = row["peak_mem_gib"] - weights_gib
            results["runs"].append(row)
            print(format_row(row), file=sys.stderr)
        del ids
    add_ratios(results, args)
    return results


def add_ratios(results: dict, args) -> None:
    dense = "dense-torch" if args.tiny else "dense-fla"
    for row in results["runs"]:
        base = next((r for r in results["runs"] if r["tokens"] == row["tokens"] and r["core"] == dense
                     and not r["error"]), None)
        if base and not row["error"]:
            row["prefill_vs_dense"] = row["prefill_ms_median"] / base["prefill_ms_median"]
            row["core_vs_dense"] = (row["core_ms_median"] / base["core_ms_median"]
                                    if base["core_ms_median"] > 0 else None)


def environment(args, device, dtype, load_s, weights_gib) -> dict:
    import transformers

    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m analysis.bench_prefill " + " ".join(sys.argv[1:]),
        "model": "qwen3.5-4b-shape (random weights)" if not args.tiny else "default-shape tiny (random weights)",
        "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        "dtype": str(dtype).removeprefix("torch."),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "budget": args.sparse.budget, "selector": args.sparse.selector, "band": args.sparse.band,
        "warmup": args.warmup, "repeats": args.repeats, "segment_tokens": args.segment_tokens,
        "model_build_s": round(load_s, 2), "weights_gib": weights_gib,
    }
    meta["fla"] = fla_version()
    meta["fla_backend"] = fla_backend() if meta["fla"] else None
    return meta


def fla_backend() -> str:
    """Which kernels FLA's chunk_gated_delta_rule runs: "flash_qla" where FlashQLA is installed, FLA_FLASH_QLA is not
    "0" and the GPU is one FlashQLA serves (compute capability 9.x, 10.x or 12.x: FLA 0.6 then dispatches to it,
    fla/ops/gated_delta_rule/backends/flash_qla.py, which may still refuse a call for its dtypes), else "native"
    (FLA's own Triton kernels). The same transformers core read 63.8-64.2 ms at 32K with FlashQLA installed and
    91.5-92.6 ms without (H200, 2026-12-01/02)."""
    import importlib.util
    import os
    if importlib.util.find_spec("flash_qla") is None or os.environ.get("FLA_FLASH_QLA", "1") == "0":
        return "native"
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] not in (9, 10, 12):
        return "native"
    return "flash_qla"


def fla_version() -> str | None:
    """flash-linear-attention's version, "?" when it does not say, None when it is not installed."""
    try:
        import fla
    except ImportError:
        return None
    return getattr(fla, "__version__", "?")


def format_row(row: dict) -> str:
    if row["error"]:
        return f"{row['tokens']:>7} {row['core']:<22} FAILED: {row['error'][:120]}"
    memory = f"{row['peak_mem_gib']:7.2f} GiB" if "peak_mem_gib" in row else ""
    return (f"{row['tokens']:>7} {row['core']:<22} prefill {row['prefill_ms_median']:9.1f} ms   "
            f"GDN core {row['core_ms_median']:8.1f} ms   {memory}")


def write_markdown(results: dict, path: Path) -> None:
    meta = results["meta"]
    on_gpu = meta["weights_gib"] is not None
    clock = "CUDA events" if on_gpu else "perf_counter"
    weights = f" Weights: {meta['weights_gib']:.2f} GiB (included in peak memory)." if on_gpu else ""
    lines = [
        f"# End-to-end prefill, {meta['model']}",
        "",
        f"{meta['date']} on {meta['device']}, {meta['dtype']}, torch {meta['torch']}, transformers "
        f"{meta['transformers']}, fla {meta['fla']}{FLA_BACKENDS.get(meta.get('fla_backend'), '')}. SparseGDN budget "
        f"{meta['budget']}, selector "
        f"{meta['selector']}, band {meta['band']}. Median of {meta['repeats']} interleaved runs after "
        f"{meta['warmup']} warm-up run(s); `model(ids, use_cache=True, logits_to_keep=1)`, timed with "
        f"{clock}.{weights}"
        + (f" Prefilled in segments of {meta['segment_tokens']} tokens (cache carried)." if meta["segment_tokens"] else ""),
        "",
        f"Command: `{meta['command']}`",
        "",
        "| tokens | GDN core | prefill ms | vs dense | GDN core ms (sum of layers) | core vs dense | peak memory GiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["runs"]:
        if row["error"]:
            lines.append(f"| {row['tokens']} | {row['core']} | failed: {row['error'][:80]} | | | | |")
            continue
        ratio = lambda key: f"{row[key]:.3f}" if row.get(key) is not None else "-"  # noqa: E731
        memory = f"{row['peak_mem_gib']:.2f}" if "peak_mem_gib" in row else "-"
        lines.append(f"| {row['tokens']} | {row['core']} | {row['prefill_ms_median']:.1f} | {ratio('prefill_vs_dense')} "
                     f"| {row['core_ms_median']:.1f} | {ratio('core_vs_dense')} | {memory} |")
    staged = [row for row in results["runs"] if row.get("stage_ms_median")]
    for row in staged:
        separate = (f" From {meta['repeats']} separate prefill(s) with the stage hook, whose core took "
                    f"{row['staged_core_ms_median']:.1f} ms (a hooked call takes no launch plan); the table's "
                    f"figure is without it." if "staged_core_ms_median" in row else "")
        lines += ["", f"Stages of `{row['core']}` at {row['tokens']} tokens, summed over its core calls (median ms): "
                  + ", ".join(f"{stage} {ms:.1f}" for stage, ms in row["stage_ms_median"].items()) + "." + separate
                  + (" The Triton path runs state_pass and output as one launch, reported as state_pass."
                     if "triton" in row["core"] else "")]
    lines += ["", "`zero` replaces the GDN core by zeros: the prefill time of everything else. Core times are "
              "bracketed per call with CUDA events inside the prefill, so they include launch gaps between "
              "the core's kernels but not the rest of the layer.", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=None, help="default: 32768 (tiny: 512)")
    add_sparse_options(parser)   # --backend is set per contender: triton on the GPU, torch with --tiny
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--segment-tokens", type=int, default=None,
                        help="prefill in segments of this many tokens, carrying the cache (default: one pass)")
    parser.add_argument("--tiny", action="store_true", help="CPU smoke test: tiny model, torch cores")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--name", default=None, help="file stem (default prefill_4b_32k / prefill_tiny)")
    args = parser.parse_args(argv)
    args.tokens = args.tokens or ([512] if args.tiny else [32768])
    args.sparse = sparse_options(args)
    name = args.name or ("prefill_tiny" if args.tiny else "prefill_4b_" + "_".join(f"{t // 1024}k" for t in args.tokens))
    results = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    write_markdown(results, args.out / f"{name}.md")
    print((args.out / f"{name}.md").read_text(encoding="utf-8"))
    return 0 if all(not r["error"] for r in results["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
