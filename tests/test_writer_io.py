"""The folder writer's fast paths write what the plain ones would: audio columns that are views of
the rows' bytes give the same arrow arrays, sizes (so the same shard boundaries) and parquet bytes
as pa.array (test_build_workers.py checks the hashes the IO threads take of the files)."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import soundfile as sf

from casu_dataset.contract import dataset_configs
from casu_dataset.core.parquet_files import PARQUET_OPTIONS
from casu_dataset.dataset.writer import ROW_GROUP_SIZE, audio_column
from casu_dataset.formats.config_columns import AUDIO, STRING, STRINGS, arrow_schema, columns


def _flac(seed: int, seconds: float) -> bytes:
    x = np.random.default_rng(seed).uniform(-0.5, 0.5, int(16000 * seconds)).astype(np.float32)
    buf = io.BytesIO()
    sf.write(buf, x, 16000, format="FLAC", subtype="PCM_24")
    return buf.getvalue()


def _parquet(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=ROW_GROUP_SIZE, **PARQUET_OPTIONS)
    return sink.getvalue().to_pybytes()


def test_audio_columns_as_views_write_the_same_bytes():
    schema = arrow_schema("scenes")
    audio = [n for n, k in columns("scenes").items() if k == AUDIO]
    assert audio == ["audio", "background", "speech", "events"]
    clip = _flac(1, 0.5)
    values = [
        {"bytes": _flac(0, 1.0), "path": "a.flac"},
        {"bytes": clip, "path": None},  # the same bytes object in two rows
        {"bytes": clip},  # no path key
        None,  # a missing stem
        {"bytes": bytearray(_flac(2, 0.3)), "path": "b.flac"},  # not bytes: through pa.array
        {"bytes": b"", "path": "empty.flac"},
        {"bytes": None, "path": "only-a-path.flac"},
    ]
    typ = schema.field("audio").type
    plain = pa.array(values, type=typ)
    # in parts, as the writer converts rows unit by unit and joins them into one row group
    parts = [
        audio_column(values[:3], typ, pa.system_memory_pool()),
        audio_column(values[3:], typ, pa.system_memory_pool()),
    ]
    joined = pa.chunked_array(parts[0].chunks + parts[1].chunks).combine_chunks()
    assert joined.equals(plain) and joined.to_pylist() == plain.to_pylist()
    assert joined.nbytes == plain.nbytes  # the writer's shard sizes add these up
    one = pa.table({"audio": plain})
    other = pa.Table.from_arrays([pa.chunked_array(parts[0].chunks + parts[1].chunks)], names=["audio"])
    assert _parquet(other.combine_chunks()) == _parquet(one)


def test_config_schemas_are_the_ones_datasets_makes():
    """The schema written without importing datasets is the one datasets' Features gives (field
    types and the b"huggingface" JSON byte for byte), so load_dataset reads the files as before."""
    import datasets

    feature = {
        STRING: datasets.Value("string"),
        STRINGS: datasets.List(datasets.Value("string")),
        AUDIO: datasets.Audio(sampling_rate=16000, decode=False),
    }
    for config in dataset_configs():
        ours = arrow_schema(config)
        theirs = datasets.Features({n: feature[k] for n, k in columns(config).items()}).arrow_schema
        assert ours.equals(theirs, check_metadata=True), config
        assert ours.metadata == theirs.metadata
        back = datasets.Features.from_arrow_schema(ours)
        assert back["audio"] == datasets.Audio(sampling_rate=16000, decode=False)
    assert list(columns("scenes"))[:8] == [
        "scene_id",
        "place",
        "speech_type",
        "description",
        "audio",
        "background",
        "speech",
        "events",
    ]
