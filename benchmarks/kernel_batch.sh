#!/usr/bin/env bash
# One GPU call of kernel work (issue 14), each step bounded so that the call ends inside 600 s and
# every step leaves its log even when a later one faults. Results: $OUT/kernel_batch.tgz (+ summary.txt).
#
#   OUT=runs/kernel-batch bash benchmarks/kernel_batch.sh            # BASE=runs/base.tgz: a build to compare
#
# Batch of 2026-11-30 (night): the state pass's commit loop as a pipelined for loop.
# 1. config_probe (which configs and designs compute correctly) beside the GPU matrix, both checks only;
# 2. then, alone on the GPU, the variants that passed timed at 32K (backend entry, stage times);
# 3. the base build (BASE, a `git archive` of the build before the change) timed the same way at 32K and
#    128K, and this build's baseline at 128K (the affine design it also timed then is gone since);
# 4. the public call's read-back probe.
set -u
OUT=${OUT:-runs/kernel-batch}
BASE=${BASE:-runs/base.tgz}
WORK=$(mktemp -d)
mkdir -p "$OUT"
summary() { echo "$*" | tee -a "$WORK/summary.txt"; }

summary "date $(date -u +%FT%TZ) build $(python benchmarks/kernel_bench.py --digest 2>&1 | tail -1)"
summary "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"

timeout 200 python -m pytest -q -n 6 tests/test_triton_gpu_matrix.py tests/test_triton_kernels.py \
  tests/test_stages.py tests/test_triton_launch.py > "$WORK/gpu_matrix.log" 2>&1 &
MATRIX=$!
timeout 200 python benchmarks/config_probe.py --out "$WORK/probe" > "$WORK/config_probe.log" 2>&1
summary "config_probe rc $? at ${SECONDS}s"
wait $MATRIX
summary "matrix rc $? $(tail -1 "$WORK/gpu_matrix.log") at ${SECONDS}s"
grep -E "^[a-z0-9-]+ +(OK|BAD)|process ended" "$WORK/config_probe.log" | tee -a "$WORK/summary.txt"

PASSED=$(python - "$WORK/probe/config_probe.json" <<'PY'
import json, sys
sys.path.insert(0, "benchmarks")
from config_probe import VARIANTS
reports = json.load(open(sys.argv[1]))["checks"]
ok = [r["variant"] for r in reports if "crashed" not in r and not VARIANTS[r["variant"]].get("env")
      and not VARIANTS[r["variant"]].get("head32")
      and all("error" not in c and c["o_err"] <= 2e-2 and c["s_err"] <= 2e-2 for c in r["results"])]
print(" ".join(ok))
PY
)
summary "passed: $PASSED"
timed() {  # label, root, tokens, variants...
  local label=$1 root=$2 tokens=$3; shift 3
  (cd "$root" && timeout 150 python "$OLDPWD/benchmarks/config_probe.py" --timed "$@" --time "$tokens") \
    > "$WORK/timed-$label-$tokens.log" 2>&1
  summary "timed $label T=$tokens rc $? at ${SECONDS}s"
  python - "$WORK/timed-$label-$tokens.log" <<'PY' | tee -a "$WORK/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("TIMED "):
        r = json.loads(line[6:])
        if "error" in r:
            print(f"  {r['variant']:20s} {r['error']}")
        else:
            print(f"  {r['variant']:20s} entry {min(r['entry_ms']):.3f}-{max(r['entry_ms']):.3f} ms  "
                  + " ".join(f"{k}={v:.3f}" for k, v in r["stage_ms"].items()))
PY
}
if [ -n "$PASSED" ]; then
  timed this . 32768 $PASSED
fi
if [ -f "$BASE" ]; then
  mkdir -p /tmp/base-build && tar -xzf "$BASE" -C /tmp/base-build
  # the base build's own kernels, timed by this build's probe (its apply_variant only sets configs)
  cp benchmarks/config_probe.py /tmp/base-build/benchmarks/config_probe.py
  (cd /tmp/base-build && timeout 150 python benchmarks/config_probe.py --timed baseline --time 32768) \
    > "$WORK/timed-base-32768.log" 2>&1
  (cd /tmp/base-build && timeout 150 python benchmarks/config_probe.py --timed baseline --time 131072) \
    > "$WORK/timed-base-131072.log" 2>&1
  for f in "$WORK"/timed-base-*.log; do summary "$(basename "$f"): $(grep TIMED "$f" | cut -c1-400)"; done
fi
timed this . 131072 baseline
timeout 60 python benchmarks/public_call_probe.py --calls 200 --out "$WORK/public" > "$WORK/public.log" 2>&1
summary "public probe rc $?: $(tail -12 "$WORK/public.log" | tr '\n' ';')"
tar czf "$OUT/kernel_batch.tgz" -C "$WORK" .
cp "$WORK/summary.txt" "$OUT/summary.txt"
