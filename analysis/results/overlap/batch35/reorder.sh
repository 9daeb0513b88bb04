#!/usr/bin/env bash
# Batch 35, the reordered lists' call (issue 14). The list kernel now issues Q K^T and K K^T together, makes P before
# the band solve and round(beta V) after it, so that S, the decays and the values are not held through the solve.
# Compiled for sm_90 (benchmarks/gluon_probe.py --list-caps): the list with a state 255 registers with 2 local-memory
# instructions (42 before), the zero-state list 227 registers (244). The same arithmetic in another order.
# Run from the project root with the kernel before the change beside this script (list_output_head.py: made by
# `git show 4ef406b:sparsegdn/triton/list_output.py > analysis/results/overlap/batch35/list_output_head.py`, carried
# untracked, not committed): OUT=$OUT bash analysis/results/overlap/batch35/reorder.sh (~9 min on an H100).
# 1. The lists' GPU cases on the reordered kernel (tests/test_list_output.py, the matrix's list cases).
# 2. The public call, reordered against before, in alternating processes (benchmarks/overlap_check.py, two rounds).
# 3. ncu's stall reasons of the lists (and the chain pass, pass 1 and pass 3), reordered, at 128K.
# 4. The whole GPU matrix with the time left (BUDGET_S: the call's seconds, 590 unless given).
# Prediction: the list with a state no longer spills (ncu: local-memory requests near 0 against 1.81 M) and the
# public call gains 1-3% at 128K; falsified if the reordered call is slower than before by more than the drift
# between the two rounds.
set -u
source benchmarks/batch_head.sh reorder.log
HERE=analysis/results/overlap/batch35
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
cp sparsegdn/triton/list_output.py /tmp/list_output_reordered.py
timeout 150 python -m pytest -q -p no:cacheprovider tests/test_list_output.py tests/test_triton_gpu_matrix.py \
  -k "list or register_capped" 2>&1 | tail -4
echo "list cases rc ${PIPESTATUS[0]} at ${SECONDS}s"
mkdir -p "$OUT/runs"
for round in 1 2; do
  for form in reordered before; do
    if [ "$form" = before ]; then cp "$HERE/list_output_head.py" sparsegdn/triton/list_output.py
    else cp /tmp/list_output_reordered.py sparsegdn/triton/list_output.py; fi
    timeout 120 python benchmarks/overlap_check.py --tokens 32768 131072 --only solved --claim --repeats 1 \
      --out "$OUT/runs/$form-$round.json" > "$OUT/runs/$form-$round.log" 2>&1
    echo "$form round $round rc $? at ${SECONDS}s"
  done
done
cp /tmp/list_output_reordered.py sparsegdn/triton/list_output.py
python - "$OUT/runs" <<'PY'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json"), key=lambda p: (p.stem.split("-")[1], p.stem)):
    for row in json.loads(path.read_text()):
        print(f"{path.stem:12s} T={row['T']:6d} public {row['overlapped_public_ms']:.3f} ms  overlapped "
              f"{min(row['overlapped_ms']):.3f}  serial {min(row['serial_ms']):.3f}  equal {row['bit_equal']}")
PY
timeout 150 "$NCU" --profile-from-start off --clock-control none -k 'regex:list_output|state_pass|event_prepare|intra_chunk' \
  --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__warps_active.avg.per_cycle_active,smsp__issue_active.avg.per_cycle_active,smsp__inst_executed_op_local_ld.sum,smsp__inst_executed_op_local_st.sum,gpu__time_duration.sum' \
  --csv --print-units base --log-file "$OUT/runs/stalls.csv" python benchmarks/sm_ledger.py run sparsegdn --tokens 131072 \
  > "$OUT/runs/ncu.log" 2>&1
echo "ncu rc $? at ${SECONDS}s"
python - "$OUT/runs/stalls.csv" <<'PY'
import csv, sys, collections
lines = open(sys.argv[1]).read().splitlines()
start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
table = collections.defaultdict(dict)
for row in csv.DictReader(lines[start:] if start is not None else []):
    name = row["Metric Name"].replace("smsp__average_warps_issue_stalled_", "").replace("_per_issue_active.ratio", "")
    try:
        table[(row["ID"], row["Kernel Name"][:24])][name] = float(row["Metric Value"].replace(",", ""))
    except ValueError:          # "n/a" and the like: left out of the table, kept in the CSV
        pass
for (launch, kernel), metrics in table.items():
    top = sorted(((v, k) for k, v in metrics.items() if "__" not in k), reverse=True)[:7]
    rest = {k: v for k, v in metrics.items() if "__" in k}
    print(launch, kernel, " ".join(f"{k}={v:.2f}" for v, k in top), rest)
PY
tar czf "$OUT/runs.tgz" -C "$OUT" runs && rm -rf "$OUT/runs"      # one file back (a call returns at most eight)
left=$((${BUDGET_S:-590} - SECONDS - 15))
[ "$left" -gt 60 ] && OUT=$OUT/matrix timeout "$left" bash analysis/results/overlap/batch34/call3.sh
echo "done at ${SECONDS}s"
