#!/usr/bin/env bash
# Batch 33, call 1 (issue 14): the early checks (on by default since 35a46d2) against the waiting call at every
# length on whatever card comes (the GPU matrix's files ran on that default in batch 32 call 7 and batch 33 call 8).
# Then the files with GPU cases outside the matrix. Run from the project root:
# OUT=$OUT bash analysis/results/overlap/batch33/call1.sh (about 90 s, then at most 200).
# Prediction (from batch 32 on an H100): the default's public call faster than the waiting one's by 0-25% at 4K-64K
# and level (+-1%) at 128K, for budget 0.29 and for dense semantics. On an H200 (batch 31: the third form -11% to +5%)
# falsified if the default loses by more than 2% at any length from 32K (budget 0.29 or dense semantics, which moved
# -5% to +7% there with the third form): then the default goes back to waiting on that card, or the scan is made
# cheaper (its 128K cost on the H100: 191 us). On an H100, falsified by the same loss against batch 32's reading.
set -u
source benchmarks/batch_head.sh call.log     # the same lines as it ran with, inline then
timeout 200 python benchmarks/kernel_bench.py --designs by_band waiting --configs 0.29/1/score 1.0/3/all \
  --tokens 4096 8192 16384 32768 65536 131072 --out "$OUT/compare" > "$OUT/compare.log" 2>&1
echo "compare rc $? at ${SECONDS}s"; grep -E "^T=" "$OUT/compare.log" | sed -E 's/fla .* MB  //' | cut -c1-110
# then the files with GPU cases outside the matrix not yet run on the early checks' default (batch 33 calls.md)
timeout 200 python -m pytest -q -n 8 tests/test_list_output.py tests/test_checked_keys.py \
  tests/test_streamed_prepare.py tests/test_folded_commits.py > "$OUT/others.log" 2>&1
echo "others rc $? at ${SECONDS}s"; tail -2 "$OUT/others.log"
