#!/usr/bin/env bash
# Batch 34, call 2 (issue 14): is the public call at 32K and 128K bounded by its longest commit chain or by its total
# work? benchmarks/chain_probe.py on the front page's inputs (its docstring says what each selection tests).
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch34/call2.sh (about 150 s).
# Prediction (from batch 34 call 1's stage times on the H200: state_pass 2.42-2.52 ms at 128K for budgets 0.15-0.5):
# `score` keeps every chunk of the slowest head pairs at every budget (longest chain = all 2048 chunks at 128K), and
# `uniform` at 0.29 (longest chain 594) is faster than `score` at 0.29 by at least 1 ms at 128K. Falsified if uniform
# is within 10% of score: then the total work bounds the call, not the longest chain.
set -u
source benchmarks/batch_head.sh call.log     # the same lines as it ran with, inline then
timeout 400 python benchmarks/chain_probe.py --tokens 32768 131072 --out "$OUT"
echo "probe rc $? at ${SECONDS}s"
