#!/usr/bin/env bash
# Batch 36 (issue 14): the zero-state list with both value heads of one key head a list position (list_output's PAIR
# form: q and k loaded once, each head's products and roundings the unpaired kernel's), over every chunk of the
# benchmark's inputs at 32K and 128K, against the unpaired list (benchmarks/gluon_probe.py --pairs: do_bench medians,
# three interleaved rounds; o equal bit for bit), then the GPU cases of the form and the capped lists. Run from the
# project root: OUT=$OUT bash analysis/results/overlap/batch36/pairs.sh (~2 min; no wheels).
# Compiled for sm_90 (gluon_probe.py --list-caps, fixed shares, alone): PAIR at one stage 254 registers, 90,376 B of
# shared memory, two programs an SM, 4,096 instructions against 2 x 2,360 unpaired (one stage) and no local memory;
# at two stages one program an SM (155,920 B).
# Prediction: PAIR at one stage, two programs an SM, 3-10% below the unpaired list at its launch shape (two stages, two
# programs): it issues about 13% fewer instructions a chunk and half the TMA loads of q and k, but the lists are
# latency-bound (batch 35: issue slots 27-34% busy, no one stall reason) and it gives up the second stage. At two
# stages and one program an SM: slower (4 warps an SM).
set -u
source benchmarks/batch_head.sh pairs.log
timeout 200 python benchmarks/gluon_probe.py --pairs --tokens 32768 131072 --out "$OUT/pairs.json"
echo "pairs rc $? at ${SECONDS}s"
timeout 200 python -m pytest -q -p no:cacheprovider tests/test_triton_gpu_matrix.py \
  -k "paired_zero_state or register_capped_lists" 2>&1 | tail -5
echo "tests rc $? at ${SECONDS}s"
