"""Recording robustness: realization 2 of a build (every non-speech layer on another recording of
the same bank type; speech and timeline unchanged), its own lock, the single-recording error,
realization 1's records free of any realization setting, and the harness's recording_consistency
metric."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import HARNESS_FAMILIES, ROOT, call_main, fixture_builder, shipped_families

from casu_dataset.contract import LETTERS
from casu_dataset.families.compile import compile_families
from casu_dataset.formats.lock import lock_path, read_lock
from casu_dataset.sounds.catalog import Catalog
from model_adapters.base import Adapter

FIXTURE = ROOT / "tests" / "fixtures" / "families" / "two_families.yaml"

MCQ = ["contextual_reasoning", "entity_extraction", "role_inference", "counterfactual_reasoning"]


def _build(out, lib, cache, realization=2, lock=None, relock=False, reference=None, **kw):
    from casu_dataset.dataset.build import build_dataset
    from casu_dataset.dataset.config import BuildConfig

    config = BuildConfig(
        out=out,
        scenarios=lib,
        cache=cache,
        progress=False,
        max_skips=None,
        realization=realization,
        lock="relock" if relock else "follow",
        **kw,
    )
    builder = fixture_builder(cache, lock)
    builder.reference = reference
    return build_dataset(config, compile_families(lib), builder)


def _scenes(folder: Path) -> dict[str, dict]:
    return {
        r["scene_id"]: r
        for f in sorted((folder / "scenes").glob("*.parquet"))
        for r in pq.read_table(f).to_pylist()
    }


def _parquet_bytes(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*.parquet"))}


@pytest.fixture(scope="module")
def r2_small(casu_small, session_cache):
    """Realization 2 of the `casu_small` build (same library file, same cache: its realization 1
    decisions are the ones casu_small made, taken from the scene cache)."""
    lib = casu_small.parent / "families.yaml"
    out = casu_small.parent / "r2"
    rep = _build(out, lib, session_cache)
    assert len(rep.built) == 8 and not rep.skipped, rep.skipped
    return out, rep


# -- realization 1 ------------------------------------------------------------------------------


def test_realization1_records_no_realization_setting(casu_small):
    """Realization 1's build report records no realization setting: the key is added only to
    realization 2's settings."""
    report = json.loads((casu_small / "build_report.json").read_text())
    assert "realization" not in report["settings"]


def test_realization2_varies_every_recording_and_keeps_speech_and_timeline(casu_small, r2_small):
    out, rep = r2_small
    cat = Catalog.embedded()
    a, b = _scenes(casu_small), _scenes(out)
    assert set(a) == set(b) and len(a) == 8
    for sid in a:
        A, B = json.loads(a[sid]["annotation"]), json.loads(b[sid]["annotation"])
        # every non-speech layer: another clip of the same bank type
        pairs = [(A["background"], B["background"], "background")] + [
            (ea, eb, f"events.{ea['id']}") for ea, eb in zip(A["events"], B["events"])
        ]
        types = B["extra"]["realization"]["bank_types"]
        for la, lb, name in pairs:
            assert la["clip_id"] != lb["clip_id"], (sid, name)
            assert cat[lb["clip_id"]].type == types[name] == cat[la["clip_id"]].type, (sid, name)
        assert B["extra"]["realization"]["realization1_clips"]["background"] == A["background"]["clip_id"]
        # speech: the same bytes; the timeline: the same onsets and length
        assert a[sid]["speech"]["bytes"] == b[sid]["speech"]["bytes"], sid
        assert a[sid]["audio"]["bytes"] != b[sid]["audio"]["bytes"]
        assert a[sid]["background"]["bytes"] != b[sid]["background"]["bytes"]
        assert A["num_samples"] == B["num_samples"]
        assert A["turns"] == B["turns"]  # the same TTS files (by hash), onsets and offsets
        assert [e["onset_samples"] for e in A["events"]] == [e["onset_samples"] for e in B["events"]]
        assert A["plan"]["turns"] == B["plan"]["turns"] and A["extra"]["speech"] == B["extra"]["speech"]
        assert (
            A["gains"]["speech"] == B["gains"]["speech"]
            and A["gains"]["clip_gain"] == B["gains"]["clip_gain"]
        )
    # a family's shared layers: one clip in every variant; the variants sharing a fill share its stems
    by_fill = defaultdict(list)
    for sid, r in b.items():
        by_fill[r["fill_group"]].append(r)
        ann = json.loads(r["annotation"])
        same_bed = {
            json.loads(x["annotation"])["background"]["clip_id"]
            for x in b.values()
            if x["family_id"] == r["family_id"]
        }
        if r["slot_kind"] == "event":
            assert len(same_bed) == 1, r["family_id"]
        assert ann["extra"]["realization"]["index"] == 2
    for rows in by_fill.values():
        assert (
            len({x["events"]["bytes"] for x in rows}) == 1
            and len({x["background"]["bytes"] for x in rows}) == 1
        )
    # the rows pair with realization 1's by id: same questions, options and keys
    for c in MCQ:
        qa = {
            r["id"]: (r["question"], r["options"], r["answer"])
            for r in pq.read_table(casu_small / c).to_pylist()
        }
        qb = {r["id"]: (r["question"], r["options"], r["answer"]) for r in pq.read_table(out / c).to_pylist()}
        assert qa == qb and qa
    # its own name and settings in the card and the build report
    card = (out / "README.md").read_text()
    assert "(realization 2)" not in (casu_small / "README.md").read_text()
    assert "This is **realization 2**" in card
    assert json.loads((out / "build_report.json").read_text())["settings"]["realization"] == 2
    assert (
        rep.identity["sha256"]
        != json.loads((casu_small / "casu_build.json").read_text())["identity"]["sha256"]
    )


def _one_recording_library(tmp_path: Path) -> tuple[Path, str, str]:
    """A library of hs_dinner_who_gets_it and a second family, where the first's first fill is
    re-typed to a bank type that has ONE recording (its description and keywords that clip's
    caption, so retrieval finds it): realization 2 cannot vary that family. (lib, type, fill key)"""
    from collections import Counter

    clips = Catalog.embedded().clips
    n = Counter((c.kind, c.type) for c in clips)
    one = sorted((c for c in clips if c.kind == "event" and n[("event", c.type)] == 1), key=lambda c: c.id)
    assert one, "the bank has no one-recording event type left to test realization 2's refusal with"
    clip = one[0]
    docs = shipped_families()
    fam = docs["hs_dinner_who_gets_it"]
    key = next(iter(fam["fills"]))
    fam["fills"][key] = {"type": clip.type, "description": clip.caption, "keywords": list(clip.keywords)}
    lib = tmp_path / "lib.yaml"
    lib.write_text(yaml.safe_dump([fam, docs[HARNESS_FAMILIES[1]]], sort_keys=False))
    return lib, clip.type, key


def test_a_type_with_one_recording_is_a_named_error_or_a_counted_skip(casu_small, tmp_path, session_cache):
    """A fill whose bank type the bank holds once: realization 2 refuses to build its family
    (naming family, layer and type) before anything is built; with --max-skips it builds the other
    families and reports that one as skipped, never reusing realization 1's recording."""
    from casu_dataset.api import build
    from casu_dataset.core.errors import BuildError
    from casu_dataset.dataset.config import BuildConfig

    lib, one, key = _one_recording_library(tmp_path)
    cfg = dict(scenarios=lib, cache=session_cache, check_speech=False, progress=False, realization=2)
    with pytest.raises(BuildError) as err:
        build(BuildConfig(out=tmp_path / "o", **cfg))
    msg = str(err.value)
    assert "realization=2" in msg and f"family hs_dinner_who_gets_it, layer events.cue (fill {key!r})" in msg
    assert f"bank type {one!r} has 1 usable event recording" in msg and "max_skips=4" in msg
    assert msg.count(one) == 1 and not (tmp_path / "o").exists()
    from casu_dataset.cli.build import flag

    assert "--realization 2" in err.value.render(flag) and "--max-skips 4" in err.value.render(flag)
    res = build(BuildConfig(out=tmp_path / "o", max_skips=4, **cfg))
    assert sorted({s.split(".")[0] for s in res.built}) == [HARNESS_FAMILIES[1]]
    assert len(res.skipped) == 4 and all("realization 2 not varied" in s["reason"] for s in res.skipped)
    assert one in (tmp_path / "o" / "README.md").read_text()
    assert (
        json.loads((tmp_path / "o" / "build_report.json").read_text())["settings"]["name"]
        == "lib (realization 2)"
    )


def test_realization2_lock_records_skipped_families(tmp_path, session_cache):
    """A realization-2 relock records the family it could not vary (a one-recording type) with its
    reason, so its lock still covers the library; a build that follows it skips that family again
    (never builds it anew) and reproduces the rest byte for byte. A realization-1 lock has no skips."""
    from casu_dataset.formats.lock import write_lock

    lib, one, key = _one_recording_library(tmp_path)
    _build(tmp_path / "r1", lib, session_cache, realization=1, relock=True)
    r1_lock = read_lock(lock_path(lib))
    rel = _build(tmp_path / "o2", lib, session_cache, relock=True, reference=r1_lock)
    lock2 = read_lock(lock_path(lib, 2))
    assert rel.lock["mode"] == "written" and len(lock2.scenes) == 4 and len(lock2.skipped) == 4
    assert {s.split(".")[0] for s in lock2.skipped} == {"hs_dinner_who_gets_it"}
    assert all("SecondRealizationError" in r and f"bank type {one!r}" in r for r in lock2.skipped.values())
    fol = _build(tmp_path / "o3", lib, tmp_path / "cold", lock=lock2, reference=r1_lock)
    assert fol.realization_summary()["reproduced"] == 4
    assert len(fol.skipped) == 4 and all("skipped as the lock records" in s["reason"] for s in fol.skipped)
    assert _parquet_bytes(tmp_path / "o3") == _parquet_bytes(tmp_path / "o2")
    with pytest.raises(ValueError, match="records no skips"):
        write_lock(lib, [], {}, {}, {}, skipped=fol.skipped)


def test_realization2_relock_writes_its_own_lock_and_a_build_follows_it(tmp_path, session_cache):
    from casu_dataset.formats.lock import LockError, load_for

    lib = tmp_path / "two_families.yaml"
    shutil.copy(FIXTURE, lib)
    _build(tmp_path / "r1", lib, session_cache, realization=1, relock=True)
    r1_lock = read_lock(lock_path(lib))
    r1_bytes = lock_path(lib).read_bytes()
    rep = _build(tmp_path / "r2", lib, session_cache, relock=True, reference=r1_lock)
    p2 = lock_path(lib, 2)
    assert p2.name == "two_families.realization2.lock.jsonl" and rep.lock["mode"] == "written"
    assert lock_path(lib).read_bytes() == r1_bytes  # realization 1's lock untouched
    lock2 = read_lock(p2)
    assert lock2.header["realization"] == 2 and lock2.header["reference_lock_sha256"] == r1_lock.sha256
    assert "realization" not in r1_lock.header
    # a cold build (fresh cache) follows it byte for byte, with no retrieval
    rep2 = _build(tmp_path / "r2b", lib, tmp_path / "cache", lock=lock2, reference=r1_lock)
    assert rep2.realization_summary()["reproduced"] == 8
    assert _parquet_bytes(tmp_path / "r2b") == _parquet_bytes(tmp_path / "r2")
    assert _parquet_bytes(tmp_path / "r2") != _parquet_bytes(tmp_path / "r1")
    # realization 2's lock is refused as realization 1's, and once realization 1's lock changed
    s = lock2.header["settings"]
    settings = {k: s[k] for k in s if k != "mix_config"}
    ids = list(lock2.scenes)
    with pytest.raises(LockError, match="made against realization 1's lock"):
        load_for(lib, settings, s["mix_config"], ids, realization=2, reference=None)
    assert load_for(lib, settings, s["mix_config"], ids, realization=2, reference=r1_lock) is not None
    shutil.copy(p2, lock_path(lib))
    with pytest.raises(LockError, match="a lock of realization 2, not 1"):
        load_for(lib, settings, s["mix_config"], ids)


def test_build_flags_and_config():
    from casu_dataset.cli import main
    from casu_dataset.dataset.config import BuildConfig, ConfigError

    rc, out, _ = call_main(main, ["build", "--help"])
    assert rc == 0 and "--realization {1,2}" in out and "realization2.lock.jsonl" in out
    assert BuildConfig(out="x").realization == 1 and "realization" not in BuildConfig(out="x").builder_spec()
    for bad in (3, 0, True, "2", 2.0):
        with pytest.raises(ConfigError, match="realization"):
            BuildConfig(out="x", realization=bad)


# -- the metric ---------------------------------------------------------------------------------


def _rec(fam, v, task, parsed, answer="A", rotation=0, method=None):
    return {
        "id": f"{fam}.{v}/{task}",
        "task": task,
        "condition": "PEB",
        "rotation": rotation,
        "family_id": fam,
        "parsed": parsed,
        "answer": answer,
        "correct": parsed == answer,
        "method": method or ("letter" if parsed else "unparsed"),
    }


def test_recording_consistency_by_hand():
    from harness.scoring.metrics import recording_consistency

    t = "contextual_reasoning"
    r1 = [_rec(f, v, t, "ABCD"[i]) for f in ("f1", "f2", "f3") for i, v in enumerate("wxyz")]
    r2 = [dict(r) for r in r1]
    r2[5] = _rec("f2", "x", t, "C")  # one answer of f2 differs
    got = recording_consistency(r1, r2)
    assert got["value"] == pytest.approx(2 / 3) and got["consistent"] == 2 and got["families"] == 3
    assert got["unparsed"] == {"realization1": 0, "realization2": 0}
    # an unparsed answer on both sides is never "the same"; it is counted
    r1[8] = r2[8] = _rec("f3", "w", t, None)
    got = recording_consistency(r1, r2)
    assert got["value"] == pytest.approx(1 / 3) and got["unparsed"] == {"realization1": 1, "realization2": 1}
    # a failed request counts as unparsed; a family missing from realization 2 is left out, counted
    r2[0] = dict(r2[0], method="error")
    got = recording_consistency(r1, [r for r in r2 if r["family_id"] != "f3"])
    assert got["families"] == 2 and got["families_unpaired"] == 1 and got["value"] == 0.0
    # each realization's family accuracy over the paired families (f1's keys: A,B,C,D -> answer A)
    keyed = [dict(r, answer=r["parsed"], correct=True) for r in r1[:4]]
    got = recording_consistency(keyed, keyed)
    assert got["family_accuracy_realization1"] == got["family_accuracy_realization2"] == 1.0
    assert recording_consistency([dict(r, family_id=None) for r in r1], r2) is None


class HashListener(Adapter):
    """A deterministic model that hears: its letter is drawn from the audio's bytes (so another
    recording may change it), except on role questions, where it answers from the audio's length
    (the timeline, the same on both realizations); one other answer in 7 is unparseable."""

    name = "hash-listener"

    def generate(self, requests, settings):
        out = []
        for r in requests:
            h = hashlib.sha256(r.audio.tobytes()).digest()
            if h[1] % 7 == 0 and r.task != "role_inference":
                out.append("I cannot tell.")
            elif r.task == "role_inference":
                out.append(f"Answer: {LETTERS[len(r.audio) % len(r.options)]}")
            else:
                out.append(f"Answer: {LETTERS[h[0] % len(r.options)]}")
        return out


def _logged(run_dir: Path) -> dict[str, dict]:
    """id -> CASU sample record, from a run's logged samples."""
    recs = {}
    for f in run_dir.glob("casu_samples_*.jsonl"):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            recs[(r["id"], r["rotation"])] = r
    return recs


def _by_hand(a: dict, b: dict, task: str | None) -> float:
    fams: dict[str, bool] = {}
    for k, r in a.items():
        if task and r["task"] != task:
            continue
        ok = r["parsed"] is not None and k in b and b[k]["parsed"] == r["parsed"]
        fams[r["family_id"]] = fams.get(r["family_id"], True) and ok
    return sum(fams.values()) / len(fams)


def test_recording_consistency_on_real_runs(casu_small, r2_small, tmp_path):
    from harness import simple_evaluate

    r2 = r2_small[0]
    cache = str(tmp_path / "cache.sqlite")
    res = simple_evaluate(
        HashListener(),
        tasks=MCQ,
        dataset=str(casu_small),
        robustness_dataset=str(r2),
        output_path=tmp_path / "both",
        log_samples=True,
        cache=cache,
        probe=False,
    )
    # the second realization alone, from the same response cache: nothing is asked again
    alone = simple_evaluate(
        HashListener(),
        tasks=MCQ,
        dataset=str(r2),
        output_path=tmp_path / "r2",
        log_samples=True,
        cache=cache,
        probe=False,
    )
    assert alone.document["timing"]["cache_hits"] == alone.document["timing"]["units"] > 0
    a = _logged(tmp_path / "both" / "hash-listener")
    b = _logged(tmp_path / "r2" / "hash-listener")
    doc = res.document
    for t in MCQ:
        rc = doc["results"][t]["PEB"]["recording_consistency"]
        assert rc["value"] == pytest.approx(_by_hand(a, b, t)), t
        assert rc["unparsed"]["realization1"] == sum(
            r["parsed"] is None for r in a.values() if r["task"] == t
        )
        assert rc["unparsed"]["realization2"] == sum(
            r["parsed"] is None for r in b.values() if r["task"] == t
        )
        assert (
            rc["family_accuracy_realization2"]
            == alone.document["results"][t]["PEB"]["family_accuracy"]["value"]
        )
        assert res["results"][t]["recording_consistency,none"] == rc["value"]  # lm-eval's view
    overall = doc["robustness"]["overall"]["PEB"]
    assert overall["value"] == pytest.approx(_by_hand(a, b, None)) and overall["families"] == 2
    assert doc["results"]["role_inference"]["PEB"]["recording_consistency"]["value"] == 1.0  # the timeline
    assert sum(r["parsed"] is None for r in [*a.values(), *b.values()]) > 0
    rb = doc["robustness"]
    assert (
        rb["realization1"]["identity"]["sha256"]
        == json.loads((casu_small / "casu_build.json").read_text())["identity"]["sha256"]
    )
    assert (
        rb["realization2"]["identity"]["sha256"]
        == json.loads((r2 / "casu_build.json").read_text())["identity"]["sha256"]
    )
    assert doc["config"]["robustness_dataset"] == str(r2)
    md = next((tmp_path / "both" / "hash-listener").glob("results_*.md")).read_text()
    assert "## Recording robustness" in md and "Rec. consistency" in md
    # a model that ignores the audio answers alike everywhere: consistent, at chance accuracy
    rnd = simple_evaluate(
        "random", tasks=MCQ, dataset=str(casu_small), robustness_dataset=str(r2), probe=False
    )
    assert rnd.document["robustness"]["overall"]["PEB"]["value"] == 1.0


def test_robustness_dataset_must_be_another_realization(casu_small):
    from harness import simple_evaluate
    from harness.api import UsageError

    with pytest.raises(UsageError, match="--robustness_dataset .* the same data as --dataset"):
        simple_evaluate("random", tasks=MCQ, dataset=str(casu_small), robustness_dataset=str(casu_small))
    from harness.cli import main

    rc, out, _ = call_main(main, ["--help"])
    assert rc == 0 and "--robustness_dataset" in out


# A family of the shipped library whose realization-1 speech stem reaches the peak limit on its
# own (its bed cancelled the speech where it peaks): under realization 1's gain, kept byte for
# byte, no recording of the same types fits beside it.
SPEECH_AT_LIMIT = "hs_grandpa_or_pizza"


def test_a_family_whose_speech_stem_sets_the_gain_takes_a_lower_family_gain(tmp_path, session_cache):
    """Realization 2 of a family whose realization-1 speech stem alone sets the anti-clipping gain:
    no factor on the new background and events fits that gain, so the family takes realization 1's
    rule on its new mixtures (one lower gain for all variants, the layers' balance kept), recorded
    as `speech_scale`; its speech stems are realization 1's scaled by it, and every mixture and stem
    stays under the peak limit."""
    import io

    import numpy as np
    import soundfile as sf

    from casu_dataset.mix.mixer import MixConfig

    docs = shipped_families()
    lib = tmp_path / "lib.yaml"
    lib.write_text(yaml.safe_dump([docs[SPEECH_AT_LIMIT]], sort_keys=False))
    _build(tmp_path / "r1", lib, session_cache, realization=1, relock=True)
    rep = _build(tmp_path / "r2", lib, session_cache, relock=True, reference=read_lock(lock_path(lib)))
    assert len(rep.built) == 4 and not rep.skipped, rep.skipped
    a, b = _scenes(tmp_path / "r1"), _scenes(tmp_path / "r2")
    limit = MixConfig().peak_limit
    scales, peaks1 = set(), []
    for sid in a:
        A, B = json.loads(a[sid]["annotation"]), json.loads(b[sid]["annotation"])
        r = B["extra"]["realization"]
        scales.add(r["speech_scale"])
        assert r["nonspeech_headroom"] == 1.0
        assert B["gains"]["clip_gain"] == pytest.approx(A["gains"]["clip_gain"] * r["speech_scale"], rel=1e-9)
        s1, _ = sf.read(io.BytesIO(a[sid]["speech"]["bytes"]), dtype="float64")
        s2, _ = sf.read(io.BytesIO(b[sid]["speech"]["bytes"]), dtype="float64")
        peaks1.append(np.abs(s1).max())
        # realization 2's speech: realization 1's samples, scaled
        np.testing.assert_allclose(s2, s1 * r["speech_scale"], atol=2**-14)
        for col in ("audio", "speech", "background", "events"):
            x, _ = sf.read(io.BytesIO(b[sid][col]["bytes"]), dtype="float64")
            assert np.abs(x).max() <= limit + 2**-15, (sid, col)
    (scale,) = scales  # one gain for the whole family
    assert 0.5 < scale < 1.0 and max(peaks1) >= limit - 1e-3  # a speech version at the limit
