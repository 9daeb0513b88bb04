#!/usr/bin/env bash
# Batch 34, call 4 (issue 14): call 3's eight failures after the fix (validation.host_buffer: the flags' pinned buffer
# made outside inference mode). One process (-n 0), so that the graph cases (under inference_mode) run before the
# planned calls (under no_grad) on the same thread, the order that failed. Then the rest of the two files' GPU cases
# named by call 3's failures. Run from the project root: OUT=$OUT bash analysis/results/overlap/batch34/call4.sh
set -u
mkdir -p "$OUT"
SECONDS=0
{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name --format=csv,noheader), sources $(python benchmarks/kernel_bench.py --digest)"
  echo "# Command: OUT=\$OUT bash analysis/results/overlap/batch34/call4.sh"
} > "$OUT/cases.log"
timeout 300 python -m pytest -v -p no:cacheprovider tests/test_triton_gpu_matrix.py \
  -k "graph_replay or planned_calls or early or public" >> "$OUT/cases.log" 2>&1
echo "cases rc $? at ${SECONDS}s" | tee -a "$OUT/cases.log"
grep -E "FAILED|ERROR" "$OUT/cases.log" | head -20
tail -2 "$OUT/cases.log"
