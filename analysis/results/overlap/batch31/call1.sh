#!/usr/bin/env bash
# Batch 31, call 1 (issue 14): the early checks' third form (forward.EARLY_CHECKS, off by default): q and the initial
# state checked by a scan of their own launched before pass 1 (intra_chunk.early_scan), pass 1 keeping the compares on
# the k, v and g it loads. Their GPU cases and the planned calls' beside them, then by_band against early in one
# process (budget 0.29 band 1 and dense semantics, 4K-128K), then the probe's public call against public+early.
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch31/call1.sh
# Prediction: the scan costs q's bytes at the card's bandwidth (H200 ~4 TB/s read: ~35 us at 32K, ~135 at 128K; H100
# ~3 TB/s: ~45 / ~180), so the early entry is within ~2x that of by_band's entry (falsified above 2x at 32K), and
# the early public call (at its own entry) faster than by_band's public call at every length where by_band's host
# share (batch 30: 28 / 35 / 56 / 85 / 58 / 314 us at 4K-128K) exceeds the scan's cost.
set -u
mkdir -p "$OUT"
SECONDS=0
python benchmarks/kernel_bench.py --digest
timeout 200 python -m pytest -q -n 4 tests/test_triton_gpu_matrix.py -k "early or planned" > "$OUT/cases.log" 2>&1
echo "cases rc $? at ${SECONDS}s"; tail -4 "$OUT/cases.log"
pkill -f "python -m pytest" ; sleep 5     # pytest's workers gone before anything is timed
timeout 300 python benchmarks/kernel_bench.py --designs by_band early --configs 0.29/1/score 1.0/3/all \
  --tokens 4096 8192 16384 32768 65536 131072 --out "$OUT/bench" > "$OUT/bench.log" 2>&1
echo "bench rc $? at ${SECONDS}s"; grep -E "^T=" "$OUT/bench.log" | cut -c1-220
timeout 90 python benchmarks/public_call_probe.py --tokens 4096 32768 131072 --calls 100 --out "$OUT/probe" \
  > "$OUT/probe.log" 2>&1
echo "probe rc $? at ${SECONDS}s"; tail -12 "$OUT/probe.log"
