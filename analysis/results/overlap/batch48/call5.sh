#!/usr/bin/env bash
# Batch 48's fifth call (issue 14): the new default (the lists from 4K tokens a row and 2,048 head chunks, 9c4513d)
# on other shapes than the benchmark's B 1, HV 32: more batch rows, more or fewer value heads. benchmarks/route_shapes.py
# times the public call (budget 0.29, band 1, `score`) in the one launch and on the lists at each shape, three
# interleaved rounds, and compares the two routes' outputs.
# Prediction (written before the run): B 2 and 4 at 4K and HV 48 / 64 at 4K: the lists 5-15% faster (more chunks
# than B 1's 4K, where they won by 6%); HV 16 at 8K (2,048 head chunks, the threshold): within 5% either way;
# B 2 and HV 48 at 8K: the lists 8-15% faster. o between the routes within ~5e-3 relative (bf16 and the warm-up).
# Rule: a shape the default sends to the lists where they are > 3% slower than the one launch moves the threshold.
# Then, at 4K-16K, the lists' chains cut in half (by_band) against whole chains (kernel_bench's whole_chains): the
# slowest head pairs keep every chunk and decay too slowly for the warm-up (e^-20) to start less than a segment back,
# so at 4K-8K cutting may buy nothing and cost the warm-ups' commits. Prediction: whole chains within 3% of cut ones
# at 4K-8K, cut chains ahead at 16K (batch 42: -5.4%). Rule: whole chains below a length where they win by >= 3% at
# every budget.
# OUT=$OUT bash analysis/results/overlap/batch48/call5.sh (~3.5 min on an H100; no wheels).
set -u
source benchmarks/batch_head.sh call5.log
python benchmarks/route_shapes.py --out "$OUT/route_shapes.json"
echo "route_shapes rc $? at ${SECONDS}s"
python benchmarks/kernel_bench.py --designs by_band whole_chains --configs 0.5/1/score 0.29/1/score 0.15/1/score \
  --tokens 4096 8192 12288 16384 --out "$OUT/segments"
echo "kernel_bench rc $? at ${SECONDS}s"
