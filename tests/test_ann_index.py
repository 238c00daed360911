"""The faiss index path of retrieval against exact search (the reference): top-1 agreement on the
bank and on a larger candidate set, exact constraints, identical seeded choices whenever the exact
top k are among the proposals, and the on-disk cache keyed on content + params."""

from __future__ import annotations

import numpy as np
import pytest

faiss = pytest.importorskip("faiss", reason="faiss-cpu is not installed (pip install -e '.[ann]')")

from casu_dataset.sounds.ann_index import AnnIndex, AnnParams  # noqa: E402
from casu_dataset.sounds.catalog import Catalog, CatalogClip  # noqa: E402
from casu_dataset.sounds.retrieval import Retriever, quantize  # noqa: E402
from casu_dataset.sounds.retrieval_eval import load_queries  # noqa: E402


@pytest.fixture(scope="module")
def bank(session_cache):
    return Retriever(Catalog.embedded(), cache_dir=session_cache)


@pytest.fixture(scope="module")
def queries(bank):
    qs = load_queries()
    qd, qk = bank.encode_queries([q["description"] for q in qs], [q["keywords"] for q in qs])
    return qs, qd, qk, np.array([q["kind"] for q in qs])


@pytest.fixture(scope="module")
def big(bank, tmp_path_factory):
    """12,000 candidates mixing 1-3 bank clips' description vectors (keywords of the first), plus
    the same catalog searched exactly, so exact and index share the vectors."""
    rng = np.random.default_rng(0)
    n = 12_000
    parts = rng.integers(0, len(bank.catalog), (n, 3))
    w = rng.random((n, 3)) * (np.arange(3) < rng.integers(1, 4, n)[:, None])
    desc = np.einsum("nj,njd->nd", w, bank.desc[parts])
    desc /= np.linalg.norm(desc, axis=1, keepdims=True)
    clips = [
        CatalogClip(
            id=f"mix{i}",
            kind=bank.catalog.clips[p].kind,
            captions=["-"],
            keywords=["-"],
            path="",
            duration=float(bank.durations[p]),
        )
        for i, p in enumerate(parts[:, 0])
    ]
    cat = Catalog("mix12k", clips)
    cache = tmp_path_factory.mktemp("ann")
    emb = (desc, bank.kw[parts[:, 0]])
    exact = Retriever(cat, bank.embedder, embeddings=emb, index="exact")
    ann = Retriever(cat, bank.embedder, embeddings=emb, index="ann", cache_dir=cache)
    return exact, ann, cache


def _kind_search(r, qd, qk, kinds, exact: bool, **constraints):
    idx = np.empty((len(qd), 5), dtype=np.int64)
    val = np.empty((len(qd), 5), dtype=np.float32)
    for kind in ("event", "background"):
        sel = np.flatnonzero(kinds == kind)
        m = r.mask(kind=kind, **constraints)
        i, v = (
            r._exact_topk(qd[sel], qk[sel], 5, m, r.alpha) if exact else r.topk_batch(qd[sel], qk[sel], 5, m)
        )
        assert m[i].all(), "the index returned a clip that breaks the constraints"
        idx[sel], val[sel] = i, v
    return idx, val


def test_exact_is_the_default_below_the_threshold(bank):
    assert not bank.uses_ann() and bank.ann is None and bank.index_settings() is None


def test_bank_top1_agrees_and_constraints_hold(bank, queries, tmp_path):
    _, qd, qk, kinds = queries
    r = Retriever(
        bank.catalog,
        bank.embedder,
        index="ann",
        cache_dir=tmp_path,
        ann_params=AnnParams(nlist=8, nprobe=4, rerank=16),
    )  # half the lists
    assert r.uses_ann() and r.ann is not None
    for c in ({}, {"min_duration": 6.0, "allow_loop": False}, {"min_duration": 12.0, "allow_loop": True}):
        ei, ev = _kind_search(bank, qd, qk, kinds, True, **c)
        ai, av = _kind_search(r, qd, qk, kinds, False, **c)
        assert np.mean(ai[:, 0] == ei[:, 0]) >= 0.99, c


def test_larger_set_agrees_and_ann_equals_exact_when_proposed(big, queries):
    exact, ann, _ = big
    _, qd, qk, kinds = queries
    ei, ev = _kind_search(exact, qd, qk, kinds, True, min_duration=3.0, allow_loop=False)
    ai, av = _kind_search(ann, qd, qk, kinds, False, min_duration=3.0, allow_loop=False)
    assert np.mean(ai[:, 0] == ei[:, 0]) >= 0.97
    # Where the exact top 5 were among the proposals, the index's answer is the exact one, bytes and order.
    q = np.concatenate(
        [quantize(qd) * np.float32(ann.alpha), quantize(qk) * np.float32(1 - ann.alpha)], axis=1
    )
    covered = 0
    for kind in ("event", "background"):
        sel = np.flatnonzero(kinds == kind)
        prop = ann.ann.propose(
            q[sel], ann.ann.params.rerank, ann.mask(kind=kind, min_duration=3.0, allow_loop=False)
        )
        for j, row in zip(sel, prop):
            if set(ei[j]) <= set(row.tolist()):
                covered += 1
                assert (ai[j] == ei[j]).all() and (av[j] == ev[j]).all()
    assert covered >= 0.9 * len(qd)


def test_seeded_choice_is_the_exact_one(big, queries):
    exact, ann, _ = big
    qs, _, _, _ = queries
    same = 0
    for i, q in enumerate(qs[:40]):
        c = {"kind": q["kind"], "exclude": {"mix3", "mix5"}}
        ranked = exact.search(q["description"], q["keywords"], k=10, **c)
        a = exact.choose(q["description"], q["keywords"], np.random.default_rng(i), **c)
        b = ann.choose(q["description"], q["keywords"], np.random.default_rng(i), **c)
        ties = [m.clip.id for m in ranked if m.score >= ranked[0].score - 0.02]
        got = [m.clip.id for m in ann.search(q["description"], q["keywords"], k=10, **c)]
        if set(ties) <= set(got):  # the exact tie set was proposed: the draw must be the same
            assert (a.clip.id, a.score) == (b.clip.id, b.score)
            same += 1
    assert same >= 36


def test_index_is_cached_on_content_and_params(big, monkeypatch):
    exact, ann, cache = big
    _ = ann.ann
    files = sorted((cache / "ann").glob("*.npz"))
    assert len(files) == 1
    monkeypatch.setattr(AnnIndex, "build", classmethod(lambda *a, **k: pytest.fail("rebuilt a cached index")))
    again = Retriever(ann.catalog, ann.embedder, embeddings=(ann.desc, ann.kw), index="ann", cache_dir=cache)
    assert again.ann.describe() == ann.ann.describe()
    monkeypatch.undo()
    other = Retriever(
        ann.catalog,
        ann.embedder,
        embeddings=(ann.desc, ann.kw),
        index="ann",
        cache_dir=cache,
        ann_params=AnnParams(nprobe=4),
    )
    _ = other.ann
    kw = ann.kw.copy()
    kw[0] = kw[1]  # other content
    _ = Retriever(ann.catalog, ann.embedder, embeddings=(ann.desc, kw), index="ann", cache_dir=cache).ann
    assert len(list((cache / "ann").glob("*.npz"))) == 3


def test_bad_settings_are_refused(bank):
    with pytest.raises(ValueError, match="index 'fast'"):
        Retriever(bank.catalog, bank.embedder, index="fast")
    with pytest.raises(ValueError, match="storage 'pq'"):
        AnnParams(storage="pq")
    with pytest.raises(ValueError, match="nprobe must be >= 1"):
        AnnParams(nprobe=0)
