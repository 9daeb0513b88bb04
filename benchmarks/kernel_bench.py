"""GDN-core prefill speed on the GPU, as shared/SPEC.md section 6 says (a benchmark, not a test).

    FLA_FLASH_QLA=0 python benchmarks/kernel_bench.py [--tokens 4096 ...] [--out analysis/results]

Contenders on the same inputs, in one process, interleaved, each measured twice (median of
triton.testing.do_bench): FLA 0.6.0 native chunk_gated_delta_rule, FlashQLA 0.1.3 (auto_cp=True),
and SparseGDN (our Triton backend) at budgets 1.0, 0.5, 0.29, 0.15 with band 1 and the `score`
selector, plus dense semantics through our path (budget 1.0, band 3, `all`). Selection is inside
the timed call. Also: per-stage times of SparseGDN, peak extra GPU memory, the bytes and FLOPs we
count for each pass against measured copy-bandwidth and matrix-rate ceilings.
Writes kernel_bench.json (one row per T x configuration) and kernel_bench.md.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("FLA_FLASH_QLA", "0")     # FLA's native Triton path, not its FlashQLA dispatch

import torch                                   # noqa: E402
import triton                                  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import sparsegdn                               # noqa: E402
from sparsegdn.triton.forward import sparse_gdn_forward   # noqa: E402

B, H, HV, K, V = 1, 16, 32, 128, 128
CONFIGS = [  # (budget, band, selector)
    (1.0, 1, "score"), (0.5, 1, "score"), (0.29, 1, "score"), (0.15, 1, "score"), (1.0, 3, "all"),
]
STAGES = ("chunk_prepare", "selection", "event_prepare", "state_pass", "chunk_output")
# shared/SPEC.md section 6 reference figures (same card type, 2026-11-30), for a run that could not
# carry FlashQLA: reported in their own column, never mixed with the figures measured here.
SPEC_FLASHQLA_MS = {4096: 0.36, 16384: 0.91, 32768: 1.32, 65536: 2.54, 131072: 5.00}


def make_inputs(tokens, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, tokens, H, K, device="cuda", generator=gen).bfloat16()
    k = torch.randn(B, tokens, H, K, device="cuda", generator=gen).bfloat16()
    v = torch.randn(B, tokens, HV, V, device="cuda", generator=gen).bfloat16()
    g = torch.nn.functional.logsigmoid(torch.randn(B, tokens, HV, device="cuda", generator=gen) + 4.0)
    beta = torch.rand(B, tokens, HV, device="cuda", generator=gen).mul(0.9).add(0.05).bfloat16()
    return q, k, v, g.float(), beta


def contenders(inputs):
    q, k, v, g, beta = inputs
    scale = K ** -0.5
    runs = {}
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_gdn
        runs["fla"] = lambda: fla_gdn(q, k, v, g, beta, scale=scale, use_qk_l2norm_in_kernel=True)
    except ImportError as error:
        print("FLA not available:", error)
    try:
        import flash_qla
        runs["flashqla"] = lambda: flash_qla.chunk_gated_delta_rule(q, k, v, g, beta, scale=scale,
                                                                    use_qk_l2norm_in_kernel=True, auto_cp=True)
    except ImportError as error:
        print("FlashQLA not available:", error)
    for budget, band, selector in CONFIGS:
        runs[f"sparsegdn/{budget}/{band}/{selector}"] = (
            lambda budget=budget, band=band, selector=selector: sparse_gdn_forward(
                q, k, v, g, beta, events=None, budget=budget, selector=selector, band=band, scale=scale,
                initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=True))
    # The public entry point adds the caller's input checks (validation.check_values) to the same kernels.
    runs["api/0.29/1/score"] = lambda: sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, budget=0.29, band=1,
                                                                         backend="triton")
    return runs


def peak_extra_mb(fn):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 2**20


def stage_times(inputs, budget, band, selector, repeats=20):
    q, k, v, g, beta = inputs
    samples = {name: [] for name in STAGES}
    for _ in range(repeats):
        marks = [torch.cuda.Event(enable_timing=True)]
        marks[0].record()

        def hook(name):
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            marks.append(event)
        sparse_gdn_forward(q, k, v, g, beta, events=None, budget=budget, selector=selector, band=band, scale=K ** -0.5,
                           initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=True, stage_hook=hook)
        torch.cuda.synchronize()
        for name, start, end in zip(STAGES, marks[:-1], marks[1:]):
            samples[name].append(start.elapsed_time(end))
    return {name: statistics.median(values) for name, values in samples.items()}


def counted_work(tokens, budget, band):
    """Bytes through device memory and FLOPs we count for each pass (each tensor once per pass)."""
    nc = triton.cdiv(tokens, 64)
    events = sparsegdn.event_count(budget, HV, nc)
    chunks = HV * nc
    bf16 = 2
    qk = B * tokens * H * K * bf16
    vv = B * tokens * HV * V * bf16
    gates = B * tokens * HV * (4 + bf16)
    t_inv = B * chunks * 64 * 64 * bf16
    wu = B * events * 64 * (K + V) * bf16
    snaps = B * (events + HV) * K * V * bf16
    kc = B * events * 64 * K * bf16                       # k_commit list
    if band <= 1:   # block_solve: diagonal and predecessor blocks, 16x16 products batched by four
        solve_flops = (2 + band) * 2 * 64 * 16 * K + (6 + 6 * band + 2 * band) * 2 * 4 * 16 ** 3
        solve_bytes = qk * (1 + band) + vv * (1 + band) + gates + t_inv
    else:           # chunk_prepare: whole 64x64 tiles, ten 64x64x64 float32 products
        solve_flops = 2 * 64 * 64 * K + 10 * 2 * 64 ** 3
        solve_bytes = qk + vv + gates + t_inv
    work = {
        "chunk_prepare": (solve_bytes, B * chunks * solve_flops),
        "event_prepare": (B * events * 64 * (K + V) * bf16 + B * events * 64 * 64 * bf16 + wu + kc,
                          B * events * 2 * 64 * 64 * (K + V)),
        "state_pass": (wu + kc + snaps, B * events * 2 * 2 * 64 * K * V),
        "chunk_output": (2 * qk + vv + gates + t_inv + snaps + vv,
                         B * chunks * 2 * (64 * 64 * K + 64 ** 3 + 64 * 64 * K + 64 * K * V + 64 * 64 * V)),
    }
    minimum = (2 * qk + vv + gates + vv, 0)
    return work, minimum


def ceilings():
    """Measured device-to-device copy bandwidth (bytes/s) and bf16 matrix rate (FLOP/s)."""
    x = torch.randn(2**30, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    ms = triton.testing.do_bench(lambda: y.copy_(x), return_mode="median")
    bandwidth = 2 * x.numel() * 2 / (ms * 1e-3)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = triton.testing.do_bench(lambda: a @ a, return_mode="median")
    return bandwidth, 2 * 8192 ** 3 / (ms * 1e-3)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 8192, 16384, 32768, 65536, 131072])
    parser.add_argument("--out", default="analysis/results")
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    args = parser.parse_args()
    device = torch.cuda.get_device_name()
    bandwidth, matrix_rate = ceilings()
    print(f"{device}: copy {bandwidth / 1e12:.2f} TB/s, bf16 matmul {matrix_rate / 1e12:.0f} TFLOP/s", flush=True)
    rows = []
    for tokens in args.tokens:
        inputs = make_inputs(tokens)
        runs = contenders(inputs)
        for fn in runs.values():      # compile and warm up before any timing
            fn()
        torch.cuda.synchronize()
        times = {name: [] for name in runs}
        for _ in range(2):
            for name, fn in runs.items():
                times[name].append(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
        memory = {name: peak_extra_mb(fn) for name, fn in runs.items()}
        fla_ms = statistics.mean(times["fla"]) if "fla" in times else None
        qla_ms = statistics.mean(times["flashqla"]) if "flashqla" in times else None
        for budget, band, selector in CONFIGS:
            name = f"sparsegdn/{budget}/{band}/{selector}"
            ms = statistics.mean(times[name])
            stages = stage_times(inputs, budget, band, selector)
            work, minimum = counted_work(tokens, budget, band)
            total_bytes = sum(b for b, _ in work.values())
            total_flops = sum(f for _, f in work.values())
            roofline_ms = 1e3 * max(total_bytes / bandwidth, total_flops / matrix_rate)
            rows.append({
                "T": tokens, "budget": budget, "band": band, "selector": selector,
                "sparsegdn_ms": ms, "sparsegdn_ms_runs": times[name],
                "api_ms": statistics.mean(times["api/0.29/1/score"]) if (budget, band) == (0.29, 1) else None,
                "fla_ms": fla_ms, "flashqla_ms": qla_ms,
                "fla_ms_runs": times.get("fla"), "flashqla_ms_runs": times.get("flashqla"),
                "speedup_vs_fla": fla_ms / ms if fla_ms else None,
                "speedup_vs_flashqla": qla_ms / ms if qla_ms else None,
                "flashqla_spec_ms": SPEC_FLASHQLA_MS.get(tokens),
                "speedup_vs_flashqla_spec": SPEC_FLASHQLA_MS[tokens] / ms if tokens in SPEC_FLASHQLA_MS else None,
                "peak_mem_mb": memory[name], "fla_peak_mem_mb": memory.get("fla"),
                "flashqla_peak_mem_mb": memory.get("flashqla"),
                "stage_ms": stages, "counted_bytes": total_bytes, "counted_flops": total_flops,
                "minimum_bytes": minimum[0], "roofline_ms": roofline_ms,
                "minimum_traffic_ms": 1e3 * minimum[0] / bandwidth,
                "copy_bandwidth_tbs": bandwidth / 1e12, "matmul_tflops": matrix_rate / 1e12,
                "device": device, "date": args.date,
                "command": "FLA_FLASH_QLA=0 python benchmarks/kernel_bench.py " + " ".join(sys.argv[1:]),
            })
            r = rows[-1]
            print(f"T={tokens:6d} budget={budget:4} band={band} {selector:5s} {ms:7.3f} ms  "
                  f"fla {fla_ms or float('nan'):7.3f} x{r['speedup_vs_fla'] or float('nan'):.2f}  "
                  f"qla {qla_ms or float('nan'):7.3f} x{r['speedup_vs_flashqla'] or float('nan'):.2f}  "
                  f"mem {r['peak_mem_mb']:.0f}/{r['fla_peak_mem_mb'] or float('nan'):.0f} MB  "
                  + " ".join(f"{s}={t:.3f}" for s, t in stages.items()), flush=True)
        del inputs, runs
        torch.cuda.empty_cache()
    tuned = autotune_choices()
    print("autotune choices:", tuned, flush=True)
    for r in rows:
        r["autotune"] = tuned
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "kernel_bench.json").write_text(json.dumps(rows, indent=1))
    (out / "kernel_bench.md").write_text(markdown(rows))
    print(markdown(rows))


def autotune_choices():
    """The config the autotuner kept for each of our kernels (key -> config), as text."""
    from sparsegdn.triton import block_solve, chunk_output, chunk_prepare, state_pass
    kernels = {"block_solve": block_solve.block_solve_kernel, "chunk_prepare": chunk_prepare.chunk_prepare_kernel,
               "state_pass": state_pass.state_pass_kernel,
               "chunk_output": chunk_output.chunk_output_kernel}
    return {name: [str(config) for config in getattr(kernel, "cache", {}).values()] for name, kernel in kernels.items()}


def markdown(rows):
    first = rows[0]
    lines = [
        "# SparseGDN kernel benchmark", "",
        f"{first['device']}, {first['date']}; B={B}, H={H}, HV={HV}, K=V={K}, bf16 q/k/v/beta, float32 g; "
        "do_bench medians, contenders interleaved, each measured twice (mean of the two).",
        f"Command: `{first['command']}`. Ceilings measured in the same run: copy "
        f"{first['copy_bandwidth_tbs']:.2f} TB/s, bf16 matmul {first['matmul_tflops']:.0f} TFLOP/s.",
        "`sparsegdn_ms` times the Triton backend entry (sparsegdn.triton, selection included); `api_ms` the "
        "public sparse_gated_delta_rule call, which adds the caller's input checks.", "",
        "FlashQLA columns: measured here when flash_qla was importable, else `-`; `x QLA (SPEC)` divides the "
        "SPEC section 6 reference figure (same card type, not this run) by our time.", "",
        "| T | budget | band | selector | SparseGDN ms | FLA ms | FlashQLA ms | x FLA | x FlashQLA | x QLA (SPEC) "
        "| peak MB (ours / FLA) | mem ratio | stages ms: prepare / select / events / state / output | roofline ms "
        "| gap | API ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(x, fmt):
        return "-" if x is None else format(x, fmt)
    for r in rows:
        s = r["stage_ms"]
        lines.append(
            f"| {r['T']} | {r['budget']} | {r['band']} | {r['selector']} | {r['sparsegdn_ms']:.3f} | {f(r['fla_ms'], '.3f')} "
            f"| {f(r['flashqla_ms'], '.3f')} | {f(r['speedup_vs_fla'], '.2f')} | {f(r['speedup_vs_flashqla'], '.2f')} "
            f"| {f(r['speedup_vs_flashqla_spec'], '.2f')} | {r['peak_mem_mb']:.0f} / {f(r['fla_peak_mem_mb'], '.0f')} "
            f"| {f(r['peak_mem_mb'] / r['fla_peak_mem_mb'] if r['fla_peak_mem_mb'] else None, '.2f')} "
            f"| {' / '.join(format(s[n], '.3f') for n in STAGES)} | {r['roofline_ms']:.3f} "
            f"| {r['sparsegdn_ms'] / r['roofline_ms']:.1f}x | {f(r['api_ms'], '.3f')} |")
    lines += ["", f"Autotuner choices: {first.get('autotune')}", "", "Roofline: the larger of counted bytes / copy bandwidth and counted FLOPs / matmul rate "
              "(counted per pass, each tensor once per pass; see counted_work in the script). The operator's "
              "minimum traffic (q, k, v, g, beta read once, o written once) is in the JSON as minimum_traffic_ms.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
