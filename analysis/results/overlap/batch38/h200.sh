#!/usr/bin/env bash
# For an H200 (issue 14; written in batch 38, not yet run): two scripts written in earlier batches, run on this build
# (swizzled solve, relaxed claims), each into its own folder under $OUT.
# 1. batch36/lists_caps.sh: the zero-state list at one stage, three programs, a cap of 168, against the default launch,
#    public call in alternating processes, two rounds; then ncu on the capped list. Batch 37's one ncu sample on an H200
#    read the capped list 7.4% shorter (H100 public calls tied in batch 36). On this build the capped list compiles to
#    26 local-memory instructions (batch38/list_caps_final.txt; 34 on batch 37's). Prediction: the capped form 0-3% faster at 128K on the H200; made a
#    default (for the H200 only, by the card's name) only if it wins in both rounds by more than the rounds' drift.
# 2. batch37/sources.sh: ncu's source counters of the zero-state list (which instructions hold the bank conflicts left).
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch38/h200.sh (~5 min; no wheels).
set -u
OUT=$OUT/caps timeout 330 bash analysis/results/overlap/batch36/lists_caps.sh
echo "lists_caps rc $?"
OUT=$OUT/sources timeout 200 bash analysis/results/overlap/batch37/sources.sh
echo "sources rc $?"
