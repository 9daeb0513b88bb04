"""Where the public call's time beyond its kernels goes, call by call, on the GPU's own timeline (a probe, not a test).

    python benchmarks/call_gaps.py --tokens 4096 16384 65536 131072 --out runs/gaps

The public call reads its value flags back (one device sync a call: after its last kernel when this was written;
with the early checks, forward.EARLY_CHECKS, after pass 1 only), so in a benchmark loop the GPU waits for the
host at three places: before the call's first kernel (the API's checks, the plan's key, its first allocations and
launch; hidden while the GPU still clears do_bench's cache), between kernels where the host queues a launch later
than the GPU could start it, and after the last kernel (the read-back's wait, the return, the next event; not with
the early checks, whose call returns while the later kernels run). This runs
the public call in do_bench's loop (cache clear, call) under torch.profiler, exports the trace, and splits each
call's span into those parts from the kernels' GPU times and the launches' host times (kineto puts both on one
clock); the call of median span is kept event by event (host ops and runtime calls, GPU operations). The profiler's
own cost a launch (CUPTI's callbacks) lengthens the host's part: read it as an upper bound. Printed and written
(call_gaps.json): medians over the calls per length, and per launch (by kernel name) how long after the call's start
the host launched it and the GPU started it; with the public call's remembered checks (sparsegdn.api.CHECKED_KEYS,
the default) and with every call checked in full. Then, with no profiler, do_bench medians of both and of the
backend entry alone, interleaved in two rounds (the host share the kernel benchmark reports, in this process). Uses
benchmarks/kernel_bench.py's inputs (budget 0.29, band 1, `score`).
"""
import argparse
import collections
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

CALL_LABEL = "sparsegdn public call"
GPU_CATEGORIES = ("kernel", "gpu_memset", "gpu_memcpy")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
HOST_CATEGORIES = ("cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver")
MIN_GAP_US = 1.0        # idle stretches shorter than this between two GPU operations are not counted as gaps


def breakdown(trace_events: list) -> list:
    """Per call (a user annotation named CALL_LABEL in a chrome trace's event list), in us from the call's host
    start: `first_launch` (the host's first launch), `gpu_start` / `gpu_end` (its first GPU operation's start, its
    last's end), `busy` (the GPU's time in the call's operations, overlaps counted once), `idle_inside` (gaps of
    at least MIN_GAP_US between them), `host_bound_gaps` (those whose next operation the host launched after the
    gap began: the GPU waited on the host), `before_first` (from the call's start, or from the end of GPU work
    queued before the call if later, to its first operation: waiting for the host's first launch), `tail` (from
    the last operation's end to the call's host end), `span` and `launches`: (name, host launch, GPU start)."""
    complete = [e for e in trace_events if e.get("ph") == "X"]
    calls = sorted((e for e in complete if e.get("cat") == "user_annotation" and e.get("name") == CALL_LABEL),
                   key=lambda e: e["ts"])
    launches = sorted((e for e in complete if e.get("cat") in LAUNCH_CATEGORIES and "correlation" in e.get("args", {})),
                      key=lambda e: e["ts"])
    gpu_ops = {}
    for e in complete:
        if e.get("cat") in GPU_CATEGORIES and "correlation" in e.get("args", {}):
            gpu_ops[e["args"]["correlation"]] = e
    gpu_sorted = sorted(gpu_ops.values(), key=lambda e: e["ts"])
    rows = []
    for call in calls:
        start, end = call["ts"], call["ts"] + call["dur"]
        mine = []                       # (host launch ts, gpu op) of the launches made inside the call
        for launch in launches:
            if start <= launch["ts"] <= end and launch["args"]["correlation"] in gpu_ops:
                mine.append((launch["ts"], gpu_ops[launch["args"]["correlation"]]))
        if not mine:
            continue
        ops = sorted(mine, key=lambda pair: pair[1]["ts"])
        ids = {op["args"]["correlation"] for _, op in ops}
        earlier = [op["ts"] + op["dur"] for op in gpu_sorted
                   if op["args"]["correlation"] not in ids and op["ts"] < ops[0][1]["ts"]]
        queued_until = max([start] + earlier)           # GPU work queued before the call (do_bench's cache clear)
        busy = idle = host_bound = 0.0
        reach = ops[0][1]["ts"]
        for launched, op in ops:
            op_start, op_end = op["ts"], op["ts"] + op["dur"]
            if op_start - reach >= MIN_GAP_US:
                idle += op_start - reach
                if launched > reach:
                    host_bound += op_start - reach
            busy += max(0.0, op_end - max(op_start, reach))
            reach = max(reach, op_end)
        first = ops[0][1]["ts"]
        rows.append({
            "span": end - start,
            "first_launch": min(launched for launched, _ in mine) - start,
            "gpu_start": first - start,
            "gpu_end": reach - start,
            "before_first": max(0.0, first - queued_until),
            "busy": busy,
            "idle_inside": idle,
            "host_bound_gaps": host_bound,
            "tail": max(0.0, end - reach),
            "launches": [(op["name"], launched - start, op["ts"] - start)
                         for launched, op in sorted(mine, key=lambda pair: pair[0])],
            "host_events": [(e.get("cat"), str(e.get("name"))[:48], round(e["ts"] - start, 2), round(e["dur"], 2))
                            for e in complete if e.get("cat") in HOST_CATEGORIES and start <= e["ts"] <= end
                            and e is not call],
            "gpu_ops": [(op["name"][:48], round(op["ts"] - start, 2), round(op["dur"], 2)) for _, op in ops],
        })
    return rows


def summarize(rows: list) -> dict:
    """Medians over calls of every field; per launch position, its name and median host and GPU times."""
    fields = ("span", "first_launch", "gpu_start", "gpu_end", "before_first", "busy", "idle_inside",
              "host_bound_gaps", "tail")
    summary = {field: round(statistics.median(row[field] for row in rows), 2) for field in fields}
    summary["exposed"] = round(summary["before_first"] + summary["idle_inside"] + summary["tail"], 2)
    summary["calls"] = len(rows)
    common = min(len(row["launches"]) for row in rows)
    middle = sorted(rows, key=lambda row: row["span"])[len(rows) // 2]      # the call of median span, event by event
    summary["median_call"] = {"span": middle["span"], "host_events": sorted(middle["host_events"], key=lambda e: e[2]),
                              "gpu_ops": middle["gpu_ops"]}
    summary["launches"] = [
        {"name": rows[0]["launches"][i][0][:60],
         "host_us": round(statistics.median(row["launches"][i][1] for row in rows), 2),
         "gpu_start_us": round(statistics.median(row["launches"][i][2] for row in rows), 2)}
        for i in range(common)]
    return summary


def traced(fn, calls):
    """Chrome-trace events of `calls` calls of fn in do_bench's loop (cache clear, then the call)."""
    import torch
    import triton
    from torch.profiler import ProfilerActivity, profile, record_function

    cache = triton.runtime.driver.active.get_empty_cache_for_benchmark()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            triton.runtime.driver.active.clear_cache(cache)
            with record_function(CALL_LABEL):
                fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text())["traceEvents"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384, 65536, 131072])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("runs/call_gaps"))
    args = parser.parse_args()
    import torch
    import triton
    import kernel_bench
    from sparsegdn import SparseConfig, api

    config = SparseConfig(budget=0.29, band=1, selector="score", backend="triton")
    results = {"device": torch.cuda.get_device_name(), "build": kernel_bench.build(), "lengths": []}
    for tokens in args.tokens:
        inputs = kernel_bench.make_inputs(tokens)
        public = lambda: kernel_bench.public_call(inputs, config)                    # noqa: E731
        entry = lambda: kernel_bench.backend_entry(inputs, config)                   # noqa: E731
        row = {"tokens": tokens, "traced": {}, "do_bench_ms": {}}
        for _ in range(2):          # rounds, the public call's two ways interleaved with the entry
            for name, checked, fn in (("public", True, public), ("public_full_checks", False, public),
                                      ("entry", True, entry)):
                api.CHECKED_KEYS = checked
                if name not in row["traced"] and name != "entry":
                    events = traced(fn, args.calls)
                    rows = breakdown(events)
                    if not rows:        # what the trace holds instead, to mend the reading
                        kinds = collections.Counter((e.get("cat"), str(e.get("name", ""))[:40]) for e in events)
                        raise SystemExit(f"no call read from the trace; its events: {kinds.most_common(80)}")
                    row["traced"][name] = summarize(rows)
                ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                row["do_bench_ms"].setdefault(name, []).append(round(ms, 4))
        api.CHECKED_KEYS = True
        results["lengths"].append(row)
        timed = ", ".join(f"{name} {ms}" for name, ms in row["do_bench_ms"].items())
        print(f"T={tokens} do_bench ms, two rounds: {timed}")
        for name, summary in row["traced"].items():
            print(f"  {name} traced (us, medians of {summary['calls']} calls): span {summary['span']}, "
                  f"GPU busy {summary['busy']}, before first {summary['before_first']} "
                  f"(first launch at {summary['first_launch']}), idle inside {summary['idle_inside']} "
                  f"(host-bound {summary['host_bound_gaps']}), tail {summary['tail']}")
            for launch in summary["launches"]:
                print(f"    {launch['name']:<60} host {launch['host_us']:>8} GPU start {launch['gpu_start_us']:>8}")
        inputs = public = entry = None      # the inputs freed before the next length
        torch.cuda.empty_cache()
        args.out.mkdir(parents=True, exist_ok=True)       # written after every length: a cut run keeps the rest
        (args.out / "call_gaps.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
