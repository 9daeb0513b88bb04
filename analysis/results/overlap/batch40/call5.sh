#!/usr/bin/env bash
# Batch 40, call 5 (issue 14), as run (one command, on call 4's warm H100, 131 s of device time left after it): with
# segments the lists end last (call 4), so the zero-state list's claims two tiles ahead (SPARSEGDN_LIST_CLAIM_AHEAD=1,
# batch 38: that list 1.143 -> 1.015 ms under ncu) may count again. 128K only, two rounds, no timeline.
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch40/call5.sh (~50 s; no wheels).
set -u
ROUNDS=2 TOKENS="131072" bash benchmarks/ab_rounds.sh seg1024="SPARSEGDN_LISTS_SEGMENT=1024" \
  seg1024-ahead="SPARSEGDN_LISTS_SEGMENT=1024 SPARSEGDN_LIST_CLAIM_AHEAD=1" \
  seg512-ahead="SPARSEGDN_LISTS_SEGMENT=512 SPARSEGDN_LIST_CLAIM_AHEAD=1"
