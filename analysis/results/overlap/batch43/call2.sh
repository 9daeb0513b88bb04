#!/usr/bin/env bash
# Batch 43, call 2 (issue 14): the lists' and chains' launch shapes again, now that the chains beside the lists are cut
# in half (batch 42's default) and the lists end last (0.65 ms after the chains at 128K on an H100). Every shape below
# was last timed beside whole chains, when the chains were the call's critical path.
#  1. ncu's sections of both lists in one warm public call at 128K (batch 37's limiter.sh, default and the zero-state
#     list at one stage, three programs and a cap of 168): what limits them on this build.
#  2. benchmarks/ab_rounds.sh, three alternating rounds at 32K / 64K / 128K, the public call (budget 0.29, band 1):
#     base          the defaults (segments of half the chunk count, claims ahead)
#     own3cap       the zero-state list at one stage, three programs an SM, a cap of 168 (batch 37: the list 7.4%
#                   shorter under ncu on an H200; batch 36: tied in the public call beside whole chains)
#     chain2        the chain programs at two pipeline stages (72 KB of shared memory, not 107: room for a list beside)
#     own3cap-chain2  both
#     bv16          chain programs of 16 value columns (twice the programs, each lighter)
#     chainsmall    bv16 at two stages and a cap of 168 (three chain programs an SM by registers and shared memory)
#     pub32         progress counts every 32 commits, not 64 (the list with a state waits on them)
# Prediction (written before the run): own3cap -2 to -4% at 128K and level to -2% at 32K (the zero-state list's own
# time was the gain under ncu; now that the lists are the wall it should reach the call); chain2, bv16, pub32 within
# 1% of base; chainsmall unknown (spills against room), within 3%.
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch43/call2.sh (~6 min on an H100; no wheels).
set -u
mkdir -p "$OUT"
SECONDS=0
OUT="$OUT/limiter" timeout 200 bash analysis/results/overlap/batch37/limiter.sh > /dev/null 2>&1
echo "limiter rc $? at ${SECONDS}s"
tail -n +3 "$OUT/limiter/limiter.log" 2>/dev/null | grep -E "Duration|Issue Slots Busy|Eligible|L1/TEX Cache Th|L2 Cache Th|DRAM Th|Achieved Occ" | head -24
ROUNDS=${ROUNDS:-3} PROFILE=1 TOKENS="32768 65536 131072" bash benchmarks/ab_rounds.sh base="" \
  own3cap="SPARSEGDN_LIST_LAUNCH=1x3,1x2 SPARSEGDN_LIST_MAXNREG=168,0" \
  chain2="SPARSEGDN_CHAIN_STAGES=2" \
  own3cap-chain2="SPARSEGDN_LIST_LAUNCH=1x3,1x2 SPARSEGDN_LIST_MAXNREG=168,0 SPARSEGDN_CHAIN_STAGES=2" \
  bv16="SPARSEGDN_CHAIN_BV=16" \
  chainsmall="SPARSEGDN_CHAIN_BV=16 SPARSEGDN_CHAIN_STAGES=2 SPARSEGDN_CHAIN_MAXNREG=168" \
  pub32="SPARSEGDN_CHAIN_PUBLISH=32"
echo "call2 done at ${SECONDS}s"
