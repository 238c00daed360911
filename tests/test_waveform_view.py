"""Waveforms wherever people look for one, on the CPU stack (no torchcodec):
`casu_dataset.load_dataset(...)[0]["audio"]["array"]`, iteration, `map`, `filter`,
`with_format("numpy")`, `streaming=True`, the scenes config's stems, a Hub id; `decode_audio` in
`map`, `waveform()` of map's LazyRow, of a plain dict and of a decoded value; the dataset files
untouched."""

import hashlib
import io

import numpy as np
import pytest
import soundfile as sf

import casu_dataset


def _reference(folder, config):
    """Every row's mixture decoded straight from the parquet bytes with soundfile."""
    import pyarrow.parquet as pq

    rows = pq.read_table(str(folder / config), use_threads=False).to_pylist()
    return rows, [sf.read(io.BytesIO(r["audio"]["bytes"]), dtype="float32")[0] for r in rows]


def _digest(folder) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            h.update(f.relative_to(folder).as_posix().encode() + f.read_bytes())
    return h.hexdigest()


def test_load_dataset_gives_float32_arrays_at_16k_on_every_path(casu_small, tmp_path, no_torchcodec):
    before = _digest(casu_small)
    rows, want = _reference(casu_small, "contextual_reasoning")
    ds = casu_dataset.load_dataset(casu_small, "contextual_reasoning", cache_dir=tmp_path / "c")
    a = ds[0]["audio"]
    assert a["array"].dtype == np.float32 and a["array"].ndim == 1 and a["sampling_rate"] == 16000
    assert a["path"] == rows[0]["audio"]["path"]
    assert [r["id"] for r in ds] == [r["id"] for r in rows]  # iteration decodes too
    for got, ref in zip((r["audio"]["array"] for r in ds), want, strict=True):
        np.testing.assert_array_equal(got, ref)
    assert ds[0]["options"] == rows[0]["options"]  # the other columns as stored
    # map: the function sees decoded rows; decode_audio passes them through
    mapped = ds.map(casu_dataset.decode_audio)
    np.testing.assert_array_equal(np.asarray(mapped[1]["audio"]["array"], np.float32), want[1])
    lengths = ds.map(lambda r: {"n": len(casu_dataset.waveform(r)[0])})["n"]
    assert list(lengths) == [len(w) for w in want]
    batched = ds.map(casu_dataset.decode_audio, batched=True, batch_size=3)
    assert len(batched) == len(ds) and len(batched[-1]["audio"]["array"]) == len(want[-1])
    # numpy format and filter keep the decoding (it is a feature of the column, not a transform)
    as_np = ds.with_format("numpy")[0]["audio"]
    assert isinstance(as_np["array"], np.ndarray) and as_np["array"].dtype == np.float32
    key = rows[0]["answer"]
    kept = ds.filter(lambda r: r["answer"] == key)
    assert len(kept) == sum(r["answer"] == key for r in rows) and kept[0]["audio"]["array"].size
    # streaming
    stream = casu_dataset.load_dataset(casu_small, "contextual_reasoning", streaming=True)
    first = next(iter(stream))
    np.testing.assert_array_equal(first["audio"]["array"], want[0])
    assert next(iter(stream.map(casu_dataset.decode_audio)))["audio"]["sampling_rate"] == 16000
    assert _digest(casu_small) == before  # nothing was written into the built folder


def test_scenes_stems_and_the_all_config(casu_small, tmp_path, no_torchcodec):
    sc = casu_dataset.load_dataset(casu_small, "scenes", cache_dir=tmp_path)
    stems = {c: sc[0][c]["array"] for c in ("audio", "background", "speech", "events")}
    assert len({len(x) for x in stems.values()}) == 1 and all(x.dtype == np.float32 for x in stems.values())
    everything = casu_dataset.load_dataset(casu_small, cache_dir=tmp_path)
    assert len(everything) == len(casu_dataset.load(casu_small)) and everything[0]["audio"]["array"].size


def test_plain_datasets_rows_decode_with_the_helpers(casu_small, tmp_path, no_torchcodec):
    """A dataset from `datasets.load_dataset` itself: its rows as a dict, as map's LazyRow, as a
    decoded value; a multi-channel or 44.1 kHz value comes back mono at 16 kHz (the contract)."""
    import datasets

    files = casu_dataset.data_files(casu_small, "role_inference")
    raw = datasets.load_dataset("parquet", data_files=files, split="test", cache_dir=str(tmp_path))
    _, want = _reference(casu_small, "role_inference")
    x, sr = casu_dataset.waveform(raw[0])
    assert sr == 16000 and np.array_equal(x, want[0])
    got = raw.map(lambda r: {"n": len(casu_dataset.waveform(r)[0])})["n"]  # r is a LazyRow
    assert list(got) == [len(w) for w in want]
    y, _ = casu_dataset.waveform({"array": np.stack([x, x], axis=1), "sampling_rate": 16000})
    np.testing.assert_allclose(y, x, atol=1e-7)
    buf = io.BytesIO()
    sf.write(buf, np.tile(x[:44100, None], (1, 8)), 44100, format="FLAC")  # 8 channels, 44.1 kHz
    z, sr = casu_dataset.waveform({"audio": {"bytes": buf.getvalue(), "path": "eight.flac"}})
    assert z.ndim == 1 and sr == 16000 and abs(len(z) - 16000) <= 1
    for bad, msg in [
        ("a.flac", "expected a CASU row or its audio value \\(a mapping\\), got str"),
        ({"audio": "a.flac"}, "the row's audio is a str"),
        (
            {"audio": {"array": "xyz", "sampling_rate": 16000, "path": "p.flac"}},
            "audio p.flac: not a decoded",
        ),
    ]:
        with pytest.raises(casu_dataset.LoadError, match=msg):
            casu_dataset.waveform(bad)
    with pytest.raises(casu_dataset.LoadError, match=r"decode_audio: no 'audio' column among str"):
        casu_dataset.decode_audio("x")


def test_load_dataset_names_a_missing_folder_and_a_bad_row(casu_small, tmp_path, no_torchcodec):
    with pytest.raises(casu_dataset.LoadError, match="nowhere"):
        casu_dataset.load_dataset(tmp_path / "nowhere", "role_inference")
    import datasets

    ds = casu_dataset.load_dataset(casu_small, "role_inference", cache_dir=tmp_path / "c")
    broken = datasets.Dataset.from_dict(
        {"audio": [{"bytes": b"not flac at all", "path": "s1/mixture.flac"}]},
        features=datasets.Features({"audio": casu_dataset.SoundfileAudio()}),
    )
    with pytest.raises(casu_dataset.LoadError, match=r"s1/mixture.flac.*undecodable"):
        broken[0]
    assert ds[0]["audio"]["array"].size  # the good dataset is unaffected


def test_a_hub_id_goes_through_datasets_with_the_same_waveforms(
    casu_small, tmp_path, monkeypatch, no_torchcodec
):
    import datasets

    real = datasets.load_dataset
    asked = []

    def hub(repo, config, split, streaming=False, cache_dir=None, revision=None):
        asked.append((repo, config, split, revision))
        files = casu_dataset.data_files(casu_small, config, split)
        return real("parquet", data_files=files, split=split, streaming=streaming, cache_dir=str(tmp_path))

    monkeypatch.setattr(datasets, "load_dataset", hub)
    ds = casu_dataset.load_dataset("casu-org/casu", "entity_extraction", revision="v3")
    assert asked == [("casu-org/casu", "entity_extraction", "test", "v3")]
    _, want = _reference(casu_small, "entity_extraction")
    np.testing.assert_array_equal(ds[0]["audio"]["array"], want[0])
