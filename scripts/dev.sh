#!/usr/bin/env bash
# One entry point for a fresh Debian machine: installs what is missing, then
#   bash scripts/dev.sh app  [app.py flags...]   launch the demo (python app.py)
#   bash scripts/dev.sh test [pytest args...]    run the whole test suite
# Set-up is idempotent: system packages only when missing, the virtual
# environment (.venv) only when the development set changed since the last install: requirements-dev.txt
# (+ requirements-test.txt) pinned by constraints-dev.txt, Python 3.11 and torch 2.14.1. The Space's own
# set (requirements.txt: Python 3.12, torch 2.11.0) is CI's second lane: scripts/space_lane.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v ffmpeg >/dev/null 2>&1 || need_apt+=(ffmpeg)
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)  # axe-core for the browser tests
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "[setup] installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
stamp=.venv/.requirements.sha
want=$(cat requirements-dev.txt requirements-test.txt constraints-dev.txt | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] creating .venv and installing requirements (a few minutes the first time)"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements-dev.txt -c constraints-dev.txt
  .venv/bin/python -m pip check
  echo "$want" > "$stamp"
fi

# axe-core (the browser tests' contrast check): only when package-lock.json changed since the last install
npm_stamp=node_modules/.package-lock.sha
if command -v npm >/dev/null 2>&1; then
  npm_want=$(sha256sum package-lock.json | cut -d' ' -f1)
  if [ ! -f node_modules/axe-core/axe.min.js ] || [ "$(cat "$npm_stamp" 2>/dev/null)" != "$npm_want" ]; then
    echo "[setup] installing the browser tests' npm packages (axe-core)"
    npm ci --no-audit --no-fund --silent
    echo "$npm_want" > "$npm_stamp"
  fi
else
  echo "[setup] npm not found: the browser tests' contrast check will be skipped (install Node 20 + npm)"
fi

export GRADIO_ANALYTICS_ENABLED=False HF_HUB_DISABLE_TELEMETRY=1
cmd=${1:-}
shift || true
case "$cmd" in
  app)  exec .venv/bin/python app.py "$@" ;;
  # two workers, one test file each at a time (module fixtures stay shared); `-n 0` runs serially
  test) exec .venv/bin/python -m pytest -n 2 --dist loadfile "$@" ;;
  setup) echo "[setup] done" ;;
  *) echo "usage: bash scripts/dev.sh app|test|setup [args...]" >&2; exit 2 ;;
esac
