#!/usr/bin/env bash
# Batch 49's first call (issue 14): the small kernels before pass 3, timed before and after this batch's three forms
# (all off by default when written): select_kernel's search two bits a step (schedule.SELECT_STEP_BITS 2: 16 steps of
# three counts in one reduction, against 32 steps of one), schedule_kernel's count of the earlier head pairs' events in
# loads of 4,096 (schedule.SCHEDULE_LOAD: the last head pair waited on 31 loads one after the other), and pass 1
# launched beside the early scan as its programmatic dependent (intra_chunk.EARLY_BESIDE). kernel_bench's designs
# select_before (none of them), select_after (all three), beside_only and search_only, interleaved in one process,
# the public call at budget 0.29, band 1, `score`; then each kernel on the timeline at 8K and 128K.
# Batch 48's timelines (H100, 8K): early scan 19 us, pass 1 40, score_scan 2, select_kernel 9.4, schedule_kernel 10.8,
# the list kernels 5.7, pass 3 39, chains 180 with the lists ending 24 after; at 128K select_kernel 81.5, schedule 14.6.
# Prediction (written before the run): select_kernel 9.4 -> 5-6 us at 8K, 81 -> 60-100 at 128K (it spills more:
# 337 local-memory instructions against 247, compile_report); schedule_kernel 10.8 -> ~3 us at 8K, ~8 at 128K; the
# scan and pass 1 together 59 -> ~48 us at 8K, level at 128K. The public call: -5 to -8% at 4K, -4 to -7% at 8K
# (0.340 -> ~0.32 ms), ~-3% at 16K, -1 to -2% at 32K, within 1% at 128K.
# Rule: a form becomes the default where it wins (median) at every length timed from 4K, or, for select_kernel's
# search, from the lengths where it wins (the rows' length decides, schedule.SELECT_STEP_BITS by row length).
# OUT=$OUT bash analysis/results/overlap/batch49/call1.sh (~4 min on an H100; no wheels).
set -u
source benchmarks/batch_head.sh call1.log
timeout 200 python -m pytest -q -p no:cacheprovider tests/test_triton_gpu_matrix.py tests/test_triton_kernels.py \
  -k "schedule_is_the_same or early_checks_change_no_output or top_scores_at_the_benchmark_size"
echo "GPU cases rc $? at ${SECONDS}s"
python benchmarks/kernel_bench.py --designs select_before select_after beside_only search_only --configs 0.29/1/score \
  --tokens 4096 8192 16384 32768 131072 --out "$OUT/bench"
echo "kernel_bench rc $? at ${SECONDS}s"
python benchmarks/route_timelines.py --tokens 8192 131072 --designs select_before select_after --out "$OUT/timelines.json"
echo "route_timelines rc $? at ${SECONDS}s"
