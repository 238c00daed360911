"""Fill the per-scene build cache with Ray tasks (`build --executor ray [--ray-address ADDR]`).

Each unit of work (a scene, or a contrast family's four variants) is one Ray task declaring its
resources: one CPU, and a GPU (or a fraction) when the voices include a GPU TTS engine
(Kokoro, Zonos) or `--ray-num-gpus` says so. A task builds its unit into the scene cache exactly
as a local worker does and returns the cache entries it used; the driver stores the ones its own
cache lacks (so a cluster needs no shared filesystem), then `build_dataset` assembles the folder
from the cache in a fixed order: the output is byte-identical to `--num-proc 1`.

Failures: a task whose worker process dies is retried by Ray (`max_retries`); a unit whose task is
lost for good is built by the driver during assembly (nothing cached is lost, and nothing is
built twice once cached). A scene that fails (bad script, unsayable text) is not a crash: the task
returns, and the driver's assembly fails it again and reports it skipped with the same reason,
exactly as a local build does.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from casu_dataset.core import atomic, cache_layout
from casu_dataset.core.errors import Field
from casu_dataset.dataset.scene_cache import build_unit

log = logging.getLogger(__name__)

GPU_ENGINES = ("kokoro", "zonos")
ENTRY_FILES = ("annotation.json", "mixture.flac", "background.flac", "speech.flac", "events.flac", "done")

_BUILDERS: dict[str, object] = {}  # per worker process: spec -> builder (models load once per process)


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


def build_task(unit: list, seed: int, spec: dict, cache_dir: str) -> dict:
    """Build one unit on a worker: {error, entries: {key: {file: bytes}}}."""
    cache = _local_cache(cache_dir)
    touched: list[str] = []
    try:
        build_unit(unit, seed, _builder(spec), cache, touched)
        error = None
    except Exception as err:  # reported again, with the same reason, when the driver assembles
        error = f"{type(err).__name__}: {err}"
    entries = {}
    for key in dict.fromkeys(touched):
        d = cache_layout.scenes_dir(cache) / key
        if (d / "done").is_file():
            entries[key] = {f: (d / f).read_bytes() for f in ENTRY_FILES}
    return {"error": error, "entries": entries}


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
) -> None:
    """Run one Ray task per unit and store what they built in `cache_dir`. Connects to `address`
    (a running cluster: `ray start --head`), or starts a local one when none is given and this
    process is not already connected; a cluster this call started is shut down at the end."""
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
    task = ray.remote(build_task).options(num_cpus=1, num_gpus=gpus, max_retries=max_retries)
    stats = stats if stats is not None else {}
    stats.update(stored=0, failed=0, lost=[])
    try:
        spec_ref = ray.put(spec)
        pending = {task.remote(u, seed, spec_ref, str(cache_dir)): u for u in units}
        with tqdm(total=len(pending), desc="scenes (ray)", disable=not progress) as bar:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                unit = pending.pop(done[0])
                try:
                    res = ray.get(done[0])
                except Exception as err:  # retries exhausted: the driver builds this unit itself
                    stats["lost"].append((unit[0].script.id, f"{type(err).__name__}"))
                    bar.update()
                    continue
                stats["failed"] += res["error"] is not None
                stats["stored"] += sum(store_entry(cache_dir, k, f) for k, f in res["entries"].items())
                bar.update()
    finally:
        if started:
            ray.shutdown()
    for sid, why in stats["lost"]:
        log.warning(
            "ray: the task for %s was lost (%s) after %s retries; built locally instead",
            sid,
            why,
            max_retries,
        )
