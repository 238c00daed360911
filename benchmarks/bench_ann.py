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

Reported per size: exact search time, index build time (train + add + write; the index is then
cached on disk, the load time is reported too), index search time, index memory, peak RSS, top-1
agreement with exact search (same clip; and same score, which counts exact ties) and hit@5
(the exact winner in the index's top 5).

Memory is measured per process: the candidates are written once as fp16 .npy files (the grid
vectors are fp16 numbers, so this is exact) and three fresh child processes open them as read-only
memmaps, as a big catalog would be: `exact` (the baseline's search), `build` (a first run: build,
write and search the index) and `load` (a later run: load the cached index and search). Each reports
its own peak RSS (VmHWM: anonymous memory and the resident pages of mapped files, the vectors and
the index, alike); `peak_rss_mb` is the larger of build and load, the index path's peak.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
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


def _status_mb(field: str) -> float:
    """A /proc/self/status figure in MiB (VmHWM: peak RSS, VmRSS, RssAnon, RssFile)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


# Queries per exact scoring batch: 64 x 1M float32 scores (and the product's temporaries) is ~1.3 GB,
# 256 (retrieval's default) ~5 GB on this shared machine; the scores, hence the results, are the same.
EXACT_CHUNK = 64


def _search(r: Retriever, qd, qk, kinds, exact: bool):
    """top-5 (idx, val) per query, each query constrained to its kind (one batch per kind)."""
    idx = np.empty((len(qd), 5), dtype=np.int64)
    val = np.empty((len(qd), 5), dtype=np.float32)
    for kind in ("event", "background"):
        sel = np.flatnonzero(kinds == kind)
        m = r.mask(kind=kind)
        if exact:
            i, v = r._exact_topk(qd[sel], qk[sel], 5, m, r.alpha, chunk=EXACT_CHUNK)
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
        _sizes(res, sizes, bank_cat, cap_e, cap_owner, kw_e, kw_owner, pairs, qd, qk, kinds, cache, params)
    finally:
        shutil.rmtree(cache, ignore_errors=True)  # at 1M: 1.5 GB of vectors, 1.5 GB of index
    res["goal"] = (
        "index search < 1 s at 100k; top-1 agreement >= 0.99; 1M: index path peak RSS < 8 GB "
        "(peak_rss_mb), index load < 3 s"
    )
    return res


def _sizes(res, sizes, bank_cat, cap_e, cap_owner, kw_e, kw_owner, pairs, qd, qk, kinds, cache, params):
    from casu_dataset.sounds.ann_index import AnnParams

    np.save(cache / "qd.npy", qd)
    np.save(cache / "qk.npy", qk)
    np.save(cache / "qkinds.npy", kinds)
    settings = json.dumps(asdict(params or AnnParams()))
    for n in sizes:
        gc.collect()
        folder = cache / f"n{n}"
        folder.mkdir()
        desc, kw, first = candidates(bank_cat, cap_e, cap_owner, kw_e, kw_owner, pairs, n)
        for name, x in (("desc", desc), ("kw", kw)):
            x16 = np.lib.format.open_memmap(folder / f"{name}.npy", "w+", np.float16, x.shape)
            for s in range(0, n, 100_000):
                x16[s : s + 100_000] = x[s : s + 100_000]
                # grid values (multiples of 2**-11 in [-1, 1]) are fp16 numbers: nothing is rounded
                assert np.array_equal(x16[s : s + 100_000], x[s : s + 100_000]), "not fp16-exact"
            x16.flush()
            del x16
        np.save(folder / "kinds.npy", np.array([c.kind for c in bank_cat.clips])[first])
        np.save(folder / "durations.npy", np.array([c.duration for c in bank_cat.clips])[first])
        row = {"candidates": n, "vectors_mb": (desc.nbytes + kw.nbytes) / 2**20}
        del desc, kw, first
        gc.collect()
        row["load_avg_1m"] = os.getloadavg()[0]
        ex = _child("exact", folder, cache, settings)
        bu = _child("build", folder, cache, settings)
        lo = _child("load", folder, cache, settings)
        ei, ev = np.load(folder / "exact_idx.npy"), np.load(folder / "exact_val.npy")
        ai, av = np.load(folder / "index_idx.npy"), np.load(folder / "index_val.npy")
        row.update(
            exact_search_s=ex["search_s"],
            index_build_s=bu["index_s"],
            index=bu["index"],
            index_mb=bu["index_mb"],
            index_file_mb=sum(f.stat().st_size for f in (folder / "ann").rglob("*")) / 2**20,
            index_load_s=lo["index_s"],
            index_search_s=lo["search_s"],
            index_search_s_after_build=bu["search_s"],
            index_search_s_repeats=lo["search_s_repeats"],
        )
        row["ratio_index_vs_exact_search"] = row["exact_search_s"] / row["index_search_s"]
        row["top1_agreement"] = float(np.mean(ai[:, 0] == ei[:, 0]))
        row["top1_same_score"] = float(np.mean(av[:, 0] == ev[:, 0]))
        row["hit_at_5"] = float(np.mean([e in a for e, a in zip(ei[:, 0], ai)]))
        row["top5_identical"] = float(np.mean((ai == ei).all(1)))
        row["built_equals_loaded"] = bool(
            np.array_equal(np.load(folder / "built_idx.npy"), ai)
            and np.array_equal(np.load(folder / "built_val.npy"), av)
        )
        row["vectors_and_key_s"] = lo[
            "vectors_and_key_s"
        ]  # the memmaps to the float32 joint matrix + its digest
        row["rss_mb_over_start"] = lo["rss_end_mb"] - lo["rss_start_mb"]
        row["peak_rss_mb"] = max(bu["peak_rss_mb"], lo["peak_rss_mb"])
        row["build_peak_rss_mb"] = bu["peak_rss_mb"]
        row["load_search_peak_rss_mb"] = lo["peak_rss_mb"]
        row["load_search_rss_end_anon_file_mb"] = [lo["rss_anon_end_mb"], lo["rss_file_end_mb"]]
        row["exact_peak_rss_mb"] = ex["peak_rss_mb"]
        row["bench_parent_peak_rss_mb"] = _status_mb("VmHWM")  # generating the candidates
        res[f"n{n}"] = row
        print(json.dumps(row), flush=True)
        shutil.rmtree(folder, ignore_errors=True)


def _child(role: str, folder: Path, cache: Path, settings: str) -> dict:
    """Run one role in a fresh interpreter (its own peak RSS); its result is the last stdout line."""
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", role, str(folder), str(cache), settings],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"bench_ann child {role} exited {out.returncode}:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def child(role: str, folder: Path, cache: Path, settings: str) -> dict:
    """exact: the baseline search; build: a first run (build, write, search); load: a later run
    (map the cached index, search). Vectors come from the fp16 memmaps written by `_sizes`."""
    from casu_dataset.sounds.ann_index import AnnParams

    start = _status_mb("VmRSS")
    desc = np.load(folder / "desc.npy", mmap_mode="r")
    kw = np.load(folder / "kw.npy", mmap_mode="r")
    clips = [
        CatalogClip(id=f"gen{i}", kind=str(k), captions=["-"], keywords=["-"], path="", duration=float(d))
        for i, (k, d) in enumerate(zip(np.load(folder / "kinds.npy"), np.load(folder / "durations.npy")))
    ]
    qd, qk, kinds = (np.load(cache / f"{x}.npy") for x in ("qd", "qk", "qkinds"))
    r = Retriever(
        Catalog(f"generated{len(clips)}", clips),
        Embedder(),
        embeddings=(desc, kw),
        cache_dir=folder,
        index="exact" if role == "exact" else "ann",
        ann_params=AnnParams(**json.loads(settings)),
    )
    del clips
    out: dict = {"rss_start_mb": start}
    t = time.perf_counter()
    _ = r.joint, r.content_key
    out["vectors_and_key_s"] = time.perf_counter() - t
    if role == "exact":
        r._exact_topk(qd[:8], qk[:8], 5, None, r.alpha)  # warm the threads
    else:
        t = time.perf_counter()
        ann = r.ann  # build: trains, adds and writes (nothing is cached yet); load: maps the files
        out["index_s"] = time.perf_counter() - t
        out["index"] = f"{ann.describe()}; nprobe {ann.params.nprobe}, rerank {ann.params.rerank}"
        out["index_mb"] = ann.nbytes() / 2**20
        r.topk_batch(qd[:8], qk[:8], k=5)
    t = time.perf_counter()
    idx, val = _search(r, qd, qk, kinds, exact=role == "exact")
    out["search_s"] = time.perf_counter() - t  # the first full search (mapped lists: first touches)
    if role == "load":  # the same search twice more: how much of the figure is this machine's load
        out["search_s_repeats"] = []
        for _ in range(2):
            t = time.perf_counter()
            _search(r, qd, qk, kinds, exact=False)
            out["search_s_repeats"].append(time.perf_counter() - t)
    name = {"exact": "exact", "build": "built", "load": "index"}[role]
    np.save(folder / f"{name}_idx.npy", idx)
    np.save(folder / f"{name}_val.npy", val)
    out["peak_rss_mb"] = _status_mb("VmHWM")
    out["rss_end_mb"] = _status_mb("VmRSS")
    out["rss_anon_end_mb"], out["rss_file_end_mb"] = _status_mb("RssAnon"), _status_mb("RssFile")
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        role, folder, cache, settings = sys.argv[2:6]
        print(json.dumps(child(role, Path(folder), Path(cache), settings)), flush=True)
        sys.exit(0)
    quick = "--quick" in sys.argv
    sizes = tuple(int(x) for x in sys.argv[1:] if x != "--quick") or (100_000, 1_000_000)
    print(json.dumps(run(quick, sizes), indent=1))
