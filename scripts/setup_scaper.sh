#!/usr/bin/env bash
# The scaper 1.6.5 baseline for `make bench`, in its own venv: it needs numpy<2 and pandas<2.3,
# and Debian libsox-dev. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x .venv-scaper/bin/python ] && .venv-scaper/bin/python -c "import scaper" 2>/dev/null; then exit 0; fi
if ! dpkg -s libsox-dev >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    apt-get install -y -q libsox-dev sox >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q libsox-dev sox >/dev/null; }
  else
    echo "bench: scaper needs libsox-dev: sudo apt-get install libsox-dev sox" >&2; exit 1
  fi
fi
python3.11 -m venv .venv-scaper
.venv-scaper/bin/pip install -q --disable-pip-version-check "numpy<2" "pandas<2.3" scaper==1.6.5 2>&1 | grep -v '^WARNING: Location' || true
.venv-scaper/bin/python -c "import scaper; print('bench: scaper', scaper.__version__)"
