#!/usr/bin/env bash
# Batch 30, call 1 (issue 14): the early checks (forward.EARLY_CHECKS, off by default) on the GPU: their cases and the
# planned calls' beside them, then the public call timed with them against by_band in the same process and rounds,
# 4K-32K (call 2: 64K-128K and the probe).
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch30/call1.sh
# Prediction (H200, batch 28's front page: the public call +33% / +29% / +20% / +8.8% over its kernels at 4K-32K):
# with the early checks the public call within ~5% of its own entry at every length, and faster than by_band's public
# call by 40-90 us at 4K-32K; their entry slower than by_band's by the q read and the copy (~10-40 us). Falsified if
# the early public call is not faster than by_band's at 8K and 16K.
set -u
mkdir -p "$OUT"
SECONDS=0
timeout 200 python -m pytest -q -n 4 tests/test_triton_gpu_matrix.py -k "early or planned" > "$OUT/cases.log" 2>&1
echo "cases rc $? at ${SECONDS}s"; tail -4 "$OUT/cases.log"
pkill -f "python -m pytest" ; sleep 5     # pytest's workers gone before anything is timed (batch 28 call 8 timed beside them)
timeout 320 python benchmarks/kernel_bench.py --designs by_band early --configs 0.29/1/score 1.0/3/all \
  --tokens 4096 8192 16384 32768 --out "$OUT/short" > "$OUT/short.log" 2>&1
echo "short rc $? at ${SECONDS}s"; grep -E "^T=" "$OUT/short.log" | cut -c1-200
