"""Build throughput (scenes/s) of the same scene set: local in-process (--num-proc 1), the local
spawn pool (--num-proc 2), and Ray tasks on a local cluster of 1 and of 2 CPUs. Every run starts
from an empty scene cache and the same warm speech cache (TTS turns synthesised once beforehand),
so the rows compare scene building (retrieval + mixing + encoding), model loading in the workers
included; the Ray cluster's start-up is reported apart. The outputs must be byte-identical.

Scenes: the first 6 contrast families (24 scenes) of the shipped CASU-mini v2 library, no Whisper.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path


def _bytes(folder: Path) -> dict:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def run(quick: bool = False) -> dict:
    families = 1 if quick else 6
    import ray

    from casu_dataset.dataset.build import build_dataset
    from casu_dataset.dataset.config import BuildConfig
    from casu_dataset.families.compile import DEFAULT_V2_DIR, compile_families
    from casu_dataset.mix.realize import make_builder

    d = Path(tempfile.mkdtemp(prefix="casu-bench-ray-"))
    try:
        scenes = compile_families(DEFAULT_V2_DIR)
        keep = sorted({s.family_id for s in scenes})[:families]
        scenes = [s for s in scenes if s.family_id in keep]
        spec = {"cache": str(d / "casu"), "check_speech": False, "alpha": 0.6}
        os.environ["CASU_CACHE"] = str(d / "casu")

        def build(name, **kw):
            t = time.perf_counter()
            config = BuildConfig(
                out=d / name, cache=d / f"cache_{name}", progress=False, name="bench", max_skips=None, **kw
            )
            rep = build_dataset(config, scenes, make_builder(spec), builder_spec=spec)
            return time.perf_counter() - t, rep

        build("warmup")  # synthesises every turn once: later runs share the speech cache
        res = {"scenes": len(scenes), "load_avg_1m_at_start": os.getloadavg()[0], "cpus": os.cpu_count()}
        rows = {}
        for name, kw in [("local_num_proc_1", {}), ("local_pool_2", {"num_proc": 2})]:
            rows[name] = build(name, **kw)[0]
        for n in (1, 2):
            t = time.perf_counter()
            ray.init(num_cpus=n, include_dashboard=False, log_to_driver=False, configure_logging=False)
            res[f"ray_{n}_cluster_start_s"] = time.perf_counter() - t
            try:
                rows[f"ray_{n}_workers"] = build(f"ray_{n}_workers", executor="ray")[0]
            finally:
                ray.shutdown()
        ref = _bytes(d / "local_num_proc_1")
        for name, s in rows.items():
            res[f"{name}_s"] = s
            res[f"{name}_scenes_per_s"] = len(scenes) / s
            res[f"{name}_identical"] = _bytes(d / name) == ref
            if name != "local_num_proc_1":  # the baseline: one process, no pool, no Ray
                res[f"ratio_{name}_vs_num_proc_1"] = rows["local_num_proc_1"] / s
        return res
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    import sys

    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))
