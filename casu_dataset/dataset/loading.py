"""`casu_dataset.load(path_or_repo, task)`: a built CASU dataset's rows as items with decoded audio.

    import casu_dataset
    item = casu_dataset.load("./casu_mini", "contextual_reasoning")[0]
    item.waveform, item.sample_rate, item.question, item.options, item.key

The rows come from `casu_dataset.dataset.reader` (a local folder read from its parquet files with
pyarrow, a Hub id through `datasets.load_dataset`, audio left as bytes). Audio is decoded with
soundfile (casu_dataset.core.audio_io) when `waveform` is read, never with torchcodec.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from casu_dataset.contract import (
    SCENES_CONFIG,
    UnknownTaskError,
    registered_task,
    tasks,
)
from casu_dataset.dataset.reader import (
    ALL_CONFIG,
    BuiltDataset,
    ConfigNotFound,
    DatasetNotFound,
    LoadError,
    Row,
)

__all__ = [
    "ALL_CONFIG",
    "ConfigNotFound",
    "DatasetNotFound",
    "LoadError",
    "Row",
    "UnknownTaskError",
    "data_files",
    "load",
    "waveform",
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


def waveform(row_or_audio: dict) -> tuple[np.ndarray, int]:
    """(float32 mono waveform, sample rate) of a row from `datasets` (or its `audio` value
    `{bytes, path}`), decoded with soundfile: no torchcodec."""
    import io

    import soundfile as sf

    audio = row_or_audio.get("audio", row_or_audio) if isinstance(row_or_audio, dict) else None
    blob = audio.get("bytes") if isinstance(audio, dict) else None
    if not blob:
        raise LoadError("waveform: expected a CASU row or its audio value {bytes, path} with FLAC bytes")
    try:
        x, sr = sf.read(io.BytesIO(blob), dtype="float32", always_2d=False)
    except (RuntimeError, ValueError) as err:  # soundfile's LibsndfileError is a RuntimeError
        name = audio.get("path") if isinstance(audio, dict) else None
        shown = name or "(no path)"
        raise LoadError(f"waveform: the audio {shown} is not decodable FLAC ({err})") from None
    return x, int(sr)


def decode_audio(batch: dict) -> dict:
    """A `datasets` transform: `ds.with_transform(casu_dataset.decode_audio)` gives every row's
    `audio` as `{"array": float32 mono, "sampling_rate": int, "path": str}`, decoded with soundfile
    (no torchcodec, which cannot load beside the CPU torch). Takes a batch (column -> list, as
    `with_transform` passes it) or one row; a value without FLAC bytes is a LoadError naming it."""
    if "audio" not in batch:
        raise LoadError(f"decode_audio: no 'audio' column among {sorted(batch)}")
    values = batch["audio"]
    one = isinstance(values, dict)
    decoded = []
    for audio in [values] if one else values:
        name = (audio or {}).get("path") if isinstance(audio, dict) else None
        if not (isinstance(audio, dict) and audio.get("bytes")):
            raise LoadError(f"decode_audio: row audio {name or audio!r} has no FLAC bytes")
        try:
            x, sr = waveform(audio)
        except LoadError as err:
            raise LoadError(f"decode_audio: row audio {name!r} is not decodable: {err}") from None
        decoded.append({"array": x, "sampling_rate": sr, "path": name})
    return {**batch, "audio": decoded[0] if one else decoded}


def load(path_or_repo: str | Path, task: str = ALL_CONFIG, split: str = "test") -> list[Row]:
    """The rows of one task (a task name, or `all` for every multiple-choice question) of a built
    CASU dataset: a local folder or a Hub dataset id. Raises DatasetNotFound, ConfigNotFound,
    UnknownTaskError (all LoadError)."""
    if task == SCENES_CONFIG:
        raise UnknownTaskError(
            f"{task!r} holds whole scenes, not task items: read it with datasets.load_dataset"
        )
    return BuiltDataset(path_or_repo).rows(_config_of(task), split)
