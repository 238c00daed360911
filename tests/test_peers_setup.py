"""scripts/setup_peers.sh on a fake interpreter: torch==2.13.0 goes in first, every later install runs
under the constraints file (torch pinned, filelock < 4), PyPI's torchvision (which cannot load beside
the CPU torch) is removed, a failed step writes no stamp and a second run is a no-op. Runs in a temp
copy: the real .venv-peers is never touched."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# `-m venv DIR` makes DIR/bin/python (this script); `-m pip ...` is logged and fails when FAKE_FAIL
# is among its arguments (`pip show torchvision` succeeds when FAKE_TV=1); `-c` is the import check.
FAKE_PY = r"""#!/usr/bin/env bash
if [ "$1" = "--version" ]; then echo "Python 3.11.0"; exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  echo "pip ${*:3}" >> "$FAKE_LOG"
  if [ "$3" = "show" ]; then [ "$FAKE_TV" = "1" ]; exit $?; fi
  case " $* " in *" $FAKE_FAIL "*) echo "ERROR: No matching distribution for $FAKE_FAIL"; exit 1;; esac
  exit 0
fi
if [ "$1" = "-c" ]; then echo "import-check in $(pwd)" >> "$FAKE_LOG"; exit 0; fi
exit 3
"""


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    (r / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup_peers.sh", r / "scripts" / "setup_peers.sh")
    shutil.copy(ROOT / "pyproject.toml", r / "pyproject.toml")
    py = tmp_path / "fakepython"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    return r, py, tmp_path / "log"


def _setup(repo, fail="", torchvision="1"):
    r, py, log = repo
    env = {**os.environ, "PYTHON": str(py), "FAKE_LOG": str(log), "FAKE_FAIL": fail or "no-such-arg"}
    env["FAKE_TV"] = torchvision
    return subprocess.run(
        ["bash", str(r / "scripts" / "setup_peers.sh")], capture_output=True, text=True, env=env, timeout=60
    )


def test_torch_first_constraints_and_no_torchvision(repo):
    p = _setup(repo)
    assert p.returncode == 0, p.stdout + p.stderr
    r, _, log = repo
    steps = [line for line in log.read_text().splitlines() if line.startswith("pip ")]
    assert "torch==2.13.0" in steps[1] and " -c " not in steps[1]  # after pip's own upgrade
    peers = steps[2]
    assert " -c " in peers and "lmms-eval==0.7.3" in peers and "lm-eval==0.4.13" in peers and "-e ." in peers
    assert (r / ".venv-peers" / "constraints.txt").read_text().split() == ["torch==2.13.0", "filelock<4"]
    assert steps[3] == "pip show -q torchvision" and steps[4].startswith("pip uninstall -q -y torchvision")
    assert "import-check in /tmp" in log.read_text()
    assert len(list((r / ".venv-peers").glob(".casu-peers-*"))) == 1
    n = len(log.read_text().splitlines())
    assert _setup(repo).returncode == 0 and len(log.read_text().splitlines()) == n  # the stamp: a no-op


def test_failed_step_writes_no_stamp(repo):
    p = _setup(repo, fail="lmms-eval==0.7.3")
    assert p.returncode != 0 and "pip failed while installing lmms-eval, lm-eval and CASU" in p.stderr
    assert not list((repo[0] / ".venv-peers").glob(".casu-peers-*"))
    assert "torchvision" not in repo[2].read_text()  # stopped at the failing step


def test_nothing_to_uninstall_when_torchvision_is_absent(repo):
    assert _setup(repo, torchvision="0").returncode == 0
    assert "uninstall" not in repo[2].read_text()
