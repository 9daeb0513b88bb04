#!/usr/bin/env bash
# The app's stack for the lent GPU machine, which has none of it and no registry: streamlit 1.67 with
# the requirements that machine lacks, plotly, pypdf, protobuf (streamlit's tested version) and FLA
# (the dense core), their wheels unpacked and recompressed with xz into .gpu-app/app.tar.xz (~13 MB;
# the wheels are 35 MB). polars travels apart, in .gpu-polars/ (pack_polars.sh). On the GPU machine:
#   mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu-app/app.tar.xz && tar -C /tmp/site -xJf .gpu-polars/polars.tar.xz
#   export PYTHONPATH=/tmp/site
# (a wheel's contents are its installed layout). The versions are requirements.txt's and those its
# pins resolved to on the CPU machine; numpy, pandas, pyarrow, pillow, jinja2, click, anyio, h11,
# narwhals, attrs, requests, packaging, typing-extensions, einops and accelerate are on the GPU
# machine already (its package list: the device docs' KINDS.md). Run once per checkout, from the
# repository root; about 2 minutes (xz -9).
set -euo pipefail
bash "$(dirname "$0")/pack_site.sh" .gpu-app app.tar.xz \
  streamlit==1.67.0 plotly==7.1.0 pypdf==7.1.1 protobuf==7.36.2 \
  altair==6.3.0 pydeck==0.9.3 starlette==1.10.0 uvicorn==0.54.0 itsdangerous==2.2.0 python-multipart==0.0.34 \
  websockets==17.4 watchdog==7.1.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 \
  rpds-py==0.30.0 flash-linear-attention==0.6.0 fla-core==0.6.0
