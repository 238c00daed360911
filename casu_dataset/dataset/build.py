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
writes byte-identical files. The folder is written atomically: every new file goes to a hidden
temp name first and all are renamed into place at the end, so a build killed while writing
leaves the previous dataset readable.

This module orchestrates (features, rows, build_dataset, merge_folders); the scene
cache is scene_cache.py, the executors executor.py / ray_executor.py, the card card.py (+ the
*_template.md files), the Hub upload hub.py, and the task and column names contract.py.
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import shutil
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from casu_dataset import __version__
from casu_dataset.contract import (
    DESCRIPTION_TASK,
    FAMILY_FIELDS,
    SCENES_CONFIG,
    dataset_configs,
    mcq_configs,
)
from casu_dataset.core import atomic, cache_layout
from casu_dataset.core.errors import BuildError, Field
from casu_dataset.core.parquet_files import PARQUET_OPTIONS, row_groups
from casu_dataset.dataset.card import (
    DATASET_VERSION,
    DEFAULT_NAME,
    attribution_file,
    dataset_card,
    eval_yaml,
)
from casu_dataset.dataset.config import BuildConfig, ConfigError, replace_problem
from casu_dataset.dataset.executor import build_units, prebuild
from casu_dataset.dataset.retrieval_plan import following, planner
from casu_dataset.dataset.scene_cache import build_unit, clean_scene_cache
from casu_dataset.families.compile import FamilyScene
from casu_dataset.families.preflight import merge_rejected, rejected_summary

if TYPE_CHECKING:
    from casu_dataset.mix.cue_checks import CueMeter

log = logging.getLogger(__name__)


def __getattr__(name):
    # The configs come from the task registry (casu_dataset.contract), read at lookup time.
    if name == "TASK_CONFIGS":
        return mcq_configs()
    if name == "CONFIGS":
        return dataset_configs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def features(config: str):
    import datasets

    V, A, S = datasets.Value, datasets.Audio, datasets.Sequence
    # decode=False is stored in the parquet schema metadata, so rows come back as {bytes, path}
    # on every install: decoding would import torchcodec, which cannot load beside the CPU torch.
    # casu_dataset.load() decodes with soundfile instead.
    audio = A(sampling_rate=16000, decode=False)
    fam = {k: V("string") for k in FAMILY_FIELDS}
    if config == SCENES_CONFIG:
        return datasets.Features(
            {
                "scene_id": V("string"),
                "place": V("string"),
                "speech_type": V("string"),
                "description": V("string"),
                "audio": audio,
                "background": audio,
                "speech": audio,
                "events": audio,
                "script": V("string"),
                "annotation": V("string"),
                "variant_of": V("string"),
                **fam,
            }
        )
    if config == DESCRIPTION_TASK:
        return datasets.Features(
            {
                "id": V("string"),
                "scene_id": V("string"),
                "audio": audio,
                "reference": V("string"),
                "event_descriptions": S(V("string")),
                "turns": S(V("string")),
                "place": V("string"),
                "speech_type": V("string"),
                **fam,
            }
        )
    return datasets.Features(
        {
            "id": V("string"),
            "scene_id": V("string"),
            "task": V("string"),
            "audio": audio,
            "question": V("string"),
            "options": S(V("string")),
            "answer": V("string"),
            "rationale": V("string"),
            "layers": S(V("string")),
            "minimal_pair_id": V("string"),
            "place": V("string"),
            "speech_type": V("string"),
            **fam,
        }
    )


def family_fields(scene) -> dict:
    """The dataset's family columns: null for a scene outside any contrast family (v1)."""
    if not isinstance(scene, FamilyScene):
        return dict.fromkeys(FAMILY_FIELDS)
    return {
        "family_id": scene.family_id or None,
        "variant": scene.variant or None,
        "family_shape": scene.shape or None,
        "slot_kind": scene.slot_kind or None,
        "speech_version": scene.speech_version or None,
        "fill": scene.fill or None,
        "speech_group": scene.speech_group or None,
        "fill_group": scene.fill_group or None,
    }


@dataclass
class BuildReport:
    built: list[str] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    cached: int = 0
    seconds: dict = field(default_factory=dict)
    review: dict | None = None  # counts from the decisions file, when one was applied
    lock: dict | None = None  # the lock followed or written: {file, sha256, library_sha256, mode}
    drift: list[dict] = field(default_factory=list)  # per scene, when a lock was followed
    identity: dict | None = None  # build_manifest.identity of the written folder
    cues: dict | None = None  # cue_checks.summary of the written folder (contrast families)
    workers: dict = field(default_factory=dict)  # the executor's: worker_models (pid -> models loaded), ...

    def realization_summary(self) -> dict | None:
        """Reproduced/drifted counts of a locked build (None when no lock was followed)."""
        if not self.lock or self.lock.get("mode") != "followed":
            return None
        from casu_dataset.formats.lock import drift_summary

        return drift_summary(self.drift)


def _rows(scene, built: dict) -> dict[str, list[dict]]:
    ann, flac = built["annotation"], built["flac"]
    s = scene.script
    sid = s.id

    def audio(k):
        return {"bytes": flac[k], "path": f"{sid}/{k}.flac"}

    rows: dict[str, list[dict]] = {c: [] for c in dataset_configs()}
    fam = family_fields(scene)
    rows[SCENES_CONFIG].append(
        {
            "scene_id": sid,
            "place": s.place,
            "speech_type": s.speech_type,
            "description": scene.description,
            "audio": audio("mixture"),
            "background": audio("background"),
            "speech": audio("speech"),
            "events": audio("events"),
            "script": s.dump_json(indent=None),
            "annotation": json.dumps(ann, sort_keys=True),
            "variant_of": scene.variant_of,
            **fam,
        }
    )
    for q in scene.questions:
        rows[q.task].append(
            {
                "id": q.id,
                "scene_id": sid,
                "task": q.task,
                "audio": audio("mixture"),
                "question": q.question,
                "options": q.options,
                "answer": q.answer,
                "rationale": q.rationale,
                "layers": q.layers,
                "minimal_pair_id": q.minimal_pair_id,
                "place": s.place,
                "speech_type": s.speech_type,
                **fam,
            }
        )
    if not scene.variant_of:
        rows[DESCRIPTION_TASK].append(
            {
                "id": f"{sid}/description",
                "scene_id": sid,
                "audio": audio("mixture"),
                "reference": scene.description,
                "event_descriptions": [e.description for e in s.events],
                "turns": [t.text for t in s.turns],
                "place": s.place,
                "speech_type": s.speech_type,
                **fam,
            }
        )
    return rows


ROW_GROUP_SIZE = 100


def write_parquet(rows: list[dict], config: str, path: Path) -> None:
    """Write one config's rows to `path` as is."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows, schema=features(config).arrow_schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    # FLAC bytes do not compress further; snappy keeps the text columns small and the write
    # fast. pyarrow writes no timestamps, so the file is a pure function of the table.
    # Row groups of ROW_GROUP_SIZE rows: streaming and the Hub viewer read one group at a time.
    pq.write_table(table, str(path), row_group_size=ROW_GROUP_SIZE, **PARQUET_OPTIONS)


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
        else:  # the workers have their units: prepare the writing meanwhile
            ready.start()
            writer.prepare()
        for i, unit in enumerate(tqdm(mine, desc="scenes", disable=not progress)):
            from_worker = None
            if ready is not None:  # local workers: this unit is in the cache once next() returns
                from_worker = next(ready)  # ... and comes with it (None: the worker failed it)
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
                for c, r in _rows(scene, b).items():
                    unit_rows[c].extend(r)
                    rows[c].extend(light(x) for x in r)
            # Every decision's effect on a row depends on its unit alone (a family is one unit), so
            # applying the decisions per unit keeps exactly the rows the whole-build call keeps.
            if rv is not None:
                apply_review(unit_rows, rv)
            for c, r in unit_rows.items():
                writer.add(c, r)
                written[c].extend(_digest(light(x)) for x in r)
        if ready is not None:
            ready.close()
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

        writer.finish(rows, report, settings, on_configs)
    except BaseException:
        writer.abort()
        raise
    finally:
        if ready is not None:
            ready.close()  # stops the workers (after a failure, before they build the rest)
    report.seconds["write"] = time.perf_counter() - t0
    return report


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


def check_writable(out: Path, rows: dict, report: BuildReport, max_skips: int | None) -> None:
    """Refuse (BuildError, nothing written) an empty dataset or one with too many skipped scenes."""

    def reasons():
        return "".join(f"\n  {s['scene_id']}: {s['reason']}" for s in report.skipped[:20])

    if not rows["scenes"]:
        err = BuildError(
            f"no scene left to write ({len(report.built)} built, {len(report.skipped)} skipped"
            f"{', the rest rejected in review' if report.review else ''}); nothing written to "
            f"{out}{reasons()}"
        )
    elif max_skips is not None and len(report.skipped) > max_skips:
        err = BuildError(
            f"{len(report.skipped)} scenes skipped (allowed: {max_skips}); nothing written to {out} "
            "(a larger ",
            Field("max_skips"),
            ", or ",
            Field("max_skips", "None"),
            f", writes the dataset without them){reasons()}",
        )
    else:
        return
    err.report = report
    raise err


PARQUET = "test-00000-of-00001.parquet"  # the name of a config written as one shard
SHARD_ROWS = 1000  # a shard closes at this many rows (a multiple of ROW_GROUP_SIZE) ...
SHARD_BYTES = 256 * 1024 * 1024  # ... or once its row groups hold this many bytes (audio configs)
IO_PENDING = 2  # row-group writes queued behind the ones being written (finish() waits for none)
AUDIO_COLUMNS = ("audio", "background", "speech", "events")


def shard_name(index: int, count: int, split: str = "test") -> str:
    return f"{split}-{index:05d}-of-{count:05d}.parquet"


def clean_folder_temps(out: Path) -> list[Path]:
    """Remove what killed builds left: temp files inside `out` (older builds wrote into it) and
    staging folders beside it (`atomic.tmp_path(out)`, and `_old_path(out)`) whose writer is gone."""
    out = Path(out)
    gone = []
    if out.is_dir():
        gone += atomic.clean_stale(p for p in out.rglob(atomic.TMP_GLOB) if p.is_file())
    if out.parent.is_dir():
        for name in (out.name, out.name + OLD_SUFFIX):
            gone += atomic.clean_stale(out.parent.glob(f".{name}{atomic.TMP_MARK}*"))
    return gone


OLD_SUFFIX = ".old"


def _old_path(out: Path) -> Path:
    """Where the old build waits while the new one is renamed into place (no atomic exchange)."""
    return atomic.tmp_path(out.with_name(out.name + OLD_SUFFIX))


def light(row: dict) -> dict:
    """A row without its audio bytes (the path stays): what the card and the review need."""
    return {
        k: ({"bytes": None, "path": v["path"]} if k in AUDIO_COLUMNS and v else v) for k, v in row.items()
    }


class FolderWriter:
    """Streams a dataset into a staging folder beside `out` (`atomic.tmp_path(out)`), row group
    by row group (ROW_GROUP_SIZE rows), so memory holds one row group per config, never the
    dataset. `finish` writes the card and the build record (build_manifest.py), flushes
    everything to disk and swaps the staging folder with `out` in one atomic step: a reader, or
    a kill at any moment, sees the old build or the new one, never parts of both. `abort` (and
    the next build, for a killed one) removes the staging folder."""

    def __init__(self, out: Path):
        # A symlinked `out` is built where it points: the link stays, its target is replaced
        # (staged beside the target, so the swap is a rename on one file system).
        self.out = Path(out).expanduser().resolve()
        self.stage = atomic.tmp_path(self.out)
        self.pending: dict[str, list[dict]] = {c: [] for c in dataset_configs()}  # rows not yet converted
        self.parts: dict[str, list] = {
            c: [] for c in dataset_configs()
        }  # converted rows of the next row group
        self.group_rows: dict[str, int] = dict.fromkeys(dataset_configs(), 0)  # ... and their count
        self.shards: dict[str, list[Path]] = {c: [] for c in dataset_configs()}
        self.open: dict[str, tuple] = {}  # config -> (ParquetWriter, rows, bytes) of its open shard
        self.started = False
        self._finishing = False  # finish() queues its writes without waiting
        self._schemas: dict = {}
        self.identity: dict | None = None
        self.cues: CueMeter | None = None  # once a family's scene row is written
        # Parquet encoding and writing run on one thread per config (pyarrow releases the GIL), each
        # file's writes in submission order (the same bytes), while this one reads the next rows;
        # at most IO_PENDING writes wait beyond one per config. At the end, the configs' last row
        # groups are written at once rather than one after another.
        self._io: dict[str, ThreadPoolExecutor] = {}
        self._io_pending: deque[Future] = deque()

    def _start(self) -> None:
        if not self.started:
            why = replace_problem(self.out)  # the API and the CLI checked it; merge_folders and
            if why:  # direct callers of build_dataset come here first
                raise BuildError(Field("out"), f" {self.out}: {why}")
            self.out.parent.mkdir(parents=True, exist_ok=True)
            clean_folder_temps(self.out)
            if self.stage.exists():
                shutil.rmtree(self.stage)
            self.stage.mkdir()
            self.started = True

    def schema(self, config: str):
        """The arrow schema of a config's parquet files (made once: `features` imports datasets)."""
        if config not in self._schemas:
            self._schemas[config] = features(config).arrow_schema
        return self._schemas[config]

    def prepare(self) -> None:
        """Make every config's schema now (the datasets import, ~0.4 s) rather than at the first
        flush: the build calls it while its workers build the first units."""
        for c in dataset_configs():
            self.schema(c)

    def add(self, config: str, rows: Iterable[dict]) -> None:
        for r in rows:
            self.pending[config].append(r)  # _convert starts a new list
            if config == SCENES_CONFIG and r.get("family_id"):
                # Every slot cue is measured from the stems as written, on other threads while
                # the folder is being written.
                if self.cues is None:
                    from casu_dataset.mix.cue_checks import CueMeter

                    self.cues = CueMeter()
                self.cues.add(r)
            if self.group_rows[config] + len(self.pending[config]) == ROW_GROUP_SIZE:
                self._flush(config)
        # Converted as they come (while workers build the next units) rather than all at the end.
        self._convert(config)

    def _table(self, config: str, rows: list[dict]):
        """pa.Table.from_pylist(rows, schema), with the buffers from the system allocator: arrow's
        default (mimalloc) gives each row group fresh pages, and zeroing them (transparent huge
        pages) cost a build more system time than its parquet writing took. The values are the same."""
        import pyarrow as pa

        schema = self.schema(config)
        pool = pa.system_memory_pool()
        return pa.Table.from_arrays(
            [
                pa.array([r.get(n) for r in rows], type=f.type, memory_pool=pool)
                for n, f in zip(schema.names, schema)
            ],
            schema=schema,
        )

    def _convert(self, config: str) -> None:
        """The config's pending rows, as one more part of the row group being filled."""
        if self.pending[config]:
            self.parts[config].append(self._table(config, self.pending[config]))
            self.group_rows[config] += len(self.pending[config])
            self.pending[config] = []

    def _flush(self, config: str, empty_ok: bool = False) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._convert(config)
        parts = self.parts[config]
        if not parts and not empty_ok:
            return
        self._start()
        pool = pa.system_memory_pool()
        # One chunk per column, as one conversion of all the rows gives (the same parquet bytes).
        if not parts:
            table = self._table(config, [])
        elif len(parts) == 1:
            table = parts[0]
        else:
            table = pa.concat_tables(parts).combine_chunks(memory_pool=pool)
        self.parts[config], self.group_rows[config] = [], 0
        if config not in self.open:
            part = self.stage / config / f".shard{len(self.shards[config]):05d}.part"
            part.parent.mkdir(parents=True, exist_ok=True)
            self.shards[config].append(part)
            # FLAC bytes do not compress further; snappy keeps the text columns small and the write
            # fast. pyarrow writes no timestamps, so the file is a pure function of its rows.
            self.open[config] = (
                pq.ParquetWriter(str(part), table.schema, memory_pool=pool, **PARQUET_OPTIONS),
                0,
                0,
            )
        w, n, size = self.open[config]
        self._submit(config, w.write_table, table, row_group_size=ROW_GROUP_SIZE)
        n, size = n + table.num_rows, size + table.nbytes
        self.open[config] = (w, n, size)
        if n >= SHARD_ROWS or size >= SHARD_BYTES:
            self._close(config)

    def _close(self, config: str) -> None:
        w, _, _ = self.open.pop(config)
        self._submit(config, w.close)

    def _submit(self, config: str, fn, *args, **kwargs) -> None:
        io = self._io.get(config)
        if io is None:
            io = self._io[config] = ThreadPoolExecutor(1, thread_name_prefix=f"parquet-{config}")
        self._io_pending.append(io.submit(fn, *args, **kwargs))
        # The oldest write is running or next on its thread (every earlier one has returned), so
        # waiting for it cannot wait on this thread. finish() has every row in memory already.
        while not self._finishing and len(self._io_pending) > IO_PENDING + len(self._io):
            self._io_pending.popleft().result()  # a failed write raises here

    def _drain(self) -> None:
        """Wait for every submitted write (the first failure raises), and stop the thread."""
        while self._io_pending:
            self._io_pending.popleft().result()
        for io in self._io.values():
            io.shutdown()
        self._io.clear()

    def finish(self, rows: dict, report: BuildReport, settings: dict, on_configs=None) -> None:
        """`rows`: every config's rows as written (light() is enough): the card is made from them.
        `on_configs(config_hashes)` runs once the parquet files are final and before the card is
        written (build --relock writes the lock there, so the card can name it)."""
        from casu_dataset.formats import build_manifest

        self._start()
        self._finishing = True
        try:
            for c in dataset_configs():
                if self.pending[c] or self.parts[c] or not self.shards[c]:
                    self._flush(
                        c, empty_ok=True
                    )  # an empty config is one empty shard, as load_dataset expects
                if c in self.open:
                    self._close(c)
            self._drain()
            for c in dataset_configs():
                n = len(self.shards[c])
                for i, part in enumerate(self.shards[c]):
                    os.replace(part, self.stage / c / shard_name(i, n))
            shas = build_manifest.file_hashes(self.stage)  # only the parquet files exist yet
            hashes = build_manifest.config_hashes(shas, dataset_configs())
            if on_configs is not None:
                on_configs(hashes)
            self.identity = build_manifest.identity(report.lock, {c: hashes[c] for c in mcq_configs()})
            report.identity = self.identity
            if self.cues is not None:
                report.cues = self.cues.result()["summary"]
            card, attribution = dataset_card(rows, report, settings), attribution_file(rows)
            # Timings vary run to run, so they are printed, not written: the folder stays byte-stable.
            build_report = json.dumps(
                {
                    "settings": settings,
                    "built": report.built,
                    "skipped": report.skipped,
                    "lock": report.lock,
                    "realization": report.realization_summary(),
                    "cue_checks": report.cues,
                    "identity": self.identity,
                },
                indent=1,
                sort_keys=True,
            )
            for fname, text in (
                ("ATTRIBUTION.md", attribution),
                ("build_report.json", build_report),
                ("eval.yaml", eval_yaml(rows, settings)),
                ("README.md", card),
            ):
                (self.stage / fname).write_text(text)
            build_manifest.write(self.stage, self.identity, known=shas)
            atomic.fsync_tree(self.stage)  # on disk before the swap, so a crash cannot expose an empty file
            self._swap()
        except BaseException:
            self.abort()
            raise

    def _swap(self) -> None:
        if self.out.exists():
            if not self.out.is_dir():
                raise BuildError(Field("out"), f" {self.out}: is a file, not a folder")
            keep = self.out / ".cache"  # the Hub upload's resume state belongs to the folder, not a build
            if keep.is_dir() and not (self.stage / ".cache").exists():
                shutil.copytree(keep, self.stage / ".cache")
            if not atomic.exchange(self.stage, self.out):
                # No atomic exchange on this file system: two renames; the old build stays at the
                # staging name until the new one is in place.
                old = _old_path(self.out)
                os.replace(self.out, old)
                os.replace(self.stage, self.out)
                self.stage = old
            shutil.rmtree(self.stage, ignore_errors=True)  # now the old build
        else:
            os.replace(self.stage, self.out)

    def abort(self) -> None:
        if self.cues is not None:
            self.cues.close()
        for io in self._io.values():
            io.shutdown(wait=True, cancel_futures=True)  # nothing writes once this returns
        self._io.clear()
        self._io_pending.clear()
        for w, _, _ in self.open.values():
            try:
                w.close()
            except Exception:  # noqa: BLE001  (a half-written part is removed below either way)
                pass
        self.open.clear()
        if self.started and self.stage.exists():
            shutil.rmtree(self.stage, ignore_errors=True)


def merge_folders(out: str | Path, shards: list[str | Path]) -> BuildReport:
    """Join shard folders into one dataset identical to a single-machine build."""
    from casu_dataset.formats.reader import BuiltDataset

    out = Path(out)
    reports = []
    folders = [BuiltDataset(Path(d)) for d in shards]
    for d, ds in zip(shards, folders):
        ds.verify()  # checked first: LoadError (a ValueError) naming the file of another build
        p = Path(d) / "build_report.json"
        if not p.is_file():
            raise BuildError(f"{d}: not a CASU build folder (no build_report.json)")
        reports.append(json.loads(p.read_text()))
    seen_folder: dict[Path, str | Path] = {}
    for d in shards:
        real = Path(d).resolve()
        if real in seen_folder:
            raise BuildError(f"{d}: the same shard folder as {seen_folder[real]}; give each shard once")
        seen_folder[real] = d
    built_in: dict[str, str | Path] = {}
    for d, r in zip(shards, reports):
        for sid in r["built"]:
            if sid in built_in:
                raise BuildError(
                    f"{d}: scene {sid} is also in {built_in[sid]}; shards of one build hold each scene once "
                    "(the same --num-shards, each --shard-index once)"
                )
            built_in[sid] = d
    settings = dict(reports[0]["settings"])

    def same(st):  # clips rejected on first use differ by shard: they are joined, not compared
        return {k: v for k, v in st.items() if k != "catalog_rejected"}

    for d, r in zip(shards, reports):
        if same(r["settings"]) != same(settings):
            raise BuildError(f"{d}: built with different settings than {shards[0]}; shards cannot be merged")
    if any("catalog_rejected" in r["settings"] for r in reports):
        settings["catalog_rejected"] = merge_rejected(
            [r["settings"].get("catalog_rejected") for r in reports]
        )
    files = {c: [ds.files(c) for ds in folders] for c in dataset_configs()}
    # Pass 1 (no audio): the rows the card is made from. Stable by scene: a scene's rows are all
    # in one shard and keep their order.
    rows = {}
    for c in files:
        cols = [n for n in features(c) if n not in AUDIO_COLUMNS]
        meta = [r for ds in folders for r in ds.table(c, columns=cols).arrow.to_pylist()]
        rows[c] = sorted(meta, key=lambda r: r["scene_id"])
    report = BuildReport(
        built=sorted(b for r in reports for b in r["built"]),
        skipped=sorted((s for r in reports for s in r["skipped"]), key=lambda s: s["scene_id"]),
    )
    locks = {json.dumps(r.get("lock"), sort_keys=True) for r in reports}
    if len(locks) > 1:
        raise BuildError(
            f"{shards[0]}: the shards followed different realization locks; they cannot be merged"
        )
    report.lock = reports[0].get("lock")
    check_writable(out, rows, report, None)
    # Pass 2: the full rows, one row group per shard folder at a time, merged in scene order.
    writer = FolderWriter(out)
    try:
        for c, per_shard in files.items():
            streams = [_stream_rows(d, fs) for d, fs in zip(shards, per_shard)]
            writer.add(c, heapq.merge(*streams, key=lambda r: r["scene_id"]))
        writer.finish(rows, report, settings)
    except BaseException:
        writer.abort()
        raise
    return report


def _stream_rows(folder, files: list[Path]):
    """A shard folder's rows of one config, row group by row group; they must be in scene order
    (as build_dataset writes them) for the merge to equal a single build."""
    last = ""
    for f in files:
        bad = lambda why: BuildError(f"{folder}: {f.name}: not a readable parquet file ({why})")  # noqa: E731
        for rows in row_groups(f, None, bad):
            for r in rows:
                if r["scene_id"] < last:
                    raise BuildError(
                        f"{folder}: {f.name}: rows are not in scene order ({r['scene_id']!r} after "
                        f"{last!r}); cannot merge it without reading it whole"
                    )
                last = r["scene_id"]
                yield r
