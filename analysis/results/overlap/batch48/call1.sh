#!/usr/bin/env bash
# Batch 48's first call (issue 14): the lists' route against the one launch at short lengths. The default takes the
# Gluon lists beside the chains from 16K tokens a row (forward.LISTS_MIN_ROW_CHUNKS 256, LISTS_FROM 8,192 head chunks),
# chosen in batch 25 (H200) when the lists lost at 8K (backend entry 0.384 against 0.334 ms) and 4K. Since then the
# lists got claims, the reordered solve, relaxed claims and chains cut in half beside them, and at 16K they beat the
# one launch by 16% on an H100 (batch 46: 0.573 against 0.680 ms); 8K (the one launch, 0.383 ms in batch 42's front
# page: FLA / public 1.64, the one FLA target below 2x) was not timed on the lists since.
# 1. kernel_bench, one process, interleaved: by_band (the default), one_launch (LISTS_FROM 0) and lists_any_length
#    (the lists' length conditions lifted) at budgets 0.5 / 0.29 / 0.15, 4K / 8K / 12K / 16K; no FLA or FlashQLA
#    (no wheels; the front page's run has them).
# 2. route_timelines: the public call's kernels on the GPU timeline, one launch against the lists, 4K / 8K / 16K.
# Prediction (written before the run): at 8K budget 0.29 the lists within 10% of the one launch either way (0.35-0.42
# against ~0.38 ms); at 4K the lists 10-25% slower; at 12K the lists 0-10% faster; at 16K as batch 46 (lists ~15%
# faster). Decision rule: lower LISTS_MIN_ROW_CHUNKS to the shortest length where the lists' public call is faster
# at every budget timed by at least 3% (the rounds' spread is below 1%).
# OUT=$OUT bash analysis/results/overlap/batch48/call1.sh (~4 min on an H100; no wheels).
set -u
source benchmarks/batch_head.sh call1.log
python benchmarks/kernel_bench.py --designs by_band one_launch lists_any_length \
  --configs 0.5/1/score 0.29/1/score 0.15/1/score --tokens 4096 8192 12288 16384 --out "$OUT/bench"
echo "kernel_bench rc $? at ${SECONDS}s"
python benchmarks/route_timelines.py --tokens 4096 8192 16384 --out "$OUT/timelines.json"
echo "route_timelines rc $? at ${SECONDS}s"
