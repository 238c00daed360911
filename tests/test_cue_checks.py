"""Cue checks on a real built dataset: each family's slot cue is measured from the stems as mixed
(audibility in its window, the retrieved clip's captions against the fill, fills told apart)."""

import numpy as np
import pytest
from conftest import fixture_builder, shipped_families

from casu_dataset.mix import cue_checks as cc


@pytest.fixture(scope="module")
def built(tmp_path_factory, session_cache):
    from conftest import ROOT

    from casu_dataset.dataset.build import build_dataset
    from casu_dataset.dataset.config import BuildConfig
    from casu_dataset.families.compile import compile_families

    b = fixture_builder(session_cache)
    out = tmp_path_factory.mktemp("cues") / "ds"
    build_dataset(
        BuildConfig(out=out, cache=session_cache, progress=False, max_skips=None),
        compile_families(ROOT / "tests" / "fixtures" / "families" / "two_families.yaml"),
        b,
    )
    return out


def test_every_cue_is_measured_from_the_audio(built):
    r = cc.check_folder(built)
    assert len(r["cues"]) == 8 and r["summary"]["families"] == 2
    for c in r["cues"]:
        assert c["kind"] in ("event", "background") and c["caption"] and 0 < c["truth"] <= 1
        assert np.isfinite(c["audibility_db"])
    # every pair of fills of a family is compared once (4 fills: 6 pairs; 2 fills: 1)
    assert sorted(
        len([p for p in r["pairs"] if p["family_id"] == f]) for f in {c["family_id"] for c in r["cues"]}
    ) in ([1, 6], [6, 6], [1, 1])
    text = cc.format_summary(r["summary"])
    assert "audibility" in text and "truth" in text and "distinctness" in text


def test_cues_measured_while_writing_equal_the_written_folders(built):
    """The build measures every cue while it writes (CueMeter threads, event stems decoded only up
    to the window's end); a check of the written folder, on one thread, decoding every stem whole,
    finds the very same numbers."""
    import json

    import pyarrow.parquet as pq

    from casu_dataset.core.audio_io import decode_bytes

    written = json.loads((built / "build_report.json").read_text())["cue_checks"]
    one = cc.check_folder(built, threads=1)
    assert json.loads(json.dumps(one["summary"])) == written
    assert cc.check_folder(built, threads=3) == one
    rows = [r for r in pq.read_table(str(built / "scenes")).to_pylist() if r["family_id"]]
    whole = {
        r["scene_id"]: cc.audibility(
            {k: decode_bytes(r[k]["bytes"]) for k in ("background", "speech", "events")},
            json.loads(r["annotation"]),
            r["slot_kind"],
        )
        for r in rows
    }
    assert whole == {c["scene_id"]: c["audibility_db"] for c in one["cues"]}
    assert any(c["kind"] == "event" for c in one["cues"])


def test_audibility_falls_with_the_cue_level(built):
    import json

    import pyarrow.parquet as pq

    from casu_dataset.core.audio_io import decode_bytes

    rows = [r for r in pq.read_table(str(built / "scenes")).to_pylist() if r["slot_kind"] == "event"]
    r = rows[0]
    ann = json.loads(r["annotation"])
    stems = {k: decode_bytes(r[k]["bytes"]) for k in ("background", "speech", "events")}
    loud = cc.audibility(stems, ann, "event")
    quiet = cc.audibility(dict(stems, events=stems["events"] * np.float32(10 ** (-20 / 20))), ann, "event")
    assert quiet == pytest.approx(loud - 20, abs=0.05)  # a 20 dB quieter cue is 20 dB less audible
    s = cc.summary(
        [
            {"family_id": "f", "fill": "a", "audibility_db": 1.0, "truth": 0.9},
            {"family_id": "f", "fill": "b", "audibility_db": 9.0, "truth": 0.4},
        ],
        [{"family_id": "f", "fills": ["a", "b"], "distance_db": 0.5}],
    )
    assert s["inaudible"] == [("f", "a")] and s["untrue"] == [("f", "b")] and s["alike"] == [("f", "a", "b")]
    assert len(cc.failures(s)) == 3 and "inaudible" in cc.failures(s)[0]


def test_the_same_sound_twice_is_not_distinct(clips_dir):
    from casu_dataset.core.audio_io import load_audio

    x = load_audio(clips_dir / "ev__electric_bell_ring__savebell2.ogg")
    y = load_audio(clips_dir / "ev__door_open_close_slam__DoorClose2.ogg")
    same = np.sqrt(np.mean((cc.band_profile(x) - cc.band_profile(x * np.float32(1.0))) ** 2))
    other = np.sqrt(np.mean((cc.band_profile(x) - cc.band_profile(y)) ** 2))
    assert same == 0.0 and other > cc.DISTINCT_MIN_DB


def test_fill_truth_over_every_recording_of_the_type_names_the_recording_that_says_otherwise(
    tmp_path, session_cache
):
    """A fast-river fill against every recording of its type: the bank's babbling-brook loop (typed
    river_stream_waterfall, never played for this fill: the realizations play the two rivers) does
    not say what the fill says and is listed with its caption and similarity; the rivers are not.
    Each slot fill of the family is checked once, whatever the number of its variants."""
    import yaml

    from casu_dataset.families import validity as fv
    from casu_dataset.families.compile import compile_families
    from casu_dataset.sounds.catalog import Catalog
    from casu_dataset.sounds.retrieval import Retriever

    docs = shipped_families()
    fam = docs["tc_hold_hand_edge"]
    fill = fam["fills"]["river"]
    assert fill["type"] == "river_stream_waterfall"
    lib = tmp_path / "type_truth.yaml"
    lib.write_text(yaml.safe_dump([fam], sort_keys=False))
    r = Retriever(Catalog.embedded(), cache_dir=session_cache)
    scenes = compile_families(lib)
    st = fv.check_type_truth(scenes, r)
    assert st["fills"] == len(fam["fills"]) == 4 and len(scenes) == 4
    brook = st["below"]["ba__river_stream_waterfall__river_loop"]
    assert brook["caption"] == "A small brook babbles and gurgles continuously."
    assert [d for _, d in brook["fills"]] == [fill["description"]] and brook["fills"][0][0] < 0.5
    rivers = [c for c in r.catalog.clips if c.type == fill["type"] and "river" in c.caption.lower()]
    assert len(rivers) >= 2 and not any(c.id in st["below"] for c in rivers)
    assert st["below_min"] == sum(len(b["fills"]) for b in st["below"].values()) <= st["pairs"]
    report = fv.format_report(fv.counts(scenes), [], None, None, st, dataset_version="test")
    assert "ba__river_stream_waterfall__river_loop (river_stream_waterfall: 'A small brook babbles" in report


def test_cues_measured_in_a_worker_equal_the_drivers_own(built):
    """A pool worker measures its unit's cues where the stems are (measure_rows) and the driver's
    meter takes them: the result is the meter's own, also when a row that must give its fill's
    profile arrives without one (the meter then measures that row itself)."""
    import pyarrow.parquet as pq

    from casu_dataset.contract import SCENES_CONFIG

    rows = [
        r for f in sorted((built / SCENES_CONFIG).glob("*.parquet")) for r in pq.read_table(f).to_pylist()
    ]
    own = cc.CueMeter()
    for r in rows:
        own.add(r)
    want = own.result()
    measured = cc.measure_rows(rows)
    assert set(measured) == {r["scene_id"] for r in rows if r["family_id"]}
    with_profile = [sid for sid, (_, prof) in measured.items() if prof is not None]
    assert len(with_profile) == len({(r["family_id"], r["fill"]) for r in rows if r["family_id"]})
    fed = cc.CueMeter()
    for r in rows:
        fed.add(r, measured.get(r["scene_id"]))
    assert fed.result() == want
    # A first variant whose profile is missing: measured again by the meter, same result.
    stripped = {sid: (row, None) for sid, (row, _) in measured.items()}
    partly = cc.CueMeter()
    for r in rows:
        partly.add(r, stripped.get(r["scene_id"]))
    assert partly.result() == want
