#!/usr/bin/env bash
# For the next batch (issue 14; written in batch 38, not yet run): warm-up segments beside the lists, timed again now
# that the chains are the overlapped call's critical path (batch 38: the chain pass 2.65-2.68 ms beside the lists at
# 128K, the lists ending with it whatever their own speed). Batch 30 found segments never faster (4.06-4.27 against
# 4.06 ms at 128K) when the lists were slower: the warm-ups' extra commits took the multiprocessors the lists needed.
# The lists are shorter since (ncu, 128K: 1.246 + 0.995 ms in batch 35; 1.015 + 0.885 with claims ahead in batch 38).
# Forms, in alternating processes, two rounds, 32K and 128K:
# whole chains (forward.LISTS_SEGMENT 0, the default) and segments of 512 and 1,024 commits
# (SPARSEGDN_LISTS_SEGMENT; the benchmark's keys are normalised, so each segment's entering state comes from a
# warm-up of LISTS_WARM_UP, which moved o by 1.6-2.1e-3 against whole chains in batch 29), each with the zero-state
# list's claims read at once (the default) and two tiles ahead (SPARSEGDN_LIST_CLAIM_AHEAD=1). Round 1 also records
# each call's kernel timeline (overlap_check.py --profile): the chains' time beside the lists.
# Run from the project root: OUT=$OUT bash analysis/results/overlap/batch38/segments.sh (~4 min; no wheels).
# Prediction: segments of 1,024 with claims ahead 3-8% faster than whole chains at 128K (the longest chain's walk
# halved, the lists' shorter work absorbing the warm-ups); level at 32K (chains of <= 512 commits are not cut by 512).
# A default only if faster in both rounds by more than their drift, and then with its error measured by
# benchmarks/warm_up_error.py --route lists.
set -u
source benchmarks/batch_head.sh segments.log
mkdir -p "$OUT/runs"
for round in 1 2; do
  order="0-0 1024-1 512-1 0-1 1024-0 512-0"; [ "$round" = 2 ] && order="512-0 1024-0 0-1 512-1 1024-1 0-0"
  for form in $order; do
    segment=${form%-*}; ahead=${form#*-}; name="segment$segment-ahead$ahead-round$round"
    profile=""; [ "$round" = 1 ] && profile="--profile"
    SPARSEGDN_LISTS_SEGMENT=$segment SPARSEGDN_LIST_CLAIM_AHEAD=$ahead timeout 120 python benchmarks/overlap_check.py \
      --tokens 32768 131072 --only solved --claim --repeats 1 $profile --out "$OUT/runs/$name.json" \
      > "$OUT/runs/$name.log" 2>&1
    echo "$name rc $? at ${SECONDS}s"
  done
done
python benchmarks/overlap_check.py --summary "$OUT/runs"
python - "$OUT/runs" <<'PY'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("*round1.json")):
    for row in json.loads(path.read_text()):
        kernels = row.get("overlapped_kernels") or []
        chains = [k for k in kernels if k[0].startswith("state_pass")]
        lists = [k for k in kernels if k[0].startswith("list_output")]
        if chains and lists:
            begin = chains[0][1]
            print(f"{path.stem:28s} T={row['T']:6d} chains {sum(k[2] for k in chains):7.0f} us  lists end "
                  f"{max(k[1] + k[2] for k in lists) - begin:7.0f} us after the chains begin")
PY
tar czf "$OUT/runs.tgz" -C "$OUT" runs && rm -rf "$OUT/runs"      # one file back
