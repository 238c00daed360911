"""What a build worker (a pool process or a Ray actor) imports before its first unit: the fork
server (executor.warm_pool) and a warm actor (ray_executor.warm_ray) import it ahead, while the
driver reads the library and plans."""

from __future__ import annotations

import importlib

# The unit builder, the mixer and its loudness (pyloudnorm, scipy.signal: ~0.8 s alone).
WORKER_PRELOAD = (
    "casu_dataset.dataset.executor",
    "casu_dataset.mix.realize",
    "casu_dataset.mix.cue_checks",
    "pyloudnorm",
    "scipy.signal",
)


def preload() -> None:
    for m in WORKER_PRELOAD:
        importlib.import_module(m)
