"""Who builds the scenes: this process, `num_proc` spawned workers, or Ray (ray_executor.py);
what each builds is a unit (scene_cache.build_unit), with the clips the driver picked for it
(retrieval_plan.py), so workers load no retrieval model. Workers are long-lived: each makes its
builder once and builds unit after unit. Every executor only fills the scene cache; build.py then
assembles the folder from the cache in a fixed order, so every executor writes the same bytes."""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from casu_dataset.core.env_vars import environment
from casu_dataset.core.errors import Field
from casu_dataset.core.signals import ignoring_sigint
from casu_dataset.dataset.config import ConfigError
from casu_dataset.dataset.retrieval_plan import follow_plan, loaded_models
from casu_dataset.dataset.rows import delivered, unit_cues
from casu_dataset.dataset.scene_cache import build_unit, stems_by_reference, stems_loaded
from casu_dataset.dataset.worker_stack import THREAD_VARS, forkserver_serves, worker_threads
from casu_dataset.families.compile import FamilyScene

if TYPE_CHECKING:
    from casu_dataset.dataset.ray_executor import RayRun

log = logging.getLogger(__name__)

EXECUTORS = ("local", "ray")


def unit_key(scene) -> str:
    """A scene's unit of work: its contrast family's id, or its own id."""
    return scene.family_id if isinstance(scene, FamilyScene) else scene.script.id


def build_units(scenes: list) -> dict[str, list]:
    """Units of work by key: a contrast family's variants together (key: family id), any other
    scene alone (key: scene id)."""
    units: dict[str, list] = {}
    for s in sorted(scenes, key=lambda s: s.script.id):
        units.setdefault(unit_key(s), []).append(s)
    return units


def prebuild(
    units: list,
    seed: int,
    cache_dir: Path,
    executor: str = "local",
    num_proc: int = 1,
    builder_spec: dict | None = None,
    progress: bool = True,
    ray_options: dict | None = None,
    timings: dict | None = None,
    plans: Callable[[], list | None] | list | None = None,
    stats: dict | None = None,
) -> PoolRun | RayRun | None:
    """Fill the scene cache ahead of assembly ("ray", or "local" with num_proc > 1); a no-op for
    a single local process (build.py builds each unit as it assembles).

    `plans`: per unit, the driver's retrieval plan (retrieval_plan.plan_retrieval) or None; or a
    function returning them, called once the workers are starting (they import meanwhile).
    `stats["worker_models"]` collects, per worker process, the models it loaded (none, when the
    driver planned the retrieval and the speech cache is warm).

    Local workers (PoolRun) and Ray's actors (ray_executor.RayRun) both return an iterator that
    yields once per unit, in the order given: (the unit as build_unit returns it, its cues measured
    where it was built), or None when its worker failed it (the caller builds it again and reports
    why). The caller assembles unit i while the workers build the next ones (close it to stop them)."""
    if executor not in EXECUTORS:
        raise ConfigError(Field("executor"), f" {executor!r}: expected local or ray")
    if executor == "ray":
        if builder_spec is None:
            raise ConfigError(
                Field("executor", "ray"), " needs a builder spec (workers construct their own models)"
            )
        from casu_dataset.dataset.ray_executor import RayRun

        return RayRun(
            units,
            seed,
            builder_spec,
            cache_dir,
            progress=progress,
            plans=plans,
            stats=stats,
            **(ray_options or {}),
        )
    # Never more worker processes than units of work: each one imports the stack.
    if num_proc > len(units) > 0:
        log.info(
            "%d worker processes asked for %d units of work: starting %d", num_proc, len(units), len(units)
        )
        num_proc = len(units)
    if num_proc > 1:
        if builder_spec is None:
            raise ConfigError(
                Field("num_proc"), " > 1 needs a builder spec (workers construct their own models)"
            )
        return PoolRun(units, seed, builder_spec, cache_dir, num_proc, timings, plans, stats)
    return None


_POOL_STATE: dict = {}
# Libraries whose thread pools deadlock (or whose state breaks) in a forked child: once one is
# imported here, workers are spawned (each imports the stack afresh, ~1 s of CPU apiece).
FORK_UNSAFE = ("torch", "ctranslate2", "onnxruntime", "tensorflow", "jax")


def start_method(num_proc: int = 0) -> str:
    """How pool workers start: from the fork server worker_stack.warm_pool started, when it runs with this
    process's environment and the thread split of `num_proc` workers (its workers inherit both);
    else forked on Linux while this process has imported none of FORK_UNSAFE (a build whose
    retrieval was planned from the query cache: the workers start at once, with the stack already
    imported), else spawned."""
    import multiprocessing as mp
    import sys

    if forkserver_serves(num_proc):
        return "forkserver"
    if sys.platform != "linux" or "fork" not in mp.get_all_start_methods():
        return "spawn"
    return "spawn" if any(m in sys.modules for m in FORK_UNSAFE) else "fork"


def _pool_init(spec: dict, seed: int, cache_dir: Path) -> None:
    import sys

    # The workers share the CPUs, as Ray's do (it sets OMP_NUM_THREADS to an actor's CPUs; here
    # PoolRun sets it): with torch's default of a thread per core in every worker, each tiny
    # retrieval GEMM waited on the other workers' threads (~35 ms a search, ~0.1 ms with one).
    # The bytes do not change: embeddings are on a grid, so every score is exact under any
    # thread count (sounds/retrieval.py), and Whisper's threads were already split (spec).
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(spec.get("threads") or 1)
    try:  # a forked worker's BLAS pool was sized in the parent, before THREAD_VARS were set
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

        threadpool_limits(spec.get("threads") or 1)
    except ImportError:
        pass
    from casu_dataset.mix.realize import make_builder

    _POOL_STATE.update(builder=make_builder(spec), seed=seed, cache_dir=cache_dir)


def _pool_build(job):
    """Build one unit (with the driver's retrieval plan) in a worker; returns (pid, models loaded
    so far, the worker's stage seconds spent on it: the parent adds them up, so the build's stage
    timers cover the work done in workers too, the unit as build_unit returns it, None if it
    failed: the parent then builds it itself, reporting the same reason, and its cues measured
    here, where the stems are: cue_checks.measure_rows, {} if that failed: the parent measures)."""
    unit, plan = job
    st = _POOL_STATE
    builder = st["builder"]
    before = dict(builder.timings)
    built, where = None, {}
    try:
        follow_plan(builder, plan)
        built = build_unit(unit, st["seed"], builder, st["cache_dir"], where=where)
    except Exception:  # noqa: BLE001  (reported again, with the same reason, when the parent assembles)
        pass
    cues = unit_cues(unit, built)
    spent = {k: v - before.get(k, 0.0) for k, v in builder.timings.items()}
    # The stems go as their files in the cache the parent shares (it reads them back).
    return os.getpid(), loaded_models(builder), spent, stems_by_reference(built, where), cues


class PoolRun:
    """Worker processes filling the scene cache: `next()` returns once the next unit (in the given
    order) is in it, so the parent assembles the folder in that fixed order and the output is
    identical to num_proc=1; `close()` stops the workers.

    Workers fork from warm_pool's fork server, which has their stack imported already: the pool
    starts at `start()` (the first next() calls it), after the driver has planned. Without it they
    fork where that is safe (start_method: no torch or ctranslate2 thread pools here, whose copies
    deadlock in a child), else spawn, as soon as this is made, so they import and make their
    builders while the driver plans (`plans()` is called at start())."""

    def __init__(self, units, seed, spec, cache_dir, num_proc, timings=None, plans=None, stats=None):
        spec = {**spec, "threads": worker_threads(num_proc)}
        self.units, self.plans, self.timings = units, plans, timings
        stats = stats if stats is not None else {}
        self.models = stats.setdefault("worker_models", {})
        stats["worker_start"] = self.method = start_method(num_proc)
        self.pool = None
        self._pool_args = (num_proc, spec, seed, cache_dir)
        if self.method != "forkserver":
            self._start_pool()
        self.results: deque = deque()
        self.jobs: Iterator | None = None  # the units with their plans, once planned
        self.window = 2 * num_proc + 2  # units handed out ahead: every worker busy, the next queued

    def _start_pool(self) -> None:
        import multiprocessing as mp

        if self.pool is not None:
            return
        num_proc, spec, seed, cache_dir = self._pool_args
        # The workers' BLAS and OpenMP pools are sized as they start (numpy is imported before
        # the initializer runs), so the split thread count goes in the environment they inherit.
        # SIGINT is ignored while they start (inherited), even while importing.
        threads = {k: str(spec["threads"]) for k in THREAD_VARS}
        with environment(threads), ignoring_sigint():
            self.pool = mp.get_context(self.method).Pool(
                num_proc, initializer=_pool_init, initargs=(spec, seed, cache_dir)
            )

    def __iter__(self):
        return self

    def __next__(self) -> tuple[dict, dict] | None:
        """The next unit as build_unit returns it, every scene counted as a cache hit (as when the
        parent read it back from the cache the worker filled), with its cues measured in the
        worker (scene id -> cue_checks.measure_rows' value); None: the worker failed it."""
        self.start()
        if not self.results:
            raise StopIteration
        pid, loaded, spent, built, cues = self.results.popleft().get()
        self._submit()
        built = stems_loaded(built)
        self.models[pid] = loaded
        if self.timings is not None:
            for k, v in spent.items():
                self.timings[k] = self.timings.get(k, 0.0) + v
        return delivered(built, cues)

    def start(self) -> None:
        """Plan (`plans()`) and hand out the first units, once (the first next() does it too)."""
        if self.jobs is None:
            plans = (self.plans() if callable(self.plans) else self.plans) or [None] * len(self.units)
            self.jobs = iter(list(zip(self.units, plans)))
            self._start_pool()
            for _ in range(self.window):
                self._submit()

    def _submit(self) -> None:
        """Hand the next unit to the pool. Units go out in order as workers free up and come back
        in order; at most `window` are out at once, so the built units (their audio) waiting for
        the parent stay few however far the workers could run ahead."""
        job = next(self.jobs, None) if self.jobs is not None else None
        if job is not None:
            assert self.pool is not None  # started by start()
            self.results.append(self.pool.apply_async(_pool_build, (job,)))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None
