"""Who builds the scenes: this process, `num_proc` spawned workers, or Ray (ray_executor.py);
what each builds is a unit (scene_cache.build_unit).
Every executor only fills the scene cache; build.py then assembles the folder from the cache in a
fixed order, so every executor writes the same bytes."""

from __future__ import annotations

import logging
import os
from collections.abc import Generator
from pathlib import Path

from casu_dataset.core.errors import Field
from casu_dataset.core.signals import ignoring_sigint
from casu_dataset.dataset.config import ConfigError
from casu_dataset.dataset.scene_cache import build_unit
from casu_dataset.families.compile import FamilyScene

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
) -> Generator[None, None, None] | None:
    """Fill the scene cache ahead of assembly ("ray", or "local" with num_proc > 1); a no-op for
    a single local process (build.py builds each unit as it assembles).

    Local workers return an iterator that yields once per unit, in the order given, when that
    unit is in the cache: the caller assembles unit i while the workers build the next ones
    (close it to stop them). Ray fills the whole cache before returning None."""
    if executor not in EXECUTORS:
        raise ConfigError(Field("executor"), f" {executor!r}: expected local or ray")
    if executor == "ray":
        if builder_spec is None:
            raise ConfigError(
                Field("executor", "ray"), " needs a builder spec (workers construct their own models)"
            )
        from casu_dataset.dataset.ray_executor import prebuild_ray

        prebuild_ray(units, seed, builder_spec, cache_dir, progress=progress, **(ray_options or {}))
        return None
    # Never more worker processes than units of work: each one loads the models.
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
        return _prebuild_parallel(units, seed, builder_spec, cache_dir, num_proc, timings)
    return None


_POOL_STATE: dict = {}


def _pool_init(spec: dict, seed: int, cache_dir: Path) -> None:
    from casu_dataset.mix.realize import make_builder

    # torch keeps its default thread count: its GEMM results depend on it, and retrieval
    # scores are recorded in the annotation. Only Whisper's threads are split (spec).
    _POOL_STATE.update(builder=make_builder(spec), seed=seed, cache_dir=cache_dir)


def _pool_build(unit):
    """Build one unit in a worker; returns the worker's stage seconds spent on it (the parent adds
    them up, so the build's stage timers cover the work done in workers too)."""
    st = _POOL_STATE
    before = dict(st["builder"].timings)
    try:
        build_unit(unit, st["seed"], st["builder"], st["cache_dir"])
    except Exception:  # noqa: BLE001  (reported again, with the same reason, when the parent assembles)
        pass
    return {k: v - before.get(k, 0.0) for k, v in st["builder"].timings.items()}


def _prebuild_parallel(scenes, seed, spec, cache_dir, num_proc, timings=None) -> Generator[None, None, None]:
    """Fill the scene cache with worker processes, yielding as each unit (in the given order) is
    in it; the parent assembles the folder from the cache in that fixed order, so the output is
    identical to num_proc=1. Workers are spawned, not forked: torch's and ctranslate2's thread
    pools deadlock in a forked child. The pool starts at the first next()."""
    import multiprocessing as mp

    spec = {**spec, "threads": max(1, (os.cpu_count() or 1) // num_proc)}
    with ignoring_sigint():  # the workers start with it ignored (inherited), even while importing
        pool = mp.get_context("spawn").Pool(
            num_proc, initializer=_pool_init, initargs=(spec, seed, cache_dir)
        )
    with pool:
        # imap hands units out in order as workers free up and returns them in order: the workers
        # run ahead of the caller, never more than the task queue allows.
        for spent in pool.imap(_pool_build, scenes):
            if timings is not None:
                for k, v in spent.items():
                    timings[k] = timings.get(k, 0.0) + v
            yield None
