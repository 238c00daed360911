"""Resources that run out (a full disk, a file size limit, memory) end a command with one line that
names the path and what ran out, exit code 6, and no half-written output."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, tiny_dataset
from helpers import cli_process, harness_argv

from casu_dataset.core.errors import EXIT_RESOURCE, resource_message

FIXTURE = ROOT / "tests" / "fixtures" / "families" / "two_families.yaml"


def _file_size_limit(kb: int):
    """What `ulimit -f KB` does (soft and hard limit), for the child process alone."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (kb * 1024, kb * 1024))


@pytest.fixture()
def full_disk(tmp_path):
    """A 1 MiB tmpfs filled to the brim (root can mount one, as CI runs here)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({p.stderr.decode().strip() or 'not root'})")
    try:
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:  # ENOSPC: full
            pass
        finally:
            os.close(fd)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _no_partial(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*") if p.is_file() and p.name != "filler"]


def test_a_build_onto_a_full_disk_is_one_line_and_leaves_nothing(full_disk):
    p = cli_process("casu_dataset", "build", "--out", full_disk / "ds", "--scenarios", FIXTURE)
    assert p.returncode == EXIT_RESOURCE, p.stderr[-2000:]
    assert f"error: writing --out {full_disk / 'ds'}: no space left on the device (ENOSPC)" in p.stderr
    assert "Traceback" not in p.stderr and _no_partial(full_disk) == []


def test_an_evaluation_onto_a_full_disk_is_one_line(full_disk, tmp_path):
    d = tiny_dataset(tmp_path / "ds", 3, "full")
    p = cli_process("harness", *harness_argv(d, full_disk / "res"))
    assert p.returncode == EXIT_RESOURCE and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert (
        f"--cache {full_disk / 'res' / 'cache.sqlite'}: the response cache could not be written" in p.stderr
    )
    p = cli_process("harness", *harness_argv(d, full_disk / "res2", "--cache", "off"))
    assert p.returncode == EXIT_RESOURCE and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert f"writing --output_path {full_disk / 'res2'}: no space left on the device" in p.stderr
    assert not [f for f in _no_partial(full_disk) if not f.startswith("cache.sqlite")]


def test_a_file_size_limit_is_named(tmp_path):
    out = tmp_path / "ds"
    p = cli_process(
        "casu_dataset", "build", "--out", out, "--scenarios", FIXTURE, preexec_fn=_file_size_limit(200)
    )
    assert p.returncode == EXIT_RESOURCE, p.stderr[-2000:]
    assert (
        f"writing --out {out}: the file grew past this process's file size limit (ulimit -f) (EFBIG)"
        in p.stderr
    )
    assert not out.exists() and "Traceback" not in p.stderr


def test_resource_lines_name_the_path_and_leave_other_errors_alone():
    import errno
    import sqlite3

    err = OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), "/x/" + "a" * 300)
    assert resource_message(err).startswith("/x/aaa") and "too long" in resource_message(err)
    assert "out of memory" in resource_message(MemoryError())
    assert "response cache" in resource_message(sqlite3.OperationalError("database or disk is full"))
    assert resource_message(OSError(errno.ECONNREFUSED, "refused")) is None  # not a resource: a traceback
    assert resource_message(ValueError("bug")) is None
