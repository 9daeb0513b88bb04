#!/usr/bin/env bash
# One GPU call of kernel work (issue 14), each step bounded so that the call ends inside 600 s and
# every step leaves its log even when a later one hangs or faults. Results: $OUT/kernel_batch.tgz and
# $OUT/summary.txt.
#
#   OUT=runs/kernel-batch [STEPS="matrix" | STEPS="probe timed"] bash benchmarks/kernel_batch.sh
#
# Batches of 2026-12-01: passes 4 and 5 in one launch (sparsegdn/triton/state_output.py), output programs
# waiting for their snapshots while the long commit chains run (analysis/results/overlap/).
# 1. the GPU matrix (every shape in both designs of Tinv; the skewed-chain test of one launch and two,
#    commits one or two at a time, repeated) beside config_probe's checks of the variants;
# 2. then, alone on the GPU, the variants timed at the lengths (backend entry, stage times, peak memory;
#    benchmark inputs, budget 0.29, band 1, score).
# Batch of 2026-12-01, morning: the final default's matrix passed (paired cases left out); paired commits were
# wrong on the H200 (analysis/results/overlap/batch5), mended on the CPU since.
# Then (CPU) the chain reads its decays by slot (Schedule.event_decays): every load two commits ahead.
# Then (CPU) short calls replayed from CUDA graphs (sparsegdn/triton/graphs.py, off).
# Batch of 2026-12-01, midday (analysis/results/overlap/batch6): decays by slot -7 to -10%; pairs correct but
# slower; graphs on by default (up to 8K). Next batch (its defaults): pair_check.py and the whole matrix; the
# default (baseline), the two launches with the whole chain (separate), segments of 64 commits in the one launch
# (float32 maps: segmented; maps as identity plus difference in the input dtype: segmented-delta) and in two
# launches (segmented-delta-separate) checked, then timed beside the timing-only chain-only and no-graph at 4K,
# 32K and 128K.
# Batch of 2026-12-01, afternoon (analysis/results/overlap/batch7): segments lost in every form, so did publishing
# less, capping registers and chain blocks of 8 (kernel_bench.notes.md). The default variants are now the two
# designs only; name the variants under study in VARIANTS.
# Evening (CPU): chunks from a zero state skip the state's part (chunk_output.SKIP_ZERO_STATE), one decay grid,
# 32-bit offsets inside tiles, a cheaper finite check; the one launch's timeline (benchmarks/launch_timeline.py).
# Variants whose setting is read at import time ("env" in config_probe.VARIANTS) are checked and timed each in a
# process started with it (config_probe does that itself).
# Batch 8 (analysis/results/overlap/batch8): the skip and the diet measured (entry at 32K 1.42 -> 1.225 ms); the
# timeline shows the one launch balanced between chains (long chains pair up on SMs) and outputs. Next:
#   OUT=$OUT STEPS="probe timed timeline" VARIANTS="select-kernel" TIMED_ONLY="chain-only" LENGTHS="4096 32768 131072" \
#     TIMELINE_VARIANTS="baseline" bash benchmarks/kernel_batch.sh
# Batch 9 (analysis/results/overlap/batch9, 2026-12-02): graphs above 8K lose (graph-32k/64k/128k: the entry ~33%
# slower at every length), the select kernel holding its row in registers wins 4-5.5% of the entry at 4K-32K and is
# on; the matrix passed with it (126). Next: the full benchmark (kernel_bench.py, three wheel-piece calls) and, to
# find the graphs' slowdown, nsys on `graph-64k` against `baseline` at 32K.
# Batch 10 (2026-12-02, later): calls launched from recorded plans (call_plans.py, on), checked and timed:
#   OUT=$OUT STEPS="plans" bash benchmarks/kernel_batch.sh
# Batch 27 (planned): the chain pass's shapes beside the lists, checked, then timed, in three calls:
#   OUT=$OUT STEPS="chain_cases" bash benchmarks/kernel_batch.sh, then STEPS="chains", then STEPS="chains_more"
# Batch 28 (analysis/results/overlap/batch28, 2026-12-05): every chain case passed at 16 and 64 (and the lists' route
# at 32); blocks of 32 won (entry -4.0 to -5.3% from 16K) and are the default; the transposed commits, TMA snapshots, 8
# and 2 warps and the streamed preparation lost. CHAIN_RUNS names runs of its own (see GPU_RUNBOOK.md section 1).
set -u
OUT=${OUT:-runs/kernel-batch}
VARIANTS=${VARIANTS:-"separate"}
# Timed in a process of their own (pairs faulted on the H200 in batch 5).
RISKY=${RISKY:-"paired paired-separate"}
SAFE=$(for name in $VARIANTS; do [[ " $RISKY " == *" $name "* ]] || echo -n "$name "; done)
RISKY_ASKED=$(for name in $VARIANTS; do [[ " $RISKY " == *" $name "* ]] && echo -n "$name "; done)
# Timed only, never checked here (chain-only's outputs are garbage; the graphs' checks are in the GPU matrix).
TIMED_ONLY=${TIMED_ONLY:-"chain-only no-graph"}
LENGTHS=${LENGTHS:-"4096 32768 131072"}
# The one launch's timeline (benchmarks/launch_timeline.py): these variants at these lengths.
TIMELINE_VARIANTS=${TIMELINE_VARIANTS:-"baseline chain-only stored"}
TIMELINE_LENGTHS=${TIMELINE_LENGTHS:-"32768 131072"}
# The chain pass's shapes (STEPS="chains", "chains_more"): timed at these lengths.
CHAIN_LENGTHS=${CHAIN_LENGTHS:-"32768 131072"}
STEPS=${STEPS:-"matrix probe timed"}
WORK="$OUT/logs"          # under $OUT, so that every step's log comes back even if a later step hangs
mkdir -p "$WORK"
summary() { echo "$*" | tee -a "$WORK/summary.txt"; }

summary "date $(date -u +%FT%TZ) build $(python benchmarks/kernel_bench.py --digest 2>&1 | tail -1)"
summary "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"

has() { [[ " $STEPS " == *" $1 "* ]]; }

# The steps fit one 600 s call each way: STEPS="matrix" (the matrix beside pair_check.py: 450 s were too few for its
# 300 cases on 2026-12-04, batch 26, hence 540) and
# STEPS="probe timed" (config_probe's checks, then the variants timed alone on the GPU) in two back-to-back calls.
if has matrix; then
  # -v: every case's outcome is in the log as it ends, also when the timeout stops the run.
  timeout 540 python -m pytest -v -n 8 -p no:cacheprovider tests/test_triton_gpu_matrix.py tests/test_triton_kernels.py \
    tests/test_stages.py tests/test_triton_launch.py > "$WORK/gpu_matrix.log" 2>&1 &
  MATRIX=$!
  timeout 150 python benchmarks/pair_check.py > "$WORK/pair_check.log" 2>&1
  summary "pair_check rc $? at ${SECONDS}s"
  wait $MATRIX
  summary "matrix rc $? $(grep -E "passed|failed" "$WORK/gpu_matrix.log" | tail -1) at ${SECONDS}s"
  grep -E "FAILED|Error" "$WORK/gpu_matrix.log" | head -20 | cut -c1-200 | tee -a "$WORK/summary.txt"
fi
if has probe; then
  timeout 180 python benchmarks/config_probe.py --only baseline $VARIANTS --out "$WORK/probe" \
    > "$WORK/config_probe.log" 2>&1
  summary "config_probe rc $? at ${SECONDS}s"
  grep -E "^[a-z0-9-]+ +(OK|BAD)|process ended" "$WORK/config_probe.log" | tee -a "$WORK/summary.txt"
fi
if has timed; then
  # Two processes: a CUDA fault ends its process, so the variants that faulted before (the paired ones) are timed
  # in a second one and cannot take the default's and the timing-only rows with them.
  # baseline: the one launch at every length; default-lists: the library's default (the Gluon lists for long calls)
  timeout ${TIMED_LIMIT:-240} python benchmarks/config_probe.py --timed baseline default-lists $TIMED_ONLY $SAFE --time $LENGTHS > "$WORK/timed.log" 2>&1
  summary "timed rc $? at ${SECONDS}s"
  : > "$WORK/timed_risky.log"
  if [ -n "$RISKY_ASKED" ]; then
    timeout 120 python benchmarks/config_probe.py --timed $RISKY_ASKED --time $LENGTHS > "$WORK/timed_risky.log" 2>&1
    summary "timed ($RISKY_ASKED) rc $? at ${SECONDS}s"
  fi
  cat "$WORK/timed.log" "$WORK/timed_risky.log" > "$WORK/timed_all.log"
  python benchmarks/config_probe.py --summarize "$WORK/timed_all.log" | tee -a "$WORK/summary.txt"
fi
if has plans; then
  # Calls launched from recorded plans (sparsegdn/triton/call_plans.py): the GPU tests that compare them with the
  # launches, then the public call and the entry with plans on, off, and with the CUDA graphs on (4K and 8K).
  timeout 240 python -m pytest -v -p no:cacheprovider tests/test_triton_gpu_matrix.py::test_gpu_planned_calls_equal_the_launches \
    tests/test_triton_gpu_matrix.py::test_gpu_graph_replay_equals_the_launches tests/test_triton_call_plans.py \
    tests/test_triton_launch.py > "$WORK/plan_tests.log" 2>&1
  summary "plan tests rc $? $(grep -E "passed|failed" "$WORK/plan_tests.log" | tail -1) at ${SECONDS}s"
  grep -E "FAILED|Error" "$WORK/plan_tests.log" | head -10 | cut -c1-200 | tee -a "$WORK/summary.txt"
  for setting in SPARSEGDN_CALL_PLANS=1 SPARSEGDN_CALL_PLANS=0 SPARSEGDN_CUDA_GRAPH=1; do
    case $setting in
      SPARSEGDN_CALL_PLANS=1) lengths=${PLAN_LENGTHS:-"4096 8192 16384 32768 131072"} ;;
      SPARSEGDN_CALL_PLANS=0) lengths=${PLAN_OFF_LENGTHS:-"16384 32768"} ;;
      *) lengths="4096 8192" ;;
    esac
    name=$(echo "$setting" | tr 'A-Z_=' 'a-z--')      # file names of letters, digits and dashes
    env $setting timeout 150 python benchmarks/public_call_probe.py --tokens $lengths --out "$WORK/probe-$name" \
      > "$WORK/probe-$name.log" 2>&1
    summary "public_call_probe $setting rc $? at ${SECONDS}s"
    grep -E "^T=" "$WORK/probe-$name.log" | tee -a "$WORK/summary.txt"
  done
fi
# Batch 27 (planned on the CPU, 2026-12-04, late night): the chain pass beside the lists in other shapes, each
# setting in a process of its own (read at import). STEPS="chain_cases": the GPU cases of the streamed preparation
# and the transposed chains at CASES_BLOCKS (the default's 32 since batch 28; 16 and 64 in batch 28), the settings'
# processes side by side. STEPS="chains": budget 0.29's backend entry and stage times at CHAIN_LENGTHS (no contenders
# unless their wheels are unpacked): blocks of 16 (the default then) and the streamed preparation; blocks of 64 on the
# state and on its transpose, its snapshots stored plainly or by TMA. STEPS="chains_more": the transpose at blocks of
# 64 with eight warps, both ways; blocks of 32 with eight warps. CHAIN_RUNS replaces both lists of runs. Each step
# fits a call of its own.
if has chain_cases; then
  # Side by side (processes on the one GPU: these are checks, not times), one bound for all.
  pids=()
  for bv in ${CASES_BLOCKS:-32 64}; do
    SPARSEGDN_CHAIN_BV=$bv timeout ${CASES_LIMIT:-270} python -m pytest -v -p no:cacheprovider \
      tests/test_triton_gpu_matrix.py -k "streamed or transposed or default_takes_the_lists" \
      > "$WORK/check-sparsegdn-chain-bv-$bv.log" 2>&1 &
    pids+=($!)
  done
  i=0
  for bv in ${CASES_BLOCKS:-32 64}; do
    wait "${pids[$i]}"; rc=$?; i=$((i + 1))
    summary "chain cases SPARSEGDN_CHAIN_BV=$bv rc $rc $(grep -E "passed|failed" "$WORK/check-sparsegdn-chain-bv-$bv.log" \
      | tail -1) at ${SECONDS}s"
    grep -E "FAILED|Error" "$WORK/check-sparsegdn-chain-bv-$bv.log" | head -10 | cut -c1-200 | tee -a "$WORK/summary.txt"
  done
fi
if has chains || has chains_more; then
  runs=()
  # CHAIN_RUNS="setting:designs;setting:designs" names the runs itself (settings space-separated inside one run;
  # newlines count as ";", blanks around a run are dropped, an empty run is skipped, a run without ":" refused).
  if [ -n "${CHAIN_RUNS:-}" ]; then
    IFS=';' read -r -a given <<< "$(echo "$CHAIN_RUNS" | tr '\n' ';')"
    for run in "${given[@]}"; do
      run=$(echo "$run" | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//')
      [ -z "$run" ] && continue
      if [[ "$run" != *:* ]] || [ -z "${run#*:}" ]; then
        summary "CHAIN_RUNS: '$run' is not setting:designs; not run"
        continue
      fi
      runs+=("$run")
    done
  else
    has chains && runs+=("SPARSEGDN_CHAIN_BV=16:by_band streamed" "SPARSEGDN_CHAIN_BV=64:by_band transposed transposed_tma")
    has chains_more && runs+=("SPARSEGDN_CHAIN_BV=64 SPARSEGDN_CHAIN_WARPS=8:transposed transposed_tma" \
                              "SPARSEGDN_CHAIN_BV=32 SPARSEGDN_CHAIN_WARPS=8:by_band")
  fi
  for run in "${runs[@]}"; do
    setting=${run%%:*}
    name=$(echo "$setting" | tr 'A-Z_= ' 'a-z---')
    # 280 s a run: batch 12's kernel_bench took 184 s for two designs at three lengths in a fresh process
    env $setting timeout ${CHAIN_LIMIT:-280} python benchmarks/kernel_bench.py --configs 0.29/1/score --designs ${run#*:} \
      --tokens $CHAIN_LENGTHS --out "$WORK/bench-$name" > "$WORK/bench-$name.log" 2>&1
    summary "kernel_bench $setting (${run#*:}) rc $? at ${SECONDS}s"
    grep -E "^T=" "$WORK/bench-$name.log" | cut -c1-160 | tee -a "$WORK/summary.txt"
  done
fi
# STEPS="ncu_chains" (planned in batch 28): the chain pass that runs beside the lists, profiled alone (ncu serializes the
# kernels, so the lists wait on finished counts) at 128K on the default's route, blocks of 16 and of 32: stall reasons,
# issue rate, instructions (benchmarks/ncu_variant.sh's metrics). NCU_BLOCKS and NCU_TOKENS change what is profiled.
if has ncu_chains; then
  for bv in ${NCU_BLOCKS:-16 32}; do
    env SPARSEGDN_CHAIN_BV=$bv timeout 200 bash benchmarks/ncu_variant.sh default-lists ${NCU_TOKENS:-131072} \
      state_pass_kernel > "$WORK/ncu-chains-bv$bv.txt" 2>&1
    summary "ncu chains SPARSEGDN_CHAIN_BV=$bv rc $? at ${SECONDS}s"
    grep -E "gpu__time_duration|smsp__issue_active\.avg|smsp__inst_executed\.sum|stalled_(barrier|long_scoreboard|wait|math_pipe_throttle|membar|short_scoreboard|mio_throttle|lg_throttle|dispatch_stall)_per" \
      "$WORK/ncu-chains-bv$bv.txt" | tee -a "$WORK/summary.txt"
  done
fi
if has timeline; then
  timeout 240 python benchmarks/launch_timeline.py --tokens $TIMELINE_LENGTHS --variants $TIMELINE_VARIANTS \
    --out "$WORK/timeline.json" > "$WORK/timeline.log" 2>&1
  summary "timeline rc $? at ${SECONDS}s"
  cat "$WORK/timeline.log" | tee -a "$WORK/summary.txt"
fi
tar czf "$OUT/kernel_batch.tgz" -C "$WORK" .
cp "$WORK/summary.txt" "$OUT/summary.txt"
