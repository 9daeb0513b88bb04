"""Batch 39, call 9 (issue 14): the one launch's progress interval (state_output.PUBLISH, read at call time) at 16 and
64, the public call at 4K and 8K (the one launch's lengths; budget 0.29, band 1, `score`, final state), alternating in
one process, three rounds, do_bench medians. Batch 39's front-page run had 64 for both routes (0.249 / 0.393 ms at
4K / 8K against 0.222 / 0.361 in batch 37's at 16); the default is split since: the lists' route 64
(state_pass.PROGRESS_PUBLISH), the one launch 16. Run from the project root:
    python analysis/results/overlap/batch39/one_launch_publish.py
"""
import sys
from pathlib import Path

import triton

ROOT = Path(__file__).resolve().parents[4]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import kernel_bench  # noqa: E402
from sparsegdn import SparseConfig  # noqa: E402
from sparsegdn.triton import state_output  # noqa: E402

config = SparseConfig(budget=0.29, band=1, selector="score", backend="triton")
for tokens in (4096, 8192):
    inputs = kernel_bench.make_inputs(tokens)
    times = {16: [], 64: []}
    for round_ in range(3):
        for publish in ((16, 64) if round_ % 2 == 0 else (64, 16)):
            state_output.PUBLISH = publish
            call = lambda: kernel_bench.public_call(inputs, config)  # noqa: E731
            call()
            times[publish].append(triton.testing.do_bench(call, warmup=25, rep=200, return_mode="median"))
    print(f"T={tokens:5d} " + "  ".join(f"PUBLISH {p}: " + " / ".join(f"{t:.3f}" for t in ts) + " ms"
                                        for p, ts in times.items()))
