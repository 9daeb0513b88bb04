#!/usr/bin/env bash
# Batch 40, the last call (issue 14): the front page on this build, with the wheels of three back-to-back calls
# installed in /tmp/site (FLA 0.6.0, FlashQLA 0.1.3): the kernel benchmark's full run, then the in-model prefill at
# 32K. Where call 1's rule took warm-up segments beside the lists (/tmp/batch40_segment, a length > 0), the run takes
# them by SPARSEGDN_LISTS_SEGMENT (read at import), the setting the library's default then gets.
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch40/call3.sh (~330 s on an H200).
set -u
export PYTHONPATH=/tmp/site
segment=$(cat /tmp/batch40_segment 2>/dev/null || echo 0)
source benchmarks/batch_head.sh bench.log
echo "warm-up segments beside the lists: ${segment} (0: whole chains)"
[ "$segment" -gt 0 ] 2>/dev/null && export SPARSEGDN_LISTS_SEGMENT=$segment
FLA_FLASH_QLA=0 python benchmarks/kernel_bench.py --out "$OUT/bench" --date 2026-12-06
echo "kernel_bench rc $? at ${SECONDS}s"
FLA_FLASH_QLA=0 python -m analysis.bench_prefill --tokens 32768 --repeats 3 --out "$OUT/prefill"
echo "bench_prefill rc $? at ${SECONDS}s"
ls "$OUT" "$OUT/bench" "$OUT/prefill"
