#!/usr/bin/env bash
# Batch 36 (issue 14; ran as calls 2-3 of analysis/results/overlap/batch36/calls.md): the zero-state list at one stage
# and three programs a multiprocessor under a register cap of 168, again, on batch 35's reordered kernel. Before the
# reorder it spilled (128 local-memory instructions compiled) and the public call lost 8-10% (batch 35, lists.sh);
# reordered it compiles to 44 (benchmarks/gluon_probe.py --list-caps,
# analysis/results/overlap/batch35/list_caps_compile.json). Default and capped in alternating processes, two rounds
# (benchmarks/overlap_check.py: the default path's public call, overlapped against serial bit for bit). Then ncu on the
# capped variant: its warps a scheduler and local-memory instructions executed. Run from the project root: OUT=$OUT
# bash analysis/results/overlap/batch36/lists_caps.sh (~3 min; no wheels). Prediction: within +-3% of the default at
# 32K and 128K (the spills shrink, the third program's gain is unknown); the cap is worth a default only if it wins in
# both rounds by more than the rounds' drift.
set -u
source benchmarks/batch_head.sh lists_caps.log
mkdir -p "$OUT/runs"
for round in 1 2; do
  order=("2 2 0 0" "1 3 168 0")
  [ "$round" = 2 ] && order=("1 3 168 0" "2 2 0 0")       # the order reversed in the second round
  for variant in "${order[@]}"; do
    set -- $variant
    name="own$1-$2_caps$3-$4-round$round"
    timeout 150 python benchmarks/overlap_check.py --tokens 32768 131072 --only solved --claim --repeats 1 \
      --own-launch "$1" "$2" --list-maxnreg "$3" "$4" --out "$OUT/runs/$name.json" > "$OUT/runs/$name.log" 2>&1
    echo "$name rc $? at ${SECONDS}s"
  done
done
python benchmarks/overlap_check.py --summary "$OUT/runs"
# whether three capped programs are resident, and what the spills execute (the capped variant, one warm call, 128K)
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
SPARSEGDN_LIST_MAXNREG=168,0 timeout 150 "$NCU" --profile-from-start off --clock-control none -k regex:list_output \
  --metrics smsp__warps_active.avg.per_cycle_active,smsp__inst_executed_op_local_ld.sum,smsp__inst_executed_op_local_st.sum,gpu__time_duration.sum,launch__occupancy_limit_registers \
  --csv --print-units base --log-file "$OUT/runs/capped_ncu.csv" python -c "
import sys; sys.path.insert(0, 'benchmarks')
from sparsegdn.triton import list_output; list_output.OWN_LAUNCH = (1, 3)
import sm_ledger; sm_ledger.run('sparsegdn', 131072)" > "$OUT/runs/capped_ncu.log" 2>&1
echo "capped ncu rc $? at ${SECONDS}s"
tar czf "$OUT/runs.tgz" -C "$OUT" runs && rm -rf "$OUT/runs"      # one file back (a call returns at most eight)
