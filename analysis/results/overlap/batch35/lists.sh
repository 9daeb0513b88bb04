#!/usr/bin/env bash
# Batch 35, the lists' call (issue 14): the SM ledger (ledger.sh, H100) put the two Gluon lists at 293 of our call's
# 502-546 SM-ms at 128K, two programs a multiprocessor (registers and shared memory both), 8 resident warps. Three
# parts, run from the project root: OUT=$OUT bash analysis/results/overlap/batch35/lists.sh (~6 min; no wheels).
# 1. The GPU case of the register caps (test_gpu_register_capped_lists_match_torch) first: a cap that breaks the
#    lists stops the timing below from meaning anything.
# 2. ncu's detail of the two list launches at 128K (speed of light, occupancy, warp states, memory, schedulers), so
#    that the next design knows what bounds them.
# 3. The zero-state list at one stage, three programs a multiprocessor under a register cap (compiled for sm_90:
#    168 -> 128 local-memory instructions, 128 -> 227), against the default launch shapes, in processes of
#    benchmarks/overlap_check.py (Tinv solved, claims, serial and overlapped; the public call too), the default first
#    and last (the drift between processes).
# Prediction: if the lists are latency-bound (few warps resident, products waiting on each other) the zero-state list
# at three programs gains up to a third of its 1.24 ms (serialized) and the call 0.1-0.3 ms at 128K; falsified if
# the capped variants are no faster than the default by more than the default's own drift.
set -u
source benchmarks/batch_head.sh lists.log
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
timeout 200 python -m pytest -q -p no:cacheprovider tests/test_triton_gpu_matrix.py -k register_capped_lists 2>&1 \
  | tail -5
echo "case rc ${PIPESTATUS[0]} at ${SECONDS}s"
timeout 200 "$NCU" --profile-from-start off --clock-control none -k regex:list_output --section SpeedOfLight \
  --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section ComputeWorkloadAnalysis --section SchedulerStats --csv --page details --print-units base \
  --log-file "$OUT/list_detail.csv" python benchmarks/sm_ledger.py run sparsegdn --tokens 131072 > "$OUT/ncu.log" 2>&1
echo "ncu rc $? at ${SECONDS}s"
for variant in "2 2 0 0" "1 3 168 0" "1 2 0 0" "1 3 128 0" "1 3 168 168" "2 2 0 0"; do
  set -- $variant
  name="own$1-$2_caps$3-$4"
  timeout 150 python benchmarks/overlap_check.py --tokens 32768 131072 --only solved --claim --repeats 1 \
    --own-launch "$1" "$2" --list-maxnreg "$3" "$4" --out "$OUT/$name-$SECONDS.json" > "$OUT/$name-$SECONDS.log" 2>&1
  echo "$name rc $? at ${SECONDS}s"
done
python - "$OUT" <<'PY'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("own*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[1])):
    for row in json.loads(path.read_text()):
        print(f"{path.stem:28s} T={row['T']:6d} overlapped {min(row['overlapped_ms']):.3f} ms  public "
              f"{row['overlapped_public_ms']:.3f}  serial {min(row['serial_ms']):.3f}  one launch "
              f"{row['default_one_launch_ms']:.3f}  equal {row['bit_equal']}")
PY
