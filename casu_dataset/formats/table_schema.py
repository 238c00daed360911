"""The column types of a built dataset's question configs, checked before anything runs.

A reader that trusts the rows turns a wrong type into a silent wrong result: `options` stored
as one string becomes seven "options" built from its characters, an integer `answer` column
reads as "", a null `audio` fails deep inside with "'NoneType' object is not subscriptable".
So every config a task reads is checked here first: each known column has its type, every
file of a config has the same schema, ids are non-null and unique, and a config has rows.
The functions return problems as text; `casu_dataset.formats.reader` raises them as LoadError."""

from __future__ import annotations

import pyarrow as pa

# Columns the harness reads, by the kind of Arrow type they must have.
STRING, STRINGS, AUDIO = "string", "list of strings", "audio (a struct with a binary 'bytes' field)"
COLUMN_KINDS = {
    "id": STRING,
    "scene_id": STRING,
    "task": STRING,
    "question": STRING,
    "answer": STRING,
    "reference": STRING,
    "minimal_pair_id": STRING,
    "place": STRING,
    "speech_type": STRING,
    "family_id": STRING,
    "variant": STRING,
    "family_shape": STRING,
    "slot_kind": STRING,
    "options": STRINGS,
    "layers": STRINGS,
    "event_descriptions": STRINGS,
    "turns": STRINGS,
    "audio": AUDIO,
}


def kind_of(t: pa.DataType) -> str:
    """The column kind an Arrow type is, in COLUMN_KINDS' words (else the Arrow type's own name)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return STRING
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and (
        kind_of(t.value_type) == STRING or pa.types.is_null(t.value_type)
    ):
        return STRINGS  # list<null>: only empty or null items, which the row checks name
    if pa.types.is_struct(t):
        i = t.get_field_index("bytes")
        if i >= 0 and (pa.types.is_binary(t.field(i).type) or pa.types.is_large_binary(t.field(i).type)):
            return AUDIO
    if pa.types.is_null(t):
        return "null (every value missing)"
    return str(t)


def column_problems(schema: pa.Schema, required: list[str]) -> list[str]:
    """Each known column whose type is not the one the harness reads. An optional column whose
    values are all missing (Arrow's null type) reads as empty; a required one is a problem."""
    out = []
    for f in schema:
        want = COLUMN_KINDS.get(f.name)
        got = kind_of(f.type)
        if pa.types.is_null(f.type) and f.name not in required:
            continue
        if want is not None and got != want:
            out.append(f"column {f.name!r} is {got}, not {want}")
    return out


def schema_difference(a: pa.Schema, b: pa.Schema) -> str:
    """'' when two files' schemas agree (names and types, metadata ignored), else what differs."""
    ta, tb = {f.name: f.type for f in a}, {f.name: f.type for f in b}
    parts = []
    if set(ta) - set(tb):
        parts.append(f"only in the first: {sorted(set(ta) - set(tb))}")
    if set(tb) - set(ta):
        parts.append(f"only in the second: {sorted(set(tb) - set(ta))}")
    parts += [f"{k!r} is {ta[k]} vs {tb[k]}" for k in sorted(set(ta) & set(tb)) if ta[k] != tb[k]]
    return "; ".join(parts)


def id_problems(rows: list[dict], limit: int = 5) -> list[str]:
    """Null or empty ids and ids given twice (each named with its row numbers)."""
    seen: dict[str, int] = {}
    out = []
    for i, r in enumerate(rows):
        v = r.get("id")
        if not isinstance(v, str) or not v.strip():
            out.append(f"row {i}: id is {v!r} (every row needs a non-empty id)")
        elif v in seen:
            out.append(f"rows {seen[v]} and {i}: id {v!r} given twice (ids must be unique)")
        else:
            seen[v] = i
        if len(out) >= limit:
            out.append("...")
            break
    return out
