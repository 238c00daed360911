"""What build workers load and what the driver plans for them: the driver's retrieval plan picks
the same clips (and scores) as each scene retrieving on its own, and a locked build on a pool of
workers with a warm speech cache loads no model anywhere in the workers, with the same bytes."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import fixture_builder, folder_bytes

from casu_dataset.dataset.build import build_dataset
from casu_dataset.dataset.config import BuildConfig
from casu_dataset.dataset.executor import build_units
from casu_dataset.dataset.retrieval_plan import PlannedRetrieve, follow_plan, plan_retrieval
from casu_dataset.families.compile import compile_families
from casu_dataset.formats.lock import lock_path, read_lock

FIXTURE = Path(__file__).parent / "fixtures" / "families" / "two_families.yaml"


def _record(found: dict) -> list:
    return [(m.clip.id, m.score, m.desc_sim, m.kw_sim) for m in [found["background"], *found["events"]]]


def test_the_driver_plan_picks_what_each_scene_retrieves_on_its_own(session_cache):
    units = list(build_units(compile_families(FIXTURE)).values())
    own = fixture_builder(session_cache)  # one query at a time, as a worker without a plan would
    planned = fixture_builder(session_cache)
    plans = plan_retrieval(units, planned, seed=3)
    assert plans is not None and [len(p) for p in plans] == [len(u) for u in units]
    worker = fixture_builder(session_cache)
    for unit, plan in zip(units, plans):
        follow_plan(worker, plan)
        key = unit[0].rng_key
        for scene in unit:
            expected = _record(own.retrieve(scene.script, 3, key))
            assert _record(plan[(scene.script.id, 3, key)]) == expected
            assert _record(worker.retrieve(scene.script, 3, key)) == expected
    assert isinstance(worker.__dict__["retrieve"], PlannedRetrieve)
    # The worker never encoded a query: its encoder's model was never loaded.
    assert "model" not in worker.retriever.embedder.__dict__


def test_a_locked_build_on_workers_loads_no_model(session_cache, tmp_path):
    lib = tmp_path / "two_families.yaml"
    shutil.copy(FIXTURE, lib)

    def build(out, cache, **kw):
        config = BuildConfig(
            out=out, scenarios=lib, cache=cache, progress=False, name="lock fixture", max_skips=None, **kw
        )
        lock = None if kw.get("lock") == "relock" else read_lock(lock_path(lib))
        spec = {"cache": str(session_cache), "check_speech": False}
        if lock is not None:
            spec["lock"] = str(lock.path)
        return build_dataset(
            config, compile_families(lib), fixture_builder(session_cache, lock), builder_spec=spec
        )

    ref = build(tmp_path / "ref", tmp_path / "c0", lock="relock")  # writes the lock (warms the speech)
    assert ref.lock["mode"] == "written"
    one = build(tmp_path / "one", tmp_path / "c1")
    pool = build(tmp_path / "pool", tmp_path / "c2", num_proc=2)
    assert one.lock["mode"] == pool.lock["mode"] == "followed"
    assert pool.built == one.built and len(pool.built) == 8
    assert folder_bytes(tmp_path / "pool") == folder_bytes(tmp_path / "one")
    models = pool.workers["worker_models"]
    assert models and all(m == [] for m in models.values()), models


def test_workers_forked_from_the_warmed_fork_server_build_the_same_bytes(session_cache, tmp_path):
    """api.build starts the pool's fork server first thing (warm_pool): its workers build the
    same bytes as one process, and the record's file hashes (taken on the writer's IO threads as
    each shard closed) are those of the files."""
    from casu_dataset.core.audio_io import file_sha256
    from casu_dataset.dataset.worker_stack import warm_pool
    from casu_dataset.formats import build_manifest

    assert warm_pool(2)
    spec = {"cache": str(session_cache), "check_speech": False}

    def build(name, **kw):
        config = BuildConfig(
            out=tmp_path / name, cache=tmp_path / f"c{name}", progress=False, max_skips=None, **kw
        )
        return build_dataset(
            config, compile_families(FIXTURE), fixture_builder(session_cache), builder_spec=spec
        )

    one, pool = build("one"), build("pool", num_proc=2)
    assert pool.workers["worker_start"] == "forkserver"
    assert pool.built == one.built and len(pool.built) == 8
    assert folder_bytes(tmp_path / "pool") == folder_bytes(tmp_path / "one")
    record = build_manifest.read(tmp_path / "pool")
    assert record is not None
    files = [p for p in sorted((tmp_path / "pool").rglob("*.parquet"))]
    assert len(files) >= 6
    for p in files:
        rel = p.relative_to(tmp_path / "pool").as_posix()
        assert record["files"][rel]["sha256"] == file_sha256(p), rel


def test_a_pool_worker_sends_its_stems_as_cache_files_the_parent_reads_back(session_cache, tmp_path):
    """A pool worker's result names each stem's file in the scene cache it shares with the parent
    instead of carrying the audio (the pickle through the pipe is a few KB, not MB); the parent
    reads them back as exactly the bytes the unit was built with."""
    import pickle

    from casu_dataset.dataset import executor
    from casu_dataset.dataset.scene_cache import StemFile, build_unit, stems_loaded

    spec = {"cache": str(session_cache), "check_speech": False}
    unit = next(iter(build_units(compile_families(FIXTURE)).values()))
    executor._pool_init(spec, 0, tmp_path / "cache")
    try:
        pid, _, _, sent, cues = executor._pool_build((unit, None))
    finally:
        executor._POOL_STATE.clear()
    assert sorted(sent) == sorted(s.script.id for s in unit) and set(cues) == set(sent)
    stems = [v for b, _ in sent.values() for v in b["flac"].values()]
    assert len(stems) == 4 * len(unit) and all(isinstance(v, StemFile) for v in stems)
    audio = sum(v.size for v in stems)
    assert len(pickle.dumps(sent)) < audio / 50
    # What the parent reads is what building the unit here gives (a cache hit, byte for byte) ...
    by_value = build_unit(unit, 0, fixture_builder(session_cache), tmp_path / "cache")
    got = stems_loaded(sent)
    assert got is not None
    assert {s: b["flac"] for s, (b, _) in got.items()} == {s: b["flac"] for s, (b, _) in by_value.items()}
    assert {s: b["annotation"] for s, (b, _) in got.items()} == {
        s: b["annotation"] for s, (b, _) in by_value.items()
    }


def test_stems_go_by_reference_only_from_a_complete_folder_and_come_back_only_intact(tmp_path):
    """stems_by_reference keeps a stem as bytes where its folder is incomplete (no `done`) or the
    file's size is not the stem's; stems_loaded gives None (the parent then builds the unit
    itself) when a named file is gone or has changed size."""
    from casu_dataset.dataset.scene_cache import StemFile, stems_by_reference, stems_loaded

    def folder(name, files, done=True):
        d = tmp_path / name
        d.mkdir()
        for f, b in files.items():
            (d / f).write_bytes(b)
        if done:
            (d / "done").write_text("ok")
        return d

    a, b, c = b"fLaC" + bytes(range(200)), b"fLaC" + bytes(300), b"fLaC" + b"\x01" * 99
    built = {
        "s1": ({"annotation": {"x": 1}, "flac": {"mixture": a, "speech": b}}, False),
        "s2": ({"annotation": {"x": 2}, "flac": {"mixture": c}}, True),
        "s3": ({"annotation": {"x": 3}, "flac": {"mixture": a}}, False),
    }
    where = {
        "s1": folder("one", {"mixture.flac": a, "speech.flac": b + b"!"}),  # speech: another size
        "s2": folder("two", {"mixture.flac": c}, done=False),  # a folder still being written
    }  # s3: no folder known
    sent = stems_by_reference(built, where)
    assert sent is not None
    assert sent["s1"][0]["flac"]["mixture"] == StemFile(str(where["s1"] / "mixture.flac"), len(a))
    assert sent["s1"][0]["flac"]["speech"] == b
    assert sent["s2"][0]["flac"]["mixture"] == c and sent["s3"][0]["flac"]["mixture"] == a
    assert sent["s1"][0]["annotation"] == {"x": 1} and sent["s2"][1] is True
    assert stems_loaded(sent) == built
    assert stems_by_reference(None, {}) is None and stems_loaded(None) is None
    (where["s1"] / "mixture.flac").write_bytes(a[:-1])  # changed after it was sent
    assert stems_loaded(sent) is None
    (where["s1"] / "mixture.flac").unlink()  # gone
    assert stems_loaded(sent) is None


def test_the_workers_stop_while_the_files_are_written_and_a_failed_stop_loses_nothing(
    session_cache, tmp_path, monkeypatch, caplog
):
    """Once the last unit is in, the pool is stopped on the driver's thread while the writer's IO
    threads encode the files (after every write is queued, before the writer waits for them); a
    failure to stop it is a warning, and the dataset is written all the same."""
    from casu_dataset.dataset import executor, writer

    spec = {"cache": str(session_cache), "check_speech": False}
    events: list[str] = []
    real_close, real_submit, real_drain = (
        executor.PoolRun.close,
        writer.FolderWriter._submit,
        writer.FolderWriter._drain,
    )

    def close(self):
        if self.pool is not None:
            events.append("close")
            real_close(self)
            raise RuntimeError("the pool would not stop")

    monkeypatch.setattr(executor.PoolRun, "close", close)
    monkeypatch.setattr(
        writer.FolderWriter,
        "_submit",
        lambda self, *a, **k: (events.append("write"), real_submit(self, *a, **k))[1],
    )
    monkeypatch.setattr(
        writer.FolderWriter, "_drain", lambda self: (events.append("drain"), real_drain(self))[1]
    )

    def build(name, **kw):
        config = BuildConfig(
            out=tmp_path / name, cache=tmp_path / f"c{name}", progress=False, max_skips=None, **kw
        )
        return build_dataset(
            config, compile_families(FIXTURE), fixture_builder(session_cache), builder_spec=spec
        )

    one = build("one")
    events.clear()
    with caplog.at_level("WARNING"):
        pool = build("pool", num_proc=2)
    assert pool.built == one.built and folder_bytes(tmp_path / "pool") == folder_bytes(tmp_path / "one")
    assert events.count("close") == 1 and events.count("drain") == 1
    assert events.index("close") == events.index("drain") - 1 and "write" in events[: events.index("close")]
    assert "the pool would not stop" in caplog.text
