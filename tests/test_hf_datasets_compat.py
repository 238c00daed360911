"""A built folder read the way a notebook reads a Hugging Face dataset, on a standard install
(no torchcodec): `datasets.load_dataset` row access, iteration and filters, the default `all`
config, `casu_dataset.decode_audio` as a transform, and the card's own snippets (a waveform in
two lines, a local folder by its data files) run from any working directory."""

import io
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from conftest import question_counts

import casu_dataset


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

    counts = question_counts(casu_small)
    ds = datasets.load_dataset(str(casu_small), split="test", cache_dir=str(tmp_path))  # no config named
    assert len(ds) == sum(counts.values())
    assert {r["task"] for r in ds} == {c for c, n in counts.items() if n}
    named = datasets.load_dataset(str(casu_small), "all", split="test", cache_dir=str(tmp_path / "b"))
    assert len(named) == len(ds)


def _blocks(card: str) -> list[str]:
    import re

    return re.findall(r"```python\n(.*?)```", card, re.S)


def test_the_cards_waveform_and_local_folder_snippets_run_from_anywhere(casu_small, tmp_path, monkeypatch):
    import shutil

    import numpy as np
    import pyarrow.parquet as pq

    card = (casu_small / "README.md").read_text()
    blocks = _blocks(card)
    wave = next(b for b in blocks if "soundfile" in b)
    local = next(b for b in blocks if "data_files" in b)
    assert len([x for x in wave.splitlines() if x.strip()]) == 2 and "torchcodec" not in wave
    # two folders of the same name with other content, loaded from a third working directory
    a, b = tmp_path / "a" / "casu_mini", tmp_path / "b" / "casu_mini"
    shutil.copytree(casu_small, a)
    shutil.copytree(casu_small, b)
    (b / "casu_build.json").unlink()  # its questions are edited below: no longer the build that wrote it
    assert 'data_files("/path/to/casu_mini", "' in local  # the card's snippet loads one named config
    for f in b.glob("*/*.parquet"):  # every question config of the second folder
        t = pq.read_table(f)
        if "question" not in t.column_names:
            continue
        q = [f"other {x}" for x in t.column("question").to_pylist()]
        import pyarrow as pa

        pq.write_table(t.set_column(t.schema.get_field_index("question"), "question", pa.array(q)), f)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    got = {}
    for folder in (a, b):
        ns: dict = {}
        exec("import datasets, casu_dataset\n" + local.replace("/path/to/casu_mini", str(folder)), ns)
        exec(wave, ns)
        got[folder] = ns["ds"][0]["question"]
        assert isinstance(ns["wav"], np.ndarray) and ns["wav"].ndim == 1 and ns["wav"].dtype == np.float32
        assert ns["sr"] == 16000 and len(ns["wav"]) > 16000
    assert got[b] == "other " + got[a]  # never the first folder's cached rows
    # the README's notebook block, as printed, on the second folder
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    nb = next(
        b for b in _blocks(readme.split("## Notebooks, the Hub and the leaderboard")[1]) if "data_files" in b
    )
    ns2: dict = {}
    exec(nb.replace("/path/to/casu_mini", str(b)), ns2)
    assert (
        ns2["ds"][0]["question"].startswith("other ") and ns2["sr"] == 16000 and ns2["items"][0].waveform.size
    )
    import casu_dataset

    x, sr = casu_dataset.waveform(ns["ds"][0])
    assert sr == 16000 and np.array_equal(x, ns["wav"])
    with pytest.raises(casu_dataset.LoadError, match="FLAC bytes"):
        casu_dataset.waveform({"audio": {"path": "x.flac"}})
