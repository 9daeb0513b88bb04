#!/usr/bin/env bash
# Packages for the lent GPU machine, which has no registry: their wheels for CPython 3.12 on x86-64
# Linux, unpacked (a wheel's contents are its installed layout) and recompressed with xz into
# FOLDER/ARCHIVE, FOLDER added to git's local exclude file. On the GPU machine:
#   mkdir -p /tmp/site && tar -C /tmp/site -xJf FOLDER/ARCHIVE && export PYTHONPATH=/tmp/site
# Usage (from the repository root): bash benchmarks/pack_site.sh FOLDER ARCHIVE PACKAGE==VERSION...
# pack_app.sh and pack_polars.sh call it with their lists.
set -euo pipefail
folder=$1 archive=$2
shift 2
exclude="$(git rev-parse --git-common-dir)/info/exclude"
grep -qxF "/$folder/" "$exclude" 2>/dev/null || echo "/$folder/" >> "$exclude"
work=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d "$work/wheels" "$@"
mkdir -p "$work/site" "$folder"
for wheel in "$work"/wheels/*.whl; do python3 -m zipfile -e "$wheel" "$work/site/"; done
tar -C "$work/site" -cf - . | xz -9 -T0 > "$folder/$archive"
rm -rf "$work"
du -sh "$folder/$archive"
