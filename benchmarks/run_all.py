"""Every benchmark, each reporting ratios against a baseline measured in the same run.

    python benchmarks/run_all.py [--quick] [--out DIR] [NAME ...]

`make bench` runs the full sizes (the headline figures). `--quick` runs every bench on small
sizes in a few seconds to a minute each; CI runs it (`make bench-quick`), so a bench that breaks
fails CI instead of rotting. The exit status is 1 when any bench raised or reported no ratio.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

import bench_ann  # noqa: E402
import bench_build  # noqa: E402
import bench_eval  # noqa: E402
import bench_harness  # noqa: E402
import bench_mixer  # noqa: E402
import bench_peers  # noqa: E402
import bench_ray_build  # noqa: E402
import bench_retrieval  # noqa: E402
import bench_tts  # noqa: E402

BENCHES = {
    "mixer_vs_scaper": bench_mixer.run,
    "retrieval": bench_retrieval.run,
    "tts": bench_tts.run,
    "casu_mini_build": bench_build.run,
    "harness_overhead": bench_harness.run,
    "eval_path": bench_eval.run,
    "retrieval_index": bench_ann.run,
    "ray_build": bench_ray_build.run,
    "peers_side_by_side": bench_peers.run,
}


def ratios(result) -> dict:
    """Every `ratio_*` figure of a result, nested ones included (their keys joined by '.')."""
    found = {}
    if isinstance(result, dict):
        for k, v in result.items():
            if k.startswith("ratio_") and isinstance(v, (int, float)):
                found[k] = v
            for sub, r in ratios(v).items():
                found[f"{k}.{sub}"] = r
    return found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "names", nargs="*", metavar="NAME", help=f"benches to run (default all): {', '.join(BENCHES)}"
    )
    ap.add_argument("--quick", action="store_true", help="small sizes: checks that every bench still runs")
    ap.add_argument("--out", default="bench_out", help="folder of results.json (quick: quick.json)")
    a = ap.parse_args(argv)
    if a.quick and not os.environ.get("CASU_CACHE"):
        # CI runs the quick mode: cold caches of its own, never the user's ~/.cache/casu.
        scratch = tempfile.mkdtemp(prefix="casu-bench-quick-cache-")
        atexit.register(shutil.rmtree, scratch, True)
        os.environ["CASU_CACHE"] = scratch
    unknown = [n for n in a.names if n not in BENCHES]
    if unknown:
        ap.error(f"unknown bench {', '.join(unknown)}; choose from {', '.join(BENCHES)}")
    out = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "cpu": _cpu_model(),
        },
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "quick": a.quick,
    }
    failed = []
    for name in a.names or list(BENCHES):
        t = time.perf_counter()
        print(f"== {name}{' (quick)' if a.quick else ''}", flush=True)
        try:
            res = BENCHES[name](quick=a.quick)
        except Exception:  # a bench that breaks is reported and fails the run; the others still run
            res = {"error": traceback.format_exc()}
        res["bench_wall_s"] = time.perf_counter() - t
        if "error" not in res and not ratios(res):
            res["error"] = "reported no ratio_* figure against a same-run baseline"
        if "error" in res:
            failed.append(name)
        out[name] = res
        print(json.dumps(res, indent=1), flush=True)
    folder = Path(a.out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ("quick.json" if a.quick else "results.json")
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")
    if failed:
        print(f"benchmarks failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
