"""Contrast families: the compiler, the invariants (each broken on purpose and reported), the
family metric and its family bootstrap, and identical stems within speech versions and fills."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import fixture_builder

from casu_dataset.families import validity as fv
from casu_dataset.families.compile import (
    FamilyError,
    compile_families,
    compile_family,
    families_of,
    naming_violations,
    parse_family,
)

FIXTURE = Path(__file__).parent / "fixtures" / "families" / "two_families.yaml"


def _raw() -> list[dict]:
    return yaml.safe_load(FIXTURE.read_text())


def _compile(item: dict):
    return compile_family(parse_family(item, "x.yaml"), "x.yaml")


def test_compiles_two_shapes_with_keys_a_permutation():
    scenes = compile_families(FIXTURE)
    fams = families_of(scenes)
    assert sorted(fams) == ["fx_class_lineup", "fx_go_or_stay"]
    assert len(scenes) == 8
    for fid, vs in fams.items():
        by_task = {}
        for s in vs:
            for q in s.questions:
                by_task.setdefault(q.task, []).append(q)
        for task, qs in by_task.items():
            assert sorted(q.answer for q in qs) == list("ABCD")
            assert len({tuple(q.options) for q in qs}) == 1 and len({q.question for q in qs}) == 1
    crossed = fams["fx_go_or_stay"]
    assert {s.variant for s in crossed} == {"go.alarm", "go.phone", "stay.alarm", "stay.phone"}
    assert {s.speech_group for s in crossed} == {"fx_go_or_stay/go", "fx_go_or_stay/stay"}
    slot_ev = [e for e in fams["fx_class_lineup"][0].script.events if e.id == "cue"][0]
    assert slot_ev.window == 4.0  # the default fixed window
    assert fv.check_scenes(scenes) == []


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda f: f["fills"].pop("horn"), "fills"),
        (lambda f: f["fills"]["horn"].update(type="siren"), "fills"),
        (lambda f: f["questions"][0]["options"].pop("horn"), "options"),
        (lambda f: f["questions"][0]["options"].update(horn=f["questions"][0]["options"]["bell"]), "options"),
        (
            lambda f: f["questions"][0].update(q="Why does the school bell make the teacher line them up?"),
            "names a fill",
        ),
        (
            lambda f: f["questions"][0].update(
                q="Why line up? The lesson has ended and it is time to go home"
            ),
            "appears in the question",
        ),
        (
            lambda f: f["script"]["events"][0].update(description="A bell."),
            "slot's sound comes from the fills",
        ),
        (lambda f: f.update(types={}), "types"),
        # an event without an id: named in the message, not a TypeError from sorting the layers
        (lambda f: f["script"]["events"].append({"anchor": {"type": "at", "time": 1.0}}), "types"),
        (lambda f: f.update(slot="nope"), "slot"),
        (lambda f: f["variants"].pop("bell"), "variants"),
        (lambda f: f.update(versions=["a", "b"]), "versions"),
        (lambda f: f["questions"].append(copy.deepcopy(f["questions"][0])), "more than one question"),
    ],
)
def test_compiler_refuses_broken_slot_family(mutate, field):
    item = _raw()[0]
    mutate(item)
    with pytest.raises(FamilyError) as err:
        _compile(item)
    assert "fx_class_lineup" in str(err.value) and field in str(err.value)


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda f: f["script"]["turns"][1].update(text="Same in both."), "identical"),
        (lambda f: f["script"]["turns"][1].update(text={"go": "Out.", "other": "Stay."}), "turns[1].text"),
        (lambda f: f.update(versions=["go"]), "versions"),
        (
            lambda f: f["fills"].update(
                third={"type": "dog_bark", "description": "A dog barks.", "keywords": ["dog"]}
            ),
            "fills",
        ),
    ],
)
def test_compiler_refuses_broken_crossed_family(mutate, field):
    item = _raw()[1]
    mutate(item)
    with pytest.raises(FamilyError) as err:
        _compile(item)
    assert "fx_go_or_stay" in str(err.value) and field in str(err.value)


def _broken(kind: str):
    scenes = compile_families(FIXTURE)
    fams = families_of(scenes)
    slot, crossed = fams["fx_class_lineup"], fams["fx_go_or_stay"]
    if kind == "question text":
        slot[1].questions[0].question = "Something else?"
    elif kind == "option order":
        slot[2].questions[0].options = list(reversed(slot[2].questions[0].options))
    elif kind == "keys":
        slot[3].questions[0].answer = slot[0].questions[0].answer
    elif kind == "missing question":
        slot[3].questions = slot[3].questions[:1]
    elif kind == "second slot varies":
        d = slot[1].script.to_dict()
        d["background"]["description"] = "Rain falls on the roof."
        slot[1].script = type(slot[1].script).model_validate(d)
    elif kind == "two speech scripts in a slot family":
        d = slot[1].script.to_dict()
        d["turns"][0]["text"] = "Hello there, everyone."
        slot[1].script = type(slot[1].script).model_validate(d)
    elif kind == "crossed with three speech versions":
        d = crossed[0].script.to_dict()
        d["turns"][0]["text"] = "What was that noise?"
        crossed[0].script = type(crossed[0].script).model_validate(d)
    elif kind == "option inside question":
        for s in slot:
            s.questions[0].question = s.questions[0].question + " " + s.questions[0].options[0]
    elif kind == "family of three":
        scenes.remove(slot[3])
    return scenes


@pytest.mark.parametrize(
    "kind, field",
    [
        ("question text", "questions.contextual_reasoning.q"),
        ("option order", "questions.contextual_reasoning.options"),
        ("keys", "questions.contextual_reasoning.answer"),
        ("missing question", "questions.counterfactual_reasoning"),
        ("second slot varies", "script"),
        ("two speech scripts in a slot family", "script.turns"),
        ("crossed with three speech versions", "script.turns"),
        ("option inside question", "questions.contextual_reasoning.options"),
        ("family of three", "variants"),
    ],
)
def test_validity_reports_each_broken_invariant(kind, field):
    v = fv.check_scenes(_broken(kind))
    assert v, f"{kind}: not reported"
    assert any(x["field"] == field or x["field"].startswith(field) for x in v), [str(x) for x in v]


def test_naming_check_is_whole_words():
    from casu_dataset.families.compile import Fill

    fills = {"bell": Fill(type="electric_bell_ring", description="d", keywords=["school bell"])}
    assert naming_violations("Why did the school bell ring?", fills)
    assert not naming_violations("Why is everyone belligerent?", fills)


def test_question_only_readers_sit_at_chance_by_construction():
    from casu_dataset.sounds.retrieval import Embedder

    scenes = compile_families(FIXTURE)
    res = fv.embedding_readers(scenes, Embedder())
    q = res["question only"]["all"]
    assert q["accuracy"] == pytest.approx(0.25) and q["family_accuracy"] == 0.0
    # A speech-only reader cannot tell a slot family's variants apart; on crossed families <= 50%.
    assert res["speech only"]["slot"]["accuracy"] == pytest.approx(0.25)
    assert res["speech only"]["crossed"]["accuracy"] <= 0.5
    assert res["sounds only"]["crossed"]["accuracy"] <= 0.5
    for k, row in fv.length_readers(scenes).items():
        assert row["all"]["accuracy"] == pytest.approx(0.25) and row["all"]["family_accuracy"] == 0.0


def test_family_bootstrap_resamples_families():
    from harness.scoring.metrics import family_bootstrap

    recs = [
        {"family_id": f"f{i}", "task": "t", "correct": c}
        for i in range(20)
        for c in ([True] * 4 if i < 5 else [True, False, False, False])
    ]
    m = family_bootstrap(recs, seed=0)
    assert m["family_accuracy"]["value"] == pytest.approx(5 / 20)
    assert m["accuracy"]["value"] == pytest.approx((5 * 4 + 15) / 80)
    assert m["accuracy"]["families"] == 20 and m["accuracy"]["resampled"] == "families"
    # Intervals over families are wider than ones that treat 80 variants as independent.
    from harness.scoring.metrics import bootstrap_ci

    naive = bootstrap_ci([r["correct"] for r in recs], seed=0)
    assert (m["accuracy"]["ci95"][1] - m["accuracy"]["ci95"][0]) > (naive[1] - naive[0])
    # A model that ignores the slot: one right variant per family -> 25%, family accuracy 0.
    blind = [{"family_id": f"f{i}", "task": "t", "correct": k == 0} for i in range(20) for k in range(4)]
    mb = family_bootstrap(blind)
    assert mb["accuracy"]["value"] == 0.25 and mb["family_accuracy"]["value"] == 0.0
    # Incomplete families (a --limit run) do not count for family accuracy.
    assert family_bootstrap(recs[:3])["family_accuracy"]["value"] is None


@pytest.fixture(scope="module")
def built_fixture_families():
    from casu_dataset.families.family_build import build_family

    cache = Path(os.environ["CASU_CACHE"]) if os.environ.get("CASU_CACHE") else None
    b = fixture_builder(cache)
    scenes = compile_families(FIXTURE)
    res = {}

    def one(v, st):
        r = b.build(v.script, 0, **st)
        res[v.script.id] = r
        return {"annotation": r.annotation}, False

    for vs in families_of(scenes).values():
        build_family(vs, b, 0, one)
    return scenes, res


def test_speech_identical_within_versions_and_sounds_within_fills(built_fixture_families):
    scenes, res = built_fixture_families
    for group, layers in (("speech_group", ["speech"]), ("fill_group", ["background", "events"])):
        groups = {}
        for s in scenes:
            groups.setdefault(getattr(s, group), []).append(s)
        for g, members in groups.items():
            for layer in layers:
                ref = res[members[0].script.id].stems[layer]
                for m in members[1:]:
                    assert np.array_equal(res[m.script.id].stems[layer], ref), (g, layer, m.script.id)
    crossed = [s for s in scenes if s.family_id == "fx_go_or_stay"]
    go = res[crossed[0].script.id].stems["speech"]
    stay = next(
        res[s.script.id].stems["speech"] for s in crossed if s.speech_version != crossed[0].speech_version
    )
    assert not np.array_equal(go, stay)  # the versions really differ
    # Turn onsets are shared by both versions (the reserve), so the events line up too.
    onsets = {tuple(t["onset"] for t in res[s.script.id].annotation["plan"]["turns"]) for s in crossed}
    assert len(onsets) == 1
    # The slot window: the clip never plays past it.
    for s in scenes:
        ev = next(e for e in res[s.script.id].annotation["plan"]["events"])
        assert ev["offset"] - ev["onset"] <= s.script.events[0].window + 1e-6


def test_family_clip_gain_is_shared(built_fixture_families):
    scenes, res = built_fixture_families
    for fid, vs in families_of(scenes).items():
        assert len({res[s.script.id].annotation["gains"]["clip_gain"] for s in vs}) == 1


def test_regenerate_reproduces_a_forced_clip_gain(built_fixture_families):
    from casu_dataset.mix.mixer import SceneSources, SourceRef, compose
    from casu_dataset.mix.regenerate import regenerate

    scenes, res = built_fixture_families
    s = scenes[0]
    ann = copy.deepcopy(res[s.script.id].annotation)
    src = SceneSources(
        SourceRef(_path(ann["background"]), ann["background"]["clip_id"]),
        [SourceRef(_path(t), t["clip_id"]) for t in ann["turns"]],
        [SourceRef(_path(e), e["clip_id"]) for e in ann["events"]],
    )
    forced = compose(s.script, src, 0, rng_key=s.rng_key, clip_gain=0.5)
    assert forced.annotation["gains"]["clip_gain"] == 0.5 and forced.annotation["gains"]["clip_gain_forced"]
    again = regenerate(forced.annotation)
    assert np.array_equal(again.mixture, forced.mixture)


def _path(entry: dict) -> str:
    from casu_dataset.mix.regenerate import resolve_source_path

    return resolve_source_path(entry["path"], [])


# -- the built dataset and the harness ----------------------------------------------------------


@pytest.fixture(scope="module")
def family_dataset(tmp_path_factory):
    """The fixture families built into a real dataset folder (no Whisper check: fast)."""
    from casu_dataset.dataset.build import build_dataset
    from casu_dataset.dataset.config import BuildConfig

    cache = Path(os.environ["CASU_CACHE"])
    b = fixture_builder(cache)
    out = tmp_path_factory.mktemp("families") / "v2"
    config = BuildConfig(out=out, cache=cache, progress=False, name="CASU-mini v2 fixture", max_skips=None)
    rep = build_dataset(config, compile_families(FIXTURE), b)
    assert len(rep.built) == 8 and not rep.skipped
    return out


def test_built_dataset_has_family_columns_and_identical_stems(family_dataset):
    import pyarrow.parquet as pq

    t = pq.read_table(str(family_dataset / "contextual_reasoning")).to_pylist()
    assert len(t) == 8 and {r["family_id"] for r in t} == {"fx_class_lineup", "fx_go_or_stay"}
    assert {r["variant"] for r in t if r["family_id"] == "fx_go_or_stay"} == {
        "go.alarm",
        "go.phone",
        "stay.alarm",
        "stay.phone",
    }
    d = pq.read_table(str(family_dataset / "scene_description")).to_pylist()
    assert len(d) == 8 and len({r["reference"] for r in d}) == 8  # one reference per variant
    bad, stats = fv.check_built(family_dataset)
    assert bad == [] and stats["speech_groups"] == 3 and stats["fill_groups"] == 6


def test_validity_reports_a_stem_that_differs(family_dataset, tmp_path):
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from casu_dataset.core.audio_io import decode_bytes, encode_flac

    bad = tmp_path / "bad"
    shutil.copytree(family_dataset, bad)
    f = next((bad / "scenes").glob("*.parquet"))
    rows = pq.read_table(str(f)).to_pylist()
    x = decode_bytes(rows[1]["speech"]["bytes"])
    x[1000] += 0.01
    rows[1]["speech"] = {"bytes": encode_flac(x), "path": rows[1]["speech"]["path"]}
    schema = pq.read_schema(str(f))
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), str(f))
    # The build record names the edited file: the folder is not the build that wrote it ...
    v, _ = fv.check_built(bad)
    assert len(v) == 1 and f.name in v[0]["problem"] and "not the file build" in v[0]["problem"]
    # ... and without the record (a folder made by other means) the stem check finds the difference.
    (bad / "casu_build.json").unlink()
    v, _ = fv.check_built(bad)
    assert len(v) == 1 and v[0]["field"] == f"{rows[1]['scene_id']}.speech"


def test_removing_the_slot_leaves_any_model_at_chance(family_dataset):
    """An audio-dependent model (answer = hash of the audio): with the slot masked, a slot
    family's four variants are the same audio (25% per variant, no family right), a crossed
    family's two and two (at most 50%); masking the speech does the same to crossed families."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
    from plugin_adapters import AudioHashAdapter

    from harness.config import EvalConfig
    from harness.run.conditions import parse_conditions
    from harness.run.data import CasuData
    from harness.run.evaluate import evaluate
    from harness.task.config import load_tasks

    tasks = load_tasks()
    ev = evaluate(
        AudioHashAdapter(),
        [tasks["contextual_reasoning"], tasks["counterfactual_reasoning"]],
        CasuData(family_dataset),
        EvalConfig(progress=False, probe=False, conditions=parse_conditions("PEB,P_B,_EB")),
    )
    cr = ev["results"]["contextual_reasoning"]
    for cond in ("PEB", "P_B", "_EB"):
        assert "family_accuracy" in cr[cond] and set(cr[cond]["by_family_shape"]) == {"slot", "crossed"}
    assert cr["P_B"]["by_family_shape"]["slot"]["accuracy"]["value"] == 0.25
    assert ev["results"]["counterfactual_reasoning"]["P_B"]["accuracy"]["value"] == 0.25
    assert cr["P_B"]["by_family_shape"]["crossed"]["accuracy"]["value"] <= 0.5
    assert cr["_EB"]["by_family_shape"]["crossed"]["accuracy"]["value"] <= 0.5
    for cond in ("P_B", "_EB"):
        assert cr[cond]["by_family_shape"]["crossed"]["family_accuracy"]["value"] == 0.0
    assert cr["P_B"]["family_accuracy"]["value"] == 0.0
    # The masked audio itself: identical across a slot family's variants.
    data = CasuData(family_dataset)
    samples = [s for s in data.samples("contextual_reasoning") if s.family_id == "fx_class_lineup"]
    cond = parse_conditions("P_B")[0]
    audios = [data.audio(s, cond) for s in samples]
    assert all(np.array_equal(audios[0], a) for a in audios[1:])
    full = [data.audio(s, parse_conditions("PEB")[0]) for s in samples]
    assert not np.array_equal(full[0], full[1])


def test_a_key_given_twice_is_named_in_families_tasks_scripts_and_cards(tmp_path):
    """PyYAML keeps the second of two equal keys silently; every CASU reader refuses it by name."""
    from casu_dataset.families.compile import FamilyError, compile_families
    from casu_dataset.formats.reader import BuiltDataset, LoadError
    from casu_dataset.script.schema import ScriptError, load_script
    from harness.task.config import TaskConfigError, builtin_tasks_dir, load_task

    text = FIXTURE.read_text()
    fam = tmp_path / "fams.yaml"
    fam.write_text(text.replace("      q: Why does", "      q: What now?\n      q: Why does", 1))
    with pytest.raises(FamilyError, match=r"(?s)fams.yaml: .*the key 'q' twice \(first on line \d+\)"):
        compile_families(fam)
    task = tmp_path / "role_inference.yaml"
    src = (builtin_tasks_dir() / "role_inference.yaml").read_text()
    task.write_text(src + "\ntask: role_inference\n")
    with pytest.raises(TaskConfigError, match=r"(?s)role_inference.yaml: .*the key 'task' twice"):
        load_task(task)
    script = tmp_path / "s.yaml"
    script.write_text("id: s\nplace: a kitchen\nplace: a garden\n")
    with pytest.raises(ScriptError, match=r"(?s)s.yaml: .*the key 'place' twice"):
        load_script(script)
    card = tmp_path / "ds"
    card.mkdir()
    (card / "README.md").write_text("---\nconfigs: []\nconfigs: []\n---\n# x\n")
    with pytest.raises(LoadError, match=r"(?s)README.md: .*the key 'configs' twice"):
        BuiltDataset(card).rows("role_inference", "test")


def test_yml_files_are_family_files_too(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "fams.yml").write_text(FIXTURE.read_text())
    from casu_dataset.families.compile import compile_families, is_family_library

    assert is_family_library(lib)
    assert {s.family_id for s in compile_families(lib)} == {s.family_id for s in compile_families(FIXTURE)}


def test_validity_names_every_library_family_missing_from_the_dataset(family_dataset, tmp_path):
    scenes = compile_families(FIXTURE)
    assert fv.check_coverage(family_dataset, scenes) == []
    other = tmp_path / "lib.yaml"
    text = FIXTURE.read_text().replace("- id: fx_go_or_stay", "- id: fx_go_or_stay_renamed")
    other.write_text(text)
    v = fv.check_coverage(family_dataset, compile_families(other))
    assert [x["family"] for x in v] == ["fx_go_or_stay_renamed", "-"]
    assert "4 of 4 variants not in" in v[0]["problem"] and "4 scenes not in the library" in v[1]["problem"]
