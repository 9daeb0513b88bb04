#!/usr/bin/env bash
# For the next batch (issue 14; written in batch 40, not yet run): calls 4-5's lead on the card the targets were set on.
# Whole chains (the default) against warm-up segments beside the lists with the zero-state list's claims two tiles
# ahead, claims ahead alone, and segments alone, in alternating processes, three rounds, 32K / 64K / 128K, round 1
# with the kernels' timeline (check first that each row's `segment` is the form's and that the chains shortened).
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch40/next.sh (~3 min on an H200; no wheels).
# Prediction (from calls 4-5 on an H100): segments of 1,024 with claims ahead 2-4% faster than whole chains at 128K,
# level at 32K and 64K (1,024 does not cut their chains; claims ahead alone was 0.2-0.8% slower beside whole chains in
# batch 38); segments of 512 with claims ahead within 1% of it at 128K and 1-3% faster at 64K; segments of 256 with
# claims ahead 2-4% faster at 32K.
# Since commit 775ba5f (batch 42) the default cuts the chains beside the lists in half and claims ahead there, so
# base="" no longer means whole chains: rerun with SPARSEGDN_LISTS_SEGMENT=0 SPARSEGDN_LIST_CLAIM_AHEAD=0 for base.
set -u
ROUNDS=3 PROFILE=1 TOKENS="32768 65536 131072" bash benchmarks/ab_rounds.sh base="" \
  ahead="SPARSEGDN_LIST_CLAIM_AHEAD=1" \
  seg1024="SPARSEGDN_LISTS_SEGMENT=1024" \
  seg1024-ahead="SPARSEGDN_LISTS_SEGMENT=1024 SPARSEGDN_LIST_CLAIM_AHEAD=1" \
  seg512-ahead="SPARSEGDN_LISTS_SEGMENT=512 SPARSEGDN_LIST_CLAIM_AHEAD=1" \
  seg256-ahead="SPARSEGDN_LISTS_SEGMENT=256 SPARSEGDN_LIST_CLAIM_AHEAD=1"
