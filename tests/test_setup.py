"""scripts/setup.sh on a fake interpreter: a failed pip step fails the set-up (no stamp), pip's
'WARNING: Location' lines are filtered without hiding its exit status, and the import check
runs from outside the repo. Runs in a temp copy: the shared .venv is never touched."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A stand-in for python3.11 and for the venv's python: `-m venv DIR` makes DIR/bin/python (this
# same script); `-m pip ...` prints a Location warning and fails when FAKE_FAIL is in its
# arguments; `-c ...` (the import check) records the folder it runs in.
FAKE_PY = r"""#!/usr/bin/env bash
if [ "$1" = "--version" ]; then echo "Python 3.11.0"; exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  echo "WARNING: Location 'x' is ignored"; echo "pip $*" >> "$FAKE_LOG"
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
    shutil.copy(ROOT / "scripts" / "setup.sh", r / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", r / "pyproject.toml")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("flite", "espeak-ng", "chromedriver"):  # present, so no apt-get is attempted
        (bin_ / tool).write_text("#!/bin/sh\nexit 0\n")
    (bin_ / "fakepython").write_text(FAKE_PY)
    for f in bin_.iterdir():
        f.chmod(0o755)
    return r, bin_, tmp_path / "log"


def _setup(repo, fail=""):
    r, bin_, log = repo
    env = {
        **os.environ,
        "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}",
        "PYTHON": str(bin_ / "fakepython"),
        "FAKE_LOG": str(log),
        "FAKE_FAIL": fail or "no-such-arg",
    }
    return subprocess.run(
        ["bash", str(r / "scripts" / "setup.sh")], capture_output=True, text=True, env=env, timeout=60
    )


def test_failed_pip_step_fails_setup_and_writes_no_stamp(repo):
    p = _setup(repo, fail="torch==2.13.0")
    assert p.returncode != 0, p.stdout + p.stderr
    assert "pip failed while installing torch" in p.stderr
    assert (
        "No matching distribution for torch==2.13.0" in p.stdout + p.stderr
    )  # pip's own error stays visible
    assert not list((repo[0] / ".venv").glob(".casu-setup-*"))
    assert "-e .[dev]" not in repo[2].read_text()  # stopped at the failing step


def test_successful_setup_filters_warnings_and_checks_the_import_outside_the_repo(repo):
    p = _setup(repo)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "WARNING: Location" not in p.stdout + p.stderr
    assert len(list((repo[0] / ".venv").glob(".casu-setup-*"))) == 1
    log = repo[2].read_text()
    assert sum(line.startswith("pip ") for line in log.splitlines()) == 4 and "import-check in /tmp" in log
    assert _setup(repo).returncode == 0  # a second run is a no-op on the stamp


def test_failed_import_check_fails_setup(repo):
    r, bin_, log = repo
    (bin_ / "fakepython").write_text(
        FAKE_PY.replace('>> "$FAKE_LOG"; exit 0; fi\nexit 3', '>> "$FAKE_LOG"; exit 1; fi\nexit 3')
    )
    p = _setup(repo)
    assert p.returncode != 0 and "import check failed" in p.stderr
    assert not list((r / ".venv").glob(".casu-setup-*"))
