#!/usr/bin/env bash
# Process-level settings against each other on the GPU, in alternating processes: the public call (and the backend
# entry, overlapped and serial, bit for bit) at each length, by benchmarks/overlap_check.py (budget 0.29, band 1,
# `score`, the lists beside the chains). Each form is a name and the SPARSEGDN_* settings its process starts with
# (read at import); the first round runs the forms in the order given, the next reversed, then rotated, and so on.
#
#   OUT=$OUT [ROUNDS=3] [TOKENS="32768 131072"] [PROFILE=1] [LIMIT=120] bash benchmarks/ab_rounds.sh \
#       base="" in-loop="SPARSEGDN_CHAIN_PUBLISH_IN_LOOP=1" ...
#
# PROFILE=1 also records round 1's kernel timelines (overlap_check.py --profile: the chain pass's time beside the lists).
# Prints overlap_check.py --summary (each form's mean, fastest and slowest public call) and leaves two files: $OUT/ab.log
# (what it printed) and $OUT/ab.tgz (every run's JSON and log). Needs a GPU; no wheels.
set -u
set -f      # a form's settings are split into words, never expanded as file names
[ $# -ge 2 ] || { echo "usage: OUT=... bash benchmarks/ab_rounds.sh NAME=\"SETTINGS\" NAME=\"SETTINGS\" ..." >&2; exit 2; }
for form in "$@"; do
  case "$form" in
    *=*) ;;
    *) echo "ab_rounds.sh: a form is NAME=\"SETTINGS\" (empty settings for the defaults), got '$form'" >&2; exit 2;;
  esac
done
source benchmarks/batch_head.sh ab.log
mkdir -p "$OUT/ab"
names=(); settings=()
for form in "$@"; do
  names+=("${form%%=*}"); settings+=("${form#*=}")
done
n=${#names[@]}
for round in $(seq 1 "${ROUNDS:-3}"); do
  order=()
  for j in $(seq 0 $((n - 1))); do order+=($(( (j + (round - 1) / 2) % n ))); done
  if [ $((round % 2)) = 0 ]; then order=($(printf '%s\n' "${order[@]}" | tac)); fi
  for i in "${order[@]}"; do
    name="${names[$i]}-round$round"
    profile=""; [ "${PROFILE:-0}" = 1 ] && [ "$round" = 1 ] && profile="--profile"
    env ${settings[$i]} timeout "${LIMIT:-120}" python benchmarks/overlap_check.py --tokens ${TOKENS:-32768 131072} \
      --only solved --claim --repeats 1 $profile --out "$OUT/ab/$name.json" > "$OUT/ab/$name.log" 2>&1
    echo "$name (${settings[$i]:-defaults}) rc $? at ${SECONDS}s"
  done
done
python benchmarks/overlap_check.py --summary "$OUT/ab"
tar czf "$OUT/ab.tgz" -C "$OUT" ab && rm -rf "$OUT/ab"      # one file back
