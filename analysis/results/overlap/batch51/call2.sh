#!/usr/bin/env bash
# Batch 51's second call (issue 14), written in batch 50's session (no device time left to run it): select_kernel's
# search in other forms, at the lengths where the selection is a visible share of the call. At 8K tokens (batch 50's
# timelines, H100) select_kernel took 9.5 us of the public call's ~321: one program of four warps, 32 keys a thread,
# 32 dependent steps, each a count over the row and a reduction through shared memory; with one warp a scheduler
# every step waits on its own latencies. The forms (off by default; kernel_bench designs):
#   select_wide    the bit-a-step search with 8 keys a thread (schedule.SELECT_THREAD_KEYS: 16 warps at 8K, 32 from 16K)
#   select_radix   a byte a step (schedule.SELECT_STEP_BITS 8: four 256-bin histograms), 8 keys a thread
#   select_nibble  four bits a step (eight 16-bin histograms), 8 keys a thread
# compile_report (sm_90, 8K): 40 / 90 / 55 registers, no local memory; the histogram forms spill at 128K (4,000+
# local-memory instructions), so they are timed up to 32K only.
# First the GPU cases (the top scores at the benchmark's sizes, every form), then kernel_bench's four designs (one
# process, interleaved) at 4K-32K, then one profiled call of each at 8K.
# Prediction (written before the run): select_kernel at 8K 4-7 us for select_wide, 3-8 for the histogram forms
# (against 9.5); the public call -0.5 to -1.5% at 4K-8K for the best form, within 1% at 16K-32K.
# Rule: a form goes on for the rows where it wins the public call's median at every length timed up to the longest
# it wins at, by 0.5% or more at one of them, and its timeline shows select_kernel faster; else all stay off.
# OUT=$OUT bash analysis/results/overlap/batch51/call2.sh (~4 min on an H100; no wheels).
set -u
source benchmarks/batch_head.sh call2.log
timeout 200 python -m pytest -q -p no:cacheprovider tests/test_triton_kernels.py -k "top_scores"
echo "GPU cases rc $? at ${SECONDS}s"
python benchmarks/kernel_bench.py --designs by_band select_wide select_radix select_nibble --configs 0.29/1/score \
  --tokens 4096 8192 16384 32768 --out "$OUT/bench"
echo "kernel_bench rc $? at ${SECONDS}s"
python benchmarks/route_timelines.py --tokens 8192 --designs by_band select_wide select_radix select_nibble \
  --out "$OUT/timelines.json"
echo "route_timelines rc $? at ${SECONDS}s"
