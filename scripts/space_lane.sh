#!/usr/bin/env bash
# CI's second lane: the Space's own environment, as ZeroGPU builds it, and the tests its behaviour rests on.
#   bash scripts/space_lane.sh [ARGS]     build (or reuse) the environment, then run the Space's tests
#   bash scripts/space_lane.sh --env      build (or reuse) it and print its python's path
#   bash scripts/space_lane.sh --full     another one, with the extras too ([batch], [bench]): for measuring
#
# The environment is Python 3.12 (pyenv's; the Space runs 3.12.12) with exactly what the Space installs, in
# the Space's order: Gradio at the front matter's sdk_version, `spaces` (the ZeroGPU hardware brings it; at
# requirements-sdk.txt's version), then requirements.txt; the test runner
# (requirements-test.txt) last. Torch 2.11.0 for 3.12 is a CUDA build of several GB from PyPI, so the
# environment lives outside the clone, under ~/.cache/marlin-demo/space-venvs/<hash of all of that>, and a
# fresh clone reuses it. MARLIN_SPACE_VENVS moves that folder.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=test  # other arguments go to pytest
case "${1:-}" in
  --env) mode=env; shift ;;
  --full) mode=full; shift ;;
esac

py312=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3.12 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$py312" ] || [ ! -x "$py312" ]; then
  echo "[space] error: the Space lane needs Python 3.12 (the Space runs 3.12.12) and found none under" \
       "${PYENV_ROOT:-$HOME/.pyenv}/versions/3.12.*: install it with 'pyenv install 3.12' and rerun." >&2
  exit 1
fi

# the front matter's sdk_version (between the first two '---' lines) and the spaces version tested
sdk=$("$py312" -c 'import re, sys; m = re.search(r"^sdk_version: *\"?([^\"\s]+)", open("README.md").read().split("---")[1], re.M); print(m.group(1) if m else "")')
spaces_version=$(sed -n 's/^spaces==\([^ #]*\).*/\1/p' requirements-sdk.txt)
if [ -z "$sdk" ]; then
  echo "[space] error: README.md's front matter has no sdk_version: the Space would not know its Gradio." >&2
  exit 1
fi

root=${MARLIN_SPACE_VENVS:-$HOME/.cache/marlin-demo/space-venvs}
# the key: what is installed, comments and blank lines left out (a reworded comment needs no new environment)
key=$( { "$py312" --version; echo "$sdk $spaces_version"
         sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' requirements.txt requirements-test.txt; } \
       | sha256sum | cut -c1-16)
venv="$root/py312-$key"
mkdir -p "$root"
exec 9>"$root/.build.lock"
flock 9  # two lanes at once (two clones): one builds, the other waits and reuses
if [ ! -f "$venv/.complete" ]; then
  echo "[space] building $venv: $("$py312" --version), gradio==$sdk, spaces==$spaces_version, requirements.txt" >&2
  rm -rf "$venv"  # an unfinished one (no .complete) is started again
  "$py312" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  # as the Space builds itself: its SDK first, then `spaces`, then the Space's requirements.txt
  "$venv/bin/python" -m pip install -q "gradio==$sdk" "spaces==$spaces_version" >&2
  "$venv/bin/python" -m pip install -q -r requirements.txt >&2
  "$venv/bin/python" -m pip install -q -r requirements-test.txt >&2
  "$venv/bin/python" -m pip check >&2
  touch "$venv/.complete"
fi

if [ "$mode" = full ]; then  # the same environment plus every extra of pyproject.toml, as written there
  extras=$("$venv/bin/python" -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb"))
print(" ".join(r for v in d["project"]["optional-dependencies"].values() for r in v))')
  full="$venv-full-$(echo "$extras" | sha256sum | cut -c1-8)"
  if [ ! -f "$full/.complete" ]; then
    rm -rf "$full"
    cp -a "$venv" "$full"  # no second download of torch; commands run as `python -m`, so the copy works
    rm -f "$full/.complete"
    # shellcheck disable=SC2086  # $extras is a list of requirement words
    "$full/bin/python" -m pip install -q $extras >&2
    "$full/bin/python" -m pip check >&2
    touch "$full/.complete"
  fi
  venv=$full
fi

if [ "$mode" != test ]; then
  echo "$venv/bin/python"
  exit 0
fi

flock -u 9
# The tests the Space's behaviour rests on: its configuration against ZeroGPU's facts and the torch/torchcodec
# pair decoding, the ZeroGPU path (stand-in `spaces`: refusals, GPU calls in forked processes, a served
# caption), app start-up on the tiny model, caption/find/compare/search over the Gradio client, MCP, the
# scheduler's per-window GPU calls. Everything else (bench, batch, quantize, browser...) is the main lane's.
SPACE_TESTS=(
  tests/test_space_env.py
  tests/test_zerogpu.py
  tests/test_startup.py
  tests/test_app_api.py
  tests/test_hardening.py
  tests/test_compare.py
  tests/test_library_app.py
  tests/test_mcp.py
  tests/test_scheduler.py
  tests/test_capacity.py
)
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_DISABLE_TELEMETRY=1
# a different torch may train a different tiny checkpoint: this environment keeps its own (built once)
export MARLIN_CACHE_DIR="$venv/marlin-cache"
echo "[space] $("$venv/bin/python" --version), torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'):" \
     "${#SPACE_TESTS[@]} test files" >&2
# the browser tests need Playwright and Chromium, which the Space does not install: the main lane runs them
exec "$venv/bin/python" -m pytest -n 2 --dist loadfile -m "not browser" "${SPACE_TESTS[@]}" "$@"
