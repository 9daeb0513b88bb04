#!/usr/bin/env bash
# Batch 39, call 3 (issue 14), after call 2 (ab.sh): counts every 16 commits inside the loop did not shorten the chains
# beside the lists (2,654 against 2,661 us at 128K); every 64 did (2,577 us, public call 4.125 against 4.179 ms), and
# blocks of 16 in the loop shortened them to ~2,250 us but the lists then ended later. Here: whether the loop matters
# at 64 (runs of 64 commits, the default's form), 128 commits, the acq_rel order (compiled for sm_90 the commit's own
# snapshot stores still come before the count), and blocks of 16 with claims ahead at 64.
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch39/ab2.sh (~4 min). SPARSEGDN_CHAIN_COUNT_ORDER
# (state_pass.COUNT_ACQ_REL) was removed after this call (level with release): `git apply
# analysis/results/overlap/batch39/count_order.patch` puts it back; without it the form loop32-acq-p64 runs loop32-p64.
# Prediction: runs of 64 within 0.5% of loop32-p64 (the drains 4x rarer too); p128 0-0.5% faster than p64 at 128K;
# acq_rel level (its fence waits for the same stores); loop16-ahead-p64 the fastest at 128K (the chains ~2.2 ms and the
# lists' end ~2.55 ms).
set -u
# (As run, the first form had no settings: 16 commits was the default then; it is 64 since this batch, so the
# first form names 16 now.)
ROUNDS=3 PROFILE=1 TOKENS="32768 131072" bash benchmarks/ab_rounds.sh base="SPARSEGDN_CHAIN_PUBLISH=16" \
  runs32-p64="SPARSEGDN_CHAIN_PUBLISH=64" \
  loop32-p64="SPARSEGDN_CHAIN_PUBLISH_IN_LOOP=1 SPARSEGDN_CHAIN_PUBLISH=64" \
  loop32-p128="SPARSEGDN_CHAIN_PUBLISH_IN_LOOP=1 SPARSEGDN_CHAIN_PUBLISH=128" \
  loop32-acq-p64="SPARSEGDN_CHAIN_PUBLISH_IN_LOOP=1 SPARSEGDN_CHAIN_PUBLISH=64 SPARSEGDN_CHAIN_COUNT_ORDER=acq_rel" \
  loop16-ahead-p64="SPARSEGDN_CHAIN_PUBLISH_IN_LOOP=1 SPARSEGDN_CHAIN_BV=16 SPARSEGDN_LIST_CLAIM_AHEAD=1 SPARSEGDN_CHAIN_PUBLISH=64"
