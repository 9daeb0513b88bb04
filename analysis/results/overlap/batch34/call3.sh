#!/usr/bin/env bash
# Batch 34, call 3 (issue 14): the GPU matrix on this build (early checks on by default), with the other files whose
# cases run on a GPU, in one call: python -m pytest -v -n 10 (the log lists every case). Run from the project root:
# OUT=$OUT bash analysis/results/overlap/batch34/call3.sh (at most 560 s).
set -u
mkdir -p "$OUT"
SECONDS=0
{
  echo "# GPU matrix, $(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)," \
       "torch $(python -c 'import torch; print(torch.__version__)'), triton $(python -c 'import triton; print(triton.__version__)')," \
       "sources $(python benchmarks/kernel_bench.py --digest) (benchmarks/kernel_bench.py --digest)"
  echo "# Command: OUT=\$OUT bash analysis/results/overlap/batch34/call3.sh"
} > "$OUT/matrix.log"
timeout 560 python -m pytest -v -n 10 -p no:cacheprovider tests/test_triton_gpu_matrix.py tests/test_triton_kernels.py \
  tests/test_stages.py tests/test_triton_launch.py tests/test_gluon_band_solve.py >> "$OUT/matrix.log" 2>&1
echo "matrix rc $? at ${SECONDS}s" | tee -a "$OUT/matrix.log"
grep -E "FAILED|ERROR" "$OUT/matrix.log" | head -20
tail -3 "$OUT/matrix.log"
