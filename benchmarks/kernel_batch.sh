#!/usr/bin/env bash
# One GPU call of kernel work (issue 14), each step bounded so that the call ends inside 600 s and
# every step leaves its log even when a later one faults. Results: $OUT/kernel_batch.tgz (+ summary.txt).
#
#   OUT=runs/kernel-batch bash benchmarks/kernel_batch.sh
#
# 1. the GPU matrix (every shape the API accepts against the torch backend) on this build;
# 2. the launch path: profile_call at 4K and 32K with launch.py's fast path on and off;
# 3. the segmented commit chain: its two matrix cases under compute-sanitizer (autotuning on, as in
#    the fault of 2026-11-30) and without autotuning, then the benchmark's segmented design at 32K and
#    128K without autotuning (its stage times against the stored design's committed ones).
set -u
OUT=${OUT:-runs/kernel-batch}
WORK=$(mktemp -d)
mkdir -p "$OUT"
summary() { echo "$*" | tee -a "$WORK/summary.txt"; }
left() { echo $(( ${1} - SECONDS )); }

if [ -d .gpu-wheels ] && ! python -c "import fla" 2>/dev/null; then
  pip install -q --no-index --find-links .gpu-wheels flash-linear-attention >/dev/null 2>&1
fi
summary "date $(date -u +%FT%TZ) build $(python benchmarks/kernel_bench.py --digest 2>&1 | tail -1)"
summary "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"

timeout 210 python -m pytest -q -n 8 tests/test_triton_gpu_matrix.py tests/test_triton_kernels.py \
  tests/test_stages.py tests/test_triton_launch.py > "$WORK/gpu_matrix.log" 2>&1
summary "matrix rc $? $(tail -1 "$WORK/gpu_matrix.log") at ${SECONDS}s"

for fast in 1 0; do
  SPARSEGDN_FAST_LAUNCH=$fast timeout 90 python benchmarks/profile_call.py --tokens 4096 32768 \
    --out "$WORK/profile-fast$fast" > "$WORK/profile-fast$fast.log" 2>&1
  summary "profile fast_launch=$fast rc $?: $(grep -h 'ms/call' "$WORK/profile-fast$fast.log" | tr '\n' ';')"
done

timeout 100 compute-sanitizer --tool memcheck python -m pytest -q -x tests/test_triton_gpu_matrix.py -k designs \
  > "$WORK/segments_memcheck.log" 2>&1
summary "segments memcheck rc $? $(grep -c 'Invalid' "$WORK/segments_memcheck.log") invalid accesses at ${SECONDS}s"
SPARSEGDN_AUTOTUNE=0 timeout 60 python -m pytest -q tests/test_triton_gpu_matrix.py -k designs \
  > "$WORK/segments_no_autotune.log" 2>&1
summary "segments without autotuning rc $? $(tail -1 "$WORK/segments_no_autotune.log")"

if [ "$(left 560)" -gt 60 ]; then
  SPARSEGDN_AUTOTUNE=0 timeout "$(left 560)" python benchmarks/kernel_bench.py --tokens 32768 131072 \
    --designs segmented --out "$WORK/bench" > "$WORK/bench.log" 2>&1
  summary "segmented bench rc $? at ${SECONDS}s"
fi
tar czf "$OUT/kernel_batch.tgz" -C "$WORK" .
cp "$WORK/summary.txt" "$OUT/summary.txt"
