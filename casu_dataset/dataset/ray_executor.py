"""Fill the per-scene build cache with Ray (`build --executor ray [--ray-address ADDR]`).

Long-lived workers: one actor (BuildWorker) per CPU of the cluster, each making its builder once
and building unit after unit; an actor declares its resources: one CPU, and a GPU (or a fraction)
when the voices include a GPU TTS engine (Kokoro, Zonos) or `--ray-num-gpus` says so. The driver
plans the retrieval (retrieval_plan.py) and sends each unit (a scene, or a contrast family's
four variants) with its planned query embeddings, so no actor loads the sentence-transformers
model; a model an actor does need (a TTS engine on a cold speech cache, Whisper) loads once in
that actor. An actor builds its unit into the scene cache exactly as a local worker does and
returns the unit as build_unit returns it, with its cues measured where the stems are (as a pool
worker does), and, when it is not on the driver's node, the cache entries it used, which the
driver stores (so a cluster needs no shared filesystem, and a killed build resumes from them);
`build_dataset` assembles the folder in a fixed order, unit by unit as they come back (RayRun),
from the units returned, never reading them back: the output is byte-identical to `--num-proc 1`.

Failures: an actor whose process dies is restarted and its unit retried by Ray (`max_retries`);
a unit whose call is lost for good is built by the driver during assembly (nothing cached is
lost, and nothing is built twice once cached). A scene that fails (bad script, unsayable text) is
not a crash: the call returns, and the driver's assembly fails it again and reports it skipped
with the same reason, exactly as a local build does.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from casu_dataset.core import atomic, cache_layout
from casu_dataset.core.errors import Field
from casu_dataset.dataset.retrieval_plan import follow_plan, loaded_models
from casu_dataset.dataset.rows import delivered, unit_cues
from casu_dataset.dataset.scene_cache import (
    DONE,
    build_unit,
    entry_complete,
    put_entry,
    stems_by_reference,
    stems_loaded,
)

log = logging.getLogger(__name__)

GPU_ENGINES = ("kokoro", "zonos")

_BUILDERS: dict[str, object] = {}  # per worker process: spec -> builder (models load once per process)
MAX_RETRIES = 3  # restarts of an actor whose process died, and retries of its call
# What warm_ray started, until a RayRun adopts it (or release_warm lets it go): the actors, the GPU
# share each asks for, and whether it started the cluster (which its adopter then stops).
_WARM: dict = {}
IN_FLIGHT = 2  # calls queued per actor: the next unit is there when one finishes
_LOCAL: list = []  # the head Node of the local cluster _start_local started, until _stop_local


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


def build_task(
    unit: list, seed: int, spec: dict, cache_dir: str, plan: dict | None = None, ship: bool = True
) -> dict:
    """Build one unit on a worker: {error, built, cues, entries, pid, models}. `built`: the unit as
    build_unit returns it (None if it failed: the driver builds it again and reports the same
    reason); `cues`: cue_checks.measure_rows of its rows, measured here where the stems are ({} if
    that failed: the driver measures); `entries` (when `ship`: the driver's cache is not this
    node's): the complete cache entries it used, {key: {file: bytes}}, a file that is one of
    `built`'s stems given as (scene id, stem) instead, so each unit's audio travels once."""
    cache = _local_cache(cache_dir)
    touched: list[str] = []
    where: dict = {}
    builder = _builder(spec)
    built, error = None, None
    try:
        follow_plan(builder, plan)
        built = build_unit(unit, seed, builder, cache, touched, where)
    except Exception as err:  # reported again, with the same reason, when the driver assembles
        error = f"{type(err).__name__}: {err}"
    cues = unit_cues(unit, built)
    shipped = ship or cache != Path(cache_dir)
    entries = _entries(cache, touched, built) if shipped else {}
    return {
        "error": error,
        # In the driver's own cache, the stems go as their files there (the driver reads them back).
        "built": built if shipped else stems_by_reference(built, where),
        "cues": cues,
        "entries": entries,
        "pid": os.getpid(),
        "models": loaded_models(builder),
    }


def _entries(cache: Path, touched: list[str], built: dict | None) -> dict:
    """The complete entries among `touched`, {key: {file: bytes | (scene id, stem)}}."""
    stems = {b: (sid, k) for sid, (e, _) in (built or {}).items() for k, b in e["flac"].items()}
    out = {}
    for key in dict.fromkeys(touched):
        d = cache_layout.scenes_dir(cache) / key
        if entry_complete(d):
            files = {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}
            out[key] = {f: stems.get(b, b) for f, b in files.items()}
    return out


def entry_files(files: dict, built: dict | None) -> dict[str, bytes]:
    """A shipped entry's files, the stems it refers to taken from the unit `built`."""
    out = {}
    for f, v in files.items():
        if not isinstance(v, bytes):  # a reference: `built` came with it
            sid, stem = v
            v = (built or {})[sid][0]["flac"][stem]
        out[f] = v
    return out


class BuildWorker:
    """A long-lived Ray actor: makes its builder once (imports and any model it loads stay warm),
    then builds the units it is sent. Made without a spec (warm_ray), it only imports the workers'
    stack, and each call brings its build's (spec, seed, cache folder, driver node): a restarted
    actor, which runs __init__ again with the same arguments, has them from its next call."""

    def __init__(
        self, spec: dict | None = None, seed: int = 0, cache_dir: str = "", driver_node: str | None = None
    ):
        self.job: tuple | None = None
        if spec is None:
            from casu_dataset.dataset.worker_stack import preload

            preload()
        else:
            self._setup((spec, seed, cache_dir, driver_node))

    def _setup(self, job: tuple) -> None:
        import ray

        spec, self.seed, self.cache_dir, driver_node = job
        self.spec, self.job = spec, job
        # On the driver's node the entries it builds are in the driver's cache already (when it
        # can write there: build_task checks): none is shipped back.
        self.ship = driver_node is None or ray.get_runtime_context().get_node_id() != driver_node
        _builder(spec)

    def build(self, unit: list, plan: dict | None = None, job: tuple | None = None) -> dict:
        if job is not None and job != self.job:
            self._setup(job)
        return build_task(unit, self.seed, self.spec, self.cache_dir, plan, self.ship)


def _actor_class(gpus: float, max_retries: int):
    ray = require_ray()
    return ray.remote(BuildWorker).options(
        num_cpus=1, num_gpus=gpus, max_restarts=max_retries, max_task_retries=max_retries
    )


def _actor_count(ray, gpus: float) -> int:
    """One actor per CPU of the cluster; with a GPU share each, no more than the shares."""
    have = ray.cluster_resources()
    n = max(1, int(have.get("CPU", 1)))
    if gpus:  # an actor holds its GPU share for the whole build
        n = min(n, max(1, int(have.get("GPU", 0) / gpus + 1e-9)))
    return n


def _connect(ray, address: str | None, num_cpus: int | None = None) -> bool:
    """Connect to the cluster at `address` (or start a local one, of `num_cpus` CPUs: default all)
    unless this process already is; True when this started or joined it (and so stops or leaves it
    at the end: _disconnect)."""
    if ray.is_initialized():
        return False
    opts = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    if address is None and not os.environ.get("RAY_ADDRESS"):  # ray.init honours RAY_ADDRESS
        address = _start_local(num_cpus)
        if address is None:  # no lean start with this Ray: ray.init's own local cluster
            ray.init(num_cpus=num_cpus, **opts)
            return True
    try:
        ray.init(address=address, **opts)
    except BaseException:
        _stop_local()  # a cluster started for this connection goes with it
        raise
    return True


def _start_local(num_cpus: int | None) -> str | None:
    """Start a local cluster for this build, as ray.init would but without the autoscaler's monitor
    and the log monitor (a local cluster has nothing to scale, and the build does not stream its
    workers' logs): two Python processes fewer, ~1.2 CPU-seconds less of a start that costs ~5, and
    a stop that does not wait on them (~0.2 s instead of ~1.3). Its address, or None where this
    Ray's private Node API differs from the pinned one's (the caller then uses ray.init)."""
    try:
        from ray._private.node import Node
        from ray._private.parameter import RayParams

        # include_log_monitor is a flag that Ray annotates as a str (ray.cluster_utils passes False).
        params = RayParams(
            num_cpus=num_cpus,
            include_dashboard=False,
            no_monitor=True,
            include_log_monitor=False,  # type: ignore[arg-type]
        )
        # The reaper stops the cluster if this process dies without _stop_local.
        node = Node(params, head=True, shutdown_at_exit=False, spawn_reaper=True)
    except (ImportError, AttributeError, TypeError) as err:
        log.debug("ray: no lean local cluster (%s: %s); ray.init starts one", type(err).__name__, err)
        return None
    _LOCAL.append(node)
    return node.address


def _stop_local() -> None:
    """Stop the local clusters _start_local started (after ray.shutdown: this process disconnected)."""
    while _LOCAL:
        node = _LOCAL.pop()
        try:
            node.destroy_external_storage()  # objects spilled to disk, as ray.shutdown does
        finally:
            node.kill_all_processes(check_alive=False, allow_graceful=True, wait=True)


atexit.register(_stop_local)  # a build that never reached its stop (an exception, an exit)


def _disconnect(ray) -> None:
    """Leave the cluster this process joined, and stop it if this process started it."""
    ray.shutdown()
    _stop_local()


def warm_ray(
    spec: dict, address: str | None = None, num_gpus: float | None = None, num_cpus: int | None = None
) -> None:
    """Connect to the cluster at `address` (or start a local one) now and start its actors, which
    import the workers' stack while the driver reads the library and plans; the build's RayRun
    adopts them and the cluster (stopping one started here at its end). api.build calls it first
    thing; release_warm lets go of what no run adopted (a build that failed before its run).
    `num_cpus`: the CPUs of a local cluster started here (default: all of this machine's)."""
    ray = require_ray()
    if _WARM:
        return
    _WARM["started"] = _connect(ray, address, num_cpus)
    gpus = default_num_gpus(spec) if num_gpus is None else float(num_gpus)
    if gpus and not ray.cluster_resources().get("GPU"):
        return  # RayRun says so, naming the flags
    actor = _actor_class(gpus, MAX_RETRIES)
    _WARM.update(gpus=gpus, actors=[actor.remote() for _ in range(_actor_count(ray, gpus))])


def _take_warm() -> dict:
    warm = dict(_WARM)
    _WARM.clear()
    return warm


def release_warm() -> None:
    """Kill the actors warm_ray started and stop the cluster it started, unless a run took them."""
    warm = _take_warm()
    if not warm:
        return
    import ray

    for a in warm.get("actors", []):
        ray.kill(a)
    if warm.get("started"):
        _disconnect(ray)


def store_entry(cache_dir: Path, key: str, files: dict[str, bytes]) -> bool:
    """Write a shipped cache entry unless a complete one is present; atomic like build_scene's own
    writes (`done`, which lists the other files' sizes, last; an incomplete entry is replaced)."""
    d = cache_layout.scenes_dir(cache_dir) / key
    if entry_complete(d):
        return False
    tmp = atomic.tmp_path(d)
    tmp.mkdir(parents=True, exist_ok=True)
    for f, b in files.items():
        if f != DONE:
            (tmp / f).write_bytes(b)
    (tmp / DONE).write_bytes(files[DONE])
    return put_entry(tmp, d)


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
    cluster, never more than units), the entries shipped back stored in `cache_dir` as they come.
    `next()` returns the next unit (in the given order) as PoolRun does: (built, cues), every
    scene counted as a cache hit, or None when its actor failed it or it was lost (the driver then
    builds it): the driver assembles unit i while the actors build the next ones.
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
        max_retries: int = MAX_RETRIES,
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
        warm = _take_warm()  # warm_ray's cluster and actors, when api.build started them
        self.started = _connect(ray, address) or bool(warm.get("started"))
        self.job: tuple | None = None
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
            n = max(1, min(num_workers or _actor_count(ray, gpus), len(units)))
            node = ray.get_runtime_context().get_node_id()
            ready = warm.get("actors", [])
            if ready and warm.get("gpus") == gpus and max_retries == MAX_RETRIES and len(ready) >= n:
                # Started (and importing) since api.build began; each call brings the build's job.
                self.workers = ready[:n] if units else []
                self.job = (spec, seed, str(cache_dir), node)
                stats["warm_actors"] = len(self.workers)
                ready = ready[len(self.workers) :]
            else:
                # The spec goes by value: an actor restarted after its process died needs its
                # arguments again, and an object-store copy may be gone by then. The actors start
                # (imports, builder) while the driver plans.
                actor = _actor_class(gpus, max_retries)
                self.workers = (
                    [actor.remote(spec, seed, str(cache_dir), node) for _ in range(n)] if units else []
                )
            for a in ready:  # warm actors this run does not use
                ray.kill(a)
        except BaseException:
            self.close()
            raise
        self.queue: list | None = None  # (index, unit, plan) still to send, last first
        self.pending: dict = {}  # call -> (worker, index, unit)
        self.dead: set = set()
        self.held: dict[int, tuple | None] = {}  # units back (or lost), not yet handed to the driver
        # Units out at once, sent or held: every actor busy with its next call queued, and as many
        # units again back ahead of the one the driver waits for; the built units (their audio)
        # waiting in the driver stay few however far the actors could run ahead.
        self.window = (IN_FLIGHT + 1) * len(self.workers)
        self.next_index = 0
        self.bar = tqdm(total=len(units), desc="scenes (ray)", disable=not progress)

    def __iter__(self):
        return self

    def __next__(self) -> tuple[dict, dict] | None:
        """The next unit as build_unit returns it, every scene counted as a cache hit (as when the
        driver read it back from the cache), with its cues measured in the actor (scene id ->
        cue_checks.measure_rows' value); None: the actor failed it, or it was lost."""
        self.start()
        i = self.next_index
        if i >= len(self.units):
            raise StopIteration
        while i not in self.held:
            if not self.pending:
                self._top_up()
            if self.pending:
                self._collect_one()
            else:  # every actor died for good: the units never sent are built by the driver too
                for j, unit, _ in reversed(self.queue or []):
                    self.stats["lost"].append((unit[0].script.id, "no live worker"))
                    self.held[j] = None
                self.queue = []
        self.next_index += 1
        got = self.held.pop(i)
        self._top_up()
        return got

    def start(self) -> None:
        """Plan (`plans()`) and send every actor its first units, once."""
        if self.queue is not None:
            return
        plans = self.plans() if callable(self.plans) else self.plans
        jobs = list(zip(range(len(self.units)), self.units, plans or [None] * len(self.units)))
        self.queue = list(reversed(jobs))
        self._top_up()

    def _top_up(self) -> None:
        """Send units, in order, each to the live actor with the fewest calls queued (round by
        round: a unit for every actor before a second one), while fewer than `window` are out."""
        live = [w for w in self.workers if w not in self.dead]
        while self.queue and live and len(self.pending) + len(self.held) < self.window:
            calls = {w: 0 for w in live}
            for w, _, _ in self.pending.values():
                if w in calls:
                    calls[w] += 1
            w = min(live, key=calls.__getitem__)
            if calls[w] >= IN_FLIGHT:
                return
            i, unit, plan = self.queue.pop()
            self.pending[w.build.remote(unit, plan, self.job)] = (w, i, unit)

    def _collect_one(self) -> None:
        """Wait for one call; store the entries it shipped and hold its unit (or count it lost)."""
        ray, stats = self.ray, self.stats
        done, _ = ray.wait(list(self.pending), num_returns=1)
        w, i, unit = self.pending.pop(done[0])
        self.bar.update()
        try:
            res = ray.get(done[0])
        except Exception as err:  # retries exhausted: the driver builds this unit itself
            stats["lost"].append((unit[0].script.id, f"{type(err).__name__}"))
            self.dead.add(w)  # its restarts are used up: the others take the queue
            self.held[i] = None
            self._top_up()
            return
        self.models[res["pid"]] = res["models"]
        stats["failed"] += res["error"] is not None
        built = res["built"]
        # Stored for a later build (or a resume after a kill); this one uses `built` as it came.
        stats["stored"] += sum(
            store_entry(self.cache_dir, k, entry_files(f, built)) for k, f in res["entries"].items()
        )
        self.held[i] = delivered(stems_loaded(built), res["cues"])
        self._top_up()

    def close(self) -> None:
        """Stop (a cluster this run started is shut down) and name the units that were lost; once."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.started:
            self.started = False
            _disconnect(self.ray)
        for sid, why in self.stats["lost"][self.warned :]:
            log.warning(
                "ray: the build of %s was lost (%s) after %s retries; built locally instead",
                sid,
                why,
                self.max_retries,
            )
        self.warned = len(self.stats["lost"])
