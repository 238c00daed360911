"""Dataset build on a few real CASU-mini scenes: load_dataset, byte-identical rebuilds,
resume, shards + merge, skipped scenes, atomic writes under kill -9, stale temp clean-up, the
card (name, license, attribution), the scene key, and the exact Hub commit operations."""

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from casu_dataset.core.errors import BuildError
from casu_dataset.dataset.build import CONFIGS, build_dataset
from casu_dataset.dataset.config import BuildConfig, ConfigError
from casu_dataset.dataset.publish import plan_push, push
from casu_dataset.dataset.writer import merge_folders
from casu_dataset.legacy.library import DEFAULT_DIR, compile_library

SCENES = ["school_dismissal", "kitchen_kettle", "hotel_wake_call"]  # one with a minimal pair


def _config(out, cache, **kw) -> BuildConfig:
    """These tests' build: seed 1, no progress bars; any number of skips unless max_skips says."""
    return BuildConfig(out=out, seed=1, cache=cache, progress=False, **{"max_skips": None, **kw})


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
def builder(work, session_cache):
    from casu_dataset.mix.mixer import MixConfig
    from casu_dataset.mix.realize import SceneBuilder
    from casu_dataset.sounds.catalog import Catalog
    from casu_dataset.sounds.retrieval import Retriever
    from casu_dataset.speech.intelligibility import WhisperChecker
    from casu_dataset.speech.layer import SpeechSynth
    from casu_dataset.speech.voices import VoiceRegistry

    # Embeddings and speech turns come from the session cache (shared with casu_small); the
    # scene cache is this module's own (work/cache), so resume tests see only these scenes.
    return SceneBuilder(
        Retriever(Catalog.embedded(), cache_dir=session_cache),
        SpeechSynth(session_cache),
        VoiceRegistry(),
        MixConfig(),
        WhisperChecker(),
    )


@pytest.fixture(scope="module")
def built(work, builder):
    invalid = []
    scenes = compile_library(work / "lib.yaml", invalid)
    rep = build_dataset(_config(work / "out", work / "cache"), scenes, builder, invalid=invalid)
    return work / "out", rep, scenes, invalid


def _bytes(folder: Path) -> dict:
    """Every dataset file (temp files of killed writes are not part of the dataset)."""
    from casu_dataset.core.atomic import is_tmp

    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not is_tmp(p)
    }


def test_load_dataset_every_config_and_decode_with_soundfile(built):
    import datasets
    import soundfile as sf

    out, rep, scenes, _ = built
    assert len(rep.built) == 5  # 3 scenes + their 2 minimal-pair variants
    for c in CONFIGS:
        ds = datasets.load_dataset(str(out), c, split="test")
        assert len(ds) > 0, c
        assert (
            isinstance(ds.features["audio"], datasets.Audio) and ds.features["audio"].sampling_rate == 16000
        )
    ds = datasets.load_dataset(str(out), "contextual_reasoning", split="test").cast_column(
        "audio", datasets.Audio(decode=False)
    )
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
    attribution = (out / "ATTRIBUTION.md").read_text()
    assert "| ev__" in attribution  # clip attribution
    assert "flite" in card or "piper" in card  # voice attribution


def test_rebuild_is_byte_identical_and_served_from_cache(built, builder, work):
    out, rep, scenes, invalid = built
    rep2 = build_dataset(_config(work / "out2", work / "cache"), scenes, builder, invalid=invalid)
    assert rep2.cached == len(rep2.built) == 5
    assert _bytes(out) == _bytes(work / "out2")


def test_interrupted_build_resumes(built, builder, work):
    out, rep, scenes, invalid = built
    cache = work / "cache_resume"
    shutil.copytree(work / "cache", cache)
    done = sorted((cache / "build" / "scenes").iterdir())
    shutil.rmtree(done[0])  # as if killed before this scene finished
    (done[1] / "done").unlink()  # and this one was half written
    rep3 = build_dataset(_config(work / "out3", cache), scenes, builder, invalid=invalid)
    assert rep3.cached == 3
    assert _bytes(out) == _bytes(work / "out3")


def test_entries_an_os_crash_left_incomplete_are_built_again(built, builder, work):
    """The scene cache is not flushed before its renames: after an OS crash an entry can be in
    place with a stem empty or short, or with an empty `done`. Its `done` lists every file's size,
    so such an entry counts as absent, is built again and replaces the broken one."""
    from casu_dataset.dataset.scene_cache import entry_complete

    out, rep, scenes, invalid = built
    cache = work / "cache_crash"
    shutil.copytree(work / "cache", cache)
    entries = sorted(p for p in (cache / "build" / "scenes").iterdir() if p.is_dir())
    sizes = json.loads((entries[0] / "done").read_text())["sizes"]
    assert sizes == {p.name: p.stat().st_size for p in entries[0].iterdir() if p.name != "done"}
    (entries[0] / "mixture.flac").write_bytes(b"")  # delayed allocation: the data never reached the disk
    half = (entries[1] / "speech.flac").read_bytes()
    (entries[1] / "speech.flac").write_bytes(half[: len(half) // 2])
    (entries[2] / "done").write_text("")
    assert not any(entry_complete(e) for e in entries[:3]) and all(entry_complete(e) for e in entries[3:])
    rep4 = build_dataset(_config(work / "out4", cache), scenes, builder, invalid=invalid)
    assert rep4.cached == len(rep4.built) - 3
    assert _bytes(out) == _bytes(work / "out4")
    assert all(entry_complete(e) for e in entries)
    assert not [p for p in (cache / "build" / "scenes").iterdir() if "broken" in p.name]


def test_shards_merge_to_the_single_build(built, builder, work):
    out, rep, scenes, invalid = built
    for i in range(2):
        build_dataset(
            _config(work / f"shard{i}", work / "cache", num_shards=2, shard_index=i),
            scenes,
            builder,
            invalid=invalid if i == 0 else [],
        )
    merged = merge_folders(work / "merged", [work / "shard0", work / "shard1"])
    assert sorted(merged.built) == sorted(rep.built)
    assert _bytes(out) == _bytes(work / "merged")
    # A shard given twice (by any path), or two builds holding one scene, is refused by name.
    alias = work / "shard0_link"
    alias.symlink_to(work / "shard0")
    with pytest.raises(BuildError, match=rf"{alias}: the same shard folder as {work / 'shard0'}"):
        merge_folders(work / "merged_twice", [work / "shard0", work / "shard1", alias])
    with pytest.raises(BuildError, match=rf"{out}: scene \S+ is also in {work / 'shard0'}"):
        merge_folders(work / "merged_overlap", [work / "shard0", out])
    assert not (work / "merged_twice").exists() and not (work / "merged_overlap").exists()
    with pytest.raises(ConfigError, match=r"^shard_index 2: must be in 0\.\.1 for num_shards 2$"):
        _config(work / "x", work / "cache", num_shards=2, shard_index=2)


def test_retrieval_below_threshold_and_failed_synthesis_are_skipped(built, builder, work):
    from dataclasses import replace

    out, rep, scenes, _ = built
    strict = replace(builder, min_score=0.99, cache=None)
    with pytest.raises(BuildError) as e:  # every scene skipped: the build fails, with the report
        build_dataset(_config(work / "strict", work / "cache_strict"), scenes[:1], strict)
    rep4 = e.value.report
    assert rep4.built == [] and "RetrievalError" in rep4.skipped[0]["reason"]
    from casu_dataset.speech.voices import VoiceRegistry

    mute = replace(
        builder,
        registry=VoiceRegistry([v for v in builder.registry.voices if v.gender == "male"]),
        cache=None,
    )
    with pytest.raises(BuildError) as e:
        build_dataset(
            _config(work / "mute", work / "cache_mute"),
            [s for s in scenes if s.script.id == "kitchen_kettle"],
            mute,
        )
    rep5 = e.value.report
    assert rep5.built == [] and "no adult female voice" in rep5.skipped[0]["reason"]


def test_push_sends_exactly_the_folder(built):
    out, _, _, _ = built
    (out / "scenes" / ".test-00000-of-00001.parquet.tmp-host-999999999").write_bytes(
        b"half"
    )  # a killed write
    paths = plan_push(out)
    assert "README.md" in paths and "contextual_reasoning/test-00000-of-00001.parquet" in paths
    assert "ATTRIBUTION.md" in paths and not [p for p in paths if ".tmp" in p]
    assert paths == sorted(paths) and len(paths) == len(set(paths))

    class Recorder:
        def __init__(self):
            self.calls = []

        def create_repo(self, **kw):
            self.calls.append(("create_repo", kw))

        def upload_folder(self, **kw):
            self.calls.append(("upload_folder", kw))
            return None

    api = Recorder()
    push(out, "casu-org/casu-mini", api=api)
    (name1, repo), (name2, upload) = api.calls
    assert repo == {
        "repo_id": "casu-org/casu-mini",
        "repo_type": "dataset",
        "private": True,
        "exist_ok": True,
    }
    assert upload["repo_type"] == "dataset" and upload["folder_path"] == str(
        out
    )  # tests/test_hub_push.py: what it sends
    with pytest.raises(ValueError, match="expected ORG/NAME"):
        push(out, "noslash", api=api)


def test_num_proc_builds_the_same_bytes(built, work):
    from casu_dataset.dataset.build import build_dataset

    out, rep, scenes, invalid = built
    spec = {"cache": os.environ["CASU_CACHE"], "check_speech": True, "alpha": 0.6}  # warm speech, cold scenes
    from casu_dataset.mix.realize import make_builder

    b = make_builder(spec)
    rep6 = build_dataset(
        _config(work / "mp", work / "cache_mp", num_proc=2), scenes, b, invalid=invalid, builder_spec=spec
    )
    assert rep6.built == rep.built
    a, b = _bytes(out), _bytes(work / "mp")
    assert [k for k in a if a[k] != b.get(k)] == []
    # The driver planned the retrieval and the speech (and its Whisper checks) is cached: the
    # workers loaded no model at all (not sentence-transformers, not Whisper, no TTS engine).
    models = rep6.workers["worker_models"]
    assert models and all(m == [] for m in models.values()), models


def _read_all(folder: Path) -> dict:
    import pyarrow.parquet as pq

    return {c: pq.read_table(folder / c).num_rows for c in CONFIGS}


# Rewrites DST from SRC (merge_folders: the same write phase as a build) and is killed with
# SIGKILL halfway through writing the second parquet file of the write phase.
KILL_DURING_WRITE = r"""
import os, signal, sys
from pathlib import Path
from casu_dataset.dataset.writer import FolderWriter, merge_folders
real, calls = FolderWriter._close_shard, []
def dying(self, config):  # on the config's IO thread, as its shard closes
    real(self, config)
    calls.append(config)
    if len(calls) == 2:
        path = self.shards[config][-1]
        os.truncate(path, os.path.getsize(path) // 2)
        os.kill(os.getpid(), signal.SIGKILL)
FolderWriter._close_shard = dying
merge_folders(sys.argv[1], [sys.argv[2]])
"""


def test_kill_during_write_leaves_the_previous_dataset_readable(built, builder, work):
    import datasets

    out, rep, scenes, invalid = built
    new = work / "kill_src"  # different content: one scene
    build_dataset(
        _config(new, work / "cache"), [s for s in scenes if s.script.id == "kitchen_kettle"], builder
    )
    target = work / "kill_target"
    shutil.copytree(out, target)
    old = _bytes(target)
    p = subprocess.run(
        [sys.executable, "-c", KILL_DURING_WRITE, str(target), str(new)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == -9, p.stderr[-2000:]
    assert _bytes(target) == old  # every file of the old dataset, byte for byte
    assert _read_all(target) == _read_all(out)
    assert len(datasets.load_dataset(str(target), "contextual_reasoning", split="test")) > 1
    leftovers = list(target.parent.glob(f".{target.name}.tmp-*"))
    assert leftovers  # the killed writer's staging folder (beside it) ...
    merge_folders(target, [new])  # ... is removed by the next write
    assert not list(target.parent.glob(f".{target.name}.tmp-*"))
    assert _bytes(target) == _bytes(new)


def test_stale_temp_files_of_killed_scene_and_speech_writes_are_cleaned(built, builder, work):
    from casu_dataset.core.atomic import HOST
    from casu_dataset.speech.layer import SpeechSynth

    out, rep, scenes, invalid = built
    cache = work / "cache_stale"
    shutil.copytree(work / "cache", cache)
    dead = int(
        subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
        ).stdout
    )  # a process that has exited
    live = os.getppid()
    sdir = cache / "build" / "scenes"
    stale = [sdir / f".{'a' * 32}.tmp-{HOST}-{dead}", sdir / f".{'b' * 32}.tmp-{HOST}-{live}"]
    keep = sdir / f".{'c' * 32}.tmp-{HOST}-{live}"
    for d in (*stale, keep):
        d.mkdir()
        (d / "mixture.flac").write_bytes(b"partial")
    old = time.time() - 7 * 3600  # a live PID but hours old: not a running write
    os.utime(stale[1], (old, old))
    speech = cache / "speech" / "ab"
    speech.mkdir(parents=True)
    dead_turn, live_turn = (
        speech / f".{'d' * 64}.wav.tmp-{HOST}-{dead}",
        speech / f".{'e' * 64}.wav.tmp-{HOST}-{live}",
    )
    for f in (dead_turn, live_turn):
        f.write_bytes(b"RIFF")
    rep2 = build_dataset(_config(work / "stale_out", cache), scenes, builder, invalid=invalid)
    assert rep2.cached == 5
    assert not any(d.exists() for d in stale) and keep.is_dir()
    SpeechSynth(cache)
    assert not dead_turn.exists() and live_turn.exists()


def test_a_failed_parquet_write_fails_the_build_and_leaves_the_old_folder(built, builder, work, monkeypatch):
    """Row groups are written on their own thread: its failure (a full disk) still reaches the build,
    which removes its staging folder and keeps the old dataset byte for byte."""
    import pyarrow.parquet as pq

    out, rep, scenes, invalid = built
    target = work / "disk_full_target"
    shutil.copytree(out, target)
    before = _bytes(target)

    def full(self, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full)
    with pytest.raises(OSError, match="No space left"):
        build_dataset(_config(target, work / "cache"), scenes, builder, invalid=invalid)
    assert _bytes(target) == before
    assert not list(target.parent.glob(f".{target.name}.tmp-*"))


def test_skipped_scenes_fail_the_build_and_write_nothing(built, builder, work):
    from dataclasses import replace

    out, rep, scenes, invalid = built
    target = work / "skip_target"
    shutil.copytree(out, target)
    before = _bytes(target)
    with pytest.raises(BuildError, match=r"(?s)1 scenes skipped \(allowed: 0\).*broken_scene"):
        build_dataset(_config(target, work / "cache", max_skips=0), scenes, builder, invalid=invalid)
    assert _bytes(target) == before
    strict = replace(builder, min_score=0.99, cache=None)  # every scene fails retrieval
    with pytest.raises(BuildError, match=r"no scene left to write \(0 built, 1 skipped\)"):
        build_dataset(_config(target, work / "cache_strict"), scenes[:1], strict)
    assert _bytes(target) == before
    with pytest.raises(BuildError, match="no scene left"):
        build_dataset(_config(work / "never", work / "cache_strict"), scenes[:1], strict)
    assert not (work / "never").exists()
    rep2 = build_dataset(_config(target, work / "cache", max_skips=1), scenes, builder, invalid=invalid)
    assert len(rep2.built) == 5 and _bytes(target) == before


def test_cli_build_exit_status_name_and_partial_scenario_files(work, session_cache):
    from casu_dataset.cli import main

    docs = [s for f in sorted(DEFAULT_DIR.glob("*.yaml")) for s in yaml.safe_load(f.read_text())]
    one = next(s for s in docs if s["id"] == "kitchen_kettle")
    one.pop("pair", None)
    one["questions"] = [q for q in one["questions"] if q["task"] == "entity_extraction"]  # one task only
    broken = json.loads(json.dumps(one))
    broken["id"], broken["script"]["turns"][0]["speaker"] = "broken_scene", "nobody"
    lib = work / "my_scenes"
    lib.mkdir()
    (lib / "a.yaml").write_text(yaml.safe_dump([one, broken], sort_keys=False))
    out = work / "cli_out"
    args = [
        "build",
        "--out",
        str(out),
        "--scenarios",
        str(lib),
        "--no-check-speech",
        "--cache",
        str(session_cache),
    ]
    assert main(args) == 1 and not out.exists()
    assert main(args + ["--max-skips", "1"]) == 0
    card = (out / "README.md").read_text()
    assert "\n# my_scenes\n" in card and 'pretty_name: "my_scenes"' in card
    assert "4-option questions for entity extraction," in card and "CASU-mini" not in card
    import pyarrow.parquet as pq

    assert pq.read_table(out / "entity_extraction").num_rows == 1
    assert pq.read_table(out / "role_inference").num_rows == 0
    assert main(args + ["--allow-skips", "--name", "Kitchen Set"]) == 0
    assert "\n# Kitchen Set\n" in (out / "README.md").read_text()


def test_card_license_front_matter_and_attribution_file(built):
    from huggingface_hub import DatasetCard

    from casu_dataset.dataset.card import card_license

    out, rep, scenes, invalid = built
    data = DatasetCard((out / "README.md").read_text()).data.to_dict()
    assert data["pretty_name"] == "CASU-mini" and data["license"] == "other"
    assert data["license_name"] == "casu-per-clip-licenses" and data["license_link"] == "ATTRIBUTION.md"
    attribution = (out / "ATTRIBUTION.md").read_text()
    import pyarrow.parquet as pq

    for r in pq.read_table(out / "scenes", columns=["annotation"]).to_pylist():
        ret = json.loads(r["annotation"])["extra"]["retrieval"]
        for m in [ret["background"], *ret["events"]]:
            assert f"| {m['clip_id']} | {m['source']} |" in attribution and m["license"] in attribution
    same = {"a": {"license": "CC0"}, "b": {"license": "Creative Commons Zero 1.0"}}
    assert card_license(same) == {"license": "cc0-1.0"}
    assert card_license({"a": {"license": "CC0"}, "b": {"license": "GPL-2+"}})["license"] == "other"
    assert card_license({"a": {"license": "Battle-Tanks-License"}})["license"] == "other"


def test_card_reports_mix_level_wer_or_says_it_was_not_run():
    from casu_dataset.dataset.card import mix_intelligibility_summary

    def rows(*extras):
        return {"scenes": [{"annotation": json.dumps({"extra": e})} for e in extras]}

    assert "not run" in mix_intelligibility_summary(rows({}, {}))
    s = mix_intelligibility_summary(
        rows(
            {"mix_intelligibility": [{"turn": 0, "wer": 0.0}, {"turn": 1, "wer": 0.5}]},
            {"mix_intelligibility": {"turns": [{"wer": 0.25}]}},
            {},
        )
    )
    assert "3 turns in 2 of 3 scenes, mean WER 0.250, max WER 0.500" in s


def test_scene_key_covers_the_rendering_code(built, builder, tmp_path, monkeypatch):
    from casu_dataset.dataset import scene_cache

    out, rep, scenes, invalid = built
    src = scene_cache._CODE_ROOT  # the casu_dataset package
    root = tmp_path / "code"
    for pattern in scene_cache.RENDER_SOURCES:
        assert list(src.glob(pattern)), (
            f"RENDER_SOURCES: {pattern} names no file (moved?): its code would go unhashed"
        )
        for f in src.glob(pattern):
            (root / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, root / f.relative_to(src))
    shutil.copy(src / "api.py", root / "api.py")  # not rendering code
    monkeypatch.setattr(scene_cache, "_CODE_ROOT", root)
    scene_cache.code_hash.cache_clear()
    seen = {scene_cache.scene_key(scenes[0], 1, builder)}
    for rel in ("mix/mixer.py", "speech/layer.py", "api.py"):
        (root / rel).write_bytes((root / rel).read_bytes() + b"\n# changed\n")
        scene_cache.code_hash.cache_clear()
        seen.add(scene_cache.scene_key(scenes[0], 1, builder))
    assert len(seen) == 3  # mix/mixer.py and speech/layer.py changed the key; api.py did not


def test_the_test_session_is_hermetic():
    import tempfile

    import datasets

    from casu_dataset.core.cache_layout import cache_root

    tmp = Path(tempfile.gettempdir()).resolve()
    assert tmp in cache_root().resolve().parents
    assert tmp in Path(datasets.config.HF_DATASETS_CACHE).resolve().parents


def test_configs_stream_into_several_shards_and_old_shards_go(built, work, monkeypatch):
    import casu_dataset.dataset.writer as writer
    from casu_dataset.formats.loading import load

    out = built[0]
    target = work / "sharded"
    shutil.copytree(out, target)
    monkeypatch.setattr(writer, "ROW_GROUP_SIZE", 2)
    monkeypatch.setattr(writer, "SHARD_ROWS", 2)
    merge_folders(target, [out])  # streamed: shards of 2 rows, row groups of 2
    names = sorted(p.name for p in (target / "scenes").glob("*.parquet"))
    assert (
        names == [f"test-{i:05d}-of-{len(names):05d}.parquet" for i in range(len(names))] and len(names) > 1
    )
    assert _read_all(target) == _read_all(out)
    assert [i.id for i in load(target)] == [i.id for i in load(out)]
    monkeypatch.undo()
    merge_folders(target, [target])  # back to one shard: the stale shards are removed
    assert _bytes(target) == _bytes(out)


def test_never_more_worker_processes_than_units_of_work(monkeypatch, tmp_path):
    from casu_dataset.dataset import executor

    started = []
    monkeypatch.setattr(executor, "PoolRun", lambda units, *a, **k: started.append((len(units), a[3])))
    spec = {"cache": str(tmp_path)}
    executor.prebuild([["family a"]], 0, tmp_path, num_proc=3, builder_spec=spec, progress=False)
    assert started == []  # one unit: built in this process, no pool of 3
    executor.prebuild([["a"], ["b"]], 0, tmp_path, num_proc=3, builder_spec=spec, progress=False)
    assert started == [(2, 2)]  # two units: two workers
    executor.prebuild([["a"], ["b"], ["c"]], 0, tmp_path, num_proc=2, builder_spec=spec, progress=False)
    assert started[-1] == (3, 2)


def test_a_cache_that_is_a_file_is_named_as_the_cache(tmp_path, monkeypatch):
    import casu_dataset

    fixture = Path(__file__).parent / "fixtures" / "families" / "two_families.yaml"
    a_file = tmp_path / "not_a_folder"
    a_file.write_text("x")
    for cache, env, where in (
        (a_file, None, "a file, not a folder"),
        (a_file / "sub", None, "cannot make the cache folder"),
        (None, a_file, "from $CASU_CACHE or the default"),
    ):
        if env:
            monkeypatch.setenv("CASU_CACHE", str(env))
        config = BuildConfig(out=tmp_path / "out", cache=cache, scenarios=fixture, progress=False)
        with pytest.raises(ConfigError) as err:
            casu_dataset.build(config)
        assert (
            str(err.value).startswith("cache ")
            and where in str(err.value)
            and "catalog" not in str(err.value)
        )
    assert not (tmp_path / "out").exists()  # nothing written


def test_report_files_that_cannot_be_written_are_named_before_any_work(tmp_path):
    from conftest import call_main

    from casu_dataset.cli import main

    folder = tmp_path / "a_folder"
    folder.mkdir()
    cases = [
        (["validity", "--out", str(folder)], f"--out {folder}: a folder; give a file name"),
        (["voices", "--json", str(folder)], f"--json {folder}: a folder; give a file name"),
        (
            ["validity", "--out", str(tmp_path / "no" / "r.md")],
            f"its folder {tmp_path / 'no'} does not exist",
        ),
    ]
    for argv, want in cases:
        t = time.perf_counter()
        rc, out, err = call_main(main, argv)
        assert rc == 2 and want in err and "Traceback" not in err, (argv, err)
        assert time.perf_counter() - t < 5  # refused up front, not after the work


def test_a_dry_run_push_checks_the_repo_id_as_the_real_push_does(built):
    from conftest import call_main

    from casu_dataset.cli import main

    out = built[0]
    rc, stdout, err = call_main(main, ["push", "--folder", str(out), "--repo", "not a repo", "--dry_run"])
    assert rc == 2 and "--repo 'not a repo': expected ORG/NAME" in err and "would upload" not in stdout
    rc, stdout, _ = call_main(main, ["push", "--folder", str(out), "--repo", "org/casu-mini", "--dry_run"])
    assert rc == 0 and "would upload" in stdout


def test_an_output_that_is_holds_or_lies_inside_an_input_is_refused_and_nothing_is_lost(tmp_path):
    from conftest import call_main

    from casu_dataset.cli import main

    fixture = Path(__file__).parent / "fixtures" / "families" / "two_families.yaml"
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(fixture, lib / "families.yaml")
    cache = tmp_path / "cache"
    cases = [
        (["--out", str(lib), "--scenarios", str(lib)], f"--out {lib} is --scenarios {lib}"),
        (
            ["--out", str(lib / "ds"), "--scenarios", str(lib)],
            f"--out {lib / 'ds'} lies inside --scenarios {lib}",
        ),
        (["--out", str(tmp_path), "--scenarios", str(lib)], f"--out {tmp_path} contains --scenarios {lib}"),
        (
            ["--out", str(cache / "ds"), "--scenarios", str(lib)],
            f"--out {cache / 'ds'} lies inside --cache {cache}",
        ),
    ]
    for argv, want in cases:
        rc, _, err = call_main(main, ["build", "--cache", str(cache), *argv])
        assert rc == 2 and want in err and "write somewhere else" in err, (argv, err)
        assert sorted(p.name for p in lib.iterdir()) == ["families.yaml"]  # the library is untouched
        assert (lib / "families.yaml").read_text() == fixture.read_text()


def test_an_embedding_model_that_cannot_load_is_named_as_the_flag(tmp_path):
    from conftest import call_main

    from casu_dataset.cli import main

    fixture = Path(__file__).parent / "fixtures" / "families" / "two_families.yaml"
    missing = tmp_path / "no_model"
    for argv in (
        ["build", "--out", str(tmp_path / "o"), "--scenarios", str(fixture), "--no-lock"],
        ["retrieval-eval"],
    ):
        rc, _, err = call_main(main, [*argv, "--embedding-model", str(missing)])
        assert rc == 2 and f"--embedding-model '{missing}': cannot load it" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_an_out_name_too_long_for_the_files_beside_it_is_refused_before_work(tmp_path):
    from conftest import call_main

    from casu_dataset.cli import main

    fixture = Path(__file__).parent / "fixtures" / "families" / "two_families.yaml"
    out = tmp_path / ("x" * 250)
    t = time.perf_counter()
    rc, _, err = call_main(main, ["build", "--out", str(out), "--scenarios", str(fixture)])
    assert rc == 2 and "the folder name is 250 bytes" in err and "give a shorter name" in err, err
    assert time.perf_counter() - t < 10 and not out.exists()
