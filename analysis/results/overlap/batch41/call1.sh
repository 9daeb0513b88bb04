#!/usr/bin/env bash
# Batch 41, call 1 (issue 14): batch 40's next.sh (whole chains against warm-up segments beside the lists, with and
# without the zero-state list's claims two tiles ahead; its prediction is in that script) with one more form:
# SPARSEGDN_LISTS_SEGMENT=half (half the call's chunk count: 256 / 512 / 1,024 at 32K / 64K / 128K) with claims ahead,
# the per-call form of batch 40's "fastest segment was half the chain". Its rows must record those segments.
# Prediction for half-ahead: within 1% of the best fixed segment with claims ahead at each length, 2-4% faster than
# whole chains at 128K, level to 2% faster at 32K-64K.
# First the GPU matrix's cases of the default route with and without the lists' segments (half among them).
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch41/call1.sh (~5 min on an H100; no wheels).
# Since commit 775ba5f (batch 42) the default cuts the chains beside the lists in half and claims ahead there, so
# base="" no longer means whole chains: rerun with SPARSEGDN_LISTS_SEGMENT=0 SPARSEGDN_LIST_CLAIM_AHEAD=0 for base.
set -u
mkdir -p "$OUT"
timeout 150 python -m pytest -q -p no:cacheprovider tests/test_triton_gpu_matrix.py \
  -k "default_takes_the_lists_from_lists_from" > "$OUT/cases.log" 2>&1
echo "cases rc $? at ${SECONDS}s"; tail -3 "$OUT/cases.log"
ROUNDS=${ROUNDS:-3} PROFILE=1 TOKENS="32768 65536 131072" bash benchmarks/ab_rounds.sh base="" \
  ahead="SPARSEGDN_LIST_CLAIM_AHEAD=1" \
  seg1024="SPARSEGDN_LISTS_SEGMENT=1024" \
  seg1024-ahead="SPARSEGDN_LISTS_SEGMENT=1024 SPARSEGDN_LIST_CLAIM_AHEAD=1" \
  seg512-ahead="SPARSEGDN_LISTS_SEGMENT=512 SPARSEGDN_LIST_CLAIM_AHEAD=1" \
  seg256-ahead="SPARSEGDN_LISTS_SEGMENT=256 SPARSEGDN_LIST_CLAIM_AHEAD=1" \
  half-ahead="SPARSEGDN_LISTS_SEGMENT=half SPARSEGDN_LIST_CLAIM_AHEAD=1"
