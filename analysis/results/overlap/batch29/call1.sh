#!/usr/bin/env bash
# Batch 29, call 1 (issue 14): the lists' route cases at blocks of 32, warm-up segments beside the lists timed
# against whole chains (each setting in a process of its own, whole chains first and last), then the warm-up's
# error beside the lists. Run from the project root: OUT=$OUT bash analysis/results/overlap/batch29/call1.sh
set -u
mkdir -p "$OUT/logs"
S="SPARSEGDN_WARM_UP=20 SPARSEGDN_LISTS_WITH_SEGMENTS=1"   # the switch of 48ffcae (forward.LISTS_SEGMENT since)
SPARSEGDN_CHAIN_BV=32 timeout 200 python -m pytest -q -n 4 -p no:cacheprovider tests/test_triton_gpu_matrix.py \
  -k "list and overlap" > "$OUT/logs/cases-list-overlap-bv32.log" 2>&1
echo "cases rc $? $(tail -1 "$OUT/logs/cases-list-overlap-bv32.log") at ${SECONDS}s"
sleep 5     # pytest's workers gone before anything is timed
OUT="$OUT/chains" STEPS=chains CHAIN_LIMIT=100 CHAIN_LENGTHS="16384 32768 65536 131072" CHAIN_RUNS="\
SPARSEGDN_CHAIN_BV=32 RUN=1:by_band;\
SPARSEGDN_CHAIN_BV=32 SPARSEGDN_COMMIT_SEGMENT=256 $S:by_band;\
SPARSEGDN_CHAIN_BV=32 SPARSEGDN_COMMIT_SEGMENT=512 $S:by_band;\
SPARSEGDN_CHAIN_BV=32 SPARSEGDN_COMMIT_SEGMENT=1024 $S:by_band;\
SPARSEGDN_CHAIN_BV=64 SPARSEGDN_COMMIT_SEGMENT=512 $S:by_band;\
SPARSEGDN_CHAIN_BV=32 RUN=2:by_band" bash benchmarks/kernel_batch.sh
echo "chains done at ${SECONDS}s"
timeout 150 python benchmarks/warm_up_error.py --route lists --tokens 32768 131072 --bands 1 --segments 256 512 1024 \
  > "$OUT/logs/warm_up_error_lists.log" 2>&1
echo "warm_up_error rc $? at ${SECONDS}s"
cat "$OUT/logs/warm_up_error_lists.log" | cut -c1-600
