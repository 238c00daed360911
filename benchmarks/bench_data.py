"""Datasets the benchmarks run on: the shipped CASU-mini (full sizes) or the two-family test
library (quick mode), built with the real CLI."""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "families" / "two_families.yaml"


def build(out: Path, cache: Path, scenarios: str | Path | None = None, extra=()) -> float:
    """Seconds one `python -m casu_dataset build` took, model loading included (a user's view).
    Skipped scenes do not fail it: the caller reads them from build_report.json."""
    t = time.perf_counter()
    cmd = [sys.executable, "-m", "casu_dataset", "build", "--out", str(out), "--cache", str(cache)]
    cmd += [
        "--num-proc",
        "2",
        "--allow-skips",
        *(["--scenarios", str(scenarios)] if scenarios else []),
        *extra,
    ]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return time.perf_counter() - t


@functools.cache
def _scratch() -> Path:
    d = Path(tempfile.mkdtemp(prefix="casu-bench-data-"))
    atexit.register(shutil.rmtree, d, True)
    return d


@functools.cache
def small_dataset() -> Path:
    """The two-family test library built once per run (8 scenes, every task)."""
    out = _scratch() / "two_families"
    build(out, _scratch() / "cache", FIXTURE)
    return out


# The shipped library as the casu_mini_build bench built it in this run (full sizes), kept for the
# evaluation benches when there is no ./casu_mini.
BUILT_MINI: list[Path] = []


def keep_built_mini(folder: Path) -> None:
    dest = _scratch() / "casu_mini"
    shutil.move(str(folder), dest)
    BUILT_MINI[:] = [dest]


def dataset(quick: bool) -> tuple[Path, str]:
    """(folder, what it is): at full sizes ./casu_mini, else the one casu_mini_build made in this
    run; in quick mode (or with neither) the two-family test library."""
    from casu_dataset.contract import mcq_configs

    mini = ROOT / "casu_mini"
    if not quick and (mini / mcq_configs()[0]).is_dir():
        return mini, "./casu_mini"
    if not quick and BUILT_MINI:
        return BUILT_MINI[0], "CASU-mini as built by casu_mini_build in this run"
    return small_dataset(), "the two-family test library"
