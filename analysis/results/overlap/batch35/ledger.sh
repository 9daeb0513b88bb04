#!/usr/bin/env bash
# Batch 35 (planned; issue 14): the multiprocessor time of each contender's call, kernel by kernel
# (benchmarks/sm_ledger.py), at 32K and 128K. Needs FLA and FlashQLA in /tmp/site: run as the last of the three wheel
# piece calls, `bash .gpu-piece-3/unpack-piece.sh 3 3 && export PYTHONPATH=/tmp/site && OUT=$OUT bash
# analysis/results/overlap/batch35/ledger.sh` (every ncu run under 200 s; FlashQLA compiles ~100 s in its first
# process). If the call's time is short, `TOKENS=131072` first, then `TOKENS=32768` in the next call (/tmp/site stays
# while the machine is warm).
# Prediction (batch 34's stage times on the H200 at 128K, kernel_bench.notes.md): our call's packed upper bound at
# 128K is 2.8-3.2 ms, around FlashQLA's whole timed call (3.09 ms on the H200); falsified outside 2.5-3.5 ms (the
# stage-time reading of where the work is would then be wrong). Read: if our lower bound is above FlashQLA's timed
# call, only cheaper passes can reach the target at 128K; if our upper bound is below it, a better schedule of the
# same passes can; between, the chains' share of a multiprocessor decides.
set -u
source benchmarks/batch_head.sh ledger.log
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
METRICS=$(python benchmarks/sm_ledger.py --metrics)
for tokens in ${TOKENS:-131072 32768}; do     # TOKENS=131072: the one that decides, alone
  for contender in sparsegdn fla flashqla; do
    timeout 200 "$NCU" --profile-from-start off --clock-control none --csv --print-units base --metrics "$METRICS" \
      --log-file "$OUT/${contender}_${tokens}.csv" \
      python benchmarks/sm_ledger.py run "$contender" --tokens "$tokens" > "$OUT/${contender}_${tokens}.log" 2>&1
    echo "$contender $tokens rc $? at ${SECONDS}s"
  done
done
python benchmarks/sm_ledger.py ledger "$OUT"/*.csv --json "$OUT/sm_ledger.json"
