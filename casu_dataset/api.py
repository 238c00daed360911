"""Build a CASU dataset from Python: `build(BuildConfig(out=...))` -> BuildResult.

The `casu build` command parses its flags into a BuildConfig and calls `build`; everything a
build decides happens here and in build.py, so a script and the command write the same bytes.
Importing this module loads nothing heavy and changes no setting: the models, the catalog and
the library are loaded when `build` runs.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from casu_dataset.core.errors import Field
from casu_dataset.dataset.config import BuildConfig, ConfigError, out_problem, replace_problem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuildResult:
    """What a build wrote. identity: build_manifest.identity of the folder (its sha256 names
    the dataset); realization: reproduced/drifted counts when a lock was followed; lock: the
    lock followed or written ({file, sha256, library_sha256, mode}) and lock_file its path;
    seconds: setup (library, models, lock), build (scenes and writing) and the build's own
    breakdown (prebuild, scenes, write); stage_seconds: the scene stages summed over workers."""

    out: Path
    built: tuple[str, ...]
    skipped: tuple[dict, ...]
    cached: int
    identity: dict | None
    realization: dict | None
    lock: dict | None
    lock_file: Path | None
    seconds: dict = field(default_factory=dict)
    stage_seconds: dict = field(default_factory=dict)


def build(config: BuildConfig) -> BuildResult:
    """Build the dataset folder `config.out` from `config.scenarios`.

    Raises ConfigError (exit code 2) for a value that cannot be built (an unwritable `out`, a
    missing library, a catalog that cannot be read or has no usable clips), LibraryError for a
    bad library, LockError for a lock made for another library or other settings, and BuildError
    (exit code 1) when the build itself fails (fills that cannot be retrieved, too many skipped
    scenes, a scene that contradicts the lock); nothing is written then."""
    try:
        return _build(config)
    finally:
        ray_executor = sys.modules.get("casu_dataset.dataset.ray_executor")
        if ray_executor is not None:  # the cluster and actors warm_ray started and no run took
            ray_executor.release_warm()


def _build(config: BuildConfig) -> BuildResult:
    """build(), which see."""
    t0 = time.perf_counter()
    from casu_dataset.core.cache_layout import cache_root
    from casu_dataset.core.paths import WHY, collision

    lib = config.library()
    clash = collision(
        {"out": config.out},
        {
            "scenarios": lib,
            "cache": cache_root(config.cache),
            **{f"catalogs[{i}]": c for i, c in enumerate(config.catalogs) if Path(c).exists()},
        },
    )
    if clash:
        _, out, rel, key, inp = clash
        field = Field(key.split("[")[0])
        raise ConfigError(Field("out"), f" {out} {rel} ", field, f" {inp}{WHY}")
    why = out_problem(config.out) or replace_problem(config.out)
    if why:
        raise ConfigError(Field("out"), f" {config.out}: {why}")
    if config.executor == "ray":
        from casu_dataset.dataset.ray_executor import require_ray

        try:
            require_ray()
        except ImportError as err:
            raise ConfigError(Field("executor", "ray"), f": {err}") from None
    lib = config.library()
    if not lib.exists() and not lib.is_symlink():
        raise ConfigError(Field("scenarios"), f" {config.scenarios}: no such file or folder")
    from casu_dataset.core.paths import PathError, input_path

    try:  # a symlink loop, a dangling link, a FIFO or a device: named (a FIFO would block the read)
        input_path(lib, "scenarios", "any")
    except PathError as err:
        raise ConfigError(
            Field("scenarios"), f" {config.scenarios}: {str(err).removeprefix('scenarios: ')}"
        ) from None
    # The workers' imports start first thing, in their own processes, while this one imports the
    # build's modules, reads the library and plans.
    if config.executor == "local" and config.num_proc > 1:
        from casu_dataset.dataset.worker_stack import warm_pool

        warm_pool(config.num_proc)
    elif config.executor == "ray":
        from casu_dataset.dataset.ray_executor import warm_ray

        warm_ray(config.builder_spec(), config.ray_address, config.ray_num_gpus)
    from casu_dataset.core.errors import BuildError
    from casu_dataset.dataset.build import build_dataset, build_settings
    from casu_dataset.families.compile import compile_families, is_family_library
    from casu_dataset.families.preflight import fill_problems, rejected_summary
    from casu_dataset.formats.lock import LockError, load_for, lock_path
    from casu_dataset.legacy.library import compile_library
    from casu_dataset.mix.realize import make_builder
    from casu_dataset.script.scenes import library_name
    from casu_dataset.sounds.catalog import CatalogError

    families = is_family_library(lib)
    invalid: list[dict] = []
    # Contrast families (v2, the default) or v1 scenarios, told apart by their fields.
    scenes = compile_families(lib, invalid) if families else compile_library(lib, invalid)
    spec = config.builder_spec()
    _check_cache_folder(config.cache)
    try:
        builder = make_builder(spec)
    except (CatalogError, OSError) as err:  # a missing manifest or audio folder, truncated JSON, a bad spec
        if isinstance(err, CatalogError) and err.fields:  # a bad spec names the field itself
            raise ConfigError(*err.parts) from err
        raise ConfigError(Field("catalogs"), f": {err}") from err
    catalog = builder.retriever.catalog
    rej = rejected_summary(catalog)
    kinds = {c.kind for c in catalog.clips}
    if not {"background", "event"} <= kinds:  # nothing to retrieve a bed or an event from
        raise ConfigError(
            Field("catalogs"),
            f" {', '.join(config.catalogs)}: no usable "
            f"{' or '.join(sorted({'background', 'event'} - kinds))} clips "
            f"({len(catalog)} loaded, {rej['rejected']} rejected: "
            + "; ".join(f"{c['clip_id']}: {c['reason']}" for c in rej["clips"][:3])
            + ")",
        )
    if rej["rejected"] and config.progress:
        log.warning(
            "catalog %s: %d clip(s) or row(s) rejected, never used (listed in the card and "
            "build_report.json): %s",
            catalog.name,
            rej["rejected"],
            "; ".join(f"{c['clip_id']}: {c['reason']}" for c in rej["clips"][:5]),
        )
    builder.realization = config.realization
    lock = reference = None
    ids = [s.script.id for s in scenes]
    if config.realization == 2 and config.lock != "ignore":
        # What realization 2 differs from: realization 1's lock when the library has one (else
        # realization 1 is decided in this build). Checked as a realization-1 build checks it.
        try:
            builder.reference = reference = load_for(
                lib,
                build_settings(builder, config.seed, config.command),
                builder.mix_config.model_dump(mode="json"),
                ids,
            )
        except LockError as err:
            raise LockError(
                "realization 2 differs from realization 1's lock, which cannot be used (relock realization 1 "
                "first, or build both without locks: ",
                Field("lock", "ignore"),
                "): ",
                *err.parts,
            ) from None
    if config.lock == "follow":
        lock = load_for(
            lib,
            build_settings(builder, config.seed, config.command),
            builder.mix_config.model_dump(mode="json"),
            ids,
            realization=config.realization,
            reference=reference,
        )
    if lock is not None:
        builder.lock = lock  # build_dataset hands it on to worker processes (their builder spec)
        if config.progress:
            log.info(
                "following the realization lock %s (%s): no retrieval or Whisper decision is made",
                lock.path,
                lock.short,
            )
    # A followed lock names every clip (checked by hash when used): no retrieval to preflight.
    problems = fill_problems(scenes, builder.retriever, check_retrieval=families and lock is None)
    if problems:  # retrieval never falls back silently to a clip of another type
        raise BuildError(
            f"build failed: {len(problems)} fill(s) cannot be built as written; nothing written:\n  "
            + "\n  ".join(problems[:20])
        )
    if config.realization == 2 and lock is None:
        scenes = _drop_unvaried(config, scenes, builder, invalid)
    t1 = time.perf_counter()
    try:
        # A library without a name is named by its file or folder (build_dataset's default is
        # DEFAULT_NAME, for callers that build scenes of no library).
        named = replace(config, name=realization_name(config.name or library_name(lib), config.realization))
        rep = build_dataset(named, scenes, builder, invalid=invalid)
    except (BuildError, LockError) as err:  # a lock the build contradicts fails the build, as a skip does
        failed = BuildError("build failed: ", *err.parts)  # the parts: the CLI still shows its flags
        failed.report = getattr(err, "report", None)
        raise failed from err
    t2 = time.perf_counter()
    return BuildResult(
        out=Path(config.out),
        built=tuple(rep.built),
        skipped=tuple(rep.skipped),
        cached=rep.cached,
        identity=rep.identity,
        realization=rep.realization_summary(),
        lock=rep.lock,
        lock_file=lock_path(lib, config.realization) if rep.lock else None,
        seconds={"setup": t1 - t0, "build": t2 - t1, **rep.seconds},
        stage_seconds=dict(builder.timings or {}),
    )


def realization_name(name: str, realization: int) -> str:
    """The dataset's name for the card: realization 2 is "NAME (realization 2)"."""
    tag = f" (realization {realization})"
    return name if realization == 1 or name.endswith(tag) else name + tag


def _drop_unvaried(config: BuildConfig, scenes: list[Any], builder, invalid: list[dict]) -> list:
    """Realization 2: the scenes with a layer that has no other recording of its bank type.
    Within `max_skips` they are left out and reported as skipped (a whole family at a time: its
    variants are one unit), never built on realization 1's recording; beyond it, BuildError naming
    every (family, layer, type) before anything is built."""
    from casu_dataset.core.errors import BuildError
    from casu_dataset.dataset.executor import unit_key
    from casu_dataset.mix.second_realization import variation_problems

    problems = variation_problems(scenes, builder.retriever)
    if not problems:
        return scenes
    bad_units = {unit_key(sc) for sc, _ in problems}
    drop = [s for s in scenes if unit_key(s) in bad_units]
    msgs = list(dict.fromkeys(m for _, m in problems))
    if config.max_skips is not None and len(drop) > config.max_skips:
        raise BuildError(
            Field("realization", "2"),
            f": {len(msgs)} layer(s) in {len(bad_units)} family(ies) or scene(s) have no other recording "
            f"of their bank type, so realization 2 cannot vary them (it never reuses realization 1's "
            f"recording); nothing written:\n  "
            + "\n  ".join(msgs[:40])
            + ("\n  ..." if len(msgs) > 40 else "")
            + "\n(add recordings of those types to the bank, or build realization 2 without those "
            f"{len(drop)} scenes: ",
            Field("max_skips", str(len(drop))),
            ")",
        )
    why: dict[str, list[str]] = {}
    for sc, m in problems:
        why.setdefault(unit_key(sc), []).append(m)
    for s in drop:
        u = unit_key(s)
        invalid.append(
            {
                "scene_id": s.script.id,
                "reason": "realization 2 not varied: " + "; ".join(dict.fromkeys(why[u])),
            }
        )
    gone = {s.script.id for s in drop}
    return [s for s in scenes if s.script.id not in gone]


def _check_cache_folder(cache) -> None:
    """The cache root is a folder or can be made one; else a ConfigError naming the cache (not the
    catalog or model that would otherwise be the first to trip over it)."""
    from casu_dataset.core.cache_layout import cache_root

    root = cache_root(cache)
    shown = f" {root}" + ("" if cache else " (from $CASU_CACHE or the default ~/.cache/casu)")
    if root.exists() and not root.is_dir():
        raise ConfigError(Field("cache"), f"{shown}: a file, not a folder; give a folder (made if missing)")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            Field("cache"), f"{shown}: cannot make the cache folder ({err.strerror or err})"
        ) from None
