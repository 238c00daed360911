"""The build's scale curve: seconds to build N scenes of the shipped CASU-mini v2 library (whole
contrast families, no Whisper, realization 1 without its lock, so every row retrieves) with one
process, the local pool of 2 (its workers forked from the fork server that api.build starts first
thing, executor.warm_pool), Ray with 1 and 2 workers on a local cluster the row starts and stops,
Ray with 2 workers on a running 2-CPU cluster (started and stopped outside the row's time, as a
shared cluster is), plus Ray on a two-node cluster on this machine (`ray.cluster_utils.Cluster`,
one CPU a node) at the smallest N.

Every row is a fresh Python process and starts from the same state: the same warm speech cache,
query-embedding cache and parsed-library memo (all filled by one warm-up build of the largest N
beforehand, as a user's second build finds them), an empty scene cache, no model loaded. With the
query vectors on disk the driver plans the retrieval without loading sentence-transformers (or
importing torch); `rows.*.driver_heavy_imports` shows what it did import. A row's seconds are the
whole process: imports, library, Ray's start, the planning, the workers' start, the scenes, the
parquet files. `identical`: the output folder is byte-identical to the one-process row's at the
same N. `query_cache_cold` adds one measurement of the one-process and pool rows at N = 96 with
the query cache empty (the driver loads the model and encodes every query), for comparison.

    python benchmarks/bench_ray_build.py [--quick]        # the curve
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZES = (24, 96, 384, 1160)  # 1160: every scene of the library
QUICK_SIZES = (8,)
ROWS = ("one_process", "local_pool_2", "ray_1", "ray_2", "ray_2_running")
MULTINODE = "ray_2_nodes"
# Ray 2 on a 2-CPU cluster that is already running (started outside the row's time, as a shared
# cluster is): the row connects (`--ray-address`), starts its actors and builds.
RUNNING = "ray_2_running"
COLD_N, COLD_ROWS = 96, ("one_process", "local_pool_2")  # measured once more with the query cache empty
ROW_TIMEOUT_S = 3600
HEAVY_MODULES = ("torch", "transformers", "sentence_transformers", "faster_whisper", "ctranslate2")


def scenes_of(n: int) -> list:
    """The first n/4 contrast families (4 variants each) of the library, by family id."""
    from casu_dataset.families.compile import DEFAULT_FAMILY_LIBRARY, compile_families

    scenes = compile_families(DEFAULT_FAMILY_LIBRARY)
    keep = set(sorted({s.family_id for s in scenes})[: max(1, n // 4)])
    return [s for s in scenes if s.family_id in keep]


def build_row(
    row: str, n: int, out: Path, cache: Path, cold_queries: bool = False, address: str | None = None
) -> dict:
    """One row, in this (fresh) process: the build's stage seconds and the workers' models.
    `cold_queries`: the query vectors go to an empty cache of the row's own (under `cache`).
    `address`: the running cluster of the RUNNING row (the build connects to it, as
    `--ray-address` does, and leaves it running)."""
    t0 = time.perf_counter()
    spec = {"check_speech": False, "alpha": 0.6}  # the speech cache: $CASU_CACHE's
    kw: dict = {}
    cluster = None
    res: dict = {}
    # First thing, as api.build does: the pool's fork server, or Ray's cluster and actors, start
    # (and import the workers' stack) while this process imports, reads the library and plans.
    if row == "local_pool_2":
        from casu_dataset.dataset.worker_stack import warm_pool

        kw = {"num_proc": 2}
        warm_pool(2)
    elif row.startswith("ray"):
        import ray

        from casu_dataset.dataset.ray_executor import warm_ray

        kw = {"executor": "ray"}
        cpus = None
        if row == RUNNING:
            kw["ray_address"] = address  # warm_ray connects (and the run only disconnects at the end)
        elif row == MULTINODE:
            from ray.cluster_utils import Cluster

            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
            cluster.add_node(num_cpus=1)
            opts = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
            ray.init(address=cluster.address, **opts)
        else:
            # The build starts its local cluster, as `build --executor ray` does (of 1 CPU for ray_1),
            # and stops it while its files are written.
            cpus = int(row.split("_")[1])
        warm_ray(spec, address, num_cpus=cpus)
        res["ray_start_s"] = time.perf_counter() - t0
    from casu_dataset.dataset.build import build_dataset
    from casu_dataset.dataset.config import BuildConfig
    from casu_dataset.mix.realize import make_builder

    res["import_s"] = time.perf_counter() - t0 - res.get("ray_start_s", 0.0)
    t = time.perf_counter()
    scenes = scenes_of(n)
    res["library_s"] = time.perf_counter() - t
    try:
        config = BuildConfig(out=out, cache=cache, progress=False, name="bench", max_skips=None, **kw)
        t = time.perf_counter()
        builder = make_builder(spec)
        if cold_queries:
            builder.retriever.embedder.cache_dir = cache / "cold_queries"
            builder.retriever.embedder.__dict__.pop("queries", None)
        rep = build_dataset(config, scenes, builder, builder_spec=spec)
        res["build_s"] = time.perf_counter() - t
    finally:
        if cluster is not None:
            import ray

            ray.shutdown()
            cluster.shutdown()
    res.update(scenes=len(rep.built), skipped=len(rep.skipped), stages={**rep.seconds})
    # What the driver process imported: with warm caches, none of the model stacks.
    res["driver_heavy_imports"] = sorted(m for m in HEAVY_MODULES if m in sys.modules)
    res["worker_models"] = {str(k): v for k, v in rep.workers.get("worker_models", {}).items()}
    res["worker_start"] = rep.workers.get("worker_start")
    return res


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(folder).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _start_cluster() -> str:
    """A local 2-CPU cluster, started (and waited for) in this process, outside the row's time:
    its address, which the row connects to. ray.shutdown() here stops this cluster only."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    return ray.get_runtime_context().gcs_address


def _run_row(row: str, n: int, d: Path, cold_queries: bool = False) -> dict:
    """A row in a fresh process; seconds: its whole wall time (RUNNING: not the cluster's start
    and stop, which happen around it)."""
    out = d / f"{row}_{n}"
    cmd = [sys.executable, __file__, "--row", row, "--scenes", str(n), "--out", str(out)]
    cmd += ["--cache", str(d / f"cache_{row}_{n}")] + (["--cold-queries"] if cold_queries else [])
    address = _start_cluster() if row == RUNNING else None
    cmd += ["--address", address] if address else []
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=ROW_TIMEOUT_S)
        seconds = time.perf_counter() - t
    finally:
        if address:
            import ray

            ray.shutdown()
    if p.returncode != 0:
        raise RuntimeError(f"row {row} at N={n} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    detail = json.loads(p.stdout.strip().splitlines()[-1])
    digest = _digest(out)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(d / f"cache_{row}_{n}", ignore_errors=True)
    return {"seconds": seconds, "digest": digest, **detail}


def break_even(curve: list[dict], row: str) -> int | None:
    """The smallest N from which `row` is faster than one process at every measured N."""
    by_n = {c["scenes"]: c for c in curve if c["row"] == "one_process"}
    ns = sorted(c["scenes"] for c in curve if c["row"] == row)
    secs = {c["scenes"]: c["seconds"] for c in curve if c["row"] == row}
    winning = [n for n in ns if secs[n] < by_n[n]["seconds"]]
    for i, n in enumerate(ns):
        if all(m in winning for m in ns[i:]):
            return n
    return None


def run(quick: bool = False) -> dict:
    sizes = QUICK_SIZES if quick else SIZES
    d = Path(tempfile.mkdtemp(prefix="casu-bench-ray-"))
    try:
        t = time.perf_counter()
        _run_row("one_process", max(sizes), d)  # warm-up: every turn synthesised, every clip checked
        res: dict = {
            "warmup_s": time.perf_counter() - t,
            "cpus": os.cpu_count(),
            "load_avg_1m_at_start": os.getloadavg()[0],
            "sizes": list(sizes),
        }
        curve, details, digests = [], {}, {}
        for n in sizes:
            rows = [*ROWS, MULTINODE] if n == min(sizes) else list(ROWS)
            ref = None
            for row in rows:
                r = _run_row(row, n, d)
                ref = digests[n] = ref or r["digest"]
                curve.append(
                    {
                        "scenes": n,
                        "row": row,
                        "seconds": round(r["seconds"], 3),
                        "identical": r["digest"] == ref,
                    }
                )
                details[f"{row}_n{n}"] = {k: v for k, v in r.items() if k not in ("digest", "seconds")}
                print(f"ray_build: N={n} {row}: {r['seconds']:.1f} s", file=sys.stderr, flush=True)
        res["curve"] = curve
        res["rows"] = details
        # The same rows with the query cache empty (what a first build pays to plan its retrieval).
        n = COLD_N if COLD_N in sizes else max(sizes)
        cold = {}
        for row in COLD_ROWS:
            r = _run_row(row, n, d, cold_queries=True)
            cold[f"{row}_n{n}"] = {
                "seconds": round(r["seconds"], 3),
                "warm_seconds": next(c["seconds"] for c in curve if c["row"] == row and c["scenes"] == n),
                "identical": r["digest"] == digests[n],
                "stages": r["stages"],
                "driver_heavy_imports": r["driver_heavy_imports"],
            }
            print(
                f"ray_build: N={n} {row}, query cache cold: {r['seconds']:.1f} s", file=sys.stderr, flush=True
            )
        res["query_cache_cold"] = cold
        one = {c["scenes"]: c["seconds"] for c in curve if c["row"] == "one_process"}
        for c in curve:
            if c["row"] != "one_process":
                res[f"ratio_{c['row']}_vs_one_process_n{c['scenes']}"] = one[c["scenes"]] / c["seconds"]
        res["break_even_n"] = {row: break_even(curve, row) for row in ROWS[1:]}
        res["all_identical"] = all(c["identical"] for c in curve)
        print(
            f"ray_build: break-even N (faster than one process from there on): {res['break_even_n']}",
            file=sys.stderr,
            flush=True,
        )
        return res
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--row", choices=[*ROWS, MULTINODE], help="run one row in this process (internal)")
    ap.add_argument("--scenes", type=int)
    ap.add_argument("--out")
    ap.add_argument("--cache")
    ap.add_argument("--address", help="the running cluster of the ray_2_running row (internal)")
    ap.add_argument(
        "--cold-queries", action="store_true", help="the row's query cache starts empty (internal)"
    )
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the models are local: no Hub look-up in a row
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if a.row:
        print(json.dumps(build_row(a.row, a.scenes, Path(a.out), Path(a.cache), a.cold_queries, a.address)))
        return 0
    print(json.dumps(run(quick=a.quick), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
