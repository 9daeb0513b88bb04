"""Batch 40's rule for warm-up segments beside the lists, from ab_rounds.sh's log (call1.sh says why): prints the
segment length to take (0: whole chains)."""
import re
import sys
from collections import defaultdict

runs = defaultdict(list)      # (form, T) -> public ms of each round
for line in open(sys.argv[1]):
    m = re.match(r"(\S+)-round(\d+)\s+T=\s*(\d+) public ([0-9.]+) ms", line)
    if m:
        runs[(m[1], int(m[3]))].append(float(m[4]))
mean = {key: sum(v) / len(v) for key, v in runs.items()}
best, best_ms = 0, None
for (form, tokens), times in runs.items():
    if not form.startswith("seg") or tokens != 131072:
        continue
    base = runs.get(("base", tokens), [])
    wins = len(times) == len(base) >= 2 and max(times) <= 0.98 * min(base)
    shorter = all(mean.get((form, t), 1e9) <= 1.01 * mean.get(("base", t), 0) for t in (32768, 65536))
    print(f"# {form}: 128K {times} against {base}, wins {wins}, not slower at 32K / 64K {shorter}", file=sys.stderr)
    if wins and shorter and (best_ms is None or mean[(form, tokens)] < best_ms):
        best, best_ms = int(form[3:]), mean[(form, tokens)]
print(best)
