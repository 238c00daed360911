"""Fill the per-scene build cache with Ray (`build --executor ray [--ray-address ADDR]`).

Long-lived workers: one actor (BuildWorker) per CPU of the cluster, each making its builder once
and building unit after unit; an actor declares its resources: one CPU, and a GPU (or a fraction)
when the voices include a GPU TTS engine (Kokoro, Zonos) or `--ray-num-gpus` says so. The driver
plans the retrieval (retrieval_plan.py) and sends each unit (a scene, or a contrast family's
four variants) with its planned query embeddings, so no actor loads the sentence-transformers
model; a model an actor does need (a TTS engine on a cold speech cache, Whisper) loads once in
that actor. An actor builds its unit into the scene cache exactly as a local worker does and
returns the cache entries it used; the driver stores the ones its own cache lacks (so a cluster
needs no shared filesystem), then `build_dataset` assembles the folder from the cache in a fixed
order: the output is byte-identical to `--num-proc 1`.

Failures: an actor whose process dies is restarted and its unit retried by Ray (`max_retries`);
a unit whose call is lost for good is built by the driver during assembly (nothing cached is
lost, and nothing is built twice once cached). A scene that fails (bad script, unsayable text) is
not a crash: the call returns, and the driver's assembly fails it again and reports it skipped
with the same reason, exactly as a local build does.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from casu_dataset.core import atomic, cache_layout
from casu_dataset.core.errors import Field
from casu_dataset.dataset.retrieval_plan import follow_plan, loaded_models
from casu_dataset.dataset.scene_cache import build_unit

log = logging.getLogger(__name__)

GPU_ENGINES = ("kokoro", "zonos")
ENTRY_FILES = ("annotation.json", "mixture.flac", "background.flac", "speech.flac", "events.flac", "done")

_BUILDERS: dict[str, object] = {}  # per worker process: spec -> builder (models load once per process)
IN_FLIGHT = 2  # calls queued per actor: the next unit is there when one finishes


def require_ray():
    try:
        import ray
    except ImportError as err:
        raise ImportError(f"the ray executor needs Ray (pip install -e '.[ray]'): {err}") from None
    return ray


def default_num_gpus(spec: dict) -> float:
    """1 when a voice the builder may use runs on a GPU TTS engine, else 0 (mixing is CPU work)."""
    from casu_dataset.speech.voices import VoiceRegistry

    return 1.0 if any(v.engine in GPU_ENGINES for v in VoiceRegistry().available().voices) else 0.0


def _builder(spec: dict):
    key = json.dumps(spec, sort_keys=True, default=str)
    if key not in _BUILDERS:
        from casu_dataset.mix.realize import make_builder

        _BUILDERS.clear()
        _BUILDERS[key] = make_builder(spec)
    return _BUILDERS[key]


def _local_cache(cache_dir: str) -> Path:
    """The driver's cache folder when this node can write it (same machine, shared filesystem),
    else a node-local one: the entries travel back to the driver either way."""
    d = Path(cache_dir)
    try:
        cache_layout.scenes_dir(d).mkdir(parents=True, exist_ok=True)
        if os.access(cache_layout.scenes_dir(d), os.W_OK):
            return d
    except OSError:
        pass
    return cache_layout.build_dir(Path(tempfile.gettempdir()) / "casu-ray-cache")


def build_task(unit: list, seed: int, spec: dict, cache_dir: str, plan: dict | None = None) -> dict:
    """Build one unit on a worker: {error, entries: {key: {file: bytes}}, pid, models}."""
    cache = _local_cache(cache_dir)
    touched: list[str] = []
    builder = _builder(spec)
    try:
        follow_plan(builder, plan)
        build_unit(unit, seed, builder, cache, touched)
        error = None
    except Exception as err:  # reported again, with the same reason, when the driver assembles
        error = f"{type(err).__name__}: {err}"
    entries = {}
    for key in dict.fromkeys(touched):
        d = cache_layout.scenes_dir(cache) / key
        if (d / "done").is_file():
            entries[key] = {f: (d / f).read_bytes() for f in ENTRY_FILES}
    return {"error": error, "entries": entries, "pid": os.getpid(), "models": loaded_models(builder)}


class BuildWorker:
    """A long-lived Ray actor: makes its builder once (imports and any model it loads stay warm),
    then builds the units it is sent."""

    def __init__(self, spec: dict, seed: int, cache_dir: str):
        self.spec, self.seed, self.cache_dir = spec, seed, cache_dir
        _builder(spec)

    def build(self, unit: list, plan: dict | None = None) -> dict:
        return build_task(unit, self.seed, self.spec, self.cache_dir, plan)


def store_entry(cache_dir: Path, key: str, files: dict[str, bytes]) -> bool:
    """Write a shipped cache entry unless present; atomic like build_scene's own writes."""
    d = cache_layout.scenes_dir(cache_dir) / key
    if (d / "done").is_file():
        return False
    tmp = atomic.tmp_path(d)
    tmp.mkdir(parents=True, exist_ok=True)
    for f in ENTRY_FILES[:-1]:
        (tmp / f).write_bytes(files[f])
    (tmp / "done").write_bytes(files["done"])  # last: an entry is complete when `done` exists
    if d.exists():  # a half-written entry of a killed run: replace it
        shutil.rmtree(d, ignore_errors=True)
    tmp.replace(d)
    return True


def prebuild_ray(
    units: list,
    seed: int,
    spec: dict,
    cache_dir: Path,
    address: str | None = None,
    num_gpus: float | None = None,
    max_retries: int = 3,
    progress: bool = True,
    stats: dict | None = None,
    plans: Callable[[], list | None] | list | None = None,
    num_workers: int | None = None,
) -> None:
    """Build every unit on a pool of BuildWorker actors (`num_workers`, default one per CPU of the
    cluster, never more than units) and store what they built in `cache_dir`. Connects to
    `address` (a running cluster: `ray start --head`), or starts a local one when none is given
    and this process is not already connected; a cluster this call started is shut down at the end."""
    ray = require_ray()
    from tqdm import tqdm

    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    gpus = default_num_gpus(spec) if num_gpus is None else float(num_gpus)
    if gpus and not ray.cluster_resources().get("GPU"):
        from casu_dataset.dataset.config import ConfigError

        raise ConfigError(
            Field("executor", "ray"),
            f": tasks ask for {gpus} GPU but the cluster has none "
            "(start workers with `ray start --num-gpus N`, or set ",
            Field("ray_num_gpus"),
            " 0)",
        )
    spec = {**spec, "threads": 1}
    stats = stats if stats is not None else {}
    stats.update(stored=0, failed=0, lost=[])
    models = stats.setdefault("worker_models", {})
    have = ray.cluster_resources()
    n = num_workers or max(1, int(have.get("CPU", 1)))
    if gpus:  # an actor holds its GPU share for the whole build: no more actors than shares
        n = min(n, max(1, int(have.get("GPU", 0) / gpus + 1e-9)))
    n = max(1, min(n, len(units)))
    actor = ray.remote(BuildWorker).options(
        num_cpus=1, num_gpus=gpus, max_restarts=max_retries, max_task_retries=max_retries
    )
    try:
        # The spec goes by value: an actor restarted after its process died needs its arguments
        # again, and an object-store copy may be gone by then.
        workers = [actor.remote(spec, seed, str(cache_dir)) for _ in range(n)] if units else []
        # The actors start (imports, builder) while the driver plans.
        plans = plans() if callable(plans) else plans
        jobs = list(zip(units, plans or [None] * len(units)))
        queue = list(reversed(jobs))
        pending: dict = {}  # call -> (worker, unit)

        def submit(w) -> None:
            unit, plan = queue.pop()
            pending[w.build.remote(unit, plan)] = (w, unit)

        for _ in range(IN_FLIGHT):  # round by round: a unit for every actor before a second one
            for w in workers:
                if queue:
                    submit(w)
        dead: set = set()
        with tqdm(total=len(jobs), desc="scenes (ray)", disable=not progress) as bar:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                w, unit = pending.pop(done[0])
                bar.update()
                try:
                    res = ray.get(done[0])
                except Exception as err:  # retries exhausted: the driver builds this unit itself
                    stats["lost"].append((unit[0].script.id, f"{type(err).__name__}"))
                    dead.add(w)  # its restarts are used up: the others take the queue
                    live = [x for x in workers if x not in dead]
                    while queue and live and len(pending) < IN_FLIGHT * len(live):
                        submit(live[len(queue) % len(live)])
                    continue
                if queue:
                    submit(w)  # the freed actor's next unit, queued behind its other call
                models[res["pid"]] = res["models"]
                stats["failed"] += res["error"] is not None
                stats["stored"] += sum(store_entry(cache_dir, k, f) for k, f in res["entries"].items())
        # Every actor died for good: the units never sent are built by the driver too.
        stats["lost"].extend((unit[0].script.id, "no live worker") for unit, _ in queue)
    finally:
        if started:
            ray.shutdown()
    for sid, why in stats["lost"]:
        log.warning(
            "ray: the build of %s was lost (%s) after %s retries; built locally instead",
            sid,
            why,
            max_retries,
        )
