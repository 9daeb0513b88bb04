#!/usr/bin/env bash
# Batch 53, call 1 (issue 14): the first half of the app's polars stack copied to /tmp, then the planned-call cases
# (the whole matrix passed on an H100 in batch 52; refused starts left no room for it this batch). Run from the
# project root with .gpu-pol-a carried: OUT=$OUT bash <this file>.
set -u
cat .gpu-pol-a/part > /tmp/polars.tar.xz
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
timeout 200 python -m pytest -q -p no:cacheprovider tests/test_triton_gpu_matrix.py -k planned_calls 2>&1 \
  | tee "$OUT/planned_calls.log" | tail -6
