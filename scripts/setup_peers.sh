#!/usr/bin/env bash
# The peers' side environment: .venv-peers with the real lmms-eval 0.7.3 and lm-eval 0.4.13 beside
# CASU itself (`-e .`), for `make peers` / `make peers-quick` (harness/peers/compare.py).
#
# torch==2.13.0 (the CPU wheel on this machine) goes in FIRST, and every later pip call runs under
# a constraints file pinning it, so no resolver step can swap in a multi-GB CUDA build.
# torchvision: lmms-eval declares it (and timm needs it), so pip installs PyPI's build, which does
# not load beside the CPU torch ("operator torchvision::nms does not exist"). Nothing that lmms-eval
# or lm-eval imports to evaluate needs it (lmms_eval.evaluator, lmms_eval.tasks, lm_eval and
# transformers all import without it; only a few vision models and timm use it), but transformers
# imports it whenever it is installed, which breaks `import lmms_eval.evaluator`. So it is
# uninstalled after the install, and the import check below proves the evaluators load without it.
# Idempotent: keyed on a hash of pyproject.toml and this script, a second run is a no-op.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3.11}
VENV=.venv-peers
KEY=$( (cat pyproject.toml scripts/setup_peers.sh) | sha256sum | cut -c1-16)
STAMP="$VENV/.casu-peers-$KEY"
if [ -f "$STAMP" ] && [ -x "$VENV/bin/python" ]; then
  exit 0
fi
command -v "$PY" >/dev/null 2>&1 || { echo "setup_peers: $PY not found; set PYTHON=/path/to/python3.11" >&2; exit 1; }
echo "setup_peers: creating $VENV with $($PY --version) (lmms-eval 0.7.3, lm-eval 0.4.13, CASU; a few minutes)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
CONSTRAINTS="$VENV/constraints.txt"
# filelock<4: lmms-eval 0.7.3's evaluator imports filelock._api (FileLockMeta), which filelock 4 removed
# ("No module named 'filelock._api'" at the start of every lmms-eval run).
printf 'torch==2.13.0\nfilelock<4\n' >"$CONSTRAINTS"
quiet_filter() { grep -v '^WARNING: Location' || true; }
pip_step() {
  local what=$1; shift
  "$VENV/bin/python" -m pip "$@" 2>&1 | quiet_filter \
    || { echo "setup_peers: pip failed while installing $what (exit ${PIPESTATUS[0]}); see the output above" >&2; exit 1; }
}
pip_step pip install -q --disable-pip-version-check --upgrade "pip>=23"
pip_step torch install -q --disable-pip-version-check torch==2.13.0
# One resolver run for all three, so CASU's pins (transformers, numpy, ...) and the peers' ranges agree.
# librosa: lmms-eval's audio models import it (its [audio] extra, which would also bring torchvision back).
pip_step "lmms-eval, lm-eval and CASU" install -q --disable-pip-version-check -c "$CONSTRAINTS" \
  -e . lmms-eval==0.7.3 lm-eval==0.4.13 librosa==0.11.0
if "$VENV/bin/python" -m pip show -q torchvision >/dev/null 2>&1; then
  pip_step "(removing) torchvision" uninstall -q -y torchvision
fi
# From outside the repo, so the installed packages are what is tested.
(cd /tmp && env -u PYTHONPATH HF_HUB_OFFLINE=1 "$ROOT/$VENV/bin/python" -c "
import torch, soundfile, librosa, lmms_eval.evaluator, lmms_eval.api.registry, lm_eval, lm_eval.api.registry
import harness.peers.lmms_eval_tasks, harness.peers.lm_eval_tasks
import harness.peers.lmms_eval_replay, harness.peers.lm_eval_replay, filelock._api
from lmms_eval.tasks import TaskManager
assert torch.__version__.startswith('2.13.0'), torch.__version__
assert not torch.version.cuda, 'a CUDA torch was installed'
import importlib.metadata as md
assert md.version('lmms-eval') == '0.7.3' and md.version('lm-eval') == '0.4.13'
") || { echo "setup_peers: import check failed (run from /tmp, so it tests the installed packages)" >&2; exit 1; }
rm -f "$VENV"/.casu-peers-*
touch "$STAMP"
echo "setup_peers: done ($VENV)"
