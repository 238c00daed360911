"""`casu_dataset.load` and the built-dataset reader: items with decoded audio and their family
fields, a Hub id read through `datasets`, named errors for a missing folder, task, config or
split, a build record that does not match the files, bad rows named by config and row, and a
corpus of damaged folders (rules in tests/bad_input_corpus.py); parquet row groups sized for
streaming."""

import io
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from bad_input_corpus import (
    ROLE,
    SHARD,
    Ctx,
    E,
    Outcome,
    check_case,
    duplicate_ids,
    expect_error,
    setcol,
    table_edit,
    truncated,
)
from conftest import fixture_builder, question_counts, tiny_dataset

import casu_dataset
from casu_dataset.contract import FAMILY_FIELDS, mcq_configs


def test_load_items_decoded(casu_small, no_torchcodec):
    items = casu_dataset.load(casu_small, "contextual_reasoning")
    table = pq.read_table(str(casu_small / "contextual_reasoning"), use_threads=False).to_pylist()
    assert [i.id for i in items] == [r["id"] for r in table]
    it, row = items[0], table[0]
    ref, sr = sf.read(io.BytesIO(row["audio"]["bytes"]), dtype="float32")
    assert it.waveform.dtype == np.float32 and it.sample_rate == sr == 16000
    np.testing.assert_array_equal(it.waveform, ref)
    assert (it.question, it.options, it.key, it.scene_id) == (
        row["question"],
        row["options"],
        row["answer"],
        row["scene_id"],
    )
    assert it.options[it.key_index] and it.key in "ABCD"
    assert all(hasattr(it, f) for f in FAMILY_FIELDS)
    everything = casu_dataset.load(str(casu_small))  # default: every multiple-choice question
    assert len(everything) == sum(question_counts(casu_small).values())
    desc = casu_dataset.load(str(casu_small), "scene_description")
    assert desc and all(d.reference and not d.question for d in desc)


def test_load_family_fields(tmp_path, session_cache):
    """A v2 build of the two fixture contrast families: every item carries its family columns."""
    from casu_dataset.dataset.build import build_dataset
    from casu_dataset.dataset.config import BuildConfig
    from casu_dataset.families.compile import compile_families

    b = fixture_builder(session_cache)
    fixture = Path(__file__).parent / "fixtures" / "families" / "two_families.yaml"
    out = tmp_path / "v2"
    config = BuildConfig(out=out, cache=session_cache, progress=False, max_skips=None)
    build_dataset(config, compile_families(fixture), b)
    items = casu_dataset.load(out, "contextual_reasoning")
    assert items and all(i.family_id and i.variant and i.family_shape for i in items)
    assert len({i.family_id for i in items}) == 2
    assert items[0].waveform.dtype == np.float32


def test_load_named_errors(casu_small, tmp_path):
    from casu_dataset.formats.loading import (
        ConfigNotFoundError,
        LoadError,
        UnknownTaskError,
    )

    with pytest.raises(LoadError, match="no_such_folder") as e:
        casu_dataset.load(tmp_path / "no_such_folder", "contextual_reasoning")
    assert not isinstance(e.value, ConfigNotFoundError)  # no dataset at all: not a config to skip
    with pytest.raises(UnknownTaskError, match="'nope'.*contextual_reasoning"):
        casu_dataset.load(casu_small, "nope")
    with pytest.raises(ConfigNotFoundError, match="split 'train'"):
        casu_dataset.load(casu_small, "contextual_reasoning", split="train")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigNotFoundError, match="role_inference"):
        casu_dataset.load(empty, "role_inference")
    assert issubclass(ConfigNotFoundError, LoadError) and issubclass(LoadError, ValueError)


def test_a_build_record_whose_identity_was_rewritten_is_refused_by_every_reader(casu_small, tmp_path):
    import json
    import shutil

    from casu_dataset.formats.build_manifest import MixedFolderError

    refused = (MixedFolderError, casu_dataset.LoadError)  # the loader names it as its own LoadError
    for n, (edit, why) in enumerate(
        (
            (lambda ident: ident.update(sha256="0" * 64), "identity.sha256 is not the hash"),
            (
                lambda ident: ident["configs"].update(role_inference="f" * 64),
                "identity.configs.role_inference",
            ),
        )
    ):
        d = tmp_path / f"edited{n}"
        shutil.copytree(casu_small, d)
        rec = json.loads((d / "casu_build.json").read_text())
        edit(rec["identity"])
        (d / "casu_build.json").write_text(json.dumps(rec))
        with pytest.raises(refused, match=why):
            casu_dataset.load(d, "role_inference")
        with pytest.raises(refused, match=why):
            casu_dataset.data_files(d, "role_inference")


def test_parquet_row_groups_of_100(tmp_path, casu_small):
    from casu_dataset.dataset.writer import write_parquet

    rows = pq.read_table(str(casu_small / "contextual_reasoning"), use_threads=False).to_pylist()
    many = [dict(rows[0], id=f"q{i}") for i in range(250)]
    write_parquet(many, "contextual_reasoning", tmp_path / "a.parquet")
    meta = pq.ParquetFile(tmp_path / "a.parquet").metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [100, 100, 50]
    write_parquet(many, "contextual_reasoning", tmp_path / "b.parquet")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_reader_checks_the_build_once_and_rows_keep_no_audio(casu_small, monkeypatch):
    """One build-record check per folder however many configs are read; each file read is still
    compared with the record; a row is frozen and holds no audio bytes of its own."""
    import dataclasses

    from casu_dataset.formats import build_manifest
    from casu_dataset.formats.reader import BuiltDataset, LoadError, Row

    calls = []
    real = build_manifest.verify
    monkeypatch.setattr(build_manifest, "verify", lambda *a, **k: calls.append(a) or real(*a, **k))
    ds = BuiltDataset(casu_small)
    rows = [r for c in mcq_configs() for r in ds.rows(c)] + ds.rows("scene_description")
    assert len(calls) == 1 and ds.identity["sha256"]
    assert all(isinstance(r, Row) for r in rows) and len({r.id for r in rows}) == len(rows)
    r = rows[0]
    assert not [k for k, v in vars(r).items() if isinstance(v, (bytes, np.ndarray))]
    table = pq.read_table(str(casu_small / r.task), use_threads=False).to_pylist()
    assert r.audio_bytes == next(t["audio"]["bytes"] for t in table if t["id"] == r.id)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.answer = "B"
    # a config rewritten after the folder was checked is refused when it is read, by name
    f = next((casu_small / "scene_description").glob("*.parquet"))
    ds2 = BuiltDataset(casu_small)
    ds2.rows("role_inference")
    blob = f.read_bytes()
    try:
        f.write_bytes(blob[:-8] + bytes(8))  # same size, other bytes
        with pytest.raises(LoadError, match=rf"scene_description/{f.name}: not the file build"):
            ds2.rows("scene_description")
    finally:
        f.write_bytes(blob)


def test_reader_refuses_bad_rows_naming_them(tmp_path, casu_small):
    import pyarrow as pa

    from casu_dataset.formats.reader import BuiltDataset, LoadError

    t = pq.read_table(str(casu_small / "role_inference"), use_threads=False)
    rows = t.to_pylist()
    out = tmp_path / "ds"
    (out / "role_inference").mkdir(parents=True)
    bad = [dict(rows[0], answer="E")] + rows[1:]
    pq.write_table(
        pa.Table.from_pylist(bad, schema=t.schema), out / "role_inference" / "test-00000-of-00001.parquet"
    )
    with pytest.raises(
        LoadError, match=rf"config 'role_inference' row 0 \({rows[0]['id']}\): answer 'E' is not one"
    ):
        BuiltDataset(out).rows("role_inference")
    with pytest.raises(LoadError, match=r"config 'x/\.\.' is not a plain folder name"):
        BuiltDataset(out).rows("x/..")
    # Rows that would be scored wrongly rather than fail: each named instead.
    opts = rows[0]["options"]
    for edit, want in (
        (
            {"options": [opts[0], opts[1], opts[0].upper() + " ", opts[3]]},
            "field 'options' has the same text twice",
        ),
        (
            {"task": "contextual_reasoning"},
            "field 'task' is 'contextual_reasoning' in config 'role_inference'",
        ),
        ({"family_id": None, "variant": "v1"}, "field 'family_id' is None but 'variant' is 'v1'"),
    ):
        if not set(edit) <= set(t.schema.names):
            continue
        bad = [dict(rows[0], **edit)] + rows[1:]
        pq.write_table(
            pa.Table.from_pylist(bad, schema=t.schema), out / "role_inference" / "test-00000-of-00001.parquet"
        )
        with pytest.raises(LoadError, match=rf"row 0 \({rows[0]['id']}\): {re.escape(want)}"):
            BuiltDataset(out).rows("role_inference")
    assert "task" in t.schema.names and "family_id" in t.schema.names  # every case above ran


def test_a_hub_id_reads_the_rows_the_folder_holds(casu_small, tmp_path, monkeypatch):
    """A Hub id goes through datasets.load_dataset (here a repo serving the folder's own files)
    and gives the same rows, audio read from the Arrow table."""
    import datasets

    real = datasets.load_dataset
    asked = []

    def hub(repo, config, split):
        asked.append((repo, config, split))
        return real(
            "parquet",
            data_files=casu_dataset.data_files(casu_small, config, split),
            split=split,
            cache_dir=str(tmp_path),
        )

    monkeypatch.setattr(datasets, "load_dataset", hub)
    rows = casu_dataset.load("casu-org/casu", "role_inference")
    local = casu_dataset.load(casu_small, "role_inference")
    assert asked == [("casu-org/casu", "role_inference", "test")]
    assert rows == local and [r.audio_bytes for r in rows] == [r.audio_bytes for r in local]
    np.testing.assert_array_equal(rows[0].waveform, local[0].waveform)


# -- damaged folders: (id, run(ctx) -> Outcome, expectation) -------------------------------------


def load_case(c: Ctx, d: Path) -> Outcome:
    """casu_dataset.load, the notebook reader: a LoadError naming the problem, never a wrong item."""
    from casu_dataset.formats.loading import LoadError, load

    return expect_error(lambda: load(d, ROLE), LoadError)


CASES = [
    # casu_dataset.load reads a folder with the same checks as the harness
    (
        "load-options-one-string",
        lambda c: load_case(c, table_edit(c, "lo", setcol("options", lambda t: ["wxyz"] * len(t)))),
        (E, 2, "options", "list of strings"),
    ),
    (
        "load-answer-int",
        lambda c: load_case(c, table_edit(c, "la", setcol("answer", lambda t: [1] * len(t)))),
        (E, 2, "answer", "int64"),
    ),
    (
        "load-duplicate-ids",
        lambda c: load_case(c, table_edit(c, "li", setcol("id", lambda t: ["s"] * len(t)))),
        (E, 2, "given twice"),
    ),
    (
        "load-truncated-parquet",
        lambda c: load_case(c, truncated(c, "lt")),
        (E, 2, SHARD, "not a readable parquet"),
    ),
    (
        "load-card-latin1",
        lambda c: (
            lambda d: (
                (d / "README.md").write_bytes(
                    (d / "README.md").read_text().replace("# tiny", "# caf\xe9").encode("latin-1")
                )
                and load_case(c, d)
            )
        )(tiny_dataset(c.tmp / "lc", 2, "lc")),
        (E, 2, "README.md", "not UTF-8"),
    ),
    (
        "load-card-parent-glob",
        lambda c: (
            lambda d: (
                (d / "README.md").write_text(
                    (d / "README.md").read_text().replace(f"path: {ROLE}/*.parquet", "path: ../*/*.parquet")
                )
                and load_case(c, d)
            )
        )(tiny_dataset(c.tmp / "lg", 2, "lg")),
        (E, 2, "../*/*.parquet", "outside"),
    ),
]


def test_case_ids_are_unique():
    assert duplicate_ids(CASES) == []


@pytest.mark.parametrize("case_id, run, expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input(corpus_ctx, tmp_path, case_id, run, expect):
    check_case(corpus_ctx, tmp_path, case_id, run, expect)
