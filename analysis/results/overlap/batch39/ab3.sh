#!/usr/bin/env bash
# Batch 39, call 4 (issue 14), after call 3 (ab2.sh, H200): runs of 64 commits between counts (the default's form,
# SPARSEGDN_CHAIN_PUBLISH=64) made the public call 2.9% faster at 128K and 1.2% at 32K; counts inside the loop lost
# to it. Here the runs' length: 16 (the default), 32, 64, 128, 256. Run from the project root:
# OUT=$OUT bash analysis/results/overlap/batch39/ab3.sh (~4 min).
# Prediction: 128 and 256 within 1% of 64 at 128K (the drains rarer, the lists' counts later), worse at 32K from 256
# (a chain of ~510 commits publishes twice).
set -u
# (As run, the first form had no settings: 16 commits was the default then; it is 64 since this batch, so the
# first form names 16 now.)
ROUNDS=3 PROFILE=1 TOKENS="32768 131072" bash benchmarks/ab_rounds.sh p16="SPARSEGDN_CHAIN_PUBLISH=16" \
  p32="SPARSEGDN_CHAIN_PUBLISH=32" p64="SPARSEGDN_CHAIN_PUBLISH=64" p128="SPARSEGDN_CHAIN_PUBLISH=128" \
  p256="SPARSEGDN_CHAIN_PUBLISH=256"
