#!/usr/bin/env bash
# Batch 33, call 0 (issue 14): what the last ~250 s of a session's device time can hold, on whatever card comes.
# On an H200 first: the default (early checks) against the waiting call at 4K-128K, budget 0.29 and dense semantics
# (the card the front page's previous run was on; batch 32 timed this on an H100 only). Then, on either card, the
# GPU matrix's files not rerun on the early checks' default, as far as the time goes (on an H200 about 80 s).
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch33/call0.sh
# Prediction on an H200 as call1.sh's header says.
set -u
mkdir -p "$OUT"
exec > >(tee "$OUT/call.log") 2>&1
SECONDS=0
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$card"; python benchmarks/kernel_bench.py --digest
if [[ "$card" == *H200* ]]; then
  timeout 110 python benchmarks/kernel_bench.py --designs by_band waiting --configs 0.29/1/score 1.0/3/all \
    --tokens 4096 8192 16384 32768 65536 131072 --out "$OUT/compare" > "$OUT/compare.log" 2>&1
  echo "compare rc $? at ${SECONDS}s"; grep -E "^T=" "$OUT/compare.log" | sed -E 's/fla .* MB  //' | cut -c1-110
fi
left=$((200 - SECONDS))
if ((left > 10)); then
  timeout "$left" python -m pytest -v -n 8 tests/test_stages.py tests/test_triton_launch.py \
    tests/test_gluon_band_solve.py tests/test_triton_kernels.py > "$OUT/rest.log" 2>&1
  echo "rest rc $? at ${SECONDS}s"; grep -cE "PASSED" "$OUT/rest.log"; grep -E "FAILED|ERROR" "$OUT/rest.log" | head -5
  tail -2 "$OUT/rest.log"
fi
