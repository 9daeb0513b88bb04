#!/usr/bin/env bash
# Batch 43, call 5 (issue 14): fewer, wider chain programs beside the lists. Call 2 found the chains' footprint decides
# the lists' room: blocks of 16 (twice the chain programs) walked the chains faster (1,519 against 1,774 us at 128K)
# but the lists ended 320 us later, and two pipeline stages slowed the chains by 37-39%. Blocks of 64 halve the chain
# programs (two a head pair and segment); each commit is twice the work. Last timed beside whole chains (batch 28,
# H200: slower than 32), when the chains were the call's critical path; now they have ~650 us of slack at 128K and
# ~130 at 32K (call 2's timelines).
#   base    the defaults (blocks of 32, four warps, three stages)
#   bv64    blocks of 64, four warps
#   bv64t   blocks of 64 on the state's transpose (state_pass.TRANSPOSED: left operands from registers)
#   bv64w8  blocks of 64, eight warps
# Prediction (written before the run): every bv64 form slower at 32K (+3-8%: the chains' slack there is small); at 128K
# within 2% of base either way (the lists gain room, the chains lose speed).
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch43/call5.sh (~2.5 min on an H100; no wheels).
set -u
ROUNDS=${ROUNDS:-2} PROFILE=1 TOKENS="32768 131072" bash benchmarks/ab_rounds.sh base="" \
  bv64="SPARSEGDN_CHAIN_BV=64" \
  bv64t="SPARSEGDN_CHAIN_BV=64 SPARSEGDN_CHAIN_TRANSPOSED=1" \
  bv64w8="SPARSEGDN_CHAIN_BV=64 SPARSEGDN_CHAIN_WARPS=8"
