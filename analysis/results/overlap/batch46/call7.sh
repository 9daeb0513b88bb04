#!/usr/bin/env bash
# Batch 46's second call (issue 14): where the branch's one launch loses. Call 6 (two alternating rounds, H100): the one
# launch with pass 3's key list 0.704 / 1.324 / 2.535 / 5.066 ms at 16K / 32K / 64K / 128K against main's 0.680 / 1.288
# / 2.487 / 4.906 (+1.9 to +3.5%), while on the lists' route pass 3 (no key list there) took 520 us against 618 at 128K.
# Here the public call forced onto the one launch (SPARSEGDN_LISTS_FROM=0) under torch.profiler, each kernel's device
# time a call (benchmarks/profile_call.py), main's sources (base.tar as in call6.sh) and the branch's, twice each.
# Third form, nocap: the branch with pass 3 under no register cap (SPARSEGDN_PREPARE_MAXNREG=0).
# Prediction (written before the run): pass 3 with the key list (62 local-memory instructions against main's 14) is
# the loser, 100-160 us slower than main's at 128K; state_output within 1% of main's; nocap's pass 3 between the two.
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch45/call7.sh (~5 min on an H100).
set -u
source benchmarks/batch_head.sh profile.log
base=/tmp/batch45-base
if [ ! -d "$base/sparsegdn" ]; then
  rm -rf "$base" && mkdir -p "$base"
  tar cf - --exclude=./.gpu-piece-1 --exclude=./.gpu-piece-2 --exclude=./.gpu-piece-3 . | tar xf - -C "$base"
  rm -rf "$base/sparsegdn" "$base/benchmarks"
  tar xf analysis/results/overlap/batch45/base.tar -C "$base"
fi
echo "base sources $(cd "$base" && python benchmarks/kernel_bench.py --digest)"
for round in 1 2; do
  for form in base list nocap; do
    dir=$PWD; settings=""; [ "$form" = base ] && dir=$base
    [ "$form" = nocap ] && settings="SPARSEGDN_PREPARE_MAXNREG=0"
    (cd "$dir" && env $settings SPARSEGDN_LISTS_FROM=0 timeout 95 python benchmarks/profile_call.py --tokens 32768 131072 \
      --out "$OUT/$form-round$round" > "$OUT/$form-round$round.log" 2>&1)
    echo "$form-round$round rc $? at ${SECONDS}s"
  done
done
python - "$OUT" <<'PY'
import collections, glob, json, statistics, sys
times = collections.defaultdict(list)      # (T, call, kernel, form) -> ms a call, one a round
for path in glob.glob(f"{sys.argv[1]}/*-round*/profile_call.json"):
    form = path.split("/")[-2].split("-round")[0]
    for row in json.load(open(path)):
        for kernel, _, ms in row.get("kernels", []):
            times[row["T"], row["call"], kernel[:40], form].append(ms)
        if "device_ms" in row:
            times[row["T"], row["call"], "(device, summed)", form].append(row["device_ms"])
print("T       call    kernel                                     base ms   list ms  nocap ms")
for T, call, kernel in sorted({key[:3] for key in times}):
    ms = [statistics.mean(times.get((T, call, kernel, f), [float("nan")])) for f in ("base", "list", "nocap")]
    print(f"{T:7d} {call:7s} {kernel:40s} " + " ".join(f"{m:9.4f}" for m in ms))
PY
