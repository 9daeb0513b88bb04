#!/usr/bin/env bash
# Batch 45, the last call (issue 14): the front page on the build whose chains read their keys in place
# (chunk_loads.DIRECT_KEYS, the publishing chains at five stages), after the wheels of three back-to-back calls were
# installed in /tmp/site (FLA 0.6.0, FlashQLA 0.1.3): the kernel benchmark's full run, then the in-model prefill at 32K.
# Prediction (written before the run, from call 1's three alternating rounds on an H100): the public call at budget
# 0.29 ~2% under batch 42's at 32K-128K (~1.035 / 1.98 / 3.86 ms against 1.056 / 2.021 / 3.939), so FlashQLA / public
# ~0.93 / 0.89 / 0.87 (still short of 1.0); 4K ~4-5% slower (0.231 -> ~0.24; FlashQLA / public ~1.19), 16K level.
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch45/call4.sh (~360 s on an H100).
set -u
export PYTHONPATH=/tmp/site
source benchmarks/batch_head.sh bench.log
FLA_FLASH_QLA=0 python benchmarks/kernel_bench.py --out "$OUT/bench" --date 2026-12-07
echo "kernel_bench rc $? at ${SECONDS}s"
FLA_FLASH_QLA=0 python -m analysis.bench_prefill --tokens 32768 --repeats 3 --out "$OUT/prefill"
echo "bench_prefill rc $? at ${SECONDS}s"
ls "$OUT" "$OUT/bench" "$OUT/prefill"
