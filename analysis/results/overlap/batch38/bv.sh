#!/usr/bin/env bash
# Batch 38's call 8 as a script (issue 14), for the next batch's H200: the chains' value blocks (SPARSEGDN_CHAIN_BV 16 /
# 32, read at import) against the zero-state list's claims (read at once, the default, or two tiles ahead:
# SPARSEGDN_LIST_CLAIM_AHEAD=1), four forms in alternating processes, three rounds, the public call at 32K and 128K
# (benchmarks/overlap_check.py). On the H100 (two rounds) BV 16 with claims ahead was the fastest form (4.150-4.158 ms
# at 128K against the default's 4.166-4.181; 1.108 against 1.112 at 32K) and either change alone lost.
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch38/bv.sh (~3 min; no wheels).
# Prediction: the same order on the H200, the gain 0.2-1%; BV 16 with claims ahead made the default (both switches,
# this card's name) only if it wins in all three rounds at both lengths.
set -u
source benchmarks/batch_head.sh bv.log
mkdir -p "$OUT/bv"
for round in 1 2 3; do
  case $round in 1) order="16-1 32-1 16-0 32-0";; 2) order="32-0 16-0 32-1 16-1";; 3) order="16-0 32-1 32-0 16-1";; esac
  for form in $order; do
    bv=${form%-*}; ahead=${form#*-}; name="bv$bv-ahead$ahead-round$round"
    SPARSEGDN_CHAIN_BV=$bv SPARSEGDN_LIST_CLAIM_AHEAD=$ahead timeout 90 python benchmarks/overlap_check.py \
      --tokens 32768 131072 --only solved --claim --repeats 1 --out "$OUT/bv/$name.json" > "$OUT/bv/$name.log" 2>&1
    echo "$name rc $? at ${SECONDS}s"
  done
done
python benchmarks/overlap_check.py --summary "$OUT/bv"
tar czf "$OUT/bv.tgz" -C "$OUT" bv && rm -rf "$OUT/bv"      # one file back
