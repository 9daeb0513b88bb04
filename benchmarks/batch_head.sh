# Sourced by a GPU batch script after `set -u`, with the log's name: `source benchmarks/batch_head.sh caps.log`.
# Makes $OUT, sends everything after it to $OUT/<log> as well as the terminal, starts SECONDS, and names the card
# and the sources measured (benchmarks/kernel_bench.py --digest: the device's git may be stale).
mkdir -p "$OUT"
exec > >(tee "$OUT/$1") 2>&1
SECONDS=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python benchmarks/kernel_bench.py --digest
