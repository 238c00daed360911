"""Source validation: bad clips never reach a mix, retrieval falls back past them,
the mixer refuses degenerate sources and removes DC, and embeddings do not depend on threads."""

import json
import shutil

import numpy as np
import pytest
import soundfile as sf

from casu_dataset.core.audio_io import AudioError
from casu_dataset.mix.mixer import (
    ClipCache,
    SceneSources,
    SourceRef,
    compose,
)
from casu_dataset.mix.regenerate import regenerate
from casu_dataset.script.schema import parse_script
from casu_dataset.sounds import source_check
from casu_dataset.sounds.catalog import Catalog
from casu_dataset.sounds.retrieval import Embedder, Retriever

SR = 16000
QUERY_EVENT = ("A dog barks loudly in the yard.", ["dog", "bark"])
QUERY_BED = ("Steady rain falling on a roof.", ["rain", "roof"])


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CASU_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def embedder():
    return Embedder()


def _bell(clips_dir):
    x, sr = sf.read(clips_dir / "ev__electric_bell_ring__savebell2.ogg", dtype="float32")
    return (x.mean(axis=1) if x.ndim == 2 else x), sr


def write_bad_sources(d, clips_dir) -> dict:
    """Real degenerate files, one per defect a source can have (unreadable, empty, NaN, silent,
    dither only, a click, a bed too short, a DC offset); returns name -> path."""
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    p = {
        k: d / f"{k}.wav"
        for k in ("unreadable", "empty", "nan", "silent", "dither", "click", "tinybed", "dc")
    }
    p["unreadable"].write_bytes(b"RIFF\x00\x00\x00\x00WAVEgarbage" * 10)
    sf.write(p["empty"], np.zeros(0, dtype=np.float32), SR)
    nan = (0.1 * rng.standard_normal(SR)).astype(np.float32)
    nan[100] = np.nan
    sf.write(p["nan"], nan, SR, subtype="FLOAT")
    sf.write(p["silent"], np.zeros(2 * SR, dtype=np.float32), SR, subtype="FLOAT")
    sf.write(p["dither"], (1e-5 * rng.standard_normal(2 * SR)).astype(np.float32), SR, subtype="FLOAT")
    sf.write(p["click"], np.array([0, 0.9, -0.9, 0.5, 0], np.float32), SR, subtype="FLOAT")
    sf.write(p["tinybed"], np.array([0, 0.3, -0.3, 0.2, 0], np.float32), SR, subtype="FLOAT")
    bell, sr = _bell(clips_dir)
    sf.write(p["dc"], 0.2 * bell + 0.8, sr, subtype="FLOAT")  # a real sound on a 0.8 DC offset
    return p


@pytest.fixture
def bad_manifest(tmp_path, clips_dir):
    """A manifest.json whose bad clips are the best matches for the test queries."""
    p = write_bad_sources(tmp_path / "audio", clips_dir)

    def ev(cid, path, caption=QUERY_EVENT[0], duration=1.0):
        return {
            "id": cid,
            "kind": "event",
            "caption": caption,
            "keywords": ["dog", "bark", "loud"],
            "file": str(path),
            "duration": duration,
        }

    clips = [
        {
            "id": "bed_good",
            "kind": "background",
            "caption": "Rain falls steadily on the roof of a house.",
            "keywords": ["rain", "roof"],
            "file": str(clips_dir / "ba__rain__rain_12.ogg"),
            "duration": 99.0,
        },
        {
            "id": "bed_tiny",
            "kind": "background",
            "caption": QUERY_BED[0],
            "keywords": ["rain", "roof"],
            "file": str(p["tinybed"]),
            "duration": 30.0,
        },  # declares 30 s, holds 5 samples
        ev("ev_good", clips_dir / "ev__dog_bark__dog.ogg", "A dog barks a few times."),
        *[ev(f"ev_{k}", p[k]) for k in ("unreadable", "empty", "nan", "silent", "dither", "click")],
        ev("ev_dc", p["dc"], "An electric bell rings."),
    ]
    m = tmp_path / "manifest.json"
    m.write_text(json.dumps({"name": "bad", "clips": clips}))
    return m


def test_manifest_rejects_bad_sources_with_reasons(bad_manifest):
    cat = Catalog.from_manifest(bad_manifest)
    assert sorted(c.id for c in cat.clips) == ["bed_good", "ev_dc", "ev_good"]
    why = {r["clip_id"]: r["reason"].split(":")[0] for r in cat.rejected}
    assert why == {
        "bed_tiny": "too short",
        "ev_unreadable": "unreadable",
        "ev_empty": "empty",
        "ev_nan": "non-finite",
        "ev_silent": "silent",
        "ev_dither": "silent",
        "ev_click": "too short",
    }
    assert all(r["path"].endswith(".wav") for r in cat.rejected)
    assert all(r["path"] in r["reason"] for r in cat.rejected if r["clip_id"] in ("ev_unreadable", "ev_nan"))
    assert cat["bed_good"].duration == pytest.approx(60.0, abs=0.01)  # measured, not the declared 99 s
    assert "silent: 2" in cat.report.summary() and "too short: 2" in cat.report.summary()
    assert cat.report.loaded == 3


def test_validation_is_cached_on_content(bad_manifest, tmp_path, monkeypatch):
    calls = []
    real = source_check.measure_file
    monkeypatch.setattr(source_check, "measure_file", lambda p, sr=SR: calls.append(p) or real(p, sr))
    Catalog.from_manifest(bad_manifest)
    assert len(calls) == 10
    calls.clear()
    again = Catalog.from_manifest(bad_manifest)
    assert calls == [] and len(again) == 3  # warm: no audio decoded
    silent = tmp_path / "audio" / "silent.wav"
    shutil.copy(tmp_path / "audio" / "dc.wav", silent)  # new content under an old name
    cat = Catalog.from_manifest(bad_manifest)
    assert calls == [] and "ev_silent" in {c.id for c in cat.clips}  # same bytes as dc.wav: known by hash
    sf.write(silent, np.full(SR, 0.25, np.float32), SR)  # pure DC: silent once removed
    cat = Catalog.from_manifest(bad_manifest)
    assert len(calls) == 1 and "ev_silent" not in {c.id for c in cat.clips}  # changed content: measured again


def test_corpus_loaders_validate_load_or_first_use(tmp_path, clips_dir, embedder):
    p = write_bad_sources(tmp_path / "audio", clips_dir)
    shutil.copy(clips_dir / "ev__dog_bark__dog.ogg", tmp_path / "audio" / "dog.ogg")
    labels = tmp_path / "train.csv"
    labels.write_text("fname,label\ndog.ogg,Bark\nsilent,Bark\nclick,Bark\ndc,Bell\n")
    loaded = Catalog.from_arca23k(labels, tmp_path / "audio", validate="load")
    assert sorted(c.id for c in loaded.clips) == ["arca23k:dc", "arca23k:dog.ogg"]
    assert {r["reason"].split(":")[0] for r in loaded.rejected} == {"silent", "too short"}
    lazy = Catalog.from_arca23k(labels, tmp_path / "audio")  # large corpora: checked on first use
    assert len(lazy) == 4 and lazy.rejected == []
    r = Retriever(lazy, embedder, cache_dir=tmp_path / "emb")
    got = r.search("The sound of bark.", ["bark"], k=3, kind="event")
    assert got[0].clip.id == "arca23k:dog.ogg"
    assert {x["clip_id"] for x in lazy.rejected} == {"arca23k:silent", "arca23k:click"}
    assert p["silent"].exists()


@pytest.mark.parametrize("validate", ["load", "lazy"])
def test_retrieval_falls_back_to_the_next_valid_candidate(bad_manifest, embedder, tmp_path, validate):
    cat = Catalog.from_manifest(bad_manifest, validate=validate)
    assert len(cat) == (3 if validate == "load" else 10)
    r = Retriever(cat, embedder, cache_dir=tmp_path / "emb")
    rng = np.random.default_rng(0)
    m = r.choose(*QUERY_EVENT, rng, kind="event", tie_margin=0.0)
    assert m.clip.id == "ev_good"
    bed = r.choose(*QUERY_BED, rng, kind="background", min_duration=30.0, allow_loop=False)
    assert bed.clip.id == "bed_good" and r.durations[r.catalog._index["bed_good"]] == pytest.approx(
        60.0, abs=0.01
    )
    rejected = {x["clip_id"] for x in cat.rejected}
    assert {"ev_silent", "bed_tiny"} <= rejected
    assert "ev_dc" not in rejected


# --- the mixer ------------------------------------------------------------------------------
def _script(n_events=1):
    return parse_script(
        {
            "id": "src",
            "place": "school",
            "speech_type": "conversation",
            "background": {"description": "a playground", "keywords": ["school"]},
            "speakers": [
                {"id": "T", "role": "teacher", "gender": "female"},
                {"id": "S", "role": "student", "gender": "male", "age": "child"},
            ],
            "turns": [
                {"speaker": "T", "text": "It's time to go, everyone. Please line up by the door."},
                {"speaker": "S", "text": "Okay, we are coming right now."},
            ],
            "events": [
                {
                    "id": f"e{i}",
                    "description": "a bell",
                    "keywords": ["bell"],
                    "anchor": {"type": "after_turn", "turn": 0, "offset": 0.2},
                }
                for i in range(n_events)
            ],
        }
    )


@pytest.fixture
def mix_sources(clips_dir, speech_wavs):
    def make(event_path=None, bed_path=None):
        bed = bed_path or clips_dir / "ba__school_playground__School1.ogg"
        ev = event_path or clips_dir / "ev__electric_bell_ring__savebell2.ogg"
        return SceneSources(
            SourceRef(str(bed), "bed"),
            [SourceRef(str(p), p.stem) for p in speech_wavs],
            [SourceRef(str(ev), "ev")],
        )

    return make


@pytest.mark.parametrize("name,reason", [("silent", "silent"), ("dither", "silent"), ("click", "too short")])
def test_mixer_refuses_degenerate_events(tmp_path, clips_dir, mix_sources, name, reason):
    p = write_bad_sources(tmp_path / "a", clips_dir)[name]
    with pytest.raises(AudioError, match=f"{name}.wav: unusable source: {reason}"):
        compose(_script(), mix_sources(event_path=p), seed=0)


def test_mixer_refuses_a_tiny_bed_and_checks_bed_length(tmp_path, clips_dir, mix_sources):
    p = write_bad_sources(tmp_path / "a", clips_dir)
    with pytest.raises(AudioError, match="tinybed.wav: unusable source: too short"):
        compose(_script(), mix_sources(bed_path=p["tinybed"]), seed=0)
    half = tmp_path / "half.wav"
    sf.write(half, _bell(clips_dir)[0][:8000], _bell(clips_dir)[1])
    ClipCache().get(str(half))  # fine as an event...
    with pytest.raises(AudioError, match="too short: .* minimum for background"):
        ClipCache().get(str(half), kind="background")


def test_mixer_removes_dc_before_loudness(tmp_path, clips_dir, mix_sources):
    p = write_bad_sources(tmp_path / "a", clips_dir)["dc"]
    clean = compose(_script(), mix_sources(), seed=0)
    dc = compose(_script(), mix_sources(event_path=p), seed=0)
    assert abs(float(dc.mixture.mean())) < 1e-3  # was +0.18
    assert dc.annotation["clip_gain_db"] == pytest.approx(
        clean.annotation["clip_gain_db"], abs=0.05
    )  # was -4.9 dB
    out = dc.write(tmp_path / "scene")
    assert regenerate(out / "annotation.json").mixture.tobytes() == dc.mixture.tobytes()


def test_regenerate_goes_through_the_same_gate(tmp_path, clips_dir, mix_sources):
    p = write_bad_sources(tmp_path / "a", clips_dir)["silent"]
    ann = compose(_script(), mix_sources(), seed=0).annotation
    ann["events"][0]["path"] = str(p)
    with pytest.raises(AudioError, match="silent.wav: unusable source: silent"):
        regenerate(ann)


# --- deterministic embeddings -----------------------------------------------------------------
def test_embeddings_and_scores_do_not_depend_on_thread_count(embedder, tmp_path):
    import torch

    cat = Catalog.embedded()
    texts = [c.caption for c in cat.clips[:60]]
    r = Retriever(cat, embedder, cache_dir=tmp_path / "emb")
    before = torch.get_num_threads()
    got = {}
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            single = np.stack([embedder.encode([t])[0] for t in texts])  # one text at a time
            batch = embedder.encode(texts)
            assert torch.get_num_threads() == n  # encode restores the setting
            qd, qk = r.encode_queries(texts[:8], [["dog"]] * 8)
            m = r.choose("a bell rings at school", ["bell", "school"], np.random.default_rng(3), kind="event")
            got[n] = (single.tobytes(), batch.tobytes(), r.score_matrix(qd, qk).tobytes(), m.clip.id, m.score)
            assert single.tobytes() == batch.tobytes()  # batch-mates do not matter
    finally:
        torch.set_num_threads(before)
    assert got[1] == got[2]


def test_scores_are_exact(embedder, tmp_path):
    r = Retriever(Catalog.embedded(), embedder, cache_dir=tmp_path / "emb")
    qd, qk = r.encode_queries(["a kettle boils", "waves on a beach"], [["kettle"], ["sea", "waves"]])
    d = qd.shape[1]
    exact_d = qd.astype(np.float64) @ r.joint[:, :d].T.astype(np.float64)
    exact_k = qk.astype(np.float64) @ r.joint[:, d:].T.astype(np.float64)
    # every cosine is exact in float32, so any summation order gives these bytes
    assert np.array_equal(exact_d.astype(np.float32), exact_d) and np.array_equal(
        exact_k.astype(np.float32), exact_k
    )
    a = np.float32(r.alpha)
    expected = exact_d.astype(np.float32) * a + exact_k.astype(np.float32) * np.float32(1 - r.alpha)
    assert r.score_matrix(qd, qk).tobytes() == expected.astype(np.float32).tobytes()
