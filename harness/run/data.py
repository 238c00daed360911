"""A built CASU dataset (a local folder or a Hub repo) as evaluation samples.

Reading is `casu_dataset.formats.reader`'s (the one reader of a built dataset: exactly the parquet files
on disk, hashed from the bytes parsed, the build record checked); this module adds what the
harness checks before any model runs (the columns each task reads, the scenes the layer
conditions render from) and the audio under a condition. Every table and row list is held by
its `CasuData` alone, so a run's audio is freed with it.

Audio stays as FLAC bytes in the Arrow table until a batch needs it; decoding uses soundfile
(datasets' own Audio decoding needs torchcodec, which cannot load beside the CPU torch)."""

from __future__ import annotations

import functools
import hashlib
import json
from collections import OrderedDict
from pathlib import Path

import numpy as np

from casu_dataset.contract import AnnotationError, SceneAnnotation
from casu_dataset.core.audio_io import decode_bytes
from casu_dataset.formats.reader import BuiltDataset, LoadError, Row, SceneRow, Table
from harness.run.conditions import Condition, render

# Columns a task reads from its config (beyond these, missing text columns read as empty).
REQUIRED = {
    "multiple_choice": ["id", "scene_id", "audio", "question", "options", "answer"],
    "generate_until": ["id", "scene_id", "audio", "reference"],
}
METRIC_COLUMNS = {"event_match": "event_descriptions", "one_minus_wer": "turns"}


class CasuData:
    def __init__(self, source: str | Path, seed: int = 0, full_check: bool = False, flag: str = "--dataset"):
        """`full_check`: every file of a built folder hashed against its build record before use
        (--check_integrity); else sizes at once and each file's sha256 as it is read. `flag`: what
        named the dataset, first in every error (`--dataset`, or `dataset_path (FILE)`)."""
        self.source = str(source)
        self.flag = flag
        self.seed = seed
        self.dataset = BuiltDataset(source, full=full_check)
        self._tables: dict[tuple[str, str], Table] = {}
        self._samples: dict[tuple[str, str], list[Row]] = {}
        self._audio_cache: OrderedDict = OrderedDict()
        self._warned: set = set()
        self.decode_seconds = 0.0

    def table(self, config: str, split: str = "test") -> Table:
        """One config and split, read once per CasuData (every later use sees the same rows)."""
        key = (config, split)
        if key not in self._tables:
            self._tables[key] = self._read(lambda: self.dataset.table(config, split))
        return self._tables[key]

    def samples(self, config: str, split: str = "test") -> list[Row]:
        """The checked rows of one config (read once per CasuData)."""
        key = (config, split)
        if key not in self._samples:
            t = self.table(config, split)
            self._samples[key] = self._read(t.rows)
        return self._samples[key]

    def _read(self, read):
        try:
            return read()
        except LoadError as err:  # the reader names the folder or repo; the harness names its flag
            raise LoadError(f"{self.flag} {err}") from None

    def check(self, task) -> None:
        """Fail before any model runs if the task's config lacks a column the task reads."""
        t = self.table(task.dataset_config, task.split)
        need = REQUIRED[task.output_type] + [c for m, c in METRIC_COLUMNS.items() if m in task.metrics]
        if task.is_lmeval_style:  # its templates name the columns they read (checked row by row below)
            need = [c for c in need if c in ("id", "scene_id", "audio")] + [
                c for m, c in METRIC_COLUMNS.items() if m in task.metrics
            ]
            if task.output_type == "generate_until" and task.doc_to_target is None:
                need.append("reference")
        self._read(lambda: t.require(need, f"which task {task.task!r} ({task.output_type}) needs"))
        rows = self.samples(task.dataset_config, task.split)  # every row parses before any model runs
        if task.is_lmeval_style:
            self._check_templates(task, rows)

    def _check_templates(self, task, rows: list[Row]) -> None:
        """Every row renders through an lm-eval-style task's templates (prompt, choices, target)."""
        from harness.task.lmeval_yaml import LmEvalYamlError
        from harness.task.prompts import item, task_prompt

        for row in rows:
            try:
                options, _, _ = item(task, row)
                task_prompt(task, row, options, row.place)
                if task.output_type == "multiple_choice" and len(row.options or []) > 1:
                    options, _, _ = item(task, row, 1)  # a rotated row (--circular) renders too
                    task_prompt(task, row, options, row.place, 1)
            except LmEvalYamlError as err:
                raise LoadError(
                    f"{self.flag} {self.source}: task {task.task!r} ({task.source_file}), row {row.id!r} "
                    f"of config {task.dataset_config!r}: {err}"
                ) from None

    def check_all(self, tasks) -> None:
        """Every task's config checked; "evaluated 0 requests" with exit 0 is a wrong result, so a
        run whose configs are all empty is refused, and an empty one among others is named."""
        import sys

        for t in tasks:
            self.check(t)
        empty = [t for t in tasks if not self.table(t.dataset_config, t.split).num_rows]
        if empty and len(empty) == len(tasks):
            raise LoadError(
                f"{self.flag} {self.source}: "
                + "; ".join(f"config {t.dataset_config!r} split {t.split!r} has no rows" for t in empty)
                + f": task(s) {', '.join(t.task for t in empty)} would evaluate nothing"
            )
        for t in empty:
            if (t.dataset_config, t.split) in self._warned:
                continue
            self._warned.add((t.dataset_config, t.split))
            print(
                f"warning: {self.flag} {self.source}: config {t.dataset_config!r} split {t.split!r} has no "
                f"rows: task {t.task!r} scores nothing (reported with n = 0)",
                file=sys.stderr,
            )

    def check_scenes(self, samples: list[Row]) -> None:
        """The `scenes` config the layer conditions render from: checked stems and annotations
        (casu_dataset.formats.reader) and a row for every sample's scene (else each sample would fail
        alone, deep in rendering, with a TypeError or KeyError)."""
        have = self._scenes
        lost = sorted({s.scene_id for s in samples} - set(have))
        if lost:
            raise LoadError(
                f"{self.flag} {self.source}: config 'scenes': no row for scene(s) {lost[:5]}"
                f"{' ...' if len(lost) > 5 else ''} that questions use"
            )

    @functools.cached_property
    def _scenes(self) -> dict[str, SceneRow]:
        t = self.table("scenes", "test")
        self._read(
            lambda: t.require(
                ["scene_id", "background", "speech", "events", "annotation"],
                "which --conditions other than the full mixture render from",
            )
        )
        return {r.scene_id: r for r in self._read(t.scene_rows)}

    @functools.cached_property
    def identity(self) -> dict | None:
        """The dataset identity its build recorded (lock sha256 + question-config hashes), or None
        for a folder without a build record and for Hub repos."""
        return self._read(lambda: self.dataset.identity)

    def fingerprint(self, parts: list) -> str:
        """A hash of exactly the data read: each item a config name (split "test") or (config, split)."""
        h = hashlib.sha256()
        for c, s in sorted({(p, "test") if isinstance(p, str) else tuple(p) for p in parts}):
            h.update(json.dumps([c, s, self.table(c, s).digest]).encode())
        return h.hexdigest()[:16]

    def audio(self, sample: Row, condition: Condition) -> np.ndarray:
        """The sample's audio under a condition (16 kHz mono float32), cached per scene."""
        import time

        key = (sample.scene_id, condition.name)
        hit = self._audio_cache.get(key)
        if hit is not None:
            self._audio_cache.move_to_end(key)
            return hit
        t0 = time.perf_counter()
        if condition.is_full:
            x = decode_bytes(sample.audio_bytes, f"{sample.id} audio")
        else:
            sc = self._scenes.get(sample.scene_id)
            if sc is None:
                raise LoadError(
                    f"{self.flag} {self.source}: scene {sample.scene_id!r} has no stems in 'scenes'"
                )
            stems = {
                k: decode_bytes(sc.stem(k), f"{sample.scene_id} {k} stem")
                for k in ("background", "speech", "events")
            }
            try:
                ann = SceneAnnotation.parse(
                    sc.annotation, f"{self.flag} {self.source}: scene {sample.scene_id!r} annotation"
                )
            except AnnotationError as err:
                raise LoadError(str(err)) from None
            x = render(condition, stems, ann, self.seed)
        self.decode_seconds += time.perf_counter() - t0
        self._audio_cache[key] = x
        if len(self._audio_cache) > 32:
            self._audio_cache.popitem(last=False)
        return x
