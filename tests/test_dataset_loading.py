"""Reading a built dataset on a standard install (no torchcodec): plain `load_dataset` row access,
iteration and filters, the default `all` config, `casu_dataset.load` items with decoded audio,
its named errors, and parquet row groups sized for streaming."""

import io
import re
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from conftest import fixture_builder

import casu_dataset
from casu_dataset.contract import FAMILY_FIELDS, mcq_configs


@pytest.fixture
def no_torchcodec(monkeypatch):
    """Make `import torchcodec` fail as on the standard (CPU torch) install, wherever this runs."""
    monkeypatch.setitem(sys.modules, "torchcodec", None)


def _counts(folder):
    return {c: pq.read_table(str(folder / c), use_threads=False).num_rows for c in mcq_configs()}


def test_rows_readable_without_torchcodec(casu_small, tmp_path, no_torchcodec):
    import datasets

    ds = datasets.load_dataset(str(casu_small), "contextual_reasoning", split="test", cache_dir=str(tmp_path))
    assert ds.features["audio"].decode is False  # from the parquet schema, not a cast
    row = ds[0]
    assert row["question"] and len(row["options"]) == 4
    assert set(row["audio"]) == {"bytes", "path"}
    wav, sr = sf.read(io.BytesIO(row["audio"]["bytes"]), dtype="float32")
    assert sr == 16000 and len(wav) > sr
    ids = [r["id"] for r in ds]  # iteration reads the audio column too
    assert len(ids) == len(ds) > 0
    picked = ds.filter(lambda r: r["scene_id"] == row["scene_id"])
    assert 0 < len(picked) <= len(ds) and all(r["scene_id"] == row["scene_id"] for r in picked)
    sc = datasets.load_dataset(str(casu_small), "scenes", split="test", cache_dir=str(tmp_path))
    assert all(set(sc[0][c]) == {"bytes", "path"} for c in ("audio", "background", "speech", "events"))


def test_decode_audio_gives_arrays_in_a_notebook_without_torchcodec(casu_small, tmp_path, no_torchcodec):
    import datasets

    files = casu_dataset.data_files(casu_small, "contextual_reasoning")
    ds = datasets.load_dataset("parquet", data_files=files, split="test", cache_dir=str(tmp_path))
    rows = ds.with_transform(casu_dataset.decode_audio)
    a = rows[0]["audio"]
    want, sr = sf.read(io.BytesIO(ds[0]["audio"]["bytes"]), dtype="float32")
    assert a["array"].dtype == np.float32 and a["sampling_rate"] == sr == 16000
    assert np.array_equal(a["array"], want) and a["path"] == ds[0]["audio"]["path"]
    batch = rows[:3]["audio"]  # a slice is a batch: one decoded value per row
    assert len(batch) == 3 and all(b["array"].size and b["sampling_rate"] == 16000 for b in batch)
    assert rows[1]["question"] == ds[1]["question"]  # the other columns as they were
    with pytest.raises(casu_dataset.LoadError, match=r"'x/mix.flac' has no FLAC bytes"):
        casu_dataset.decode_audio({"audio": [{"bytes": None, "path": "x/mix.flac"}]})
    with pytest.raises(casu_dataset.LoadError, match=r"'x/mix.flac' is not decodable"):
        casu_dataset.decode_audio({"audio": {"bytes": b"RIFF junk", "path": "x/mix.flac"}})
    with pytest.raises(casu_dataset.LoadError, match=r"waveform: the audio s/mix.flac is not decodable FLAC"):
        casu_dataset.waveform({"audio": {"bytes": b"junk" * 10, "path": "s/mix.flac"}})
    with pytest.raises(casu_dataset.LoadError, match="no 'audio' column"):
        casu_dataset.decode_audio({"question": ["q"]})


def test_default_config_is_all_questions(casu_small, tmp_path, no_torchcodec):
    import datasets

    counts = _counts(casu_small)
    ds = datasets.load_dataset(str(casu_small), split="test", cache_dir=str(tmp_path))  # no config named
    assert len(ds) == sum(counts.values())
    assert {r["task"] for r in ds} == {c for c, n in counts.items() if n}
    named = datasets.load_dataset(str(casu_small), "all", split="test", cache_dir=str(tmp_path / "b"))
    assert len(named) == len(ds)


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
    assert len(everything) == sum(_counts(casu_small).values())
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
    from casu_dataset.dataset.loading import (
        ConfigNotFound,
        DatasetNotFound,
        LoadError,
        UnknownTask,
    )

    with pytest.raises(DatasetNotFound, match="no_such_folder"):
        casu_dataset.load(tmp_path / "no_such_folder", "contextual_reasoning")
    with pytest.raises(UnknownTask, match="'nope'.*contextual_reasoning"):
        casu_dataset.load(casu_small, "nope")
    with pytest.raises(ConfigNotFound, match="split 'train'"):
        casu_dataset.load(casu_small, "contextual_reasoning", split="train")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigNotFound, match="role_inference"):
        casu_dataset.load(empty, "role_inference")
    assert issubclass(ConfigNotFound, LoadError) and issubclass(LoadError, ValueError)


def test_a_build_record_whose_identity_was_rewritten_is_refused_by_every_reader(casu_small, tmp_path):
    import json
    import shutil

    from casu_dataset.dataset.build_manifest import MixedFolderError

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
    from casu_dataset.dataset.build import write_parquet

    rows = pq.read_table(str(casu_small / "contextual_reasoning"), use_threads=False).to_pylist()
    many = [dict(rows[0], id=f"q{i}") for i in range(250)]
    write_parquet(many, "contextual_reasoning", tmp_path / "a.parquet")
    meta = pq.ParquetFile(tmp_path / "a.parquet").metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [100, 100, 50]
    write_parquet(many, "contextual_reasoning", tmp_path / "b.parquet")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_eval_yaml_lists_the_tasks(casu_small):
    """Exactly the Hub's documented eval.yaml keys (it is validated at push time), no YAML aliases,
    and the value each task reports named in the description."""
    import yaml

    from casu_dataset.contract import mcq_tasks
    from casu_dataset.dataset.card import EVAL_TASK_KEYS, EVAL_YAML_KEYS

    text = (casu_small / "eval.yaml").read_text()
    doc = yaml.safe_load(text)
    assert tuple(doc) == EVAL_YAML_KEYS == ("name", "description", "evaluation_framework", "tasks")
    assert doc["name"] and doc["evaluation_framework"] == "casu-harness"
    assert "&id" not in text and "*id" not in text
    by_id = {t["id"]: t for t in doc["tasks"]}
    assert set(by_id) == {*mcq_tasks(), "scene_description"} and len(mcq_tasks()) == 4
    for tid, t in by_id.items():
        assert tuple(t) == EVAL_TASK_KEYS and t["split"] == "test" and (casu_small / t["config"]).is_dir()
    values = doc["description"].split("(0-100, full audio): ")[1]
    assert (
        f"{', '.join(mcq_tasks())}: accuracy x100" in values
        and "scene_description: BERTScore F1 x100" in values
    )
    assert "(eval.yaml)" in (casu_small / "README.md").read_text()


def test_eval_results_entries_match_the_datasets_eval_yaml(casu_small):
    """Each .eval_results entry `harness push` / `pr-eval-results` writes names a task of the built
    dataset's eval.yaml, with its evaluation_framework and the metric its description names."""
    import yaml

    from harness import simple_evaluate
    from harness.output.hub import eval_results_entries

    doc = yaml.safe_load((casu_small / "eval.yaml").read_text())
    res = simple_evaluate("random", tasks="all", dataset=str(casu_small), probe=False, limit=2)
    entries = eval_results_entries(
        res.document, "org/casu", "https://huggingface.co/datasets/org/casu-results"
    )
    ids = {t["id"] for t in doc["tasks"]}
    assert {e["dataset"]["task_id"] for e in entries} == ids
    # "role_inference, ...: accuracy x100; scene_description: BERTScore F1 x100" -> task -> label
    values = doc["description"].split("(0-100, full audio): ")[1].split(". ")[0]
    label = {
        tid.strip(): lab
        for part in values.split("; ")
        for tids, lab in [part.split(": ")]
        for tid in tids.split(",")
    }
    names = {"accuracy": "accuracy x100", "bertscore_f1": "BERTScore F1 x100"}
    for e in entries:
        assert e["evaluation_framework"] == doc["evaluation_framework"] and 0 <= e["value"] <= 100
        assert label[e["dataset"]["task_id"]] == names[e["notes"].split(" x100")[0]]


def test_reader_checks_the_build_once_and_rows_keep_no_audio(casu_small, monkeypatch):
    """One build-record check per folder however many configs are read; each file read is still
    compared with the record; a row is frozen and holds no audio bytes of its own."""
    import dataclasses

    from casu_dataset.dataset import build_manifest
    from casu_dataset.dataset.reader import BuiltDataset, LoadError, Row

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

    from casu_dataset.dataset.reader import BuiltDataset, LoadError

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
