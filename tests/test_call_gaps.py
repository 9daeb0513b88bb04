"""benchmarks/call_gaps.py's reading of a profiler trace (the tracing itself runs on a GPU only)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import call_gaps  # noqa: E402


def op(cat, name, ts, dur, correlation=None):
    event = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {}}
    if correlation is not None:
        event["args"]["correlation"] = correlation
    return event


def test_breakdown_splits_a_call_into_waits_for_the_host_and_gpu_work():
    events = [
        op("cuda_runtime", "cudaLaunchKernel", 0, 2, correlation=1),     # the cache clear, before the call
        op("kernel", "clear", 5, 40, correlation=1),                       # GPU busy until 45
        op("user_annotation", call_gaps.CALL_LABEL, 10, 300),              # the call: host 10 .. 310
        op("cuda_driver", "cuLaunchKernelEx", 60, 5, correlation=2),       # first launch 50 us into the call
        op("kernel", "intra", 70, 100, correlation=2),                     # GPU 70 .. 170: 25 us waiting for the host
        op("cuda_driver", "cuLaunchKernelEx", 80, 5, correlation=3),       # queued early: no gap
        op("kernel", "select", 170, 20, correlation=3),                    # 170 .. 190
        op("cuda_driver", "cuLaunchKernelEx", 200, 5, correlation=4),      # launched after the GPU ran dry at 190
        op("kernel", "one_launch", 210, 50, correlation=4),                # 20 us host-bound gap
        op("cuda_runtime", "cudaMemcpyAsync", 205, 3, correlation=5),
        op("gpu_memcpy", "flags", 262, 0.5, correlation=5),                # 2 us gap after a launch made earlier
        op("cuda_driver", "cuLaunchKernelEx", 400, 5, correlation=6),      # outside the call: ignored
        op("kernel", "next", 410, 10, correlation=6),
    ]
    (row,) = call_gaps.breakdown(events)
    assert row["span"] == 300 and row["first_launch"] == 50
    assert row["gpu_start"] == 60 and row["gpu_end"] == 252.5
    assert row["before_first"] == 25            # from the clear's end (45) to the first kernel (70)
    assert row["busy"] == 170.5
    assert row["idle_inside"] == 22 and row["host_bound_gaps"] == 20
    assert row["tail"] == 310 - 262.5
    assert [name for name, _, _ in row["launches"]] == ["intra", "select", "one_launch", "flags"]
    summary = call_gaps.summarize([row, dict(row, span=400, tail=10)])
    assert summary["span"] == 350 and summary["calls"] == 2
    assert summary["exposed"] == summary["before_first"] + summary["idle_inside"] + summary["tail"]
    assert summary["launches"][2] == {"name": "one_launch", "host_us": 190, "gpu_start_us": 200}


def test_calls_without_launches_are_left_out():
    events = [op("user_annotation", call_gaps.CALL_LABEL, 0, 10), op("kernel", "k", 20, 5, correlation=9)]
    assert call_gaps.breakdown(events) == []
