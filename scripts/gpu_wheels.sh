#!/usr/bin/env bash
# Download the wheels the offline GPU machine lacks into .whl/ (ignored by git; ~60 MB, under
# the 64 MiB that travels with the working tree). That machine has Python 3.12 and its own
# torch (+ triton) but no network: see docs/GPU_CHECK.md for the install and run command.
#
#   scripts/gpu_wheels.sh            # into .whl/
#   PY312=/path/to/python3.12 scripts/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.whl
PIP=${PIP:-.venv/bin/python -m pip}
mkdir -p "$DEST"

# Published as wheels: downloaded for CPython 3.12 on x86_64 Linux, no dependencies.
$PIP download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_24_x86_64 --platform any -d "$DEST" \
  transformers==5.24.0 \
  bitsandbytes==0.50.2 \
  fla-core==0.6.0 \
  einops==0.8.2 \
  qwen-vl-utils==0.0.14 \
  platformdirs==4.14.9

# bitsandbytes ships one library per CUDA and ROCm release (129 MB unpacked); the GPU machine runs
# CUDA 13, so only its libraries travel (the tree and the wheels must fit in 64 MiB together).
command -v zip >/dev/null || { echo "error: zip is needed to trim the bitsandbytes wheel" >&2; exit 2; }
zip -q -d "$DEST"/bitsandbytes-0.50.2-*.whl 'bitsandbytes/libbitsandbytes_cuda1[12]*' 'bitsandbytes/libbitsandbytes_rocm*' || true

# Published as source only: built here into wheels with a local Python 3.12 (pypcre has C code,
# so its wheel is cp312-specific; the others are pure Python).
PY312=${PY312:-$(command -v python3.12 || true)}
if [ -z "$PY312" ]; then
  echo "error: no python3.12 found: set PY312 to one (needed to build pypcre for the GPU machine)" >&2
  exit 2
fi
"$PY312" -m pip wheel --no-deps -w "$DEST" \
  gptqmodel==7.6.0 \
  pypcre==0.6.4 \
  tokenicer==0.0.14 \
  defuser==0.0.28 \
  logbar==0.4.15 \
  device-smi==0.5.7

ls -l "$DEST"
du -cb "$DEST"/*.whl | tail -1
