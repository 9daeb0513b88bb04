#!/usr/bin/env bash
# Batch 45's next call (issue 14): the one launch with pass 3's list of the events' keys (state_output.KEY_LIST, the
# branch's default) against main and against the keys read in place, on both routes. Batch 45's call 1: with the keys
# in place the one launch lost 6-17% (default_one_launch_ms 0.245 / 0.770 / 1.490 / 2.908 / 5.747 ms at 4K / 16K / 32K
# / 64K / 128K against main's 0.232 / 0.681 / 1.291 / 2.491 / 4.915), while the lists' route gained 1.9-2.2% from 32K.
# Compiled for sm_90 (benchmarks/compile_report.py --tokens 32768) the one launch's three-stage configs hold 106,512 B
# of shared memory with the list (two commits ahead) against 71,700 with the keys in place (one ahead); pass 3 with the
# list spills more under its register cap (62 local-memory instructions against 23; main 14).
# Forms, two alternating rounds:
#   base     main's sources (2cc2d33, from base.tar: git archive 2cc2d33 sparsegdn benchmarks > <this dir>/base.tar)
#   list     this build (the one launch reads pass 3's key list; the lists' route its keys in place)
#   inplace  SPARSEGDN_ONE_LAUNCH_KEY_LIST=0 (batch 45's call 1 direct form)
#   inplace5 SPARSEGDN_ONE_LAUNCH_KEY_LIST=0 SPARSEGDN_ONE_LAUNCH_STAGES=5 (the one launch two commits ahead in place?)
# Prediction (written before the run): list's one launch within 2% of base's at every length, inplace's as call 1,
# inplace5 between them; the public call of list as call 1's direct form (4K as base's: the public call at 4K-8K is the
# one launch).
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch45/call6.sh (~4 min on an H100).
set -u
source benchmarks/batch_head.sh ab.log
base=/tmp/batch45-base
rm -rf "$base" && mkdir -p "$base"
tar cf - --exclude=./.gpu-piece-1 --exclude=./.gpu-piece-2 --exclude=./.gpu-piece-3 . | tar xf - -C "$base"
rm -rf "$base/sparsegdn" "$base/benchmarks"
tar xf analysis/results/overlap/batch45/base.tar -C "$base"
echo "base sources $(cd "$base" && python benchmarks/kernel_bench.py --digest)"
mkdir -p "$OUT/ab"
forms=(base list inplace inplace5)
for round in $(seq 1 "${ROUNDS:-2}"); do
  for j in 0 1 2 3; do
    form=${forms[$(( (j + round - 1) % 4 ))]}; dir=$PWD; settings=""
    [ "$form" = base ] && dir=$base
    [ "$form" = inplace ] && settings="SPARSEGDN_ONE_LAUNCH_KEY_LIST=0"
    [ "$form" = inplace5 ] && settings="SPARSEGDN_ONE_LAUNCH_KEY_LIST=0 SPARSEGDN_ONE_LAUNCH_STAGES=5"
    profile=""; [ "$round" = 1 ] && profile="--profile"
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
tar czf "$OUT/ab.tgz" -C "$OUT" ab && rm -rf "$OUT/ab"      # one file back
