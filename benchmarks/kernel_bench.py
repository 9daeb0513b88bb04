"""GDN-core prefill speed on the GPU, measured as docs/CONTRACT.md section 6 says (a benchmark, not a test).

    FLA_FLASH_QLA=0 python benchmarks/kernel_bench.py [--tokens 4096 ...] [--out analysis/results]
    python benchmarks/kernel_bench.py --render analysis/results/kernel_bench.json   # rewrite its .md only

Contenders on the same inputs, in one process, interleaved, each measured twice (median of
triton.testing.do_bench), every one returning the final state: FLA's native chunk_gated_delta_rule,
FlashQLA (auto_cp=True) when flash_qla imports, and SparseGDN at budgets 1.0, 0.5, 0.29, 0.15 with
band 1 and the `score` selector, plus dense semantics through our path (budget 1.0, band 3, `all`).
SparseGDN is timed twice over: the public sparse_gated_delta_rule call (`api_ms`, the figure that
counts) and the Triton backend entry alone (`sparsegdn_ms`, kernels only). Selection is inside both.
Also: per-stage times (sparsegdn.STAGES), peak extra GPU memory, the bytes and FLOPs we count for each
pass against measured copy-bandwidth and matrix-rate ceilings, the git commit of the code measured.
Writes kernel_bench.json (one row per T x configuration; fields in analysis/measurements.py) and
kernel_bench.md; the README's table comes from the JSON (python -m analysis.front_page).
"""
import argparse
import datetime
import importlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("FLA_FLASH_QLA", "0")     # FLA's native Triton path, not its FlashQLA dispatch

import torch                                   # noqa: E402
import triton                                  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import sparsegdn                               # noqa: E402
from sparsegdn import CHUNK_SIZE, STAGES, SparseConfig    # noqa: E402
from sparsegdn.config import BLOCK_SIZE      # noqa: E402
from sparsegdn.triton import sparse_gdn_forward   # noqa: E402

B, H, HV, K, V = 1, 16, 32, 128, 128
CONFIGS = [SparseConfig(budget=budget, band=band, selector=selector, backend="triton") for budget, band, selector in
           ((1.0, 1, "score"), (0.5, 1, "score"), (0.29, 1, "score"), (0.15, 1, "score"), (1.0, 3, "all"))]


def label(config: SparseConfig) -> str:
    return f"{config.budget}/{config.band}/{config.selector}"


def build() -> str:
    """The git commit of the code measured, '-dirty' when the working tree differs from it."""
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        except OSError:     # no git on this machine
            return ""
    commit = git("rev-parse", "--short=12", "HEAD")
    if not commit:
        return "not recorded (not a git checkout)"
    return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def make_inputs(tokens, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, tokens, H, K, device="cuda", generator=gen).bfloat16()
    k = torch.randn(B, tokens, H, K, device="cuda", generator=gen).bfloat16()
    v = torch.randn(B, tokens, HV, V, device="cuda", generator=gen).bfloat16()
    g = torch.nn.functional.logsigmoid(torch.randn(B, tokens, HV, device="cuda", generator=gen) + 4.0)
    beta = torch.rand(B, tokens, HV, device="cuda", generator=gen).mul(0.9).add(0.05).bfloat16()
    return q, k, v, g.float(), beta


def contenders(inputs):
    """name -> call: every contender on the same inputs, each returning the final state."""
    q, k, v, g, beta = inputs
    scale = K ** -0.5
    runs = {}
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_gdn
        runs["fla"] = lambda: fla_gdn(q, k, v, g, beta, scale=scale, output_final_state=True,
                                      use_qk_l2norm_in_kernel=True)
    except ImportError as error:
        print("FLA not available:", error)
    try:
        import flash_qla
        runs["flashqla"] = lambda: flash_qla.chunk_gated_delta_rule(q, k, v, g, beta, scale=scale,
                                                                    output_final_state=True,
                                                                    use_qk_l2norm_in_kernel=True, auto_cp=True)
    except ImportError as error:
        print("FlashQLA not available:", error)
    for config in CONFIGS:
        # The public call: the input checks and dispatch around the same kernels (the figure that counts).
        runs[f"api/{label(config)}"] = lambda config=config: sparsegdn.sparse_gated_delta_rule(
            q, k, v, g, beta, scale=scale, output_final_state=True, config=config)
        # The Triton backend entry alone: what the kernels cost without the call around them.
        runs[f"sparsegdn/{label(config)}"] = lambda config=config: sparse_gdn_forward(
            q, k, v, g, beta, events=None, budget=config.budget, selector=config.selector, band=config.band,
            scale=scale, initial_state=None, output_final_state=True, use_qk_l2norm_in_kernel=True)
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


def stage_times(inputs, config: SparseConfig, repeats=20):
    """Median time of each stage of the public call (sparsegdn.STAGES), from CUDA events at its stage_hook."""
    q, k, v, g, beta = inputs
    samples = {name: [] for name in STAGES}
    for _ in range(repeats):
        marks = [torch.cuda.Event(enable_timing=True)]
        marks[0].record()

        def hook(name):
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            marks.append(event)
        sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, scale=K ** -0.5, output_final_state=True, config=config,
                                          stage_hook=hook)
        torch.cuda.synchronize()
        for name, start, end in zip(STAGES, marks[:-1], marks[1:]):
            samples[name].append(start.elapsed_time(end))
    return {name: statistics.median(values) for name, values in samples.items()}


def counted_work(tokens, budget, band):
    """Bytes through device memory and FLOPs we count for each pass (each tensor once per pass)."""
    nc, c, b = sparsegdn.num_chunks(tokens), CHUNK_SIZE, BLOCK_SIZE
    events = sparsegdn.event_count(budget, HV, nc)
    chunks = HV * nc
    bf16 = 2
    qk = B * tokens * H * K * bf16
    vv = B * tokens * HV * V * bf16
    gates = B * tokens * HV * (4 + bf16)
    t_inv = B * chunks * c * c * bf16
    wu = B * events * c * (K + V) * bf16
    snaps = B * (events + HV) * K * V * bf16
    kc = B * events * c * K * bf16                       # k_commit list
    if band <= 1:   # block_solve: diagonal and predecessor blocks, 16x16 products batched by four
        solve_flops = (2 + band) * 2 * c * b * K + (6 + 6 * band + 2 * band) * 2 * (c // b) * b ** 3
        solve_bytes = qk * (1 + band) + vv * (1 + band) + gates + t_inv
    else:           # chunk_prepare: whole 64x64 tiles, ten 64x64x64 float32 products
        solve_flops = 2 * c * c * K + 10 * 2 * c ** 3
        solve_bytes = qk + vv + gates + t_inv
    work = {
        "intra_solve": (solve_bytes, B * chunks * solve_flops),
        "event_prepare": (B * events * c * (K + V) * bf16 + B * events * c * c * bf16 + wu + kc,
                          B * events * 2 * c * c * (K + V)),
        "state_pass": (wu + kc + snaps, B * events * 2 * 2 * c * K * V),
        "output": (2 * qk + vv + gates + t_inv + snaps + vv,
                   B * chunks * 2 * (c * c * K + c ** 3 + c * c * K + c * K * V + c * c * V)),
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


def measure(tokens: int, bandwidth: float, matrix_rate: float, command: str, date: str, code: str) -> list[dict]:
    """One row per configuration at `tokens` tokens (fields: analysis/measurements.py)."""
    device = torch.cuda.get_device_name()
    inputs = make_inputs(tokens)
    runs = contenders(inputs)
    for fn in runs.values():      # compile and warm up before any timing
        fn()
    torch.cuda.synchronize()
    times = {name: [] for name in runs}
    for _ in range(2):            # interleaved: every contender once per round
        for name, fn in runs.items():
            times[name].append(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
    memory = {name: peak_extra_mb(fn) for name, fn in runs.items()}
    fla_ms = statistics.mean(times["fla"]) if "fla" in times else None
    qla_ms = statistics.mean(times["flashqla"]) if "flashqla" in times else None
    rows = []
    for config in CONFIGS:
        api, kernels = f"api/{label(config)}", f"sparsegdn/{label(config)}"
        work, minimum = counted_work(tokens, config.budget, config.band)
        total_bytes = sum(b for b, _ in work.values())
        total_flops = sum(f for _, f in work.values())
        rows.append({
            "T": tokens, "budget": config.budget, "band": config.band, "selector": config.selector,
            "api_ms": statistics.mean(times[api]), "api_ms_runs": times[api],
            "sparsegdn_ms": statistics.mean(times[kernels]), "sparsegdn_ms_runs": times[kernels],
            "fla_ms": fla_ms, "fla_ms_runs": times.get("fla"),
            "flashqla_ms": qla_ms, "flashqla_ms_runs": times.get("flashqla"),
            "api_peak_mem_mb": memory[api], "peak_mem_mb": memory[kernels], "fla_peak_mem_mb": memory.get("fla"),
            "flashqla_peak_mem_mb": memory.get("flashqla"),
            "stage_ms": stage_times(inputs, config), "counted_bytes": total_bytes, "counted_flops": total_flops,
            "minimum_bytes": minimum[0],
            "roofline_ms": 1e3 * max(total_bytes / bandwidth, total_flops / matrix_rate),
            "minimum_traffic_ms": 1e3 * minimum[0] / bandwidth,
            "copy_bandwidth_tbs": bandwidth / 1e12, "matmul_tflops": matrix_rate / 1e12,
            "output_final_state": True, "device": device, "date": date, "command": command, "build": code,
            "versions": versions(),
        })
        r = rows[-1]
        print(f"T={tokens:6d} {label(config):14s} public {r['api_ms']:7.3f} ms  kernels {r['sparsegdn_ms']:7.3f} ms  "
              f"fla {fla_ms or float('nan'):7.3f}  qla {qla_ms or float('nan'):7.3f}  "
              f"mem {r['api_peak_mem_mb']:.0f}/{r['fla_peak_mem_mb'] or float('nan'):.0f} MB  "
              + " ".join(f"{s}={t:.3f}" for s, t in r["stage_ms"].items()), flush=True)
    return rows


def versions() -> dict:
    """torch, triton, fla and flash_qla versions of the run (None where not installed)."""
    found = {"torch": torch.__version__, "triton": triton.__version__}
    for name in ("fla", "flash_qla"):
        try:
            found[name] = getattr(__import__(name), "__version__", "?")
        except ImportError:
            found[name] = None
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 8192, 16384, 32768, 65536, 131072])
    parser.add_argument("--out", default="analysis/results")
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    parser.add_argument("--render", type=Path, default=None, help="only rewrite the .md of an existing JSON")
    args = parser.parse_args()
    if args.render:
        write_report(args.render)
        return
    bandwidth, matrix_rate = ceilings()
    print(f"{torch.cuda.get_device_name()}: copy {bandwidth / 1e12:.2f} TB/s, bf16 matmul "
          f"{matrix_rate / 1e12:.0f} TFLOP/s", flush=True)
    command = "FLA_FLASH_QLA=0 python benchmarks/kernel_bench.py " + " ".join(sys.argv[1:])
    rows, code = [], build()
    for tokens in args.tokens:
        rows += measure(tokens, bandwidth, matrix_rate, command, args.date, code)
        torch.cuda.empty_cache()
    tuned = autotune_choices()
    print("autotune choices:", tuned, flush=True)
    for r in rows:
        r["autotune"] = tuned
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "kernel_bench.json").write_text(json.dumps(rows, indent=1))
    write_report(out / "kernel_bench.json")


def write_report(path: Path) -> None:
    """The run's markdown beside its JSON (analysis/measurements.py, which needs polars)."""
    try:
        from analysis import measurements
    except ImportError as error:
        print(f"{path.with_suffix('.md').name} not written ({error}): run "
              f"python benchmarks/kernel_bench.py --render {path} where polars is installed", flush=True)
        return
    path.with_suffix(".md").write_text(measurements.kernel_report(path))
    print(path.with_suffix(".md").read_text())


def autotune_choices():
    """The config the autotuner kept for each of our autotuned kernels (key -> config), as text."""
    chosen = {}
    for name in ("block_solve", "chunk_prepare", "state_pass", "chunk_output"):
        try:
            kernel = getattr(importlib.import_module(f"sparsegdn.triton.{name}"), f"{name}_kernel", None)
        except ImportError:
            continue
        if kernel is not None:
            chosen[name] = [str(config) for config in getattr(kernel, "cache", {}).values()]
    return chosen


if __name__ == "__main__":
    main()
