#!/usr/bin/env bash
# Batch 31, call 2 (issue 14): the early checks' fourth form. Call 1 (third form: q scanned by a kernel of its own,
# pass 1 comparing every element of its k and v tiles) cost the entry +94 us at 32K and +305 at 128K on the H200, and
# +631 at 128K for dense semantics, whose pass 1 is heavier: by that, the tile compares in pass 1 rather than q's
# bytes were the cost. Now pass 1 checks k's and v's head vectors by the sums of squares it forms anyway (64 compares a tile) and the
# scan q's by theirs. Run from the project root: OUT=$OUT bash analysis/results/overlap/batch31/call2.sh
# Prediction: the scan alone at ~3.5-4 TB/s (q's 128 / 512 MiB at 32K / 128K: ~35 / ~140 us); the early entry
# within ~1.3x that of by_band's (32K: +35-45 us; 128K: +140-180), so the early public call faster than by_band's at
# 4K-32K and level or faster at 64K-128K. Falsified if the entry's growth at 32K is above 70 us.
# Budget 0.29 at 4K, 16K, 32K and 128K only (dense semantics and 8K, 64K left out to fit the device time the failed
# starts left).
set -u
mkdir -p "$OUT"
SECONDS=0
python benchmarks/kernel_bench.py --digest
python - <<'PY' 2>&1 | tee "$OUT/scan.log"
import torch, triton
from sparsegdn.triton.intra_chunk import early_scan
from sparsegdn.triton.chunk_loads import NUM_FLAGS
for tokens in (4096, 32768, 131072):
    q = torch.randn(1, tokens, 16, 128, device="cuda", dtype=torch.bfloat16)
    flags = torch.zeros(NUM_FLAGS, dtype=torch.int32, device="cuda")
    early_scan(q, None, flags, 32)
    ms = triton.testing.do_bench(lambda: early_scan(q, None, flags, 32), warmup=50, rep=300)
    print(f"scan T={tokens} {ms * 1e3:.1f} us {q.numel() * 2 / ms / 1e9:.2f} TB/s flags {flags.tolist()}")
PY
timeout 300 python benchmarks/kernel_bench.py --designs by_band early --configs 0.29/1/score \
  --tokens 4096 16384 32768 131072 --out "$OUT/bench" > "$OUT/bench.log" 2>&1
echo "bench rc $? at ${SECONDS}s"; grep -E "^T=" "$OUT/bench.log" | sed -E 's/fla .* MB  //' | cut -c1-200
# the GPU cases last (timed runs first: the device time left may end the call)
timeout 150 python -m pytest -q -n 4 tests/test_triton_gpu_matrix.py -k "early" > "$OUT/cases.log" 2>&1
echo "cases rc $? at ${SECONDS}s"; tail -3 "$OUT/cases.log"
