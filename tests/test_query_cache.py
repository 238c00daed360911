"""The query-embedding cache (sounds/query_cache.py): a text's vector is the model's, byte for byte,
whether it was just encoded, read back in another process, or re-encoded past a damaged file; a
build whose queries and catalog were seen before plans its retrieval without importing
sentence-transformers or torch; processes writing the cache at once lose nothing."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from conftest import fixture_builder

from casu_dataset.sounds.query_cache import QueryCache
from casu_dataset.sounds.retrieval import Embedder

FIXTURE = Path(__file__).parent / "fixtures" / "families" / "two_families.yaml"
TEXTS = ["A dog barks twice.", "Rain on a tin roof.", "church bells, ringing", "A kettle whistles."]
HEAVY = ("torch", "transformers", "sentence_transformers")
REPO = Path(__file__).resolve().parent.parent


def _python(code: str, cache: Path) -> dict:
    """Run `code` in a fresh interpreter (CASU_CACHE=cache); it prints one JSON line last."""
    env = {**os.environ, "CASU_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _cache_file(cache: Path) -> Path:
    (found,) = (cache / "embeddings").glob("queries-*.sqlite")
    return found


def test_vectors_are_the_models_cold_and_warm_and_in_another_process(tmp_path):
    plain = Embedder(disk_cache=False).encode(TEXTS)  # what the model gives (memo only)
    cold = Embedder(cache_dir=tmp_path).encode(TEXTS)
    assert cold.tobytes() == plain.tobytes()
    warm = Embedder(cache_dir=tmp_path)
    assert warm.encode(TEXTS).tobytes() == plain.tobytes()
    assert "model" not in warm.__dict__  # every text came from the disk cache
    got = _python(
        f"""
        import json, sys
        from casu_dataset.sounds.retrieval import Embedder
        e = Embedder(cache_dir={str(tmp_path)!r})
        v = e.encode({TEXTS!r})
        print(json.dumps({{"hex": v.tobytes().hex(), "model": "model" in e.__dict__,
                          "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
        """,
        tmp_path,
    )
    assert bytes.fromhex(got["hex"]) == plain.tobytes()
    assert got["model"] is False and got["heavy"] == []
    # A text never seen loads the model for that text alone; the others still come from disk.
    mixed = Embedder(cache_dir=tmp_path)
    out = mixed.encode([*TEXTS, "A door slams."])
    assert out[:4].tobytes() == plain.tobytes()
    assert out[4].tobytes() == Embedder(disk_cache=False).encode(["A door slams."])[0].tobytes()


def test_a_damaged_cache_file_is_named_and_rebuilt_never_a_wrong_vector(tmp_path, caplog):
    plain = Embedder(disk_cache=False).encode(TEXTS)
    Embedder(cache_dir=tmp_path).encode(TEXTS)
    path = _cache_file(tmp_path)
    # One row's vector bytes changed under it (its digest no longer matches): encoded again.
    with sqlite3.connect(path) as db:
        (blob,) = db.execute("SELECT vec FROM vectors WHERE text = ?", (TEXTS[1],)).fetchone()
        bad = np.frombuffer(blob, dtype="<f4").copy()
        bad[0] += 2**-11
        db.execute("UPDATE vectors SET vec = ? WHERE text = ?", (bad.tobytes(), TEXTS[1]))
    e = Embedder(cache_dir=tmp_path)
    assert e.encode(TEXTS).tobytes() == plain.tobytes()
    assert "model" in e.__dict__  # the damaged row was encoded again ...
    again = Embedder(cache_dir=tmp_path)
    assert again.encode(TEXTS).tobytes() == plain.tobytes()
    assert "model" not in again.__dict__  # ... and stored right
    # A file that is not a database at all: a warning names it, the vectors are right, and the
    # file is started again, so the next process reads them from it.
    path.write_bytes(b"not a database, " * 512)
    with caplog.at_level(logging.WARNING, logger="casu_dataset.sounds.query_cache"):
        assert Embedder(cache_dir=tmp_path).encode(TEXTS).tobytes() == plain.tobytes()
    assert str(path) in caplog.text and "unreadable" in caplog.text
    after = Embedder(cache_dir=tmp_path)
    assert after.encode(TEXTS).tobytes() == plain.tobytes()
    assert "model" not in after.__dict__


def test_an_unusable_cache_folder_only_costs_the_cache(tmp_path, caplog):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    plain = Embedder(disk_cache=False).encode(TEXTS)
    with caplog.at_level(logging.WARNING, logger="casu_dataset.sounds.query_cache"):
        assert Embedder(cache_dir=blocked).encode(TEXTS).tobytes() == plain.tobytes()
    assert "not used" in caplog.text


def _writer(path: str, worker: int, rounds: int) -> None:
    cache = QueryCache(path)
    for r in range(rounds):
        # Half the texts are every writer's, half this writer's own: the same text's vector is
        # the same bytes whoever writes it (as with one model).
        texts = [f"shared {r} {i}" for i in range(5)] + [f"own {worker} {r} {i}" for i in range(5)]
        cache.put({t: _vector(t) for t in texts})


def _vector(text: str) -> np.ndarray:
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little"))
    return (np.round(rng.standard_normal(384) * 2**11) / 2**11).astype(np.float32)


def test_processes_writing_at_once_lose_and_damage_nothing(tmp_path):
    import multiprocessing as mp

    path = str(tmp_path / "embeddings" / "queries-test.sqlite")
    workers, rounds = 4, 40
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, rounds)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
        assert p.exitcode == 0
    texts = [f"shared {r} {i}" for r in range(rounds) for i in range(5)]
    texts += [f"own {w} {r} {i}" for w in range(workers) for r in range(rounds) for i in range(5)]
    got = QueryCache(path).get(texts)
    assert len(got) == len(texts) == rounds * 5 * (workers + 1)
    assert all(got[t].tobytes() == _vector(t).tobytes() for t in texts)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_warm_build_plans_its_retrieval_without_sentence_transformers_or_torch(session_cache, tmp_path):
    """The driver of a build whose queries and catalog are in the cache imports none of the model
    stack, in one process and with a pool of workers (forked then: nothing here forbids it); both
    folders are the bytes of the build that filled the cache."""
    from casu_dataset.dataset.build import build_dataset
    from casu_dataset.dataset.config import BuildConfig
    from casu_dataset.families.compile import compile_families

    cache = tmp_path / "casu"
    config = BuildConfig(out=tmp_path / "first", cache=tmp_path / "scenes0", progress=False, max_skips=None)
    # The speech turns come from the session's cache; the query vectors go to this test's own.
    builder = fixture_builder(session_cache)
    builder.retriever.embedder.cache_dir = cache
    builder.retriever.embedder.__dict__.pop("queries", None)
    build_dataset(config, compile_families(FIXTURE), builder)
    assert _cache_file(cache).is_file()
    got = _python(
        f"""
        import json, sys
        from pathlib import Path
        sys.path.insert(0, "tests")
        from conftest import fixture_builder
        from casu_dataset.dataset.build import build_dataset
        from casu_dataset.dataset.config import BuildConfig
        from casu_dataset.families.compile import compile_families

        def build(name, **kw):
            b = fixture_builder(Path({str(session_cache)!r}))
            b.retriever.embedder.cache_dir = {str(cache)!r}
            b.retriever.embedder.__dict__.pop("queries", None)
            root = Path({str(tmp_path)!r})
            config = BuildConfig(out=root / name, cache=root / ("c" + name), progress=False, max_skips=None,
                                 **kw)
            spec = {{"cache": {str(session_cache)!r}, "check_speech": False}}
            return build_dataset(config, compile_families(Path({str(FIXTURE)!r})), b, builder_spec=spec)

        one, pool = build("second"), build("pool", num_proc=2)
        print(json.dumps({{"built": [len(one.built), len(pool.built)], "plan": "plan" in one.seconds,
                          "start": pool.workers.get("worker_start"),
                          "worker_models": list(pool.workers["worker_models"].values()),
                          "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
        """,
        session_cache,
    )
    assert got == {"built": [8, 8], "plan": True, "start": "fork", "worker_models": [[], []], "heavy": []}
    first = tmp_path / "first"
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    for other in (tmp_path / "second", tmp_path / "pool"):
        assert files == sorted(p.relative_to(other) for p in other.rglob("*") if p.is_file())
        assert all((first / f).read_bytes() == (other / f).read_bytes() for f in files), other


def test_threads_and_a_forked_child_share_one_cache_object(tmp_path, caplog):
    """An agent run's retrieval checks call encode from a thread pool, and a forked build worker
    inherits its parent's cache object: both use it without an error, lose nothing, and never
    treat a thread or fork mix-up as a damaged file."""
    import multiprocessing as mp
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "embeddings" / "queries-test.sqlite"
    cache = QueryCache(path)
    cache.put({"first": _vector("first")})  # the connection is made on this thread

    def work(w: int) -> None:
        texts = [f"thread {w} {i}" for i in range(20)]
        for t in texts:
            cache.put({t: _vector(t)})
        assert all(v.tobytes() == _vector(t).tobytes() for t, v in cache.get(texts).items())

    with caplog.at_level(logging.WARNING), ThreadPoolExecutor(4) as pool:
        list(pool.map(work, range(8)))
    texts = ["first", *(f"thread {w} {i}" for w in range(8) for i in range(20))]
    assert len(QueryCache(path).get(texts)) == len(texts)
    assert "unreadable" not in caplog.text and "not used" not in caplog.text

    child = mp.get_context("fork").Process(target=_child_put, args=(cache,))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    assert cache.get(["from the child"])["from the child"].tobytes() == _vector("from the child").tobytes()


def _child_put(cache: QueryCache) -> None:
    cache.put({"from the child": _vector("from the child")})
    assert "from the child" in cache.get(["from the child"])
