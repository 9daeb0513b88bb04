#!/usr/bin/env bash
# Batch 46's third call (issue 14): pass 3 stores the key list after g's and beta's loads. Call 7 (profiled, the public call
# forced onto the one launch, H100): pass 3 with the list took 741 us at 128K against main's 619 (+20%), state_output
# +0.9%. The list's store stood right after k's load, so the program waited for k before asking for g and beta; main's
# k_commit was stored after them. Now it is stored after them too (compiled for sm_90, compile_report --tokens 32768:
# 62 local-memory instructions as before; stored after w instead, k held longer, 162).
# Forms, three alternating rounds: base (main's sources, base.tar as in call6.sh) and list (this build), both routes;
# then each profiled once at 128K on the one launch (benchmarks/profile_call.py, SPARSEGDN_LISTS_FROM=0).
# Prediction (written before the run): pass 3 with the list within 3% of main's 619 us at 128K; the one launch within
# 1.5% of main's at 16K-128K (the state_output's +0.9% left); the lists' route as call 6 (-0.9 to -1.6% from 32K).
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch45/call8.sh (~4 min on an H100).
set -u
source benchmarks/batch_head.sh ab.log
base=/tmp/batch45-base
rm -rf "$base" && mkdir -p "$base"
tar cf - --exclude=./.gpu-piece-1 --exclude=./.gpu-piece-2 --exclude=./.gpu-piece-3 . | tar xf - -C "$base"
rm -rf "$base/sparsegdn" "$base/benchmarks"
tar xf analysis/results/overlap/batch45/base.tar -C "$base"
echo "base sources $(cd "$base" && python benchmarks/kernel_bench.py --digest)"
mkdir -p "$OUT/ab"
forms=(base list)
for round in $(seq 1 "${ROUNDS:-3}"); do
  for j in 0 1; do
    form=${forms[$(( (j + round - 1) % 2 ))]}; dir=$PWD; settings=""
    [ "$form" = base ] && dir=$base
    profile=""
    (cd "$dir" && env $settings timeout 150 python benchmarks/overlap_check.py --tokens ${TOKENS:-4096 16384 32768 65536 131072} \
      --only solved --claim --repeats 1 $profile --out "$OUT/ab/$form-round$round.json" > "$OUT/ab/$form-round$round.log" 2>&1)
    echo "$form-round$round rc $? at ${SECONDS}s"
  done
done
python benchmarks/overlap_check.py --summary "$OUT/ab"
python - "$OUT/ab" <<'PY'
import glob, json, statistics, sys
times = {}
for path in glob.glob(f"{sys.argv[1]}/*-round*.json"):
    form = path.rsplit("/", 1)[1].split("-round")[0]
    data = json.load(open(path))
    for row in data if isinstance(data, list) else data.get("rows", data):
        times.setdefault((form, row["T"]), []).append(row["default_one_launch_ms"])
print("form        T   one launch ms: mean (rounds)")
for form, tokens in sorted(times):
    print(f"{form:9s} {tokens:7d}  {statistics.mean(times[form, tokens]):.3f} ({len(times[form, tokens])})")
PY
for form in base list; do
  dir=$PWD; [ "$form" = base ] && dir=$base
  (cd "$dir" && SPARSEGDN_LISTS_FROM=0 timeout 95 python benchmarks/profile_call.py --tokens 131072 --out "$OUT/ab/profile-$form" \
    > "$OUT/ab/profile-$form.log" 2>&1)
  echo "profile-$form rc $? at ${SECONDS}s"; grep -E "T=|event_prepare|state_output" "$OUT/ab/profile-$form.log"
done
tar czf "$OUT/ab.tgz" -C "$OUT" ab && rm -rf "$OUT/ab"      # one file back
