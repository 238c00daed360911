"""Catalog loading (embedded bank, Clotho, FSD50K, ARCA23K formats) and matching-score retrieval."""

import numpy as np
import pytest

from casu_dataset.sounds.catalog import Catalog, CatalogError
from casu_dataset.sounds.retrieval import (
    Embedder,
    RetrievalError,
    Retriever,
    catalog_embeddings,
)
from casu_dataset.sounds.retrieval_eval import evaluate, load_queries


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    """Source checks and embeddings go to a temporary cache, never ~/.cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CASU_CACHE", str(tmp_path_factory.mktemp("casu_cache")))
        yield


@pytest.fixture(scope="module")
def embedder():
    return Embedder()


@pytest.fixture(scope="module")
def bank_retriever(embedder, tmp_path_factory):
    return Retriever(Catalog.embedded(), embedder, cache_dir=tmp_path_factory.mktemp("cache"))


def test_embedded_bank_manifest_is_complete():
    cat = Catalog.embedded()
    assert len(cat) >= 200
    kinds = {c.kind for c in cat.clips}
    assert kinds == {"background", "event"}
    assert len({c.type for c in cat.clips if c.kind == "event"}) >= 70
    for c in cat.clips:
        assert c.caption.endswith(".") and 3 <= len(c.keywords) <= 8
        assert c.license and c.source
        assert c.duration >= 0.2
        assert c.caption.lower() != c.type.replace("_", " ")


def test_manifest_records_drops():
    import json

    from casu_dataset.sounds.bank import bank_dir

    m = json.loads((bank_dir() / "manifest.json").read_text())
    assert m["num_dropped"] == len(m["dropped"]) > 0
    assert all(d["reason"] for d in m["dropped"])
    assert (bank_dir() / "ATTRIBUTION.md").read_text().count("| ev__") >= 100


@pytest.fixture
def corpus(tmp_path, clips_dir):
    """Tiny corpora in the published file formats, with real audio."""
    audio = tmp_path / "audio"
    audio.mkdir()
    for src, name in [
        ("ba__rain__rain.ogg", "rain_on_roof.wav"),
        ("ba__seaside_waves__wave_21.ogg", "beach.wav"),
        ("ev__dog_bark__dog.ogg", "1001.wav"),
        ("ev__siren__policecar.ogg", "1002.wav"),
    ]:
        import soundfile as sf

        x, sr = sf.read(clips_dir / src)
        sf.write(audio / name, x, sr)
    (tmp_path / "clotho_captions_development.csv").write_text(
        "file_name,caption_1,caption_2,caption_3,caption_4,caption_5\n"
        "rain_on_roof.wav,Rain falls on a roof.,Heavy rain patters steadily.,Water drops hit a surface.,"
        "It is raining outside.,A rain shower continues.\n"
        "beach.wav,Waves wash up on a beach.,The sea laps the shore.,Ocean waves roll in.,"
        "Water crashes onto sand.,Surf at the seaside.\n"
        "missing.wav,a,b,c,d,e\n"
    )
    (tmp_path / "clotho_metadata_development.csv").write_text(
        "file_name,keywords,sound_id,sound_link,start_end_samples,manufacturer,license\n"
        "rain_on_roof.wav,rain;roof;water,1,x,,me,CC0\n"
    )
    (tmp_path / "dev.csv").write_text(
        "fname,labels,mids,split\n"
        '1001,"Bark,Dog,Domestic_animals_and_pets,Animal","/m/05tny_,/m/0bt9lr,/m/068hy,/m/0jbk",train\n'
        '1002,"Police_car_(siren),Siren,Emergency_vehicle,Vehicle","/m/a,/m/b,/m/c,/m/d",val\n'
    )
    (tmp_path / "arca_train.csv").write_text("fname,label\n1001,Bark\n1002,Siren\n9999,Siren\n")
    return tmp_path


def test_clotho_loader_reads_five_captions_and_reports_skips(corpus):
    cat = Catalog.from_clotho(
        corpus / "clotho_captions_development.csv",
        corpus / "audio",
        corpus / "clotho_metadata_development.csv",
    )
    assert len(cat) == 2 and all(c.kind == "background" and len(c.captions) == 5 for c in cat.clips)
    assert cat["clotho:rain_on_roof.wav"].keywords == ["rain", "roof", "water"]
    assert cat["clotho:beach.wav"].keywords  # derived from captions when metadata has none
    assert len(cat.report.skipped) == 1 and "missing audio file" in cat.report.skipped[0]["reason"]
    assert "row 4" in cat.report.skipped[0]["row"]
    with pytest.raises(CatalogError, match="row 4: missing audio file"):
        Catalog.from_clotho(corpus / "clotho_captions_development.csv", corpus / "audio", on_error="raise")


def test_fsd50k_and_arca23k_loaders(corpus):
    fsd = Catalog.from_fsd50k(corpus / "dev.csv", corpus / "audio")
    dog = fsd["fsd50k:1001"]
    assert dog.kind == "event" and dog.keywords[:2] == ["bark", "dog"] and "bark" in dog.caption
    assert dog.type == "Bark"
    arca = Catalog.from_arca23k(corpus / "arca_train.csv", corpus / "audio")
    assert len(arca) == 2 and arca.report.skipped[0]["row"].endswith("row 4")


def test_duplicate_id_and_bad_columns_name_the_row(corpus):
    p = corpus / "dup.csv"
    p.write_text("fname,label\n1001,Bark\n1001,Dog\n")
    with pytest.raises(CatalogError, match="dup.csv: row 3: duplicate id '1001' \\(first at row 2\\)"):
        Catalog.from_arca23k(p, corpus / "audio")
    p.write_text("name,label\n1001,Bark\n")
    with pytest.raises(CatalogError, match="missing column"):
        Catalog.from_arca23k(p, corpus / "audio")


def test_matching_score_is_the_papers_formula(bank_retriever, embedder):
    r = bank_retriever
    desc, kws = "a school bell rings to end the lesson", ["bell", "school"]
    qd, qk = r.encode_queries([desc], [kws])
    i = r.catalog._index["ev__electric_bell_ring__LRRing_01_LA"]
    cand_d = embedder.encode([r.catalog.clips[i].caption])[0]
    cand_k = embedder.encode([", ".join(r.catalog.clips[i].keywords)])[0]
    expected = 0.3 * float(qd[0] @ cand_d) + 0.7 * float(qk[0] @ cand_k)
    assert r.score_matrix(qd, qk, alpha=0.3)[0, i] == pytest.approx(expected, abs=1e-5)


def test_retrieval_respects_kind_duration_and_exclusion(bank_retriever):
    r = bank_retriever
    top = r.search("police siren wailing", ["siren", "police"], k=3, kind="event")
    assert top[0].clip.type == "siren" and all(m.clip.kind == "event" for m in top)
    beds = r.search("rain falling", ["rain"], k=5, kind="background", min_duration=30.0, allow_loop=False)
    assert all(m.clip.duration >= 30.0 for m in beds)
    ex = {top[0].clip.id}
    again = r.search("police siren wailing", ["siren", "police"], k=3, kind="event", exclude=ex)
    assert top[0].clip.id not in {m.clip.id for m in again}
    with pytest.raises(RetrievalError):
        r.search("anything", ["x"], kind="background", min_duration=1000, allow_loop=False)
    with pytest.raises(RetrievalError, match="scores"):
        r.choose("police siren", ["siren"], np.random.default_rng(0), min_score=0.99, kind="event")


def test_seeded_choice_among_near_ties(bank_retriever):
    r = bank_retriever
    picks = {
        r.choose(
            "a dog barking", ["dog", "bark"], np.random.default_rng(s), tie_margin=0.1, kind="event"
        ).clip.id
        for s in range(20)
    }
    assert len(picks) > 1 and all("dog" in p for p in picks)
    same = [
        r.choose("a dog barking", ["dog"], np.random.default_rng(7), kind="event").clip.id for _ in range(3)
    ]
    assert len(set(same)) == 1
    strict = {
        r.choose(
            "a dog barking", ["dog", "bark"], np.random.default_rng(s), tie_margin=0.0, kind="event"
        ).clip.id
        for s in range(5)
    }
    assert len(strict) == 1


def test_embeddings_are_cached_and_keyed_on_content(corpus, embedder, tmp_path):
    calls = []

    class Counting(Embedder):
        def encode(self, texts, batch_size=128):
            calls.append(len(texts))
            return super().encode(texts, batch_size)

    e = Counting()
    e.__dict__["model"] = embedder.model
    cat = Catalog.from_fsd50k(corpus / "dev.csv", corpus / "audio")
    d1, k1 = catalog_embeddings(cat, e, tmp_path)
    n = len(calls)
    d2, k2 = catalog_embeddings(cat, e, tmp_path)
    assert len(calls) == n and np.array_equal(d1, d2) and np.array_equal(k1, k2)
    cat.clips[0].keywords = ["changed"]
    catalog_embeddings(cat, e, tmp_path)
    assert len(calls) > n  # content changed: re-embedded


def test_evaluation_reports_precision_for_alphas(bank_retriever):
    rows = evaluate(bank_retriever, load_queries(), alphas=(0.0, 1.0))
    assert [r["alpha"] for r in rows] == [0.0, 1.0]
    assert all(r["n"] >= 100 and 0.8 <= r["p@1"] <= 1.0 for r in rows)


def test_build_catalog_flag_formats(corpus):
    from casu_dataset.mix.realize import load_catalog

    assert len(load_catalog("embedded")) >= 200
    assert len(load_catalog(f"clotho:{corpus / 'clotho_captions_development.csv'}:{corpus / 'audio'}")) == 2
    assert len(load_catalog(f"fsd50k:{corpus / 'dev.csv'}:{corpus / 'audio'}")) == 2
    with pytest.raises(CatalogError, match="^catalogs 'freesound:x': expected embedded"):
        load_catalog("freesound:x")


def test_fingerprint_follows_a_clip_moved_to_another_type():
    """A fill retrieves only clips of its own bank type, so moving a clip to another type
    (`build_bank.py --labels` with bank_retype.json) must change the catalog fingerprint: every
    scene cache, embedding cache and lock keyed on it then misses instead of serving stale scenes."""
    import dataclasses

    cat = Catalog.embedded()
    i = next(i for i, c in enumerate(cat.clips) if c.type == "factory_industrial")
    moved = list(cat.clips)
    moved[i] = dataclasses.replace(moved[i], type="woodworking_workshop")
    other = Catalog(cat.name, moved, cat.report)
    assert [c.captions for c in other.clips] == [c.captions for c in cat.clips]
    assert other.fingerprint() != cat.fingerprint()
