"""What a build worker (a pool process or a Ray actor) starts with: the modules it imports before
its first unit, its share of the CPUs, and the pool's fork server, which imports them ahead.

The fork server (warm_pool) and a warm actor (ray_executor.warm_ray) import the stack while the
driver reads the library and plans. This module imports nothing heavy itself, so api.build can
start the fork server before it imports the build's own modules (~0.25 s sooner)."""

from __future__ import annotations

import importlib
import os

from casu_dataset.core.env_vars import environment
from casu_dataset.core.signals import ignoring_sigint

# The unit builder, the mixer and its loudness (core/loudness.py, whose filter loops core/iir.py
# loads from scipy on first use, without scipy.signal's ~0.55 s import).
WORKER_PRELOAD = (
    "casu_dataset.dataset.executor",
    "casu_dataset.mix.realize",
    "casu_dataset.mix.cue_checks",
)
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# Set by torch's import in this process (a cold query cache loads the model): a worker that imports
# torch sets them itself, so they do not make the fork server's environment another one.
SET_BY_IMPORTS = ("KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK", "TORCHINDUCTOR_CACHE_DIR")
_FORKSERVER: dict = {}  # the environment and thread count warm_pool started it with


def preload() -> None:
    for m in WORKER_PRELOAD:
        importlib.import_module(m)


def worker_threads(num_proc: int) -> int:
    """Each of `num_proc` workers' share of this machine's CPUs: its BLAS/OpenMP/torch threads."""
    return max(1, (os.cpu_count() or 1) // max(1, num_proc))


def _environ() -> dict:
    return {k: v for k, v in os.environ.items() if k not in SET_BY_IMPORTS}


def warm_pool(num_proc: int) -> bool:
    """Start the fork server that a build's `num_proc` pool workers fork from, now, with the
    workers' stack (WORKER_PRELOAD) imported in it: a process of its own imports while this one
    reads the library and plans, on a CPU that would idle through that serial start, and every
    worker then starts with it all imported. api.build calls it first thing. It ignores SIGINT,
    as the workers do. False (nothing started): one worker, or no fork server on this platform."""
    import multiprocessing as mp

    if num_proc < 2 or "forkserver" not in mp.get_all_start_methods():
        return False
    threads = worker_threads(num_proc)
    if _FORKSERVER:
        return True
    from multiprocessing import forkserver

    env = _environ()
    mp.get_context("forkserver").set_forkserver_preload(list(WORKER_PRELOAD))
    with environment({k: str(threads) for k in THREAD_VARS}), ignoring_sigint():
        forkserver.ensure_running()
    _FORKSERVER.update(env=env, threads=threads)
    return True


def forkserver_serves(num_proc: int) -> bool:
    """Whether the fork server warm_pool started runs with this process's environment and the
    thread split of `num_proc` workers (its workers inherit both), so pool workers fork from it."""
    return (
        bool(_FORKSERVER)
        and _FORKSERVER["env"] == _environ()
        and _FORKSERVER["threads"] == worker_threads(num_proc)
    )
