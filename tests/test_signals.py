"""Ctrl+C (SIGINT) and SIGTERM during a parallel build: the parent and its workers stop with one
line that says what was kept (no KeyboardInterrupt or BrokenPipeError traceback from any process),
exit 130 / 143, the output folder as it was and nothing left beside it."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ROOT / "tests" / "fixtures" / "families" / "two_families.yaml"


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _descendants(pid: int) -> list[int]:
    """Children, grandchildren...: the pool's workers are the fork server's children."""
    out = _children(pid)
    for c in list(out):
        out += _descendants(c)
    return out


def test_a_stopped_parallel_build_says_what_it_kept(tmp_path):
    """Ctrl+C as a terminal sends it: to the whole process group, while the fork server imports
    the workers' stack and the driver loads its models; the fork server follows the driver out.
    (SIGTERM takes the same path in the parent: the review test below; a worker dies of it
    silently, as SIGTERM's default action is.)"""
    sig, code = signal.SIGINT, 130
    out = tmp_path / "casu"
    out.mkdir()
    (out / "casu_build.json").write_text("{}")  # an earlier build's folder: must stay as it was
    cmd = [
        sys.executable,
        "-m",
        "casu_dataset",
        "build",
        "--out",
        str(out),
        "--cache",
        str(tmp_path / "cache"),
    ]
    cmd += ["--scenarios", str(FAMILIES), "--num-proc", "2", "--allow-skips", "--no-check-speech"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    # its own process group, signalled whole, as a terminal's Ctrl+C or `kill -- -PGID` is
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    deadline = time.monotonic() + 120
    # api.build starts the pool's fork server first thing, which imports the workers' stack while
    # the driver reads the library and loads the retrieval model (several seconds here)
    while not _descendants(p.pid) and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
    time.sleep(1.0)
    assert p.poll() is None, p.communicate()
    helpers = _descendants(p.pid)
    os.killpg(p.pid, sig)
    try:
        stdout, stderr = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    lines = [
        x
        for x in stderr.replace("\r", "\n").splitlines()
        if x.strip() and "it/s]" not in x and "?it/s" not in x
    ]
    assert p.returncode == code, stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert len(lines) == 1 and lines[0].startswith("error: stopped by"), lines
    assert f"--out {out} is as it was" in lines[0]
    assert sorted(x.name for x in out.iterdir()) == ["casu_build.json"]
    assert [x.name for x in tmp_path.iterdir() if ".tmp-" in x.name] == []
    gone = time.monotonic() + 20  # the fork server (and any worker) follows the driver out
    while any(Path(f"/proc/{pid}").exists() for pid in helpers) and time.monotonic() < gone:
        time.sleep(0.1)
    assert not [pid for pid in helpers if Path(f"/proc/{pid}").exists()]


def test_sigterm_stops_the_review_server_with_one_line(tmp_path):
    from conftest import fixture_family_rows, write_dataset

    ds = write_dataset(fixture_family_rows(), tmp_path / "ds")
    cmd = [sys.executable, "-m", "casu_dataset", "review", "--dataset", str(ds), "--port", "0"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "open http://" in p.stdout.readline() + p.stdout.readline()  # serving
    p.send_signal(signal.SIGTERM)
    _, stderr = p.communicate(timeout=30)
    assert p.returncode == 143, stderr
    assert stderr.strip().splitlines() == [
        "error: stopped by SIGTERM: no half-written file was left; the caches keep the work done, "
        "so the same command resumes"
    ]
