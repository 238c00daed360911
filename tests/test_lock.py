"""One CASU-mini on every machine: the family timeline by construction, the realization lock
(relock, follow, stale, drift), one build per folder (atomic swap, kills after each rename, mixed
folders refused by every reader) and the dataset identity in results and tables."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, fixture_builder
from helpers import cli_process

from casu_dataset.core.audio_io import load_audio, wav_bytes
from casu_dataset.core.errors import CasuError
from casu_dataset.families.compile import compile_families
from casu_dataset.formats import build_manifest
from casu_dataset.formats.lock import lock_path, read_lock
from casu_dataset.mix.mixer import SceneSources, SourceRef, compose

FIXTURE = ROOT / "tests" / "fixtures" / "families" / "two_families.yaml"


def _build(out, lib, cache, lock=None, relock=False, scenes=None):
    from casu_dataset.dataset.build import build_dataset
    from casu_dataset.dataset.config import BuildConfig

    config = BuildConfig(
        out=out,
        scenarios=lib,
        cache=cache,
        progress=False,
        name="lock fixture",
        lock="relock" if relock else "follow",
        max_skips=None,
    )
    return build_dataset(config, scenes or compile_families(lib), fixture_builder(cache, lock))


def _parquet_bytes(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*.parquet"))}


@pytest.fixture(scope="module")
def locked(tmp_path_factory, session_cache):
    """The fixture library with its lock (written by a reference build), and that build."""
    d = tmp_path_factory.mktemp("lock")
    lib = d / "two_families.yaml"
    shutil.copy(FIXTURE, lib)
    rep = _build(d / "ref", lib, session_cache, relock=True)
    assert rep.lock["mode"] == "written" and lock_path(lib).is_file()
    return lib, d / "ref", rep


# -- invariants by construction ---------------------------------------------------------------


def test_one_timeline_per_family_whatever_the_tts_lengths(speech_wavs, clips_dir, tmp_path):
    """Two speech versions 1 sample apart (TTS lengths differ by machine): the family reserves whole
    samples, so both get one length and one timeline, and the bed and events are byte-identical.
    Rounding the reserve to 1e-6 s instead would leave scenes of 198474 and 198475 samples one
    sample apart (the case of ws_ev_ouch and ws_x_kitchen_close on an AVX-512 machine)."""
    from casu_dataset.script.schema import parse_script

    x = load_audio(speech_wavs[0], 16000)
    n = 198475 - 6 * 16000 if x.shape[0] > 198475 - 6 * 16000 else x.shape[0] | 1  # an odd length
    long_ = np.concatenate([x, np.zeros(max(0, n - x.shape[0]), np.float32)])[:n]
    paths = []
    for i, y in enumerate((long_, long_[:-1])):
        p = tmp_path / f"v{i}.wav"
        p.write_bytes(wav_bytes(y, 16000))
        paths.append(p)
    s = parse_script(
        {
            "id": "fam",
            "place": "school",
            "speech_type": "monologue",
            "background": {"description": "a playground", "keywords": ["school"]},
            "speakers": [{"id": "T", "role": "teacher", "gender": "female"}],
            "turns": [{"speaker": "T", "text": "It's time to go."}],
            "events": [
                {
                    "id": "bell",
                    "description": "a bell",
                    "keywords": ["bell"],
                    "anchor": {"type": "after_turn", "turn": 0, "offset": 0.2},
                }
            ],
        }
    )
    reserve = [n / 16000]
    out = []
    for p in paths:
        src = SceneSources(
            SourceRef(str(clips_dir / "ba__school_playground__School1.ogg"), "bed"),
            [SourceRef(str(p), "turn")],
            [SourceRef(str(clips_dir / "ev__electric_bell_ring__savebell2.ogg"), "bell")],
        )
        out.append(compose(s, src, seed=3, rng_key="fam", turn_reserve=reserve))
    a, b = out
    assert a.annotation["num_samples"] == b.annotation["num_samples"]
    assert a.annotation["plan"]["events"] == b.annotation["plan"]["events"]
    assert a.stems["background"].tobytes() == b.stems["background"].tobytes()
    assert a.stems["events"].tobytes() == b.stems["events"].tobytes()


# -- the lock ---------------------------------------------------------------------------------


def test_a_locked_cold_build_reproduces_the_reference_bytes(locked, tmp_path):
    lib, ref, rep = locked
    lock = read_lock(lock_path(lib))
    assert lock.header["scenes"] == 8 and lock.header["library_sha256"]
    entry = next(iter(lock.scenes.values()))
    assert {"annotation", "turns", "stems"} <= set(entry) and entry["turns"][0]["samples"] > 0
    assert set(lock.header["configs"]) >= {"contextual_reasoning", "scenes"}
    # A fresh cache: nothing of the reference build is reused, and no retrieval runs.
    rep2 = _build(tmp_path / "b", lib, tmp_path / "cache", lock=lock)
    assert rep2.realization_summary()["reproduced"] == 8 and rep2.realization_summary()["drifted"] == 0
    assert _parquet_bytes(tmp_path / "b") == _parquet_bytes(ref)
    assert rep2.identity["sha256"] == rep.identity["sha256"] and rep2.identity["lock_sha256"] == lock.sha256
    card = (tmp_path / "b" / "README.md").read_text()
    assert "8 of 8 scenes reproduced the reference bytes" in card and lock.sha256[:16] in card
    assert json.loads((tmp_path / "b" / "build_report.json").read_text())["realization"]["reproduced"] == 8


def test_drift_is_conformed_reported_and_bounded(locked, tmp_path, session_cache):
    lib, ref, _ = locked
    lines = lock_path(lib).read_text().splitlines()
    entry = json.loads(lines[1])
    # This machine's TTS gave 300 samples more than the reference's: conformed (cut) and reported.
    entry["turns"][0]["samples"] -= 300
    lib2 = tmp_path / lib.name
    shutil.copy(lib, lib2)
    lock_path(lib2).write_text("\n".join([lines[0], json.dumps(entry), *lines[2:]]) + "\n")
    rep = _build(tmp_path / "out", lib2, session_cache, lock=read_lock(lock_path(lib2)))
    s = rep.realization_summary()
    assert s["drifted"] == 1 and s["drifted_scenes"] == [entry["scene_id"]] and s["reproduced"] == 7
    assert s["max_turn_samples_conformed"] == 300 and s["max_stem_lufs_diff"] < 0.5
    d = next(x for x in rep.drift if x["scene_id"] == entry["scene_id"])
    assert d["turns"][0] == {"padded": -300, "pcm_equal": False} and "speech" in d["stems"]
    # Against the reference folder: only that scene's speech and mixture differ, by how much is told.
    from casu_dataset.formats.lock import compare_folders

    diff = [r for r in compare_folders(ref, tmp_path / "out") if not r["equal"]]
    assert {(r["scene_id"], r["stem"]) for r in diff} == {
        (entry["scene_id"], "speech"),
        (entry["scene_id"], "mixture"),
    }
    assert all(
        r["max_diff_db"] is not None and r["max_diff_db"] < 0 and abs(r["lufs_diff"]) < 0.5 for r in diff
    )
    # A compared folder that is not the build its record describes is named, file and scene.
    mixed = tmp_path / "mixed"
    shutil.copytree(tmp_path / "out", mixed)
    (mixed / "scenes" / "stray.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(CasuError, match=r"stray.parquet: not part of build"):
        compare_folders(ref, mixed)
    # Far beyond the bound: not the same speech; the scene fails with the numbers (and so the
    # CLI build, whose default is --max-skips 0).
    entry["turns"][0]["samples"] -= 5000
    lock_path(lib2).write_text("\n".join([lines[0], json.dumps(entry), *lines[2:]]) + "\n")
    rep = _build(tmp_path / "out2", lib2, session_cache, lock=read_lock(lock_path(lib2)))
    (bad,) = [s for s in rep.skipped if s["scene_id"] == entry["scene_id"]]
    assert "turns[0]" in bad["reason"] and f"the lock {entry['turns'][0]['samples']}" in bad["reason"]
    assert "not the same speech" in bad["reason"]


def _cli_build(*args, cache):
    env = dict(os.environ, CASU_CACHE=str(cache))
    return cli_process("casu_dataset", "build", "--no-check-speech", *args, env=env)


def test_stale_or_mismatched_lock_is_a_named_error(locked, tmp_path, session_cache):
    lib, _, _ = locked
    lib2 = tmp_path / lib.name
    shutil.copy(lib, lib2)
    shutil.copy(lock_path(lib), lock_path(lib2))
    lib2.write_text(
        lib2.read_text().replace("Line up", "Line up now", 1)
        if "Line up" in lib2.read_text()
        else lib2.read_text() + "\n# edited\n"
    )
    p = _cli_build("--out", str(tmp_path / "o"), "--scenarios", str(lib2), cache=session_cache)
    assert (
        p.returncode == 2
        and "stale lock" in p.stderr
        and str(lock_path(lib2)) in p.stderr
        and "--relock" in p.stderr
    )
    shutil.copy(lib, lib2)
    p = _cli_build("--out", str(tmp_path / "o"), "--scenarios", str(lib2), "--seed", "1", cache=session_cache)
    assert p.returncode == 2 and "seed=0" in p.stderr and "seed" in p.stderr
    lock_path(lib2).write_text(lock_path(lib).read_text().splitlines()[0] + "\n")  # truncated
    p = _cli_build("--out", str(tmp_path / "o"), "--scenarios", str(lib2), cache=session_cache)
    assert p.returncode == 2 and "header says 8 scenes, the file has 0" in p.stderr
    assert not (tmp_path / "o").exists()


def test_the_shipped_library_carries_its_lock():
    from casu_dataset.families.compile import DEFAULT_FAMILY_LIBRARY
    from casu_dataset.formats.lock import library_sha256

    lock = read_lock(lock_path(DEFAULT_FAMILY_LIBRARY))
    assert lock.header["library_sha256"] == library_sha256(DEFAULT_FAMILY_LIBRARY), (
        "stale: run build --relock"
    )
    assert lock.header["scenes"] == len(compile_families(DEFAULT_FAMILY_LIBRARY)) == len(lock.scenes)


# -- one build per folder ---------------------------------------------------------------------


def test_a_kill_after_each_rename_leaves_the_old_or_the_new_build(
    locked, tmp_path, session_cache, monkeypatch
):
    import casu_dataset.core.atomic as atomic
    import casu_dataset.dataset.writer as writer

    lib, _, _ = locked
    scenes = compile_families(lib)
    one_family = [s for s in scenes if s.family_id == scenes[0].family_id]
    out = tmp_path / "out"
    old = _build(out, lib, session_cache, scenes=one_family).identity["sha256"]
    new_dir = tmp_path / "new"
    new = _build(new_dir, lib, session_cache).identity["sha256"]
    real_replace, real_exchange = os.replace, atomic.exchange
    k, seen_new = 1, False
    while True:
        calls = {"n": 0}

        class Killed(BaseException):
            pass

        def counted(fn):
            def wrapper(*a, **kw):
                r = fn(*a, **kw)
                calls["n"] += 1
                if calls["n"] == k:
                    raise Killed  # as a kill right after this rename
                return r

            return wrapper

        monkeypatch.setattr(writer.os, "replace", counted(real_replace))
        monkeypatch.setattr(writer.atomic, "exchange", counted(real_exchange))
        try:
            _build(out, lib, session_cache)
            done = True
        except Killed:
            done = False
        monkeypatch.undo()
        record = build_manifest.verify(out, full=True)  # never a mix: every file is its build's
        assert record["identity"]["sha256"] in (old, new)
        seen_new |= record["identity"]["sha256"] == new
        if done:
            break
        k += 1
        # back to the old build for the next kill point
        shutil.rmtree(out)
        _build(out, lib, session_cache, scenes=one_family)
    assert k >= 3 and seen_new
    assert not list(tmp_path.glob(".out.building-*"))  # no staging folder left behind


def _mixed(locked, tmp_path, session_cache) -> tuple[Path, Path]:
    lib, ref, _ = locked
    scenes = compile_families(lib)
    a = tmp_path / "a"
    _build(a, lib, session_cache, scenes=[s for s in scenes if s.family_id == scenes[0].family_id])
    return a, ref


def test_readers_refuse_a_folder_mixing_two_builds(locked, tmp_path, session_cache):
    from casu_dataset import load
    from casu_dataset.families.validity import check_built
    from casu_dataset.formats.reader import BuiltDataset, LoadError

    a, b = _mixed(locked, tmp_path, session_cache)
    f = "contextual_reasoning/test-00000-of-00001.parquet"
    shutil.copy(b / f, a / f)  # one config from another build
    with pytest.raises(
        LoadError, match=r"contextual_reasoning/test-00000-of-00001.parquet: not the file build"
    ):
        BuiltDataset(a).table("contextual_reasoning")
    with pytest.raises(Exception, match="not the file build"):
        load(a, "contextual_reasoning")
    assert "not the file build" in str(check_built(a)[0][0])
    shutil.rmtree(a)
    a, b = _mixed(locked, tmp_path, session_cache)
    c = a / "contextual_reasoning"
    (c / "copy.parquet").write_bytes((c / "test-00000-of-00001.parquet").read_bytes())
    with pytest.raises(LoadError, match=r"contextual_reasoning/copy.parquet: not part of build"):
        BuiltDataset(a).table("contextual_reasoning")
    (c / "copy.parquet").unlink()
    (c / "link.parquet").symlink_to(b / "contextual_reasoning" / "test-00000-of-00001.parquet")
    # a link to another build's file: refused by name (it resolves outside this folder)
    with pytest.raises(LoadError, match=r"contextual_reasoning/link.parquet"):
        BuiltDataset(a).table("contextual_reasoning")


def test_harness_refuses_a_mixed_folder_and_records_the_identity(locked, tmp_path, session_cache):
    a, b = _mixed(locked, tmp_path, session_cache)
    env = dict(os.environ, CASU_CACHE=str(session_cache))
    outs = tmp_path / "res"

    def run(ds, *extra):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "harness",
                "--model",
                "random",
                "--tasks",
                "contextual_reasoning",
                "--dataset",
                str(ds),
                "--output_path",
                str(outs),
                *extra,
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    p = run(b)
    assert p.returncode == 0, p.stderr[-2000:]
    docs = [json.loads(x.read_text()) for x in outs.rglob("*.json") if '"identity"' in x.read_text()]
    want = build_manifest.read(b)["identity"]["sha256"]
    assert docs and any(((d.get("dataset") or {}).get("identity") or {}).get("sha256") == want for d in docs)
    lm = [json.loads(x.read_text()) for x in outs.rglob("results_*.json")]  # lm-eval's file
    assert lm and lm[0]["casu"]["dataset_identity"]["sha256"] == want
    from harness.output.tables import main_table

    d1 = {
        "model": {"name": "random"},
        "config": {},
        "results": {},
        "dataset": {"identity": {"sha256": "x" * 64}},
    }
    d2 = {
        "model": {"name": "other"},
        "config": {},
        "results": {},
        "dataset": {"identity": {"sha256": "y" * 64}},
    }
    t = main_table(d1, d2)
    assert "other†" in t and "evaluated on other data" in t and "random†" not in t
    shutil.copy(
        b / "contextual_reasoning" / "test-00000-of-00001.parquet",
        a / "contextual_reasoning" / "test-00000-of-00001.parquet",
    )
    p = run(a)
    assert (
        p.returncode == 2
        and "contextual_reasoning/test-00000-of-00001.parquet" in p.stderr
        and "Traceback" not in p.stderr
    )
