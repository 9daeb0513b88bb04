#!/usr/bin/env bash
# Batch 35 (planned; issue 14), item 4 of kernel_bench.notes.md's next batch: the chain programs' share of a
# multiprocessor. First the GPU cases of the register cap (state_pass.CHAIN_MAXNREG), then benchmarks/chain_probe.py at
# 32K and 128K (whole chains and segments of 512 and 1,024 beside the lists) in one process per chain setting:
# the default (BV 32, three stages, no cap), and BV 16 with two stages and a cap of 168 (three programs a
# multiprocessor by compile_report, 16 local-memory instructions). Run from the project root:
# OUT=$OUT bash analysis/results/overlap/batch35/caps.sh (about 60 s of cases, then ~70 s a setting).
# Prediction: with whole chains the capped setting is no faster at 128K (the longest chain bounds the chain pass, and
# a narrower, capped program walks it no faster); with segments, faster than the default's segments only if the lists
# then fit beside the chains. Falsified if the capped setting with segments beats the default's whole chains at 128K
# by more than 5% (then the chains' footprint, not their walk, held the call).
set -u
source benchmarks/batch_head.sh caps.log
timeout 150 python -m pytest -q -p no:cacheprovider tests/test_triton_gpu_matrix.py -k register_capped \
  > "$OUT/cases.log" 2>&1
echo "cases rc $? at ${SECONDS}s"; tail -1 "$OUT/cases.log"
for setting in "default" "SPARSEGDN_CHAIN_BV=16 SPARSEGDN_CHAIN_STAGES=2 SPARSEGDN_CHAIN_MAXNREG=168"; do
  name=$(echo "$setting" | tr ' =' '_-')
  env $([ "$setting" = default ] || echo "$setting") timeout 200 python benchmarks/chain_probe.py \
    --tokens 32768 131072 --segments 512 1024 --out "$OUT/$name"
  echo "$setting rc $? at ${SECONDS}s"
done
