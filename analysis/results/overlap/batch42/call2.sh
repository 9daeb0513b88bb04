#!/usr/bin/env bash
# Batch 42, the last call (issue 14): the front page on the build whose default took call 1's winner (the chains
# beside the lists cut in half, the zero-state list claiming ahead where they are cut), with the wheels of three
# back-to-back calls installed in /tmp/site (FLA 0.6.0, FlashQLA 0.1.3). First the GPU matrix's cases of the lists'
# route on this build (segments, claims ahead, the default's lists), then the kernel benchmark's full run, then the
# in-model prefill at 32K.
# Prediction (written before the run): the public call at budget 0.29 3-4% under batch 40's at 32K-128K (1.07 / 2.03 /
# 3.95 ms on an H100 against 1.103 / 2.096 / 4.104), so FlashQLA / public ~0.90 / 0.85 / 0.85 at 32K / 64K / 128K
# (still short of 1.0), FLA / public ~2.2-2.4; 4K-8K unchanged (the lists, and so the cut chains, start at 16K), 16K
# within 2% (segments of 128 cut only the head pairs that keep more than half of 256 chunks).
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch42/call2.sh (~420 s on an H100).
set -u
export PYTHONPATH=/tmp/site
mkdir -p "$OUT"
timeout 100 python -m pytest -q -p no:cacheprovider tests/test_triton_gpu_matrix.py \
  -k "default_takes_the_lists or claims_ahead or list_outputs_match_chunk_output" > "$OUT/cases.log" 2>&1
echo "cases rc $? at ${SECONDS}s"; tail -3 "$OUT/cases.log"
source benchmarks/batch_head.sh bench.log
FLA_FLASH_QLA=0 python benchmarks/kernel_bench.py --out "$OUT/bench" --date 2026-12-06
echo "kernel_bench rc $? at ${SECONDS}s"
FLA_FLASH_QLA=0 python -m analysis.bench_prefill --tokens 32768 --repeats 3 --out "$OUT/prefill"
echo "bench_prefill rc $? at ${SECONDS}s"
ls "$OUT" "$OUT/bench" "$OUT/prefill"
