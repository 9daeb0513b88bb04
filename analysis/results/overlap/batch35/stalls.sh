#!/usr/bin/env bash
# Batch 35, the stalls' call (issue 14): lists.sh's ncu detail found both Gluon lists at 2 warps a scheduler, 0.33-0.41
# eligible, issue slots 27-34% busy and DRAM 52-55% busy at 128K (H100): latency, not a throughput limit; the list
# with a state spilling (1.8 M local-memory requests). This takes where the warps wait (ncu's per-reason stall
# ratios, one warm call at 128K) for the lists, the chain pass, pass 1 and pass 3. Run from the project root:
# OUT=$OUT bash analysis/results/overlap/batch35/stalls.sh (~2 min; no wheels).
set -u
source benchmarks/batch_head.sh stalls.log
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
# the register-capped cases (chains and lists) first: their shared setup was factored after lists.sh ran them
timeout 200 python -m pytest -q -p no:cacheprovider tests/test_triton_gpu_matrix.py -k register_capped 2>&1 | tail -3
timeout 300 "$NCU" --profile-from-start off --clock-control none -k 'regex:list_output|state_pass|event_prepare|intra_chunk' \
  --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__warps_active.avg.per_cycle_active,smsp__issue_active.avg.per_cycle_active' \
  --csv --print-units base --log-file "$OUT/stalls.csv" python benchmarks/sm_ledger.py run sparsegdn --tokens 131072 \
  > "$OUT/ncu.log" 2>&1
echo "ncu rc $? at ${SECONDS}s"
python - "$OUT/stalls.csv" <<'PY'
import csv, sys, collections
lines = open(sys.argv[1]).read().splitlines()
start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
table = collections.defaultdict(dict)
for row in csv.DictReader(lines[start:]):
    name = row["Metric Name"].replace("smsp__average_warps_issue_stalled_", "").replace("_per_issue_active.ratio", "")
    text = row["Metric Value"].replace(",", "")
    try:
        table[(row["ID"], row["Kernel Name"][:24])][name] = float(text)
    except ValueError:          # "n/a" and the like: left out of the table, kept in the CSV
        pass
for (launch, kernel), metrics in table.items():
    top = sorted(((v, k) for k, v in metrics.items() if "smsp__" not in k), reverse=True)[:7]
    print(launch, kernel, " ".join(f"{k}={v:.2f}" for v, k in top))
PY
