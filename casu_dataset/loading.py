"""`casu_dataset.load(path_or_repo, task)`: a built CASU dataset's rows as items with decoded audio.

    import casu_dataset
    item = casu_dataset.load("./casu_mini", "contextual_reasoning")[0]
    item.waveform, item.sample_rate, item.question, item.options, item.key

A local folder is read from its parquet files directly (pyarrow, one thread); a Hub id goes
through `datasets.load_dataset` with the audio columns left as bytes. Audio is decoded with
soundfile (casu_dataset.audio_io) when `waveform` is first read, never with torchcodec.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .contract import FAMILY_FIELDS, LETTERS, SCENES_CONFIG, UnknownTaskError, mcq_configs, registered_task, tasks
from .errors import CasuError

ALL_CONFIG = "all"  # every multiple-choice question (the card's default config)


class LoadError(CasuError, ValueError):
    """A dataset that cannot be loaded as asked (the message names the folder, config or task)."""


class DatasetNotFound(LoadError, FileNotFoundError):
    pass


class ConfigNotFound(LoadError):
    pass


class UnknownTask(LoadError, UnknownTaskError):
    def __str__(self):
        return str(self.args[0])


@dataclass
class Item:
    """One row: a question (multiple-choice configs) or a description reference (scene_description).
    `key` is the correct option's letter, `answer` as stored (the same letter)."""
    id: str
    scene_id: str
    task: str
    audio_bytes: bytes = field(repr=False)
    question: str = ""
    options: list[str] = field(default_factory=list)
    answer: str = ""
    reference: str = ""
    sample_rate: int = 16000
    family_id: str | None = None
    variant: str | None = None
    family_shape: str | None = None
    slot_kind: str | None = None
    speech_version: str | None = None
    fill: str | None = None
    speech_group: str | None = None
    fill_group: str | None = None
    extra: dict = field(default_factory=dict, repr=False)  # every other column, as stored

    @property
    def key(self) -> str:
        return self.answer

    @property
    def key_index(self) -> int | None:
        return LETTERS.index(self.answer) if self.answer and self.answer in LETTERS else None

    @functools.cached_property
    def waveform(self) -> np.ndarray:
        """Mono float32 at `sample_rate`, decoded on first use."""
        from .audio_io import decode_bytes
        return decode_bytes(self.audio_bytes, f"{self.id}: audio", self.sample_rate)


_FIELDS = {"id", "scene_id", "task", "question", "options", "answer", "reference", *FAMILY_FIELDS}


def _item(row: dict, task: str) -> Item:
    audio = row.get("audio") or {}
    blob = audio.get("bytes") if isinstance(audio, dict) else None
    if not blob:
        raise LoadError(f"row {row.get('id')!r}: no audio bytes")
    kw = {k: row[k] for k in _FIELDS if row.get(k) is not None}
    kw.setdefault("task", task)
    kw["options"] = list(kw.get("options") or [])
    if "options" in row and not (all(isinstance(o, str) and o.strip() for o in kw["options"]) and kw["options"]
                                 and isinstance(row.get("answer"), str)
                                 and row["answer"] in tuple(LETTERS[: len(kw["options"])])):
        raise LoadError(f"row {row.get('id')!r}: options {kw['options']!r} and answer {row.get('answer')!r} are not "
                        "non-empty option texts with one of their letters as the key")
    return Item(audio_bytes=blob, extra={k: v for k, v in row.items() if k not in _FIELDS and k != "audio"}, **kw)


def _config_of(task: str) -> str:
    if task == ALL_CONFIG:
        return task
    spec = registered_task(task)
    if spec is None:
        raise UnknownTask(f"unknown task {task!r} (tasks: {', '.join(t.name for t in tasks())}, {ALL_CONFIG})")
    return spec.dataset_config


def is_local(source: str | Path) -> bool:
    """A folder path (existing or not) rather than a Hub id `ORG/NAME`."""
    s = str(source)
    return isinstance(source, Path) or os.path.exists(s) or s.startswith(("/", ".", "~")) or s.count("/") != 1


def _card_globs(root: Path, config: str, split: str) -> list[str] | None:
    """The data-file globs the card's YAML header gives `config`/`split` (None: not in the card)."""
    import yaml
    card = root / "README.md"
    try:  # strict: a card in another encoding would read as a header without its configs
        text = card.read_bytes().decode("utf-8") if card.is_file() else ""
    except UnicodeDecodeError as err:
        raise LoadError(f"{card}: the dataset card is not UTF-8 (byte {err.start}: {err.reason})") from None
    m = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", text, re.S)
    try:
        head = (yaml.safe_load(m.group(1)) if m else None) or {}
    except yaml.YAMLError as err:
        raise LoadError(f"{card}: the card's YAML header does not parse ({err})") from None
    for c in head.get("configs") or []:
        if isinstance(c, dict) and c.get("config_name") == config:
            files = c.get("data_files") or []
            for item in files if isinstance(files, list) else [files]:
                if isinstance(item, dict) and str(item.get("split")) == split:
                    p = item.get("path") or []
                    return [p] if isinstance(p, str) else list(p)
            raise ConfigNotFound(f"{root}: config {config!r} has no split {split!r}")
    return None


def _local_rows(root: Path, config: str, split: str) -> list[dict]:
    import pyarrow.parquet as pq
    if not root.is_dir():
        raise DatasetNotFound(f"{root}: no such dataset folder")
    globs = _card_globs(root, config, split)
    if globs is None:
        dirs = mcq_configs() if config == ALL_CONFIG else (config,)
        globs = [f"{d}/{split}-*.parquet" for d in dirs]
    for g in globs:  # a config's files never come from outside the dataset folder
        if not isinstance(g, str) or os.path.isabs(g) or ".." in re.split(r"[\\/]", g):
            raise LoadError(f"{root}: README.md: config {config!r} data file {g!r} points outside the dataset folder")
    files = sorted({p for g in globs for p in root.glob(g) if p.is_file()})
    for p in files:
        if not p.resolve().is_relative_to(root.resolve()):
            raise LoadError(f"{root}: {p.relative_to(root)} resolves outside the dataset folder ({p.resolve()})")
    if not files:
        have = sorted(p.name for p in root.iterdir() if p.is_dir() and any(p.glob("*.parquet")))
        raise ConfigNotFound(f"{root}: no parquet files for config {config!r} split {split!r} "
                             f"(configs here: {', '.join(have) or 'none'})")
    import pyarrow as pa

    from .build_manifest import MixedFolderError, verify
    from .table_schema import column_problems
    try:
        verify(root)  # a folder holding files of two builds is refused, naming the file
    except MixedFolderError as err:
        raise LoadError(str(err)) from None
    rows = []
    for f in files:
        try:  # One thread: Arrow's pool threads can abort the interpreter at exit here.
            t = pq.read_table(str(f), use_threads=False)
        except (pa.ArrowException, OSError) as err:
            raise LoadError(f"{root}: {f.relative_to(root)}: not a readable parquet file ({err})") from None
        bad = column_problems(t.schema, ["id", "scene_id", "audio"])
        if bad:
            raise LoadError(f"{root}: {f.relative_to(root)}: " + "; ".join(bad))
        rows.extend(t.to_pylist())
    return rows


def _hub_rows(repo: str, config: str, split: str) -> list[dict]:
    import datasets
    try:
        ds = datasets.load_dataset(repo, config, split=split)
    except (FileNotFoundError, ValueError) as err:
        raise ConfigNotFound(f"{repo}: cannot load config {config!r} split {split!r} ({err})") from None
    for col, feat in ds.features.items():  # builds before 2.0.1 declared decoding audio columns
        if isinstance(feat, datasets.Audio) and feat.decode:
            ds = ds.cast_column(col, datasets.Audio(decode=False))
    return list(ds)


def data_files(folder: str | Path, task: str = ALL_CONFIG, split: str = "test") -> dict[str, list[str]]:
    """`{split: [absolute parquet paths]}` of one task (or `all`) of a built local folder, for
    `datasets.load_dataset("parquet", data_files=...)`: works from any working directory, and the
    datasets cache is keyed by these files, so a rebuilt folder (or another folder of the same
    name) is never served stale, as `load_dataset(folder)` is (its cache is keyed by the name)."""
    root = Path(folder).expanduser().resolve()
    if not root.is_dir():
        raise DatasetNotFound(f"{folder}: no such dataset folder (build one with `python -m casu_dataset build "
                              f"--out {folder}`)")
    config = _config_of(task) if task != SCENES_CONFIG else task
    globs = _card_globs(root, config, split)
    if globs is None:
        dirs = mcq_configs() if config == ALL_CONFIG else (config,)
        globs = [f"{d}/{split}-*.parquet" for d in dirs]
    files = sorted({str(p) for g in globs for p in root.glob(g) if p.is_file()})
    if not files:
        raise ConfigNotFound(f"{root}: no parquet files for config {config!r} split {split!r}")
    return {split: files}


def waveform(row_or_audio: dict) -> tuple[np.ndarray, int]:
    """(float32 mono waveform, sample rate) of a row from `datasets` (or its `audio` value
    `{bytes, path}`), decoded with soundfile: no torchcodec."""
    import io

    import soundfile as sf
    audio = row_or_audio.get("audio", row_or_audio) if isinstance(row_or_audio, dict) else None
    blob = audio.get("bytes") if isinstance(audio, dict) else None
    if not blob:
        raise LoadError("waveform: expected a CASU row or its audio value {bytes, path} with FLAC bytes")
    x, sr = sf.read(io.BytesIO(blob), dtype="float32", always_2d=False)
    return x, int(sr)


def load(path_or_repo: str | Path, task: str = ALL_CONFIG, split: str = "test") -> list[Item]:
    """The items of one task (a task name, or `all` for every multiple-choice question) of a built
    CASU dataset: a local folder or a Hub dataset id. Raises DatasetNotFound, ConfigNotFound,
    UnknownTask (all LoadError)."""
    if task == SCENES_CONFIG:
        raise UnknownTask(f"{task!r} holds whole scenes, not task items: read it with datasets.load_dataset")
    config = _config_of(task)
    if is_local(path_or_repo):
        rows = _local_rows(Path(path_or_repo).expanduser(), config, split)
    else:
        rows = _hub_rows(str(path_or_repo), config, split)
    from .table_schema import id_problems
    bad = id_problems(rows)
    if bad:
        raise LoadError(f"{path_or_repo}: config {config!r}: " + "; ".join(bad))
    return [_item(r, task) for r in rows]
