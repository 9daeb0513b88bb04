#!/usr/bin/env bash
# Batch 39, call 2 (issue 14): the chains' counts released inside their one pipelined loop (state_pass.PUBLISH_IN_LOOP)
# against the runs of 16 commits (the default), in alternating processes, three rounds, 32K and 128K, the first round
# with the kernels' timeline. Run from the project root: OUT=$OUT bash analysis/results/overlap/batch39/ab.sh (~4 min).
# Prediction (written before the run): at 128K the chain pass beside the lists falls from ~2.66 ms to 2.2-2.4 and the
# public call is 4-8% faster with blocks of 32; 1-3% at 32K. Blocks of 16 in the loop (113 registers against 181):
# within 2% of blocks of 32. Counts every 64 commits: within 1% of every 16. Falsified if loop32 is not faster than
# base at 128K in every round.
set -u
# (As run, the forms without SPARSEGDN_CHAIN_PUBLISH had 16 commits, the default then; it is 64 since this batch, so
# they name 16 now.)
ROUNDS=3 PROFILE=1 TOKENS="32768 131072" bash benchmarks/ab_rounds.sh base="SPARSEGDN_CHAIN_PUBLISH=16" \
  loop32="SPARSEGDN_CHAIN_PUBLISH_IN_LOOP=1 SPARSEGDN_CHAIN_PUBLISH=16" \
  loop16="SPARSEGDN_CHAIN_PUBLISH_IN_LOOP=1 SPARSEGDN_CHAIN_BV=16 SPARSEGDN_CHAIN_PUBLISH=16" \
  loop32-p64="SPARSEGDN_CHAIN_PUBLISH_IN_LOOP=1 SPARSEGDN_CHAIN_PUBLISH=64" \
  loop16-ahead="SPARSEGDN_CHAIN_PUBLISH_IN_LOOP=1 SPARSEGDN_CHAIN_BV=16 SPARSEGDN_LIST_CLAIM_AHEAD=1 SPARSEGDN_CHAIN_PUBLISH=16"
