"""Fill the per-scene build cache with Ray (`build --executor ray [--ray-address ADDR]`).

Long-lived workers: one actor (BuildWorker) per CPU of the cluster, each making its builder once
and building unit after unit; an actor declares its resources: one CPU, and a GPU (or a fraction)
when the voices include a GPU TTS engine (Kokoro, Zonos) or `--ray-num-gpus` says so. The driver
plans the retrieval (retrieval_plan.py) and sends each unit (a scene, or a contrast family's
four variants) with its planned query embeddings, so no actor loads the sentence-transformers
model; a model an actor does need (a TTS engine on a cold speech cache, Whisper) loads once in
that actor. An actor builds its unit into the scene cache exactly as a local worker does and
returns the cache entries it used; the driver stores the ones its own cache lacks (so a cluster
needs no shared filesystem), and `build_dataset` assembles the folder from the cache in a fixed
order, unit by unit as they come back (RayRun): the output is byte-identical to `--num-proc 1`.

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
from typing import Any

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


def prebuild_ray(units: list, seed: int, spec: dict, cache_dir: Path, **kw) -> None:
    """Build every unit on a pool of BuildWorker actors and store what they built in `cache_dir`
    (RayRun, run to its end)."""
    run = RayRun(units, seed, spec, cache_dir, **kw)
    try:
        for _ in run:
            pass
    finally:
        run.close()


class RayRun:
    """Units built on a pool of BuildWorker actors (`num_workers`, default one per CPU of the
    cluster, never more than units), their entries stored in `cache_dir` as they come back.
    `next()` returns once the next unit (in the given order) is in the cache, or was lost (the
    driver then builds it): the driver assembles unit i while the actors build the next ones.
    Connects to `address` (a running cluster: `ray start --head`), or starts a local one when none
    is given and this process is not already connected; a cluster this run started is shut down
    by `close()`."""

    def __init__(
        self,
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
    ):
        ray = self.ray = require_ray()
        from tqdm import tqdm

        self.units, self.cache_dir, self.max_retries, self.plans = units, cache_dir, max_retries, plans
        self.stats = stats = stats if stats is not None else {}
        stats.update(stored=0, failed=0, lost=[])
        self.warned = 0
        self.bar: Any = None
        self.started = not ray.is_initialized()
        if self.started:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
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
            self.models = stats.setdefault("worker_models", {})
            have = ray.cluster_resources()
            n = num_workers or max(1, int(have.get("CPU", 1)))
            if gpus:  # an actor holds its GPU share for the whole build: no more actors than shares
                n = min(n, max(1, int(have.get("GPU", 0) / gpus + 1e-9)))
            n = max(1, min(n, len(units)))
            actor = ray.remote(BuildWorker).options(
                num_cpus=1, num_gpus=gpus, max_restarts=max_retries, max_task_retries=max_retries
            )
            # The spec goes by value: an actor restarted after its process died needs its arguments
            # again, and an object-store copy may be gone by then. The actors start (imports,
            # builder) while the driver plans.
            self.workers = [actor.remote(spec, seed, str(cache_dir)) for _ in range(n)] if units else []
        except BaseException:
            self.close()
            raise
        self.queue: list | None = None  # (index, unit, plan) still to send, last first
        self.pending: dict = {}  # call -> (worker, index, unit)
        self.dead: set = set()
        self.finished: set[int] = set()  # units stored in the cache or lost
        self.next_index = 0
        self.bar = tqdm(total=len(units), desc="scenes (ray)", disable=not progress)

    def __iter__(self):
        return self

    def __next__(self) -> None:
        self.start()
        i = self.next_index
        if i >= len(self.units):
            raise StopIteration
        while i not in self.finished:
            if self.pending:
                self._collect_one()
            else:  # every actor died for good: the units never sent are built by the driver too
                for j, unit, _ in reversed(self.queue or []):
                    self.stats["lost"].append((unit[0].script.id, "no live worker"))
                    self.finished.add(j)
                self.queue = []
        self.next_index += 1
        return None  # the unit is in the cache (or lost): the driver reads (or builds) it there

    def start(self) -> None:
        """Plan (`plans()`) and send every actor its first units, once."""
        if self.queue is not None:
            return
        plans = self.plans() if callable(self.plans) else self.plans
        jobs = list(zip(range(len(self.units)), self.units, plans or [None] * len(self.units)))
        self.queue = list(reversed(jobs))
        for _ in range(IN_FLIGHT):  # round by round: a unit for every actor before a second one
            for w in self.workers:
                if self.queue:
                    self._submit(w)

    def _submit(self, w) -> None:
        assert self.queue is not None
        i, unit, plan = self.queue.pop()
        self.pending[w.build.remote(unit, plan)] = (w, i, unit)

    def _collect_one(self) -> None:
        """Wait for one call; store its entries (or count its unit lost)."""
        ray, stats = self.ray, self.stats
        done, _ = ray.wait(list(self.pending), num_returns=1)
        w, i, unit = self.pending.pop(done[0])
        self.bar.update()
        self.finished.add(i)
        try:
            res = ray.get(done[0])
        except Exception as err:  # retries exhausted: the driver builds this unit itself
            stats["lost"].append((unit[0].script.id, f"{type(err).__name__}"))
            self.dead.add(w)  # its restarts are used up: the others take the queue
            live = [x for x in self.workers if x not in self.dead]
            while self.queue and live and len(self.pending) < IN_FLIGHT * len(live):
                self._submit(live[len(self.queue) % len(live)])
            return
        if self.queue:
            self._submit(w)  # the freed actor's next unit, queued behind its other call
        self.models[res["pid"]] = res["models"]
        stats["failed"] += res["error"] is not None
        stats["stored"] += sum(store_entry(self.cache_dir, k, f) for k, f in res["entries"].items())

    def close(self) -> None:
        """Stop (a cluster this run started is shut down) and name the units that were lost; once."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.started:
            self.ray.shutdown()
            self.started = False
        for sid, why in self.stats["lost"][self.warned :]:
            log.warning(
                "ray: the build of %s was lost (%s) after %s retries; built locally instead",
                sid,
                why,
                self.max_retries,
            )
        self.warned = len(self.stats["lost"])
