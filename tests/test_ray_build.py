"""`build --executor ray` on a local 2-CPU Ray cluster: the same bytes as the local build, also when a
worker process is killed mid-build, and a bad scene skipped with the same reason."""

from __future__ import annotations

import copy
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from conftest import folder_bytes

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")

from casu_dataset.dataset.build import build_dataset  # noqa: E402
from casu_dataset.dataset.config import BuildConfig  # noqa: E402
from casu_dataset.families.compile import compile_families  # noqa: E402
from casu_dataset.mix.realize import make_builder  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "families" / "two_families.yaml"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
    )
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def spec(session_cache):
    return {"cache": str(session_cache), "check_speech": False, "alpha": 0.6}  # no Whisper: fast


def _build(out, scenes, spec, cache, executor="local"):
    config = BuildConfig(
        out=out, cache=cache, progress=False, executor=executor, max_skips=None, name="ray fixture"
    )
    return build_dataset(config, scenes, make_builder(spec), builder_spec=spec)


@pytest.fixture(scope="module")
def local(tmp_path_factory, spec):
    d = tmp_path_factory.mktemp("local")
    rep = _build(d / "out", compile_families(FIXTURE), spec, d / "cache")
    assert len(rep.built) == 8 and not rep.skipped
    return d / "out", rep


def test_ray_build_is_byte_identical(cluster, local, spec, tmp_path):
    rep = _build(tmp_path / "out", compile_families(FIXTURE), spec, tmp_path / "cache", "ray")
    assert rep.built == local[1].built and rep.cached == 8  # every scene came from the Ray-filled cache
    assert folder_bytes(tmp_path / "out") == folder_bytes(local[0])
    # Long-lived actors, one per CPU, that loaded no model: the driver planned the retrieval and
    # the speech cache is warm.
    models = rep.workers["worker_models"]
    assert 1 <= len(models) <= 2 and all(m == [] for m in models.values()), models


def _build_killing_a_worker(spec, tmp_path, title: str, poll: float):
    """A Ray build while the first actor process whose title starts with `title` is SIGKILLed;
    (its report, the pids killed)."""
    import psutil

    killed, result = [], {}

    def run():
        result["rep"] = _build(tmp_path / "out", compile_families(FIXTURE), spec, tmp_path / "cache", "ray")

    t = threading.Thread(target=run)
    t.start()
    deadline = time.time() + 120
    while not killed and t.is_alive() and time.time() < deadline:
        for p in psutil.process_iter(["pid", "cmdline"]):
            if any(c.startswith(title) for c in (p.info["cmdline"] or [])):
                os.kill(p.info["pid"], signal.SIGKILL)
                killed.append(p.info["pid"])
                break
        time.sleep(poll)
    t.join(300)
    return result.get("rep"), killed


def test_killed_worker_is_retried_and_output_identical(cluster, local, spec, tmp_path):
    rep, killed = _build_killing_a_worker(spec, tmp_path, "ray::BuildWorker", 0.05)  # dies mid-task
    assert killed, "no Ray build worker (actor) to kill"
    assert rep.built == local[1].built
    assert folder_bytes(tmp_path / "out") == folder_bytes(local[0])


def test_bad_scene_is_skipped_exactly_as_locally(cluster, spec, tmp_path):
    scenes = copy.deepcopy(compile_families(FIXTURE))
    bad = next(s for s in scenes if s.family_id == "fx_go_or_stay")
    turns = list(bad.script.turns)
    turns[0] = turns[0].model_copy(update={"text": "... !!!"})  # nothing pronounceable: the TTS refuses it
    bad.script = bad.script.model_copy(update={"turns": turns})
    a = _build(tmp_path / "a", scenes, spec, tmp_path / "ca")
    b = _build(tmp_path / "b", scenes, spec, tmp_path / "cb", "ray")
    assert len(a.skipped) == 4 and "nothing pronounceable" in a.skipped[0]["reason"]
    assert b.skipped == a.skipped and b.built == a.built
    assert folder_bytes(tmp_path / "a") == folder_bytes(tmp_path / "b")


def test_driver_takes_the_units_and_cues_the_actors_return(cluster, local, spec, tmp_path, monkeypatch):
    """The driver assembles the units as the actors return them (building none itself; the stems
    of an actor on its node it reads from the cache files the actor names) with the cues the
    actors measured (decoding no stem): the same bytes and cue summary as one process, and the
    cache filled for a later build."""
    import casu_dataset.dataset.build as build_mod
    from casu_dataset.mix import cue_checks

    reads, measured = [], []
    real_build_unit, real_add = build_mod.build_unit, cue_checks.CueMeter.add

    def counting_build_unit(unit, *a, **kw):
        reads.append(unit[0].script.id)
        return real_build_unit(unit, *a, **kw)

    def recording_add(self, r, given=None):
        if r.get("family_id"):
            measured.append(given is not None)
        return real_add(self, r, given)

    monkeypatch.setattr(build_mod, "build_unit", counting_build_unit)
    monkeypatch.setattr(cue_checks.CueMeter, "add", recording_add)
    rep = _build(tmp_path / "out", compile_families(FIXTURE), spec, tmp_path / "cache", "ray")
    assert reads == []  # no unit built or read back in the driver
    assert measured == [True] * 8  # every variant's cue came from its actor
    assert rep.cues == local[1].cues and rep.cues
    assert rep.built == local[1].built and rep.cached == 8
    assert folder_bytes(tmp_path / "out") == folder_bytes(local[0])
    # The actors' entries are in the driver's cache: a second build (one process) reads them all.
    monkeypatch.setattr(build_mod, "build_unit", real_build_unit)
    again = _build(tmp_path / "again", compile_families(FIXTURE), spec, tmp_path / "cache")
    assert again.cached == 8 and folder_bytes(tmp_path / "again") == folder_bytes(local[0])


def test_shipped_entries_carry_each_stem_once_and_store_the_same_files(spec, tmp_path):
    """An actor off the driver's node ships its unit's entries with every stem of the unit given by
    reference to the unit it returns (its audio travels once); the driver's copy of each entry
    holds the same files, byte for byte, as the actor's cache."""
    import pickle

    from casu_dataset.core import cache_layout
    from casu_dataset.dataset import ray_executor as rx
    from casu_dataset.dataset.executor import build_units

    unit = next(iter(build_units(compile_families(FIXTURE)).values()))
    res = rx.build_task(unit, 0, spec, str(tmp_path / "actor"), ship=True)
    assert res["error"] is None and sorted(res["built"]) == sorted(s.script.id for s in unit)
    assert len(res["entries"]) == len(unit) and set(res["cues"]) == set(res["built"])
    for files in res["entries"].values():
        assert all(not isinstance(v, bytes) for f, v in files.items() if f.endswith(".flac"))
    audio = sum(len(b) for e, _ in res["built"].values() for b in e["flac"].values())
    assert len(pickle.dumps(res["entries"])) < audio / 10  # the stems are not in it again
    for key, files in res["entries"].items():
        assert rx.store_entry(tmp_path / "driver", key, rx.entry_files(files, res["built"]))
        assert not rx.store_entry(tmp_path / "driver", key, rx.entry_files(files, res["built"]))
        mine, theirs = (cache_layout.scenes_dir(tmp_path / c) / key for c in ("actor", "driver"))
        assert folder_bytes(mine) == folder_bytes(theirs) and (theirs / "done").is_file()
    # On the driver's node (its cache writable there) nothing is shipped: the entries are in place,
    # and the unit's stems come as their files there, which read back as the shipped unit's bytes.
    from casu_dataset.dataset.scene_cache import StemFile, stems_loaded

    here = rx.build_task(unit, 0, spec, str(tmp_path / "actor"), ship=False)
    assert here["entries"] == {} and set(here["cues"]) == set(res["cues"])
    assert all(isinstance(v, StemFile) for e, _ in here["built"].values() for v in e["flac"].values())
    assert len(pickle.dumps(here["built"])) < audio / 50
    assert stems_loaded(here["built"]) == {s: (e, True) for s, (e, _) in res["built"].items()}


def test_warm_actors_are_adopted_and_build_the_same_bytes(cluster, local, spec, tmp_path):
    """api.build starts the actors first thing (warm_ray): the build's run takes them, each call
    bringing the build's job, and the bytes are one process's."""
    from casu_dataset.dataset import ray_executor

    ray_executor.warm_ray(spec)
    assert len(ray_executor._WARM["actors"]) == 2 and not ray_executor._WARM["started"]
    rep = _build(tmp_path / "out", compile_families(FIXTURE), spec, tmp_path / "cache", "ray")
    assert ray_executor._WARM == {}  # taken by the run
    assert rep.workers["warm_actors"] == 2
    assert rep.built == local[1].built and rep.cached == 8
    assert folder_bytes(tmp_path / "out") == folder_bytes(local[0])
    assert all(m == [] for m in rep.workers["worker_models"].values())


def test_a_warm_actor_killed_mid_build_gets_its_job_again(cluster, local, spec, tmp_path):
    """A warm actor is made without a spec: restarted after its process dies, it has the build's
    job again from its next call."""
    from casu_dataset.dataset import ray_executor

    ray_executor.warm_ray(spec)
    # a warm worker dies mid-unit (its title names the method while it runs one)
    rep, killed = _build_killing_a_worker(spec, tmp_path, "ray::BuildWorker.build", 0.02)
    assert killed, "no Ray build worker (actor) building to kill"
    assert rep.workers["warm_actors"] == 2
    assert rep.built == local[1].built
    assert folder_bytes(tmp_path / "out") == folder_bytes(local[0])


def test_warm_actors_no_run_took_are_released(cluster, spec):
    from casu_dataset.dataset import ray_executor

    ray_executor.warm_ray(spec)
    actors = ray_executor._WARM["actors"]
    ray_executor.release_warm()
    assert ray_executor._WARM == {} and ray.is_initialized()  # the cluster was not warm_ray's
    for a in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(a.build.remote([], None, None), timeout=60)


def test_a_build_that_fails_after_warming_lets_its_actors_go(cluster, tmp_path, monkeypatch):
    """api.build warms Ray's actors before it reads the library; a library that does not parse
    fails the build (exit 2), and the actors no run took are killed."""
    import casu_dataset
    from casu_dataset.dataset import ray_executor

    killed = []
    real_kill = ray.kill
    monkeypatch.setattr(ray, "kill", lambda a, **kw: (killed.append(a), real_kill(a, **kw)))
    lib = tmp_path / "broken.yaml"
    lib.write_text("families: [\n")
    with pytest.raises(Exception) as err:
        casu_dataset.build(
            casu_dataset.BuildConfig(
                out=tmp_path / "out", scenarios=lib, cache=tmp_path / "c", executor="ray"
            )
        )
    assert getattr(err.value, "exit_code", None) == 2, err.value
    assert ray_executor._WARM == {} and len(killed) == 2
    assert ray.is_initialized()  # the cluster was the test's, not warm_ray's: still running
    assert not (tmp_path / "out").exists()
