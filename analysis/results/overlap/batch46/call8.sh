#!/usr/bin/env bash
# Batch 46's third call (issue 14): pass 3 stores the key list after g's and beta's loads. Call 7 (profiled, the public call
# forced onto the one launch, H100): pass 3 with the list took 741 us at 128K against main's 619 (+20%), state_output
# +0.9%. The list's store stood right after k's load, so the program waited for k before asking for g and beta; main's
# k_commit was stored after them. Now it is stored after them too (compiled for sm_90, compile_report --tokens 32768:
# 62 local-memory instructions as before; stored after w instead, k held longer, 162).
# Forms, three alternating rounds: base (main's sources, base.tar as in call6.sh) and list (this build), both routes;
# then each profiled once at 128K on the one launch (benchmarks/profile_call.py, SPARSEGDN_LISTS_FROM=0).
# Prediction (written before the run): pass 3 with the list within 3% of main's 619 us at 128K; the one launch within
# 1.5% of main's at 16K-128K (the state_output's +0.9% left); the lists' route as call 6 (-0.9 to -1.6% from 32K).
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch45/call8.sh (~4 min on an H100).
set -u
base=/tmp/batch45-base
rm -rf "$base" && mkdir -p "$base"
tar cf - --exclude=./.gpu-piece-1 --exclude=./.gpu-piece-2 --exclude=./.gpu-piece-3 . | tar xf - -C "$base"
rm -rf "$base/sparsegdn" "$base/benchmarks"
tar xf analysis/results/overlap/batch45/base.tar -C "$base"
echo "base sources $(cd "$base" && python benchmarks/kernel_bench.py --digest)"
ROUNDS=${ROUNDS:-3} TOKENS=${TOKENS:-4096 16384 32768 65536 131072} LIMIT=150 \
  bash benchmarks/ab_rounds.sh base="SOURCES=$base" list=""     # leaves $OUT/ab.tgz
mkdir -p "$OUT/ab"
for form in base list; do
  dir=$PWD; [ "$form" = base ] && dir=$base
  (cd "$dir" && SPARSEGDN_LISTS_FROM=0 timeout 95 python benchmarks/profile_call.py --tokens 131072 --out "$OUT/ab/profile-$form" \
    > "$OUT/ab/profile-$form.log" 2>&1)
  echo "profile-$form rc $? at ${SECONDS}s"; grep -E "T=|event_prepare|state_output" "$OUT/ab/profile-$form.log"
done
tar czf "$OUT/profiles.tgz" -C "$OUT" ab && rm -rf "$OUT/ab"      # one file back
