"""CASU-mini build: cold (empty cache, models loaded in the run) and warm (everything cached).

Runs the real CLI in subprocesses so model loading is part of the cold time, as a user sees it.
Skipped scenes are reported by name, not fatal: the figures still say what the build cost.
Quick mode builds the two-family test library instead of the shipped one.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from bench_data import FIXTURE, build, keep_built_mini


def run(quick: bool = False) -> dict:
    d = Path(tempfile.mkdtemp(prefix="casu-bench-build-"))
    scenarios = FIXTURE if quick else None
    try:
        cold = build(d / "a", d / "cache", scenarios)
        warm = build(d / "b", d / "cache", scenarios)
        same = all(
            (d / "a" / p.relative_to(d / "b")).read_bytes() == p.read_bytes()
            for p in (d / "b").rglob("*.parquet")
        )
        rep = json.loads((d / "a" / "build_report.json").read_text())
        if not quick:
            keep_built_mini(d / "a")  # the evaluation benches run on it
        return {
            "library": "tests/fixtures/families/two_families.yaml" if quick else "the shipped CASU-mini",
            "scenes_built": len(rep["built"]),
            "skipped": len(rep["skipped"]),
            "skipped_scenes": rep["skipped"],
            "cold_s": cold,
            "warm_s": warm,
            "ratio_cold_vs_warm": cold / warm,
            "warm_rebuild_byte_identical": same,
            "targets": "shipped library: cold < 150 s on 2 cores, warm < 30 s",
        }
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    import sys

    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))
