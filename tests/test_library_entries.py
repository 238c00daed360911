"""A scenario library folder whose YAML-named entry is not a regular file (a FIFO, a dangling
link, a link loop, a folder) is refused in one line naming that entry, by every command that
reads a library: never waited on (a FIFO blocks a read forever) and never skipped (a smaller
library built without a word)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "casu_dataset" / "scenarios" / "casu_mini_v2"


def _entry(lib: Path, kind: str) -> Path:
    p = lib / "02_extra.yaml"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "dangling link":
        p.symlink_to(lib / "missing.yaml")
    elif kind == "link loop":
        p.symlink_to(p)
    elif kind == "folder":
        p.mkdir()
    return p


def _casu(*argv):
    return subprocess.run(
        [sys.executable, "-m", "casu_dataset", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("kind", ["fifo", "dangling link", "link loop", "folder"])
def test_build_names_an_entry_that_is_not_a_file(tmp_path, kind):
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copyfile(LIB / "01_home_school.yaml", lib / "01_home_school.yaml")
    bad = _entry(lib, kind)
    p = _casu("build", "--out", str(tmp_path / "out"), "--scenarios", str(lib), "--no-lock")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith(f"error: {bad}:"), p.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv",
    [["validity"], ["audit", "packets", "{tmp}/packets"], ["compose", "{lib}", "--out", "{tmp}/composed"]],
    ids=["validity", "audit", "compose"],
)
def test_every_library_reader_names_a_fifo(tmp_path, argv):
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copyfile(LIB / "01_home_school.yaml", lib / "01_home_school.yaml")
    if argv[0] == "compose":  # compose reads scene scripts: a folder of them
        (lib / "01_home_school.yaml").unlink()
    bad = _entry(lib, "fifo")
    args = [a.format(tmp=tmp_path, lib=lib) for a in argv]
    if argv[0] != "compose":
        args += ["--scenarios", str(lib)]
    p = _casu(*args)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    line = p.stderr.strip().splitlines()[-1]
    assert str(bad) in line and "is a named pipe (FIFO), not a regular file" in line, p.stderr
