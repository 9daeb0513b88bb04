#!/usr/bin/env bash
# Batch 53, call 1 (issue 14): the first half of the app's polars stack copied to /tmp, then on an H200 the whole GPU
# matrix on this build (its H200 log is batch 37's), on another card the planned-call cases only (the whole matrix
# passed on an H100 in batch 52). Run from the project root with .gpu-pol-a carried: OUT=$OUT bash <this file>.
set -u
cat .gpu-pol-a/part > /tmp/polars.tar.xz
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
if [[ "$card" == *H200* ]]; then
  OUT=$OUT bash analysis/results/overlap/batch34/call3.sh
else
  timeout 200 python -m pytest -q -p no:cacheprovider tests/test_triton_gpu_matrix.py -k planned_calls 2>&1 \
    | tee "$OUT/planned_calls.log" | tail -6
fi
