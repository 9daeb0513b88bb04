#!/usr/bin/env bash
# Batch 38 (issue 14): what holds the chain pass beside the lists. The overlapped call's timeline at 128K (H100, this
# batch's calls 4-5, overlap_check.py --profile) has the chain pass at 2.65-2.68 ms beside the lists (the zero-state list
# at one or two programs an SM alike), 1.70 ms in the serial form, and the lists end ~10 us after it: the chains are
# the overlapped call's critical path, so shorter lists (claims.sh: -11% / -13% under ncu) did not shorten the call.
# ncu serialized the overlapped form's chain pass at 2.18 ms (call 5): its own form costs ~0.5 ms before any
# contention. Here, at 128K, one warm public call each (sm_ledger.run; clocks not locked): the chain pass in the
# overlapped form (the default) and in the serial form (overlap_check.configure: lists after the chains), ncu's
# launch, occupancy and warp-state sections; then the overlapped form's source counters (stall samples by line).
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch38/chains.sh (~2 min; no wheels).
# Prediction: the overlapped form's extra time is waits (its progress counts published every commit, the ready marks
# of the streamed preparation), not its arithmetic: the same instructions executed within 10%.
set -u
source benchmarks/batch_head.sh chains.log
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
mkdir -p "$OUT/chains"
for form in overlapped serial; do
  overlap=True; [ "$form" = serial ] && overlap=False
  timeout 150 "$NCU" --profile-from-start off --clock-control none -k regex:state_pass --section LaunchStats \
    --section Occupancy --section WarpStateStats --section SchedulerStats --metrics gpu__time_duration.sum,smsp__inst_executed.sum \
    --csv --print-units base --log-file "$OUT/chains/$form.csv" python -c "
import sys; sys.path[:0] = ['benchmarks', '.']
import overlap_check
if not $overlap:
    overlap_check.configure(False, 0, 0.0, False)
import sm_ledger; sm_ledger.run('sparsegdn', 131072)" > "$OUT/chains/$form.log" 2>&1
  echo "$form rc $? at ${SECONDS}s"
done
python - "$OUT/chains" <<'PY'
import csv, pathlib, sys
keep = ("Duration", "gpu__time_duration", "inst_executed", "Grid Size", "Registers", "Shared Memory", "Achieved",
        "Theoretical Occupancy", "Stall", "Warp Cycles", "Eligible", "Issued Warp", "No Eligible", "Active Warps")
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.csv")):
    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    for row in csv.DictReader(lines[start:] if start is not None else []):
        if any(key in row["Metric Name"] for key in keep):
            print(f"{path.stem:10s} {row['Kernel Name'][:18]:18s} {row['Metric Name']:52s} {row['Metric Value']}")
PY
timeout 150 "$NCU" --profile-from-start off --clock-control none -k regex:state_pass -c 1 --section SourceCounters \
  --import-source no -o "$OUT/chains/overlapped_source" python -c "
import sys; sys.path.insert(0, 'benchmarks')
import sm_ledger; sm_ledger.run('sparsegdn', 131072)" > "$OUT/chains/source.log" 2>&1
echo "source profile rc $? at ${SECONDS}s"
"$NCU" --import "$OUT/chains/overlapped_source.ncu-rep" --page source --print-source "cuda,sass" --csv \
  > "$OUT/chains/overlapped_source.csv" 2> "$OUT/chains/overlapped_source.err"
echo "source page rc $? ($(wc -l < "$OUT/chains/overlapped_source.csv") lines)"
tar czf "$OUT/chains.tgz" -C "$OUT" chains && rm -rf "$OUT/chains"      # one file back
