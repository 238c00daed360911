"""Exact vs approximate (faiss IVF) retrieval: 1,000 queries x 100k and x 1M candidates.

Candidates are not noisy copies of the 225 bank vectors. They are built from real MiniLM
embeddings of *generated caption text*: for every bank clip, caption variants made from
templates x the clip's keywords x modifiers ("The sound of howl in the distance.", "A recording
of axe, muffled through a wall."), keyword-list variants (2-4 of its keywords, shuffled, some with
a modifier) and compound captions joining two clips ("... while a siren wails, at night.").
A candidate's description vector is the normalised mean of 1-5 caption variants of one clip or
clip pair (Clotho-style: one clip, several captions), its keyword vector one keyword variant, so
1M candidates are 1M distinct text mixtures spread around the bank's 225 sounds and 1,500 pairs:
dense, with many near-ties, which is what makes top-1 agreement hard.

Queries: the 160 shipped retrieval queries plus 840 held-out generated captions (a different
seed; no query text is in the candidate pool), each with its kind as the constraint (two
batches: event, background). Embedding the ~12k pool texts takes about a minute on 2 cores and
is cached in $CASU_CACHE/bench.

Reported per size: exact search time, index build time (train + add; the index is then cached
on disk, the load time is reported too), index search time, index memory, peak RSS, top-1
agreement with exact search (same clip; and same score, which counts exact ties) and hit@5
(the exact winner in the index's top 5).
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from casu_dataset.core.cache_layout import bench_dir
from casu_dataset.sounds.catalog import Catalog, CatalogClip
from casu_dataset.sounds.retrieval import Embedder, Retriever, _normalize, keyword_text
from casu_dataset.sounds.retrieval_eval import load_queries

TEMPLATES = [
    "{Kw} {mod}.",
    "The sound of {kw} {mod}.",
    "{Kw} can be heard {place}.",
    "A recording of {kw}, {mod}.",
    "{Kw} and {kw2} {place}.",
    "Close by, {kw} {place}.",
    "{Cap} {Mod}.",
    "Faint {kw} {place}, {mod}.",
    "There is {kw} {mod} and then {kw2}.",
    "{Kw} {place} while people talk quietly.",
]
MODS = [
    "in the distance",
    "close to the microphone",
    "loudly",
    "quietly",
    "with a lot of echo",
    "at night",
    "over and over",
    "briefly",
    "muffled through a wall",
    "with wind noise",
    "on and off",
    "in the rain",
]
PLACES = [
    "outdoors",
    "inside a building",
    "in a large hall",
    "on a busy street",
    "in a small room",
    "far away",
    "in the countryside",
    "near a road",
]
KW_MODS = ["distant", "loud", "soft", "echo", "close", "repeated"]
CAPS_PER_CLIP, KW_PER_CLIP, PAIRS, N_QUERIES = 32, 12, 1500, 1000


def _fill(t: str, clip: CatalogClip, rng) -> str:
    kws = clip.keywords
    kw, kw2 = kws[rng.integers(len(kws))], kws[rng.integers(len(kws))]
    mod, place = MODS[rng.integers(len(MODS))], PLACES[rng.integers(len(PLACES))]
    cap = clip.captions[0].rstrip(".")
    return t.format(kw=kw, Kw=kw[:1].upper() + kw[1:], kw2=kw2, mod=mod, Mod=mod, place=place, Cap=cap)


def caption_pool(
    cat: Catalog,
    seed: int = 0,
    exclude: set[str] = frozenset(),
    caps_per_clip: int = CAPS_PER_CLIP,
    kw_per_clip: int = KW_PER_CLIP,
    n_pairs: int = PAIRS,
):
    """Generated texts and their owners: (caps, cap_owner), (kws, kw_owner), pairs; owner = concept id
    (a clip index, or len(cat) + pair number for a two-clip compound)."""
    rng = np.random.default_rng(seed)
    n = len(cat)
    caps, cap_owner, kws, kw_owner = [], [], [], []
    for i, clip in enumerate(cat.clips):
        seen, made = set(exclude), 0
        while made < caps_per_clip:
            t = _fill(TEMPLATES[rng.integers(len(TEMPLATES))], clip, rng)
            if t not in seen:
                seen.add(t)
                caps.append(t)
                cap_owner.append(i)
                made += 1
        for _ in range(kw_per_clip):
            ks = list(rng.permutation(clip.keywords)[: rng.integers(2, min(4, len(clip.keywords)) + 1)])
            if rng.random() < 0.3:
                ks.append(KW_MODS[rng.integers(len(KW_MODS))])
            kws.append(keyword_text(ks))
            kw_owner.append(i)
    pairs = []
    for p in range(n_pairs):
        a, b = (int(x) for x in rng.choice(n, 2, replace=False))
        pairs.append((a, b))
        ca, cb = cat.clips[a], cat.clips[b]
        for _ in range(3):
            caps.append(
                f"{_fill(TEMPLATES[rng.integers(len(TEMPLATES))], ca, rng).rstrip('.')} while "
                f"{cb.keywords[rng.integers(len(cb.keywords))]} {MODS[rng.integers(len(MODS))]}."
            )
            cap_owner.append(n + p)
        kws.append(
            keyword_text(list(rng.permutation(ca.keywords)[:2]) + list(rng.permutation(cb.keywords)[:2]))
        )
        kw_owner.append(n + p)
    return (caps, np.array(cap_owner)), (kws, np.array(kw_owner)), pairs


def _embed_cached(emb: Embedder, texts: list[str], name: str) -> np.ndarray:
    key = hashlib.sha256(("\n".join(texts) + emb.model_name).encode()).hexdigest()[:20]
    p = bench_dir() / f"{name}-{key}.npy"
    if p.is_file():
        return np.load(p)
    x = emb.encode(texts)
    p.parent.mkdir(parents=True, exist_ok=True)
    np.save(p, x)
    return x


def candidates(cat: Catalog, cap_e, cap_owner, kw_e, kw_owner, pairs, n: int, seed: int = 1):
    """n candidate (desc, kw) vectors and their kinds/durations (of the concept's first clip)."""
    rng = np.random.default_rng(seed)
    n_con = len(cat) + len(pairs)

    def spans(owner):  # each concept's texts as a slice of the owner-sorted order
        order = np.argsort(owner, kind="stable")
        count = np.bincount(owner, minlength=n_con)
        return order, np.concatenate([[0], np.cumsum(count)[:-1]]), count

    c_ord, c_start, c_cnt = spans(cap_owner)
    k_ord, k_start, k_cnt = spans(kw_owner)
    # 85% one clip, 15% a two-clip compound
    concept = np.where(
        rng.random(n) < 0.85, rng.integers(0, len(cat), n), len(cat) + rng.integers(0, len(pairs), n)
    )
    desc = np.empty((n, cap_e.shape[1]), dtype=np.float32)
    kw = np.empty((n, kw_e.shape[1]), dtype=np.float32)
    for s in range(0, n, 100_000):
        c = concept[s : s + 100_000]
        m = rng.integers(1, 6, len(c))  # 1-5 captions per candidate, drawn with replacement
        pick = c_ord[c_start[c] + (rng.random((5, len(c))) * c_cnt[c]).astype(np.int64)]
        w = (np.arange(5)[:, None] < m[None, :]).astype(np.float32)
        desc[s : s + len(c)] = _normalize(np.einsum("jn,jnd->nd", w, cap_e[pick]))
        kw[s : s + len(c)] = kw_e[k_ord[k_start[c] + (rng.random(len(c)) * k_cnt[c]).astype(np.int64)]]
    first = np.array([x if x < len(cat) else pairs[x - len(cat)][0] for x in range(n_con)])[concept]
    return desc, kw, first


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _search(r: Retriever, qd, qk, kinds, exact: bool):
    """top-5 (idx, val) per query, each query constrained to its kind (one batch per kind)."""
    idx = np.empty((len(qd), 5), dtype=np.int64)
    val = np.empty((len(qd), 5), dtype=np.float32)
    for kind in ("event", "background"):
        sel = np.flatnonzero(kinds == kind)
        m = r.mask(kind=kind)
        if exact:
            i, v = r._exact_topk(qd[sel], qk[sel], 5, m, r.alpha)
        else:
            i, v = r.topk_batch(qd[sel], qk[sel], k=5, mask=m)
        idx[sel], val[sel] = i, v
        assert m[i].all(), "a constraint was violated"
    return idx, val


def run(quick: bool = False, sizes=(100_000, 1_000_000), params=None) -> dict:
    # quick: a pool of ~1.5k texts (seconds to embed), 200 queries, 20k candidates
    pool = dict(caps_per_clip=4, kw_per_clip=2, n_pairs=100) if quick else {}
    n_queries = 200 if quick else N_QUERIES
    sizes = (20_000,) if quick else sizes
    bank_cat = Catalog.embedded()
    emb = Embedder()
    shipped = load_queries()
    (caps, cap_owner), (kws, kw_owner), pairs = caption_pool(bank_cat, seed=0, **pool)
    # Held-out queries: generated with another seed, none of whose text is in the pool.
    (qcaps, qowner), _, _ = caption_pool(bank_cat, seed=7, exclude=set(caps), **pool)
    rng = np.random.default_rng(3)
    pick = rng.choice(np.flatnonzero(qowner < len(bank_cat)), n_queries - len(shipped), replace=False)
    q_desc = [q["description"] for q in shipped] + [qcaps[i] for i in pick]
    q_kw = [q["keywords"] for q in shipped] + [
        list(rng.permutation(bank_cat.clips[qowner[i]].keywords)[:3]) for i in pick
    ]
    kinds = np.array([q["kind"] for q in shipped] + [bank_cat.clips[qowner[i]].kind for i in pick])
    t = time.perf_counter()
    cap_e = _embed_cached(emb, caps, "captions")
    kw_e = _embed_cached(emb, kws, "keywords")
    qd = _embed_cached(emb, q_desc, "queries")
    qk = _embed_cached(emb, [keyword_text(k) for k in q_kw], "query-keywords")
    res = {
        "candidates_are": f"mixtures of MiniLM embeddings of {len(caps)} generated captions and {len(kws)} "
        f"keyword lists (templates x bank keywords x modifiers, {len(pairs)} two-clip compounds)",
        "queries_are": f"{len(shipped)} shipped + {n_queries - len(shipped)} held-out generated captions, "
        "each constrained to its kind",
        "pool_embedding_s": time.perf_counter() - t,
        "load_avg_1m_at_start": os.getloadavg()[0],
    }
    cache = Path(tempfile.mkdtemp(prefix="casu-bench-ann-"))
    try:
        _sizes(
            res, sizes, bank_cat, emb, cap_e, cap_owner, kw_e, kw_owner, pairs, qd, qk, kinds, cache, params
        )
    finally:
        shutil.rmtree(cache, ignore_errors=True)  # the 1M index file is 1.5 GB
    res["goal"] = "index search < 1 s at 100k; top-1 agreement >= 0.99; 1M within 24 GB (peak_rss_mb)"
    return res


def _sizes(res, sizes, bank_cat, emb, cap_e, cap_owner, kw_e, kw_owner, pairs, qd, qk, kinds, cache, params):
    from casu_dataset.sounds.ann_index import AnnParams

    for n in sizes:
        gc.collect()
        base = _rss_mb()
        desc, kw, first = candidates(bank_cat, cap_e, cap_owner, kw_e, kw_owner, pairs, n)
        clips = [
            CatalogClip(
                id=f"gen{i}",
                kind=bank_cat.clips[f].kind,
                captions=["-"],
                keywords=["-"],
                path="",
                duration=bank_cat.clips[f].duration,
            )
            for i, f in enumerate(first)
        ]
        r = Retriever(
            Catalog(f"generated{n}", clips),
            emb,
            embeddings=(desc, kw),
            cache_dir=cache,
            index="ann",
            ann_params=params or AnnParams(),
        )
        del desc, kw, clips
        gc.collect()
        row = {"candidates": n, "vectors_mb": r.joint.nbytes / 2**20}
        r._exact_topk(qd[:8], qk[:8], 5, None, r.alpha)  # warm the threads
        t = time.perf_counter()
        ei, ev = _search(r, qd, qk, kinds, exact=True)
        row["exact_search_s"] = time.perf_counter() - t
        t = time.perf_counter()
        ann = r.ann  # trains and adds (nothing cached yet in this run's folder)
        row["index_build_s"] = time.perf_counter() - t
        row["index"] = f"{ann.describe()}; nprobe {ann.params.nprobe}, rerank {ann.params.rerank}"
        row["index_mb"] = ann.nbytes() / 2**20
        r._ann = None
        t = time.perf_counter()
        _ = r.ann  # from the disk cache
        row["index_load_s"] = time.perf_counter() - t
        r.topk_batch(qd[:8], qk[:8], k=5)
        t = time.perf_counter()
        ai, av = _search(r, qd, qk, kinds, exact=False)
        row["index_search_s"] = time.perf_counter() - t
        row["ratio_index_vs_exact_search"] = row["exact_search_s"] / row["index_search_s"]
        row["top1_agreement"] = float(np.mean(ai[:, 0] == ei[:, 0]))
        row["top1_same_score"] = float(np.mean(av[:, 0] == ev[:, 0]))
        row["hit_at_5"] = float(np.mean([e in a for e, a in zip(ei[:, 0], ai)]))
        row["top5_identical"] = float(np.mean((ai == ei).all(1)))
        row["rss_mb_over_start"] = _rss_mb() - base
        row["peak_rss_mb"] = _peak_mb()
        res[f"n{n}"] = row
        print(json.dumps(row), flush=True)
        del r, ann


if __name__ == "__main__":
    import sys

    quick = "--quick" in sys.argv
    sizes = tuple(int(x) for x in sys.argv[1:] if x != "--quick") or (100_000, 1_000_000)
    print(json.dumps(run(quick, sizes), indent=1))
