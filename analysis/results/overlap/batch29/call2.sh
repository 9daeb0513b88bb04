#!/usr/bin/env bash
# Batch 29, call 2 (issue 14): warm-up segments beside the lists timed against whole chains in the same process and
# rounds (kernel_bench's design "process" takes the process's SPARSEGDN_COMMIT_SEGMENT; by_band never cuts the chains,
# which voided call 1's segment runs), then ncu on the chain pass at blocks of 16 and 32.
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch29/call2.sh
set -u
S="SPARSEGDN_WARM_UP=20 SPARSEGDN_LISTS_WITH_SEGMENTS=1"
OUT="$OUT/chains" STEPS=chains CHAIN_LIMIT=100 CHAIN_LENGTHS="32768 65536 131072" CHAIN_RUNS="\
SPARSEGDN_CHAIN_BV=32 SPARSEGDN_COMMIT_SEGMENT=128 $S:by_band process;\
SPARSEGDN_CHAIN_BV=32 SPARSEGDN_COMMIT_SEGMENT=256 $S:by_band process;\
SPARSEGDN_CHAIN_BV=32 SPARSEGDN_COMMIT_SEGMENT=512 $S:by_band process;\
SPARSEGDN_CHAIN_BV=32 SPARSEGDN_COMMIT_SEGMENT=1024 $S:by_band process;\
SPARSEGDN_CHAIN_BV=16 SPARSEGDN_COMMIT_SEGMENT=512 $S:by_band process" bash benchmarks/kernel_batch.sh
echo "chains done at ${SECONDS}s"
[ -n "${NCU:-}" ] && OUT="$OUT/ncu" STEPS=ncu_chains bash benchmarks/kernel_batch.sh      # NCU=1: the first try of this call (ncu included) lost the machine before any output came back
echo "ncu done at ${SECONDS}s"
