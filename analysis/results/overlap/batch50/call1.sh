#!/usr/bin/env bash
# Batch 50's first call (issue 14), written in batch 49's session (no device time left to run it): the early checks'
# scan of q and the initial state run by select_kernel's launch, its programs after the batch rows' searches
# (schedule.SCAN_BESIDE_SELECT, off by default), against the default (pass 1 beside the scan: intra_chunk.EARLY_BESIDE).
# select_kernel is one program a batch row (85 us at 128K on an H100, 9.3 at 8K: batch 49's timelines); the scan
# (q's read: 182 us at 128K, 19 at 8K) streams beside it instead of beside pass 1 (both bandwidth-bound at 128K, where
# that overlap bought 0.2%). compile_report (sm_90): select_kernel with the scan 115 registers at 8K (4 programs an SM),
# 64 at 128K with 32 warps (one program an SM; 270 local-memory instructions against 247).
# First the GPU cases of the three placements (the early checks' public-call cases on four routes), then kernel_bench's
# by_band against scan_in_selection (one process, interleaved), then one profiled call each at 8K and 128K.
# Prediction (written before the run): -1.5 to -2.5% at 128K (select_kernel's 85 us under the scan, the scan itself
# 180-220 us in select_kernel's launch shape), -1 to -2% at 32K, within 1% at 8K (pass 1's overlap with the scan lost,
# select_kernel's 9 us hidden), +0 to +3% at 4K.
# Rule: on from the shortest length timed where it wins (median) at that length and every longer one; if that is
# not every length, by the selection row's length (a constant beside SCAN_BESIDE_SELECT).
# OUT=$OUT bash analysis/results/overlap/batch50/call1.sh (~4 min on an H100; no wheels).
set -u
source benchmarks/batch_head.sh call1.log
timeout 240 python -m pytest -q -p no:cacheprovider tests/test_triton_gpu_matrix.py tests/test_triton_kernels.py \
  -k "early_checks_change_no_output or top_scores_at_the_benchmark_size"
echo "GPU cases rc $? at ${SECONDS}s"
python benchmarks/kernel_bench.py --designs by_band scan_in_selection --configs 0.29/1/score \
  --tokens 4096 8192 16384 32768 131072 --out "$OUT/bench"
echo "kernel_bench rc $? at ${SECONDS}s"
python benchmarks/route_timelines.py --tokens 8192 131072 --designs by_band scan_in_selection --out "$OUT/timelines.json"
echo "route_timelines rc $? at ${SECONDS}s"
