"""A built CASU dataset as a `datasets.Dataset` whose audio is a waveform wherever people look:

    ds = casu_dataset.load_dataset("./casu_mini", "contextual_reasoning")
    ds[0]["audio"]["array"], ds[0]["audio"]["sampling_rate"]     # float32 mono, 16000

The parquet files declare `datasets.Audio(decode=False)`: plain row access then needs no
torchcodec (which cannot load beside the CPU torch), and the Hub viewer still plays the column.
Decoding it would need torchcodec, so this view casts the audio columns to `SoundfileAudio`, a
`datasets` feature with the same Arrow storage (`{bytes, path}`, no copy) that decodes with
soundfile. Because it is a feature and not a transform, every access path decodes: indexing,
iteration, `map` (the function sees decoded rows), `with_format("numpy")`, `streaming=True`.
`casu_dataset.load()` keeps returning the typed `Row`s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from casu_dataset.core.audio_io import SAMPLE_RATE
from casu_dataset.core.errors import LoadError
from casu_dataset.formats.config_columns import AUDIO_COLUMNS, audio_type


@dataclass
class SoundfileAudio:
    """A `datasets` feature over CASU's `{bytes, path}` audio struct: decodes to
    `{"array": float32 mono, "sampling_rate": 16000, "path": str}` with soundfile (+ soxr when a
    file has another rate), never torchcodec. A decoded value written back (by `map`) is not
    re-encoded: the cast refuses it, so `datasets` stores the arrays as a plain struct."""

    sampling_rate: int = SAMPLE_RATE
    decode: bool = True
    id: str | None = field(default=None, repr=False)
    dtype: ClassVar[str] = "dict"
    _type: str = field(default="CasuSoundfileAudio", init=False, repr=False)

    @property
    def pa_type(self):
        return audio_type()

    def __call__(self):
        return self.pa_type

    def encode_example(self, value: Any) -> dict:
        if isinstance(value, dict) and "bytes" in value and "array" not in value:
            return {"bytes": value.get("bytes"), "path": value.get("path")}
        # TypeError: `datasets` then stores what the function returned as its own type
        raise TypeError("SoundfileAudio stores FLAC bytes; a decoded array is kept as returned")

    def decode_example(self, value: dict, token_per_repo_id=None) -> dict:
        from casu_dataset.core.audio_io import AudioError, decode_bytes

        path = value.get("path") if isinstance(value, dict) else None
        blob = value.get("bytes") if isinstance(value, dict) else None
        if not blob:
            raise LoadError(f"audio {path or '(no path)'}: no FLAC bytes in the row")
        try:
            x = decode_bytes(blob, f"audio {path or '(no path)'}", self.sampling_rate)
        except AudioError as err:
            raise LoadError(str(err)) from None
        return {"array": x, "sampling_rate": self.sampling_rate, "path": path}

    def cast_storage(self, storage):
        import pyarrow as pa
        from datasets.table import array_cast

        if pa.types.is_struct(storage.type) and storage.type.get_field_index("array") >= 0:
            raise TypeError("SoundfileAudio stores FLAC bytes, not decoded arrays")
        if pa.types.is_struct(storage.type):
            n = len(storage)
            parts = [
                storage.field(name) if storage.type.get_field_index(name) >= 0 else pa.nulls(n, typ)
                for name, typ in (("bytes", pa.binary()), ("path", pa.string()))
            ]
            storage = pa.StructArray.from_arrays(parts, ["bytes", "path"], mask=storage.is_null())
        return array_cast(storage, self.pa_type)

    def embed_storage(self, storage):
        return storage  # the bytes are already in the table

    def flatten(self):
        from datasets import Value

        return {"bytes": Value("binary"), "path": Value("string")}


def _register() -> None:
    from datasets.features.features import _FEATURE_TYPES, register_feature

    if _FEATURE_TYPES.get("CasuSoundfileAudio") is not SoundfileAudio:
        import warnings

        with warnings.catch_warnings():  # `datasets` marks register_feature experimental on every call
            warnings.simplefilter("ignore", UserWarning)
            register_feature(SoundfileAudio, "CasuSoundfileAudio")


def with_waveforms(ds):
    """`ds` (a `datasets.Dataset` or `IterableDataset` of a CASU config) with its audio columns
    decoded with soundfile on access (no data copied)."""
    _register()
    features = ds.features
    if features is None:  # a streamed Hub dataset may not know its features before the first row
        raise LoadError("load_dataset: the dataset's features are unknown; cannot set the audio decoding")
    for col in AUDIO_COLUMNS:
        if col in features:
            ds = ds.cast_column(col, SoundfileAudio())
    return ds


def load_dataset(
    path_or_repo: str | Path,
    config: str = "all",
    split: str = "test",
    *,
    streaming: bool = False,
    cache_dir: str | Path | None = None,
    revision: str | None = None,
):
    """A built CASU dataset (a local folder or a Hub id) as a `datasets.Dataset` (or an
    `IterableDataset` with `streaming=True`) whose audio columns decode to float32 mono 16 kHz
    arrays with soundfile. `config` is a task name, `all` (every multiple-choice question) or
    `scenes`. A local folder is read from its parquet files (its build record checked first), so a
    rebuilt folder is never served from the `datasets` cache of an older one."""
    import datasets

    from casu_dataset.formats.loading import data_files
    from casu_dataset.formats.reader import is_local

    cache = str(cache_dir) if cache_dir is not None else None
    if is_local(path_or_repo):
        files = data_files(path_or_repo, config, split)
        ds = datasets.load_dataset(
            "parquet", data_files=files, split=split, streaming=streaming, cache_dir=cache
        )
    else:
        try:
            ds = datasets.load_dataset(
                str(path_or_repo),
                config,
                split=split,
                streaming=streaming,
                cache_dir=cache,
                revision=revision,
            )
        except (FileNotFoundError, ValueError, OSError) as err:
            raise LoadError(f"load_dataset: {path_or_repo} ({config}, {split}): {err}") from None
    return with_waveforms(ds)
