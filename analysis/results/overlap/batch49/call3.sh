#!/usr/bin/env bash
# Batch 49's third call (issue 14), on the build with call 1's two winning forms the default (schedule.SCHEDULE_LOAD
# 4096, intra_chunk.EARLY_BESIDE on): first the lists against the one launch at 16 value heads (call 2 found the lists
# 20.5% slower at B 1, HV 16, 8K, the only shape of eight where they lost), at 8K-128K and with two batch rows, with
# HV 32 at 8K as the control; then the whole GPU matrix on this build.
# Prediction (written before the run): HV 16 loses on the lists at every length (its outputs are half HV 32's beside
# chains as long, and the one launch overlaps them with the walk), by 10-25%; B 2 x HV 16 at 8K (32 rows, as HV 32's
# 4K that won) wins or ties. The matrix passes (its cases of the new forms passed in call 1).
# Rule: where HV 16 loses by > 3% at every length timed, the lists need 32 head-pair rows (B x HV) besides their
# length conditions.
# OUT=$OUT bash analysis/results/overlap/batch49/call3.sh (~7 min on an H100; no wheels).
set -u
mkdir -p "$OUT"
timeout 150 python benchmarks/route_shapes.py --shapes 1x16x16x8192 1x16x16x16384 1x16x16x32768 1x16x16x131072 2x16x16x8192 \
  1x16x32x8192 --out "$OUT/route_shapes.json" 2>&1 | tee "$OUT/route_shapes.log"
echo "route_shapes rc $? at ${SECONDS}s"
bash analysis/results/overlap/batch34/call3.sh
