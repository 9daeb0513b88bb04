#!/usr/bin/env bash
# Batch 38 (issue 14): list_output_kernel's overflow flag made row by row (`bad` summed over a row, one masked store a
# row) instead of by a block-wide sum (a shared-memory round trip and a barrier every tile). Compiled for sm_90 with the
# swizzled solve (benchmarks/gluon_probe.py --list-caps, batch38/list_caps_rowflag.txt) the list with a state has 2
# local-memory instructions (37 with the block-wide sum) and the zero-state list 222 registers (226).
# 1. The cases: tests/test_gluon_band_solve.py, tests/test_list_output.py, the GPU matrix's list, early-check and the
#    new one-overflowing-row flag cases (test_gpu_lists_flag_one_overflowing_row).
# 2. The public call at 32K and 128K in alternating processes, three rounds, three forms: `row` (this tree: row flag,
#    swizzled solve), `block` (this tree with rowflag.patch reversed in a copy under /tmp: the block-wide flag, i.e.
#    the library before this batch) and `plain` (row flag, SPARSEGDN_SOLVE_SWIZZLE=0); benchmarks/overlap_check.py.
# 3. ncu on `row` and `block` at 128K: both lists' durations and local-memory instructions executed.
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch38/rowflag.sh (~5 min; no wheels). It ran on
# cdad7bb (batch 38, call 1); the row flag was reverted in ac055b4, so rowflag.patch applies in reverse only to a
# checkout of 9348c15-cdad7bb (the script stops otherwise).
# Prediction: the list with a state executes ~no local loads under `row` (batch 37's +7.6% sample gone); the public
# call 0.3-1% faster than `block` at 128K. Kept only if the cases pass and `row` is not slower than `block` in any round.
set -u
source benchmarks/batch_head.sh rowflag.log
mkdir -p "$OUT/runs"
rm -rf /tmp/block && mkdir -p /tmp/block && cp -r sparsegdn benchmarks /tmp/block/
patch -s -d /tmp/block -p1 -R < analysis/results/overlap/batch38/rowflag.patch \
  || { echo "rowflag.patch does not apply"; exit 1; }
echo "block copy made"
grep -c "gl.sum(gl.sum(stored" /tmp/block/sparsegdn/triton/list_output.py sparsegdn/triton/list_output.py
timeout 240 python -m pytest -q -n 12 -p no:cacheprovider tests/test_gluon_band_solve.py tests/test_list_output.py \
  tests/test_triton_gpu_matrix.py -k "solve or list_output or list or paired or folded or streamed or flag or early" \
  > "$OUT/runs/cases.log" 2>&1
echo "cases rc $? at ${SECONDS}s"; tail -3 "$OUT/runs/cases.log"
run() {     # form name: the public call by overlap_check in that form's tree and switches
  local form=$1 name=$2 root=. swizzle=1
  [ "$form" = block ] && root=/tmp/block
  [ "$form" = plain ] && swizzle=0
  SPARSEGDN_SOLVE_SWIZZLE=$swizzle timeout 120 python "$root/benchmarks/overlap_check.py" --tokens 32768 131072 \
    --only solved --claim --repeats 1 --out "$OUT/runs/$name.json" > "$OUT/runs/$name.log" 2>&1
  echo "$name rc $? at ${SECONDS}s"
}
for round in 1 2 3; do
  case $round in 1) order="row block plain";; 2) order="block plain row";; 3) order="plain row block";; esac
  for form in $order; do run "$form" "$form-round$round"; done
done
python benchmarks/overlap_check.py --summary "$OUT/runs"
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
for form in row block; do
  root=.; [ "$form" = block ] && root=/tmp/block
  (cd "$root" && timeout 120 "$NCU" --profile-from-start off --clock-control none -k regex:list_output \
    --metrics gpu__time_duration.sum,smsp__inst_executed_op_local_ld.sum,smsp__inst_executed_op_local_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum \
    --csv --print-units base --log-file "$OUT/runs/ncu_$form.csv" python -c "
import sys; sys.path.insert(0, 'benchmarks')
import sm_ledger; sm_ledger.run('sparsegdn', 131072)" > "$OUT/runs/ncu_$form.log" 2>&1)
  echo "ncu $form rc $? at ${SECONDS}s"
done
python - "$OUT/runs" <<'PY'
import csv, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("ncu_*.csv")):
    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    for row in csv.DictReader(lines[start:] if start is not None else []):
        print(f"{path.stem:10s} list {row['ID']} {row['Metric Name']:60s} {row['Metric Value']}")
PY
tar czf "$OUT/runs.tgz" -C "$OUT" runs && rm -rf "$OUT/runs"      # one file back
