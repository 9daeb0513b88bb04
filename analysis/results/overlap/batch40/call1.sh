#!/usr/bin/env bash
# Batch 40, call 1 (issue 14): warm-up segments beside the lists (forward.LISTS_SEGMENT, SPARSEGDN_LISTS_SEGMENT) on
# the current default (chain blocks of 32, runs of 64 commits between counts), against whole chains, in alternating
# processes (benchmarks/ab_rounds.sh), two rounds, 32K / 64K / 128K, round 1 with the kernels' timeline; then how far
# the segments move o (benchmarks/warm_up_error.py --route lists).
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch40/call1.sh (~3 min; no wheels).
# Why now: batch 30 (H100, blocks of 16) found segments never faster, but the chains are the critical path since
# (batch 39: chains 2,462 us beside the lists at 128K, the lists ending 26 us after them). The benchmark's slowest head
# decays ~0.26 a chunk (logsigmoid(x + 6)), so a warm-up of 20 reaches back ~80 commits: segments of 256 cut the
# longest walk from 2,048 commits to ~340.
# Prediction (written before the run): segments of 256 or 512 make the public call 5-10% faster at 128K (the region
# then bound by the lists' own work, ~1.9-2.2 ms) and 2-6% at 32K.
# Falsified if no segment form is faster than whole chains at 128K in both rounds by more than their spread.
set -u
ROUNDS=2 PROFILE=1 TOKENS="32768 65536 131072" bash benchmarks/ab_rounds.sh base="" \
  seg256="SPARSEGDN_LISTS_SEGMENT=256" seg512="SPARSEGDN_LISTS_SEGMENT=512"
timeout 200 python benchmarks/warm_up_error.py --route lists --tokens 32768 131072 --bands 1 --segments 256 512 \
  > "$OUT/warm_up_error.jsonl" 2> "$OUT/warm_up_error.err"
echo "warm_up_error rc $?"; cat "$OUT/warm_up_error.jsonl"; tail -5 "$OUT/warm_up_error.err"
# The rule written before the run, applied here so that the next call (the front page) can take it without a pause:
# a segment form is taken where it is faster than whole chains at 128K in both rounds by at least 2%, and its mean is
# not slower at 32K or 64K by more than 1%; the fastest such form at 128K. Written to /tmp/batch40_segment (0: none).
python analysis/results/overlap/batch40/decide.py "$OUT/ab.log" | tee /tmp/batch40_segment
