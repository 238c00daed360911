"""Build a CASU dataset folder: scripts -> scenes -> parquet shards + a dataset card.

The folder loads with `datasets.load_dataset(folder, CONFIG, split="test")` (datasets 5.x:
no loading script; the card's YAML `configs:` declare the parquet files). Audio columns are
`datasets.Audio(sampling_rate=16000, decode=False)` holding FLAC bytes, written with pyarrow
directly (row groups of 100 rows) so no audio codec library is needed to build or to read rows;
`casu_dataset.load` decodes with soundfile. The card's default config `all` holds every
multiple-choice question, and `eval.yaml` declares the tasks for the Hub's eval results.

Each built scene is cached by a content hash of everything that determines it (script,
seed, mix settings, retrieval settings, catalog, and the source of the code that renders a
scene), so an interrupted build resumes where it stopped and a rebuild with the same inputs
writes byte-identical files.

This module orchestrates (build_dataset, the lock entries); a scene's rows are rows.py, the
folder on disk (features, parquet shards, the atomic swap, merge_folders) writer.py, the report
report.py, the scene cache scene_cache.py, the executors executor.py / ray_executor.py, the card
card.py (+ the *_template.md files), the Hub upload publish.py, and the task and column names
contract.py.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from casu_dataset import __version__
from casu_dataset.contract import (
    dataset_configs,
    mcq_configs,
)
from casu_dataset.core import cache_layout
from casu_dataset.core.errors import BuildError, Field
from casu_dataset.dataset.card import (
    DATASET_VERSION,
    DEFAULT_NAME,
)
from casu_dataset.dataset.config import BuildConfig, ConfigError
from casu_dataset.dataset.executor import build_units, prebuild
from casu_dataset.dataset.report import BuildReport
from casu_dataset.dataset.retrieval_plan import following, planner
from casu_dataset.dataset.rows import scene_rows
from casu_dataset.dataset.scene_cache import build_unit, clean_scene_cache
from casu_dataset.dataset.writer import FolderWriter, check_writable, light
from casu_dataset.families.preflight import rejected_summary

log = logging.getLogger(__name__)


def __getattr__(name):
    # The configs come from the task registry (casu_dataset.contract), read at lookup time.
    if name == "TASK_CONFIGS":
        return mcq_configs()
    if name == "CONFIGS":
        return dataset_configs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def shard_of(scene_ids: list[str], num_shards: int, shard_index: int) -> list[str]:
    """A deterministic slice: every num_shards-th scene of the sorted ids."""
    if not 0 <= shard_index < num_shards:
        raise ConfigError(Field("shard_index"), f" {shard_index} must be in [0, {num_shards})")
    return sorted(scene_ids)[shard_index::num_shards]


def build_settings(builder, seed: int, command: str, name: str = DEFAULT_NAME) -> dict:
    r = builder.retriever
    return {
        "name": name,
        "command": command,
        "seed": int(seed),
        "alpha": r.alpha,
        "embedding_model": r.embedder.model_name,
        "catalog": r.catalog.name,
        "catalog_fingerprint": r.catalog.fingerprint(),
        "catalog_rejected": rejected_summary(
            r.catalog
        ),  # counted in the card and here, never dropped silently
        "background_lufs": builder.mix_config.background_lufs,
        "speech_check": builder.checker is not None,
        "casu_version": __version__,
        "dataset_version": DATASET_VERSION,
        # realization 2 only: realization 1's settings stay exactly as they were
        **({"realization": 2} if getattr(builder, "realization", 1) == 2 else {}),
    }


def build_dataset(
    config: BuildConfig,
    scenes: list,
    builder,
    invalid: list[dict] | None = None,
    builder_spec: dict | None = None,
) -> BuildReport:
    """Build the folder `config.out` from the compiled `scenes` with `builder` (its `lock`, when it
    has one, is followed). What the config cannot hold is passed: `invalid`, the scripts that
    failed validation upstream (reported as skipped, and in the card), and `builder_spec`, how
    worker processes make their own builder (num_proc > 1, executor "ray"; default:
    config.builder_spec() and the builder's lock).

    `config.executor`: "local" (this process, or `num_proc` spawned workers) or "ray" (one Ray
    task per unit on `ray_address`, `ray_num_gpus` each; see ray_executor.py). Either only fills
    the scene cache; the folder is then assembled here from the cache in a fixed order, so every
    executor writes the same bytes.

    `config.review_file` (default `<out>.decisions.jsonl` when it exists): human review decisions
    to apply; corrupt lines in it are reported (and skipped), never fatal.

    Raises BuildError, writing nothing, when no scene is left or when more than `config.max_skips`
    scenes were skipped (None: any number); the previous folder at `out` stays as it was.

    A builder with a `lock` (casu_dataset/formats/lock.py) realizes every scene from it and reports
    each as reproduced or drifted; `config.lock` "relock" makes the decisions afresh and writes the
    lock of the library `config.scenarios` from this build. `config.name` None: DEFAULT_NAME (api.build
    names a library by its file or folder first)."""
    from tqdm import tqdm

    out = Path(config.out)
    seed, progress, executor, num_proc = config.seed, config.progress, config.executor, config.num_proc
    if getattr(builder, "realization", 1) != config.realization:  # the config decides which realization
        builder.realization = config.realization
    relock = config.library() if config.lock == "relock" else None
    if builder_spec is None:
        builder_spec = config.builder_spec()
        if getattr(builder, "lock", None) is not None:  # workers follow the lock the builder follows
            builder_spec["lock"] = str(builder.lock.path)
        if getattr(builder, "reference", None) is not None:  # realization 2: realization 1's lock
            builder_spec["reference_lock"] = str(builder.reference.path)
    ray_options = {"address": config.ray_address, "num_gpus": config.ray_num_gpus}
    cache_dir = cache_layout.build_dir(config.cache)
    clean_scene_cache(cache_dir)
    report = BuildReport()
    lock = getattr(builder, "lock", None)
    if lock is not None and relock is not None:
        raise ConfigError(
            Field("lock", "relock"),
            ": the builder already follows a lock; build the new reference without it",
        )
    if lock is not None:
        report.lock = {
            "file": lock.path.name,
            "sha256": lock.sha256,
            "library_sha256": lock.header["library_sha256"],
            "mode": "followed",
        }
        if lock.skipped:  # the reference build skipped these (its lock says why): never built anew
            why = lock.skipped
            report.skipped.extend(
                {"scene_id": s.script.id, "reason": f"skipped as the lock records: {why[s.script.id]}"}
                for s in scenes
                if s.script.id in why
            )
            scenes = [s for s in scenes if s.script.id not in why]
    entries: list[dict] = []  # the new lock's scene entries, with relock
    # Scripts that failed validation upstream are reported with the build (and in the card).
    report.skipped.extend(sorted(invalid or [], key=lambda s: s["scene_id"]))
    # Rows go to the writer unit by unit (audio bytes included); only light() copies (no audio)
    # stay in memory, for the review counts and the card: memory is flat in the number of scenes.
    rows: dict[str, list[dict]] = {c: [] for c in dataset_configs()}
    from casu_dataset.review.decisions import decisions_path, load

    rf = Path(config.review_file) if config.review_file else decisions_path(out)
    rv = load(rf) if rf.is_file() else None
    from casu_dataset.review.apply import apply_review

    writer = FolderWriter(out)
    written: dict[str, list[str]] = {c: [] for c in dataset_configs()}  # row digests
    # A contrast family is one unit of work (and of sharding): all its variants or none.
    units = build_units(scenes)
    keep = set(shard_of(list(units), config.num_shards, config.shard_index))
    mine = [units[k] for k in sorted(keep)]
    ready = None
    try:
        t0 = time.perf_counter()
        # The driver decides what every worker would otherwise load a model for: the clips of
        # the units not yet in the cache (retrieval_plan.py), while the workers start.
        plans = planner(mine, builder, seed, cache_dir, report.seconds)
        ready = prebuild(
            mine,
            seed,
            cache_dir,
            executor,
            num_proc,
            builder_spec,
            progress,
            ray_options,
            timings=getattr(builder, "timings", None),
            plans=plans,
            stats=report.workers,
        )
        if ready is None:
            report.seconds["prebuild"] = time.perf_counter() - t0
        else:
            # The workers get their units first (their stack imports in ~0.35 s, so they are
            # ready before this process has planned), then what writing needs is loaded here.
            ready.start()
            writer.prepare()
        for i, unit in enumerate(tqdm(mine, desc="scenes", disable=not progress)):
            from_worker, cues = None, None
            if ready is not None:  # pool workers or Ray actors: the unit once it is built and cached
                got = next(ready)  # ... and comes with it, its cues measured (None: the worker failed it)
                from_worker, cues = got if got is not None else (None, None)
                if i == len(mine) - 1:
                    report.seconds["prebuild"] = time.perf_counter() - t0
            try:
                if from_worker is not None:
                    built = from_worker
                else:
                    with following(builder, plans()[i] if ready is None and executor == "local" else None):
                        built = build_unit(unit, seed, builder, cache_dir)
            except (
                Exception
            ) as err:  # one scene (or family) failing never stops the build; the reason is reported
                reason = f"{type(err).__name__}: {err}"
                report.skipped.extend({"scene_id": s.script.id, "reason": reason} for s in unit)
                continue
            unit_rows: dict[str, list[dict]] = {c: [] for c in dataset_configs()}
            for scene in unit:
                b, hit = built[scene.script.id]
                report.cached += hit
                report.built.append(scene.script.id)
                if b.get("drift"):
                    report.drift.append(b["drift"])
                if relock is not None:
                    entries.append(_lock_entry(scene.script.id, b, builder))
                for c, r in scene_rows(scene, b).items():
                    unit_rows[c].extend(r)
                    rows[c].extend(light(x) for x in r)
            # Every decision's effect on a row depends on its unit alone (a family is one unit), so
            # applying the decisions per unit keeps exactly the rows the whole-build call keeps.
            if rv is not None:
                apply_review(unit_rows, rv)
            for c, r in unit_rows.items():
                writer.add(c, r, cues)
                written[c].extend(_digest(light(x)) for x in r)
        report.seconds["scenes"] = time.perf_counter() - t0
        if rv is not None:
            for _, msg in rv.bad_lines:
                log.warning("review: skipped %s", msg)
            report.review = apply_review(rows, rv)  # the counts, refusals and unknowns of the whole build
            for msg in report.review.get("refused", []):
                log.warning("review: refused %s", msg)
            for item in report.review.get("unknown", []):
                log.warning("review: not applied, not counted: %s is not in this build", item)
        if any(written[c] != [_digest(r) for r in rows[c]] for c in rows):
            raise RuntimeError(
                "review decisions applied per unit and to the whole build disagree; nothing written"
            )
        check_writable(out, rows, report, config.max_skips)
        t0 = time.perf_counter()
        settings = build_settings(builder, seed, config.command, config.name or DEFAULT_NAME)
        on_configs = None
        if relock is not None:
            # A realization-1 lock holds every scene; a realization-2 lock records its skips (within
            # max_skips, checked above) with their reasons, so it still covers the whole library.
            if report.skipped and config.realization == 1:
                raise BuildError(
                    Field("lock", "relock"),
                    f": {len(report.skipped)} scenes were skipped; a lock covers the whole "
                    f"library, so nothing was written (first: {report.skipped[0]['scene_id']}: "
                    f"{report.skipped[0]['reason']})",
                )

            def on_configs(hashes):
                from casu_dataset.formats.lock import write_lock

                new = write_lock(
                    Path(relock),
                    entries,
                    settings,
                    builder.mix_config.model_dump(mode="json"),
                    hashes,
                    realization=config.realization,
                    reference=getattr(builder, "reference", None),
                    skipped=report.skipped if config.realization != 1 else None,
                )
                report.lock = {
                    "file": new.path.name,
                    "sha256": new.sha256,
                    "library_sha256": new.header["library_sha256"],
                    "mode": "written",
                }

        # The workers are idle now: they stop (Ray's disconnect alone takes ~0.3 s) while the
        # writer's threads encode the files.
        writer.finish(rows, report, settings, on_configs, while_writing=lambda: _stop(ready))
    except BaseException:
        writer.abort()
        raise
    finally:
        _stop(ready)  # after a failure, before they build the rest
    report.seconds["write"] = time.perf_counter() - t0
    return report


def _stop(ready) -> None:
    """Stop the workers once every unit is in; a failure to stop them costs nothing built."""
    if ready is not None:
        try:
            ready.close()
        except Exception as err:  # noqa: BLE001  (the files are being written from the units)
            log.warning("stopping the build's workers failed (%s: %s)", type(err).__name__, err)


def _lock_entry(scene_id: str, built: dict, builder) -> dict:
    """A scene's lock entry from its build: the turns as the mixer used them (16 kHz, DC removed)."""
    from casu_dataset.formats.lock import scene_entry

    ann = built["annotation"]
    pcm = [
        builder.cache.get(t["path"].replace("{speech_cache}", str(builder.synth.dir), 1)).audio
        for t in ann["turns"]
    ]
    ref = getattr(builder, "reference", None)
    if getattr(builder, "realization", 1) == 2 and ref is not None:
        from casu_dataset.formats.lock import (
            conform_length,
        )  # as realization 2 mixed them: to realization 1's lock

        pcm = [conform_length(x, t["samples"]) for x, t in zip(pcm, ref.entry(scene_id)["turns"])]
    return scene_entry(scene_id, ann, built["flac"], pcm)


def _digest(row: dict) -> str:
    import hashlib

    return hashlib.sha1(json.dumps(row, sort_keys=True, default=str).encode()).hexdigest()
