#!/usr/bin/env bash
# Batch 30, call 2 (issue 14): the early checks timed at 64K and 128K (as call 1 at 4K-32K), then the public call's
# probe, the public call with them off and on in one process (wall time per call, its wait, the allocator's driver
# calls).
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch30/call2.sh
# Prediction: at 128K the early public call within ~3% of its entry, the entry ~3-4% slower than by_band's (pass 1
# reads q: 512 MiB); falsified if the early public call is not faster than by_band's at 64K and 128K.
set -u
mkdir -p "$OUT"
SECONDS=0
timeout 330 python benchmarks/kernel_bench.py --designs by_band early --configs 0.29/1/score 1.0/3/all \
  --tokens 65536 131072 --out "$OUT/long" > "$OUT/long.log" 2>&1
echo "long rc $? at ${SECONDS}s"; grep -E "^T=" "$OUT/long.log" | cut -c1-200
timeout 150 python benchmarks/public_call_probe.py --tokens 4096 32768 131072 --calls 100 --out "$OUT/probe" \
  > "$OUT/probe.log" 2>&1
echo "probe rc $? at ${SECONDS}s"; grep -E "^T=" "$OUT/probe.log"
