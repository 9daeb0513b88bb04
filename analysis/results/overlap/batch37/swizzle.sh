#!/usr/bin/env bash
# Batch 37 (issue 14): the band solve's scratch swizzled (gluon_band_solve.SOLVE_SWIZZLE, the new default) against
# plain (SPARSEGDN_SOLVE_SWIZZLE=0, the layout before). limiter.sh found on the H200 at 128K that 34% of the
# zero-state list's shared-load wavefronts and 47% of its store wavefronts were bank conflicts (6.1- and 6.4-way a
# request); the scratch's plain views put a warp's 8 rows on the same banks (8-way for A, 4-way for the slots).
# 1. The cases that run the solve: tests/test_gluon_band_solve.py, tests/test_list_output.py and the GPU matrix's
#    list cases, swizzled (the default).
# 2. The public call at 32K and 128K, swizzled against plain in alternating processes, three rounds
#    (benchmarks/overlap_check.py: overlapped against serial, bit for bit).
# 3. ncu on both at 128K: the lists' durations and shared-memory bank conflicts.
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch37/swizzle.sh (~4-5 min; no wheels).
# Prediction: store conflicts of the zero-state list fall by more than half; its duration 3-8% shorter (the solve's
# accesses are on its dependent path), the public call 1-3% faster at 128K; no case fails. Kept as the default only if
# the cases pass and the call is not slower in any round.
set -u
source benchmarks/batch_head.sh swizzle.log
mkdir -p "$OUT/runs"
timeout 200 python -m pytest -q -n 8 -p no:cacheprovider tests/test_gluon_band_solve.py tests/test_list_output.py \
  tests/test_triton_gpu_matrix.py -k "band or list or paired or folded or streamed or solve" > "$OUT/runs/cases.log" 2>&1
echo "cases rc $? at ${SECONDS}s"; tail -2 "$OUT/runs/cases.log"
for round in 1 2 3; do
  order="1 0"; [ "$round" = 2 ] && order="0 1"
  for swizzle in $order; do
    name="swizzle$swizzle-round$round"
    SPARSEGDN_SOLVE_SWIZZLE=$swizzle timeout 90 python benchmarks/overlap_check.py --tokens 32768 131072 --only solved \
      --claim --repeats 1 --out "$OUT/runs/$name.json" > "$OUT/runs/$name.log" 2>&1
    echo "$name rc $? at ${SECONDS}s"
  done
done
python benchmarks/overlap_check.py --summary "$OUT/runs"
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
for swizzle in 1 0; do
  SPARSEGDN_SOLVE_SWIZZLE=$swizzle timeout 90 "$NCU" --profile-from-start off --clock-control none -k regex:list_output \
    --metrics gpu__time_duration.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,smsp__inst_executed.sum \
    --csv --print-units base --log-file "$OUT/runs/ncu_swizzle$swizzle.csv" python -c "
import sys; sys.path.insert(0, 'benchmarks')
import sm_ledger; sm_ledger.run('sparsegdn', 131072)" > "$OUT/runs/ncu_swizzle$swizzle.log" 2>&1
  echo "ncu swizzle $swizzle rc $? at ${SECONDS}s"
done
python - "$OUT/runs" <<'PY'
import csv, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("ncu_swizzle*.csv")):
    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    for row in csv.DictReader(lines[start:] if start is not None else []):
        print(f"{path.stem:14s} list {row['ID']} {row['Metric Name']:60s} {row['Metric Value']}")
PY
tar czf "$OUT/runs.tgz" -C "$OUT" runs && rm -rf "$OUT/runs"      # one file back
