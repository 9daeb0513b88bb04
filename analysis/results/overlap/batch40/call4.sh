#!/usr/bin/env bash
# Batch 40, call 4 (issue 14): call 1 again, now measured. Call 1's forms were one call: overlap_check.py runs the lists
# by switch (LISTS_FROM 0), a route that reads COMMIT_SEGMENT, so SPARSEGDN_LISTS_SEGMENT changed nothing there (its
# chains 2,542-2,548 us in every form). overlap_check.arrangement now gives the whole-chain arrangements the process's
# lists segments (and the rows say which segment and warm-up ran). Whole chains against warm-up segments of 256 / 512 /
# 1,024 commits beside the lists, alternating processes, two rounds, 32K and 128K, round 1 with the timeline.
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch40/call4.sh (~90 s; no wheels).
# Prediction (call 1's, unchanged): segments of 256 or 512 make the public call 5-10% faster at 128K and 2-6% at 32K,
# the chain pass beside the lists well under its 2.55 ms at 128K. Falsified if no segment form is faster than whole
# chains at 128K in both rounds by more than their spread.
set -u
ROUNDS=2 PROFILE=1 TOKENS="32768 131072" bash benchmarks/ab_rounds.sh base="" \
  seg256="SPARSEGDN_LISTS_SEGMENT=256" seg512="SPARSEGDN_LISTS_SEGMENT=512" seg1024="SPARSEGDN_LISTS_SEGMENT=1024"
