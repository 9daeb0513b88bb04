#!/usr/bin/env bash
# For the next batch (issue 14; written in batch 37, not yet run): which instructions of the zero-state list hold the
# shared-memory bank conflicts left after the swizzled solve (8.5 M on loads, 13.4 M on stores at 128K on an H100,
# batch 37's swizzle.sh). ncu's SourceCounters section for the first list launch of one warm public call at 128K
# (budget 0.29; sm_ledger.run), saved as a report, then its source page per SASS instruction (with and without the
# Python source lines ncu can match), as CSV. Run from the project root:
# OUT=$OUT bash analysis/results/overlap/batch37/sources.sh (~1-2 min; no wheels). Read the CSVs' shared-memory
# wavefront columns (ideal against excessive) by instruction; `python benchmarks/compile_report.py`'s line tables
# (nvdisasm -gi on a local compile for sm_90 of the same sources) map addresses to source lines where ncu cannot.
set -u
source benchmarks/batch_head.sh sources.log
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
mkdir -p "$OUT/src"
timeout 200 "$NCU" --profile-from-start off --clock-control none -k regex:list_output -c 1 --section SourceCounters \
  --section MemoryWorkloadAnalysis_Tables --import-source no -o "$OUT/src/zero_state" python -c "
import sys; sys.path.insert(0, 'benchmarks')
import sm_ledger; sm_ledger.run('sparsegdn', 131072)" > "$OUT/src/profile.log" 2>&1
echo "profile rc $? at ${SECONDS}s"
for source in sass "cuda,sass"; do
  name=$(echo "$source" | tr , _)
  "$NCU" --import "$OUT/src/zero_state.ncu-rep" --page source --print-source "$source" --csv \
    > "$OUT/src/source_$name.csv" 2> "$OUT/src/source_$name.err"
  echo "source page $source rc $? ($(wc -l < "$OUT/src/source_$name.csv") lines)"
  head -2 "$OUT/src/source_$name.csv" | cut -c1-600
done
"$NCU" --import "$OUT/src/zero_state.ncu-rep" --page details --csv > "$OUT/src/details.csv" 2>&1
grep -i "conflict\|wavefront" "$OUT/src/details.csv" | cut -c1-300 | head -20
tar czf "$OUT/src.tgz" -C "$OUT" src && rm -rf "$OUT/src"      # one file back
