"""Dataset build on a few real CASU-mini scenes: load_dataset, byte-identical rebuilds,
resume, shards + merge, skipped scenes, and the exact Hub commit operations."""
import io
import json
import shutil
from pathlib import Path

import pytest
import yaml

from casu_dataset.build import CONFIGS, build_dataset, merge_folders, plan_push, push
from casu_dataset.scenarios.library import DEFAULT_DIR, compile_library

SCENES = ["school_dismissal", "kitchen_kettle", "hotel_wake_call"]  # one with a minimal pair


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("build")
    docs = [s for f in sorted(DEFAULT_DIR.glob("*.yaml")) for s in yaml.safe_load(f.read_text())]
    picked = [s for s in docs if s["id"] in SCENES]
    broken = json.loads(json.dumps(picked[0]))
    broken["id"] = "broken_scene"
    broken.pop("pair", None)
    broken["script"]["turns"][0]["speaker"] = "nobody"
    (d / "lib.yaml").write_text(yaml.safe_dump(picked + [broken], sort_keys=False))
    return d


@pytest.fixture(scope="module")
def builder(work):
    from casu_dataset.catalog import Catalog
    from casu_dataset.mixer import MixConfig
    from casu_dataset.realize import SceneBuilder
    from casu_dataset.retrieval import Retriever
    from casu_dataset.speech.intelligibility import WhisperChecker
    from casu_dataset.speech.layer import SpeechSynth
    from casu_dataset.speech.voices import VoiceRegistry
    return SceneBuilder(Retriever(Catalog.embedded(), cache_dir=work / "cache"), SpeechSynth(work / "cache"),
                        VoiceRegistry(), MixConfig(), WhisperChecker())


@pytest.fixture(scope="module")
def built(work, builder):
    invalid = []
    scenes = compile_library(work / "lib.yaml", invalid)
    rep = build_dataset(work / "out", scenes, builder, seed=1, cache_dir=work / "cache", progress=False,
                        invalid=invalid)
    return work / "out", rep, scenes, invalid


def _bytes(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_load_dataset_every_config_and_decode_with_soundfile(built):
    import datasets
    import soundfile as sf
    out, rep, scenes, _ = built
    assert len(rep.built) == 5  # 3 scenes + their 2 minimal-pair variants
    for c in CONFIGS:
        ds = datasets.load_dataset(str(out), c, split="test")
        assert len(ds) > 0, c
        assert isinstance(ds.features["audio"], datasets.Audio) and ds.features["audio"].sampling_rate == 16000
    ds = datasets.load_dataset(str(out), "contextual_reasoning", split="test").cast_column(
        "audio", datasets.Audio(decode=False))
    row = next(r for r in ds if r["minimal_pair_id"])
    wav, sr = sf.read(io.BytesIO(row["audio"]["bytes"]), dtype="float32")
    assert sr == 16000 and wav.ndim == 1 and 3 * 16000 < len(wav) <= 30 * 16000
    assert row["answer"] in "ABCD" and len(row["options"]) == 4 and row["layers"]
    pairs = [r for r in ds if r["minimal_pair_id"] == row["minimal_pair_id"]]
    assert len(pairs) == 2 and pairs[0]["answer"] != pairs[1]["answer"]
    sc = datasets.load_dataset(str(out), "scenes", split="test")
    for col in ("audio", "background", "speech", "events"):  # decoding would need torchcodec
        sc = sc.cast_column(col, datasets.Audio(decode=False))
    ann = json.loads(sc[0]["annotation"])
    assert ann["format"] == "casu.scene-annotation" and sc[0]["speech"]["bytes"]


def test_invalid_script_is_skipped_and_reported_in_the_card(built):
    out, rep, _, invalid = built
    assert [s["scene_id"] for s in rep.skipped] == ["broken_scene"]
    assert "unknown speaker 'nobody'" in rep.skipped[0]["reason"]
    card = (out / "README.md").read_text()
    assert "broken_scene" in card and "configs:" in card and "config_name: contextual_reasoning" in card
    assert "| ev__electric_bell_ring" in card or "| ev__" in card   # clip attribution
    assert "flite" in card or "piper" in card                     # voice attribution


def test_rebuild_is_byte_identical_and_served_from_cache(built, builder, work):
    out, rep, scenes, invalid = built
    rep2 = build_dataset(work / "out2", scenes, builder, seed=1, cache_dir=work / "cache", progress=False,
                         invalid=invalid)
    assert rep2.cached == len(rep2.built) == 5
    assert _bytes(out) == _bytes(work / "out2")


def test_interrupted_build_resumes(built, builder, work):
    out, rep, scenes, invalid = built
    cache = work / "cache_resume"
    shutil.copytree(work / "cache", cache)
    done = sorted((cache / "build" / "scenes").iterdir())
    shutil.rmtree(done[0])                       # as if killed before this scene finished
    (done[1] / "done").unlink()                 # and this one was half written
    rep3 = build_dataset(work / "out3", scenes, builder, seed=1, cache_dir=cache, progress=False, invalid=invalid)
    assert rep3.cached == 3
    assert _bytes(out) == _bytes(work / "out3")


def test_shards_merge_to_the_single_build(built, builder, work):
    out, rep, scenes, invalid = built
    for i in range(2):
        build_dataset(work / f"shard{i}", scenes, builder, seed=1, cache_dir=work / "cache", progress=False,
                      num_shards=2, shard_index=i, invalid=invalid if i == 0 else [])
    merged = merge_folders(work / "merged", [work / "shard0", work / "shard1"])
    assert sorted(merged.built) == sorted(rep.built)
    assert _bytes(out) == _bytes(work / "merged")
    with pytest.raises(ValueError, match="--shard-index 2 must be in"):
        build_dataset(work / "x", scenes, builder, num_shards=2, shard_index=2, progress=False)


def test_retrieval_below_threshold_and_failed_synthesis_are_skipped(built, builder, work):
    from dataclasses import replace
    out, rep, scenes, _ = built
    strict = replace(builder, min_score=0.99, cache=None)
    rep4 = build_dataset(work / "strict", scenes[:1], strict, seed=1, cache_dir=work / "cache_strict", progress=False)
    assert rep4.built == [] and "RetrievalError" in rep4.skipped[0]["reason"]
    from casu_dataset.speech.voices import VoiceRegistry
    mute = replace(builder, registry=VoiceRegistry([v for v in builder.registry.voices if v.gender == "male"]),
                   cache=None)
    rep5 = build_dataset(work / "mute", [s for s in scenes if s.script.id == "kitchen_kettle"], mute, seed=1,
                         cache_dir=work / "cache_mute", progress=False)
    assert rep5.built == [] and "no adult female voice" in rep5.skipped[0]["reason"]


def test_push_sends_exactly_the_folder(built):
    out, _, _, _ = built
    ops = plan_push(out)
    paths = [o.path_in_repo for o in ops]
    assert "README.md" in paths and "contextual_reasoning/test-00000-of-00001.parquet" in paths
    assert paths == sorted(paths) and len(paths) == len(set(paths))

    class Recorder:
        def __init__(self):
            self.calls = []

        def create_repo(self, **kw):
            self.calls.append(("create_repo", kw))

        def create_commit(self, **kw):
            self.calls.append(("create_commit", kw))
            return None

    api = Recorder()
    push(out, "casu-org/casu-mini", api=api)
    (name1, repo), (name2, commit) = api.calls
    assert repo == {"repo_id": "casu-org/casu-mini", "repo_type": "dataset", "private": False, "exist_ok": True}
    assert commit["repo_type"] == "dataset" and [o.path_in_repo for o in commit["operations"]] == paths
    with pytest.raises(ValueError, match="expected ORG/NAME"):
        push(out, "noslash", api=api)


def test_num_proc_builds_the_same_bytes(built, work):
    from casu_dataset.build import build_dataset
    out, rep, scenes, invalid = built
    spec = {"cache": str(work / "cache_mp"), "check_speech": True, "alpha": 0.6}
    from casu_dataset.realize import make_builder
    b = make_builder(spec)
    rep6 = build_dataset(work / "mp", scenes, b, seed=1, cache_dir=work / "cache_mp", progress=False,
                         num_proc=2, invalid=invalid, builder_spec=spec)
    assert rep6.built == rep.built
    a, b = _bytes(out), _bytes(work / "mp")
    assert [k for k in a if a[k] != b.get(k)] == []
