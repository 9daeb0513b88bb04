#!/usr/bin/env bash
# polars for the lent GPU machine, which has none and no registry: its two wheels (55 MB, too large to
# travel beside the repository in one call's 64 MiB) unpacked and recompressed with xz into
# .gpu-polars/polars.tar.xz (~31 MB). On the GPU machine: tar -C /tmp/site -xJf .gpu-polars/polars.tar.xz
# (a wheel's contents are its installed layout), then PYTHONPATH=/tmp/site. Run once per checkout,
# from the repository root; about 5 minutes (xz -9).
set -euo pipefail
bash "$(dirname "$0")/pack_site.sh" .gpu-polars polars.tar.xz polars==2.1.0 polars-runtime-32==2.1.0
