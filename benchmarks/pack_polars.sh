#!/usr/bin/env bash
# polars for the lent GPU machine, which has none and no registry: its two wheels (55 MB, too large to
# travel beside the repository in one call's 64 MiB) unpacked and recompressed with xz into
# .gpu-polars/polars.tar.xz (~31 MB). On the GPU machine: tar -C /tmp/site -xJf .gpu-polars/polars.tar.xz
# (a wheel's contents are its installed layout), then PYTHONPATH=/tmp/site. Run once per checkout,
# from the repository root; about 5 minutes (xz -9).
set -euo pipefail
exclude="$(git rev-parse --git-common-dir)/info/exclude"
grep -qxF "/.gpu-polars/" "$exclude" 2>/dev/null || echo "/.gpu-polars/" >> "$exclude"
work=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$work/wheels" polars==2.1.0 polars-runtime-32==2.1.0
mkdir -p "$work/site" .gpu-polars
for wheel in "$work"/wheels/*.whl; do python3 -m zipfile -e "$wheel" "$work/site/"; done
tar -C "$work/site" -cf - . | xz -9 -T0 > .gpu-polars/polars.tar.xz
rm -rf "$work"
du -sh .gpu-polars/polars.tar.xz
