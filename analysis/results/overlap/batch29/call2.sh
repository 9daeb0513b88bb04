#!/usr/bin/env bash
# Batch 29, call 2 (issue 14): warm-up segments beside the lists timed against whole chains in the same process and
# rounds (call 1's segment runs timed whole chains: by_band reset COMMIT_SEGMENT), then (NCU=1) ncu on the chain pass at
# blocks of 16 and 32.
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch29/call2.sh
set -u
# Segments beside the lists are forward.LISTS_SEGMENT (warm-up 20: forward.LISTS_WARM_UP); by_band takes the process's,
# whole_chains is by_band with whole chains, timed in the same rounds.
CHAINS=${CHAINS:-1}    # CHAINS=0 NCU=1: ncu alone, in a call of its own
[ "$CHAINS" = 1 ] && OUT="$OUT/chains" STEPS=chains CHAIN_LIMIT=100 CHAIN_LENGTHS="32768 65536 131072" CHAIN_RUNS="\
SPARSEGDN_LISTS_SEGMENT=128:by_band whole_chains;\
SPARSEGDN_LISTS_SEGMENT=256:by_band whole_chains;\
SPARSEGDN_LISTS_SEGMENT=512:by_band whole_chains;\
SPARSEGDN_LISTS_SEGMENT=1024:by_band whole_chains;\
SPARSEGDN_CHAIN_BV=16 SPARSEGDN_LISTS_SEGMENT=512:by_band whole_chains" bash benchmarks/kernel_batch.sh
echo "chains done at ${SECONDS}s"
[ -n "${NCU:-}" ] && OUT="$OUT/ncu" STEPS=ncu_chains bash benchmarks/kernel_batch.sh      # NCU=1: the first try of this call (ncu included) lost the machine before any output came back
echo "ncu done at ${SECONDS}s"
