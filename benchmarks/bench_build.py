"""CASU-mini build: cold (empty cache, models loaded in the run) and warm (everything cached).

Runs the real CLI in subprocesses so model loading is part of the cold time, as a user sees it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _build(out: Path, cache: Path, extra=()) -> float:
    t = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "casu_dataset",
            "build",
            "--out",
            str(out),
            "--cache",
            str(cache),
            "--num-proc",
            "2",
            *extra,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - t


def run() -> dict:
    d = Path(tempfile.mkdtemp(prefix="casu-bench-build-"))
    try:
        cold = _build(d / "a", d / "cache")
        warm = _build(d / "b", d / "cache")
        same = all(
            (d / "a" / p.relative_to(d / "b")).read_bytes() == p.read_bytes()
            for p in (d / "b").rglob("*.parquet")
        )
        rep = json.loads((d / "a" / "build_report.json").read_text())
        return {
            "scenes_built": len(rep["built"]),
            "skipped": len(rep["skipped"]),
            "cold_s": cold,
            "warm_s": warm,
            "ratio_cold_vs_warm": cold / warm,
            "warm_rebuild_byte_identical": same,
            "targets": "cold < 300 s, warm < 30 s",
        }
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(run(), indent=1))
