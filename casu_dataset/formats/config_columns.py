"""Every built config's columns, in order, and the parquet schema its files are written with.

The schema carries, under b"huggingface", the datasets Features JSON that `load_dataset` reads
the files with: audio as Audio(sampling_rate=16000, decode=False) (decode=False is stored, so rows
come back as {bytes, path} on every install: decoding would import torchcodec, which cannot load
beside the CPU torch; casu_dataset.load() decodes with soundfile instead).

It is made with pyarrow alone, as datasets 5.2's `Features(...).arrow_schema` makes it: importing
datasets (~0.6 s) sat on every build's path only for this. tests/test_writer_io.py checks that
both give the same schema, metadata included, for every config.
"""

from __future__ import annotations

import json

from casu_dataset.contract import DESCRIPTION_TASK, FAMILY_FIELDS, SCENES_CONFIG
from casu_dataset.core.audio_io import SAMPLE_RATE

STRING, STRINGS, AUDIO = "string", "strings", "audio"  # Value("string"), List(Value("string")), Audio


def columns(config: str) -> dict[str, str]:
    """The config's columns, in file order: name -> STRING, STRINGS or AUDIO."""
    fam = dict.fromkeys(FAMILY_FIELDS, STRING)
    if config == SCENES_CONFIG:
        return {
            "scene_id": STRING,
            "place": STRING,
            "speech_type": STRING,
            "description": STRING,
            "audio": AUDIO,
            "background": AUDIO,
            "speech": AUDIO,
            "events": AUDIO,
            "script": STRING,
            "annotation": STRING,
            "variant_of": STRING,
            **fam,
        }
    if config == DESCRIPTION_TASK:
        return {
            "id": STRING,
            "scene_id": STRING,
            "audio": AUDIO,
            "reference": STRING,
            "event_descriptions": STRINGS,
            "turns": STRINGS,
            "place": STRING,
            "speech_type": STRING,
            **fam,
        }
    return {
        "id": STRING,
        "scene_id": STRING,
        "task": STRING,
        "audio": AUDIO,
        "question": STRING,
        "options": STRINGS,
        "answer": STRING,
        "rationale": STRING,
        "layers": STRINGS,
        "minimal_pair_id": STRING,
        "place": STRING,
        "speech_type": STRING,
        **fam,
    }


# The mixture, then the scenes config's stems.
AUDIO_COLUMNS = tuple(n for n, k in columns(SCENES_CONFIG).items() if k == AUDIO)
_VALUE = {"dtype": "string", "_type": "Value"}
_FEATURE = {
    STRING: _VALUE,
    STRINGS: {"feature": _VALUE, "_type": "List"},
    AUDIO: {"sampling_rate": SAMPLE_RATE, "decode": False, "_type": "Audio"},
}


def audio_type():
    """An audio column's arrow type, datasets.Audio's: struct<bytes: binary, path: string>."""
    import pyarrow as pa

    return pa.struct({"bytes": pa.binary(), "path": pa.string()})


def arrow_schema(config: str):
    """The parquet schema of the config's files (a pyarrow.Schema), datasets' metadata included."""
    import pyarrow as pa

    types = {STRING: pa.string(), STRINGS: pa.list_(pa.string()), AUDIO: audio_type()}
    cols = columns(config)
    meta = {"info": {"features": {n: _FEATURE[k] for n, k in cols.items()}}}
    return pa.schema([(n, types[k]) for n, k in cols.items()]).with_metadata(
        {"huggingface": json.dumps(meta)}
    )
