#!/usr/bin/env bash
# Batch 53, call 3 (issue 14), right after calls 1-2 on the same machine (/tmp/site holds polars from them): the app's
# stack from .gpu-app (carried), the app's pipeline on the GPU (runbook step 4), then the 4B-shape prefill with the
# sparse core timed as a caller runs it. OUT=$OUT bash <this file>.
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 STREAMLIT_BROWSER_GATHER_USAGE_STATS=false
mkdir -p /tmp/site "$OUT/prefill" && tar -C /tmp/site -xJf .gpu-app/app.tar.xz && export PYTHONPATH=/tmp/site || exit 1
python3 -c 'import streamlit, polars, plotly, pypdf, fla; print("stack ok", polars.__version__, fla.__version__)' || exit 1
SECONDS=0
timeout 300 python3 benchmarks/app_run.py --device cuda --models default qwen3.5-4b-shape --tokens 32768 \
  --out "$OUT/app_run_gpu.json" > "$OUT/app_run_gpu.log" 2>&1
echo "app_run rc $? at ${SECONDS}s" | tee -a "$OUT/app_run_gpu.log"
tail -25 "$OUT/app_run_gpu.log"
FLA_FLASH_QLA=0 timeout $((560 - SECONDS)) python3 -m analysis.bench_prefill --tokens 32768 --repeats 3 \
  --out "$OUT/prefill" > "$OUT/prefill.log" 2>&1
echo "bench_prefill rc $? at ${SECONDS}s" | tee -a "$OUT/prefill.log"
tail -20 "$OUT/prefill.log"
