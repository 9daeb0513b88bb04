#!/usr/bin/env bash
# Batch 37 (issue 14): what limits the Gluon lists. Batch 36 found three programs a multiprocessor (one stage, a cap
# of 168) tie two (the default: two stages); compiled, the capped zero-state list's spills are 27 of its tile loop's
# 2,141 instructions (1.3%, loop-invariant shared-memory addresses and wgmma descriptors reloaded each tile;
# `python benchmarks/gluon_probe.py --list-caps`, its local_ops_in_loop), too few to cancel a third program's gain if
# latency were the limit. So a throughput is: this reads which. ncu's sections (speed of light, compute pipes, memory
# tables with shared memory's wavefronts and bank conflicts, warp states, occupancy) for both lists of one warm public
# call at 128K (budget 0.29, kernel_bench's inputs), the default launch and the capped three programs.
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch37/limiter.sh (~3 min; no wheels).
# Prediction: the zero-state list's shared-memory pipe (LSU/MIO, the solve's fp32 scratch and the TMA/wgmma
# traffic) or L2 throughput above 60% of peak at two programs and not higher at three; DRAM stays ~52-55%.
set -u
source benchmarks/batch_head.sh limiter.log
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
mkdir -p "$OUT/ncu"
for variant in default capped; do
  if [ "$variant" = capped ]; then caps=168,0; launch="list_output.OWN_LAUNCH = (1, 3)"; else caps=0,0; launch="pass"; fi
  SPARSEGDN_LIST_MAXNREG=$caps timeout 240 "$NCU" --profile-from-start off --clock-control none -k regex:list_output \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section Occupancy --section WarpStateStats --section SchedulerStats \
    --section LaunchStats --csv --page details --print-units base --log-file "$OUT/ncu/$variant.csv" python -c "
import sys; sys.path.insert(0, 'benchmarks')
from sparsegdn.triton import list_output; $launch
import sm_ledger; sm_ledger.run('sparsegdn', 131072)" > "$OUT/ncu/$variant.log" 2>&1
  echo "$variant ncu rc $? at ${SECONDS}s"
done
python - "$OUT/ncu" <<'PY'
import csv, pathlib, re, sys
wanted = re.compile(r"Duration|Throughput|Pipe|Busy|Bank|Wavefront|Registers Per|Achieved Occupancy|Theoretical "
                    r"Occupancy|Block Limit|Eligible|Issued Warp|Issue Slots|Shared Memory|Warp Cycles Per|L1/TEX Hit|"
                    r"L2 Hit|Executed Ipc")
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.csv")):
    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        print(path.name, "no rows"); continue
    for row in csv.DictReader(lines[start:]):
        if wanted.search(row.get("Metric Name") or ""):         # rule rows name no metric
            print(f"{path.stem:8s} {row['ID']:>3s} {row['Kernel Name'][:24]:24s} {row['Section Name'][:22]:22s} "
                  f"{row['Metric Name'][:48]:48s} {row['Metric Value']} {row['Metric Unit']}")
PY
tar czf "$OUT/ncu.tgz" -C "$OUT" ncu && rm -rf "$OUT/ncu"      # one file back
