"""`casu_dataset.load(path_or_repo, task)`: a built CASU dataset's rows as items with decoded audio.

    import casu_dataset
    item = casu_dataset.load("./casu_mini", "contextual_reasoning")[0]
    item.waveform, item.sample_rate, item.question, item.options, item.key

The rows come from `casu_dataset.formats.reader` (a local folder read from its parquet files with
pyarrow, a Hub id through `datasets.load_dataset`, audio left as bytes). Audio is decoded with
soundfile (casu_dataset.core.audio_io) when `waveform` is read, never with torchcodec.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from casu_dataset.contract import (
    SCENES_CONFIG,
    UnknownTaskError,
    registered_task,
    tasks,
)
from casu_dataset.core.audio_io import SAMPLE_RATE
from casu_dataset.formats.reader import (
    ALL_CONFIG,
    BuiltDataset,
    ConfigNotFoundError,
    LoadError,
    Row,
)

__all__ = [
    "ALL_CONFIG",
    "ConfigNotFoundError",
    "LoadError",
    "Row",
    "UnknownTaskError",
    "data_files",
    "load",
    "waveform",
    "decode_audio",
]


def _config_of(task: str) -> str:
    if task == ALL_CONFIG:
        return task
    spec = registered_task(task)
    if spec is None:
        raise UnknownTaskError(
            f"unknown task {task!r} (tasks: {', '.join(t.name for t in tasks())}, {ALL_CONFIG})"
        )
    return spec.dataset_config


def data_files(folder: str | Path, task: str = ALL_CONFIG, split: str = "test") -> dict[str, list[str]]:
    """`{split: [absolute parquet paths]}` of one task (or `all`) of a built local folder, for
    `datasets.load_dataset("parquet", data_files=...)`: works from any working directory, and the
    datasets cache is keyed by these files, so a rebuilt folder (or another folder of the same
    name) is never served stale, as `load_dataset(folder)` is (its cache is keyed by the name).
    A LoadError names a folder whose build record does not check out."""
    config = _config_of(task) if task != SCENES_CONFIG else task
    ds = BuiltDataset(Path(folder).expanduser().resolve())
    # The build record is checked here (no stray or missing file, every size as written, the
    # identity consistent); `datasets` then reads the parquet bytes itself, unhashed.
    ds.verify()
    return {split: [str(p) for p in ds.files(config, split)]}


def _audio_value(row_or_audio: Any, who: str) -> Mapping:
    """The `audio` value of a row (a dict, `datasets`' LazyRow inside `map`, any Mapping) or the
    value itself: `{bytes, path}` as stored, or `{array, sampling_rate, ...}` already decoded."""
    if not isinstance(row_or_audio, Mapping):
        raise LoadError(
            f"{who}: expected a CASU row or its audio value (a mapping), got {type(row_or_audio).__name__}"
        )
    audio = row_or_audio["audio"] if "audio" in row_or_audio else row_or_audio
    if not isinstance(audio, Mapping):
        raise LoadError(f"{who}: the row's audio is a {type(audio).__name__}, not {{bytes, path}}")
    return audio


def _decoded(audio: Mapping, who: str) -> tuple[np.ndarray, int] | None:
    """(mono float32 at 16 kHz, 16000) of a value that `datasets` or decode_audio already decoded."""
    if "array" not in audio:
        return None
    from casu_dataset.core.audio_io import AudioError, load_array

    name = f"{who}: audio {audio.get('path') or '(no path)'}"
    try:
        sr = int(audio["sampling_rate"])
        x = np.asarray(audio["array"], dtype=np.float32)
        if x.ndim == 2 and x.shape[0] < x.shape[1]:  # (channels, frames), as torchcodec gives it
            x = x.T
        return load_array(x, sr, name, SAMPLE_RATE), SAMPLE_RATE
    except (KeyError, TypeError, ValueError, AudioError) as err:
        raise LoadError(f"{name}: not a decoded waveform ({err})") from None


def waveform(row_or_audio: Mapping) -> tuple[np.ndarray, int]:
    """(float32 mono waveform, 16000) of a row from `datasets` (a dict, or the LazyRow that
    `map` passes), of its `audio` value `{bytes, path}`, or of a value already decoded: decoded
    with soundfile (no torchcodec), mixed down to mono and brought to 16 kHz as the contract says."""
    from casu_dataset.core.audio_io import AudioError, decode_bytes

    audio = _audio_value(row_or_audio, "waveform")
    done = _decoded(audio, "waveform")
    if done is not None:
        return done
    blob = audio.get("bytes")
    if not blob:
        raise LoadError("waveform: expected a CASU row or its audio value {bytes, path} with FLAC bytes")
    shown = audio.get("path") or "(no path)"
    try:
        x = decode_bytes(bytes(blob), f"the audio {shown}", SAMPLE_RATE)
    except AudioError as err:
        raise LoadError(f"waveform: the audio {shown} is not decodable FLAC ({err})") from None
    return x, SAMPLE_RATE


def decode_audio(batch: Mapping) -> dict:
    """`ds.with_transform(casu_dataset.decode_audio)` or `ds.map(casu_dataset.decode_audio)`:
    every row's `audio` as `{"array": float32 mono, "sampling_rate": 16000, "path": str}`, decoded
    with soundfile (no torchcodec, which cannot load beside the CPU torch). Takes a batch (column
    -> list, as `with_transform` and `map(batched=True)` pass it) or one row (a dict or `map`'s
    LazyRow); a value already decoded passes through. A value without FLAC bytes is a LoadError
    naming it. `ds.map` of a dataset from `datasets.load_dataset` needs torchcodec to store the
    result in the parquet's Audio column: use `casu_dataset.load_dataset`, whose audio is decoded."""
    if not isinstance(batch, Mapping) or "audio" not in batch:
        shown = sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__
        raise LoadError(f"decode_audio: no 'audio' column among {shown}")
    values = batch["audio"]
    one = isinstance(values, Mapping)
    decoded = []
    for audio in [values] if one else values:
        name = audio.get("path") if isinstance(audio, Mapping) else None
        if isinstance(audio, Mapping) and "array" in audio:
            x, sr = waveform(audio)
        else:
            if not (isinstance(audio, Mapping) and audio.get("bytes")):
                raise LoadError(f"decode_audio: row audio {name or audio!r} has no FLAC bytes")
            try:
                x, sr = waveform(audio)
            except LoadError as err:
                raise LoadError(f"decode_audio: row audio {name!r} is not decodable: {err}") from None
        decoded.append({"array": x, "sampling_rate": sr, "path": name})
    return {**batch, "audio": decoded[0] if one else decoded}


def load(path_or_repo: str | Path, task: str = ALL_CONFIG, split: str = "test") -> list[Row]:
    """The rows of one task (a task name, or `all` for every multiple-choice question) of a built
    CASU dataset: a local folder or a Hub dataset id. Raises LoadError (ConfigNotFoundError for
    a config or split the dataset lacks, UnknownTaskError for a task name no task has)."""
    if task == SCENES_CONFIG:
        raise UnknownTaskError(
            f"{task!r} holds whole scenes, not task items: read it with datasets.load_dataset"
        )
    return BuiltDataset(path_or_repo).rows(_config_of(task), split)
