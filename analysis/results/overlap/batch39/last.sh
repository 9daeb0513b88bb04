#!/usr/bin/env bash
# Batch 39, call 7 (issue 14), on the new default (runs of 64 commits between counts, state_output.PUBLISH = 64):
# the GPU matrix's list, overlap, publishing, early-check and planned cases, then blocks of 16 (with and without the
# zero-state list's claims two tiles ahead) against the default's 32, two rounds without timelines.
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch39/last.sh (~5 min).
set -u
source benchmarks/batch_head.sh last.log
timeout 230 python -m pytest -q -n 8 tests/test_triton_gpu_matrix.py \
  -k "list or default_takes or overlap or publish or progress or claims_ahead or overflowing or planned or early" 2>&1 \
  | grep -v Warning | tail -15
echo "matrix subset rc ${PIPESTATUS[0]} at ${SECONDS}s"
ROUNDS=2 TOKENS="32768 131072" OUT=$OUT/ab bash benchmarks/ab_rounds.sh p64="" \
  bv16-p64="SPARSEGDN_CHAIN_BV=16" bv16-ahead-p64="SPARSEGDN_CHAIN_BV=16 SPARSEGDN_LIST_CLAIM_AHEAD=1" 2>&1 | tail -8
