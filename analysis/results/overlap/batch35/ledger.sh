#!/usr/bin/env bash
# Batch 35 (planned; issue 14): the multiprocessor time of each contender's call, kernel by kernel
# (benchmarks/sm_ledger.py), at 32K and 128K. Needs FLA and FlashQLA in /tmp/site: run as the last of the three wheel
# piece calls, `bash .gpu-piece-3/unpack-piece.sh 3 3 && export PYTHONPATH=/tmp/site && OUT=$OUT bash
# analysis/results/overlap/batch35/ledger.sh` (at most ~400 s; every ncu run under its own timeout).
# Prediction (batch 34's stage times on the H200, kernel_bench.notes.md): the sparse call's packed time at 128K is
# above 2.9 ms (its full-GPU passes alone ~2.4 ms under the stage hook, the long chains ~100 SM-ms), i.e. within ~10%
# of FlashQLA's whole call (3.09 ms on the H200) or above it, and FlashQLA's packed time is at most its call's time.
# Falsified if the sparse packed time at 128K is below 0.8x FlashQLA's call: then scheduling (the chains and the
# lists packed better) could still win there, and the next design is a scheduling one; if not, the passes' work.
set -u
mkdir -p "$OUT"
exec > >(tee "$OUT/ledger.log") 2>&1
SECONDS=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python benchmarks/kernel_bench.py --digest
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
METRICS=$(python benchmarks/sm_ledger.py --metrics)
for tokens in 32768 131072; do
  for contender in sparsegdn fla flashqla; do
    timeout 150 "$NCU" --profile-from-start off --csv --print-units base --metrics "$METRICS" \
      --log-file "$OUT/${contender}_${tokens}.csv" \
      python benchmarks/sm_ledger.py run "$contender" --tokens "$tokens" > "$OUT/${contender}_${tokens}.log" 2>&1
    echo "$contender $tokens rc $? at ${SECONDS}s"
  done
done
python benchmarks/sm_ledger.py ledger "$OUT"/*_32768.csv "$OUT"/*_131072.csv --json "$OUT/sm_ledger.json"
