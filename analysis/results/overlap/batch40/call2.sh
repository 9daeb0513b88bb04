#!/usr/bin/env bash
# Batch 40, call 2 (issue 14): the GPU matrix's cases of the lists' route (lists, overlap, publishing, warm-up
# segments, default route, planned calls, early checks), on the setting call 1's rule took (/tmp/batch40_segment:
# SPARSEGDN_LISTS_SEGMENT where > 0). Run from the project root: OUT=$OUT bash analysis/results/overlap/batch40/call2.sh
# (at most ~210 s).
set -u
segment=$(cat /tmp/batch40_segment 2>/dev/null || echo 0)
source benchmarks/batch_head.sh cases.log
echo "warm-up segments beside the lists: ${segment} (0: whole chains)"
[ "$segment" -gt 0 ] 2>/dev/null && export SPARSEGDN_LISTS_SEGMENT=$segment
timeout 200 python -m pytest -q -n 10 -p no:cacheprovider tests/test_triton_gpu_matrix.py \
  -k "list or default_takes or overlap or publish or progress or warm or segment or planned or early" 2>&1 \
  | grep -v Warning | tail -15
echo "matrix subset rc ${PIPESTATUS[0]} at ${SECONDS}s"
