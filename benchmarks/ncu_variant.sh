#!/usr/bin/env bash
# Stall reasons, issue rate and instructions of one kernel of the backend entry under a config_probe variant (ncu on a
# GPU machine; the metrics of kernel_bench.notes.md's ncu tables):
#     bash benchmarks/ncu_variant.sh VARIANT TOKENS KERNEL > out.txt
# The second call's launch of KERNEL is profiled (the first compiles); variant_call.py turns autotuning off, so that
# no autotuner launch of another config is counted (SPARSEGDN_AUTOTUNE=1 in the environment keeps it on).
set -euo pipefail
variant=$1 tokens=$2 kernel=$3
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
"$NCU" -k "regex:${kernel}" --launch-skip 1 --launch-count 1 \
    --metrics "gpu__time_duration.sum,sm__warps_active.avg.per_cycle_active,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_registers,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio" \
    python "$(dirname "$0")/variant_call.py" "$variant" --tokens "$tokens" --calls 2
