"""`make bench`: every benchmark, each reporting ratios against a baseline measured in the same run."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

import bench_ann  # noqa: E402
import bench_build  # noqa: E402
import bench_harness  # noqa: E402
import bench_mixer  # noqa: E402
import bench_ray_build  # noqa: E402
import bench_retrieval  # noqa: E402
import bench_tts  # noqa: E402

BENCHES = {
    "mixer_vs_scaper": bench_mixer.run,
    "retrieval": bench_retrieval.run,
    "tts": bench_tts.run,
    "casu_mini_build": bench_build.run,
    "harness_overhead": bench_harness.run,
    "retrieval_index": bench_ann.run,
    "ray_build": bench_ray_build.run,
}


def main() -> int:
    only = sys.argv[1:] or list(BENCHES)
    out = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    for name in only:
        t = time.perf_counter()
        print(f"== {name}", flush=True)
        out[name] = BENCHES[name]()
        out[name]["bench_wall_s"] = time.perf_counter() - t
        print(json.dumps(out[name], indent=1), flush=True)
    Path("bench_out").mkdir(exist_ok=True)
    Path("bench_out/results.json").write_text(json.dumps(out, indent=1))
    print("wrote bench_out/results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
