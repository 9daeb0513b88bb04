#!/usr/bin/env bash
# The front page's GPU call (issue 14): the kernel benchmark's full run, then the in-model prefill at 32K, both on the
# checkout's build. Install the contenders' wheels first, one piece a call (FLA 0.6.0, FlashQLA 0.1.3 into /tmp/site):
# `bash .gpu-piece-N/unpack-piece.sh N 3` with `carry: [.gpu-piece-N]` for N = 1, 2, then this script after piece 3's
# unpack in the same call. Write the batch's prediction in its calls.md before the run: this script is shared and
# holds none. Commit from a clean tree: kernel_bench records the build it measured.
# Run from the project root: DATE=YYYY-MM-DD OUT=$OUT bash benchmarks/front_page_call.sh (~360-450 s on an H100).
set -u
export PYTHONPATH=/tmp/site
source benchmarks/batch_head.sh bench.log
FLA_FLASH_QLA=0 python benchmarks/kernel_bench.py --out "$OUT/bench" --date "${DATE:-$(date -u +%F)}"
echo "kernel_bench rc $? at ${SECONDS}s"
FLA_FLASH_QLA=0 python -m analysis.bench_prefill --tokens "${PREFILL_TOKENS:-32768}" --repeats 3 --out "$OUT/prefill"
echo "bench_prefill rc $? at ${SECONDS}s"
ls "$OUT" "$OUT/bench" "$OUT/prefill"
