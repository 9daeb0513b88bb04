#!/usr/bin/env bash
# Batch 51's third call (issue 14): call2.sh (select_kernel's search forms), then the chains' publishing interval and
# value blocks at the short lengths on the lists' route, in one call (the device time left after seven refused starts
# holds one). At 4K-16K the lists' route cuts each chain into segments of half the chunk count (32 / 64 / 128
# commits) and the chain programs publish their progress every 64 commits (state_pass.PROGRESS_PUBLISH, chosen at
# 32K-128K on an H200 in batch 39): at 4K and 8K a segment publishes only at its end, so the list with a state waits
# for whole segments (batch 50's 8K timeline: the chain pass 154 us, the list with a state 68 after it). The one
# launch's outputs showed the same at 4K-8K (state_output.PUBLISH: 16 against 64, 0.222 / 0.361 against 0.249 / 0.393
# ms, two builds). Forms (benchmarks/ab_rounds.sh, three alternating rounds, the public call at budget 0.29):
#   base     the defaults
#   pub16    SPARSEGDN_CHAIN_PUBLISH=16
#   pub32    SPARSEGDN_CHAIN_PUBLISH=32
#   bv16     SPARSEGDN_CHAIN_BV=16 (blocks of 16 walk a commit faster, batch 43: 1,519 against 1,774 us at 128K, but
#            twice the programs; +7% at 32K-128K)
# Prediction (written before the run): pub16 -3 to -8% at 8K, -1 to -5% at 4K, within 1% at 16K; pub32 between base
# and pub16; bv16 within 3% of base at 4K-16K (faster commits against 512 chain programs at 8K, more than the 264
# slots of two an SM).
# Rule: a publishing interval goes on for the lengths where it wins the public call's median in every round by 1% or
# more (a per-call interval by chunk count then; the setting is read at import today); else the defaults stay.
# OUT=$OUT bash analysis/results/overlap/batch51/call3.sh (~7 min on an H100; no wheels).
set -u
OUT="$OUT" bash analysis/results/overlap/batch51/call2.sh
OUT="$OUT/ab" ROUNDS=3 TOKENS="4096 8192 16384" LIMIT=100 bash benchmarks/ab_rounds.sh base="" \
  pub16="SPARSEGDN_CHAIN_PUBLISH=16" pub32="SPARSEGDN_CHAIN_PUBLISH=32" bv16="SPARSEGDN_CHAIN_BV=16"
echo "call3 done"
