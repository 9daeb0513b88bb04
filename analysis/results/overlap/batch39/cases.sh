#!/usr/bin/env bash
# Batch 39, call 1 (issue 14): the GPU cases first. Run from the project root: OUT=$OUT bash analysis/results/overlap/batch39/cases.sh
# (~5 min; no wheels). 1. Batch 38's two rewritten cases (the overflow flag's one row; claims ahead equal to claims at
# once) on the default settings: never run on a GPU in their current form. 2. The lists' route with the chains'
# counts released inside their one loop (SPARSEGDN_CHAIN_PUBLISH_IN_LOOP=1, read at import): every list, overlap and
# default-route case of the matrix against the torch backend (the overlapped cases bit for bit against serial ones).
set -u
source benchmarks/batch_head.sh cases.log
timeout 150 python -m pytest -q -n 4 tests/test_triton_gpu_matrix.py -k "claims_ahead or overflowing" 2>&1 | tail -15
echo "rewritten cases rc ${PIPESTATUS[0]} at ${SECONDS}s"
SPARSEGDN_CHAIN_PUBLISH_IN_LOOP=1 timeout 380 python -m pytest -q -n 8 tests/test_triton_gpu_matrix.py \
  -k "list or default_takes or overlap or publish or progress" 2>&1 | tail -25
echo "in-loop cases rc ${PIPESTATUS[0]} at ${SECONDS}s"
