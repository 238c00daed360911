"""Retrieval speed: 1,000 queries against the embedded bank and against 100,000 synthetic
candidates, vectorised (one GEMM + topk) vs a plain Python loop over candidates.

Synthetic candidates are real MiniLM embeddings of bank captions/keywords plus Gaussian
noise, renormalised, so they sit where real text embeddings sit. Query embeddings are real
(the shipped query set, cycled to 1,000). Embedding time is reported apart: the target is
the search after embeddings are cached.
"""

from __future__ import annotations

import gc
import json
import time

import numpy as np
import psutil

from casu_dataset.sounds.catalog import Catalog, CatalogClip
from casu_dataset.sounds.retrieval import Retriever
from casu_dataset.sounds.retrieval_eval import load_queries


def _rss() -> float:
    return psutil.Process().memory_info().rss / 2**20


def synthetic(bank: Retriever, n: int, rng) -> Retriever:
    pick = rng.integers(0, len(bank.catalog), n)

    def noisy(m):
        x = m[pick] + rng.normal(0, 0.03, (n, m.shape[1])).astype(np.float32)
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    clips = [
        CatalogClip(
            id=f"syn{i}",
            kind=bank.catalog.clips[p].kind,
            captions=["x"],
            keywords=["x"],
            path="",
            duration=bank.catalog.clips[p].duration,
        )
        for i, p in enumerate(pick)
    ]
    return Retriever(
        Catalog("synthetic", clips),
        bank.embedder,
        alpha=bank.alpha,
        embeddings=(noisy(bank.desc), noisy(bank.kw)),
    )


def python_loop(r: Retriever, qd, qk, k=5) -> list[list[int]]:
    out = []
    a = r.alpha
    for q_d, q_k in zip(qd, qk):
        scores = []
        for i in range(len(r.catalog)):
            scores.append(a * float(np.dot(q_d, r.desc[i])) + (1 - a) * float(np.dot(q_k, r.kw[i])))
        out.append(sorted(range(len(scores)), key=scores.__getitem__, reverse=True)[:k])
    return out


def run(quick: bool = False) -> dict:
    n_queries, n_cand, loop_queries = (100, 5_000, 2) if quick else (1000, 100_000, 3)
    rng = np.random.default_rng(0)
    bank = Retriever(Catalog.embedded())
    qs = load_queries()
    qs = [qs[i % len(qs)] for i in range(n_queries)]
    t = time.perf_counter()
    qd, qk = bank.encode_queries([q["description"] for q in qs], [q["keywords"] for q in qs])
    res = {"query_embedding_s": time.perf_counter() - t}
    for name, r in [("bank", bank)]:
        t = time.perf_counter()
        idx, _ = r.topk_batch(qd, qk, k=5, mask=r.mask(kind="event"))
        res[f"{name}_search_s"] = time.perf_counter() - t
        res[f"{name}_candidates"] = len(r.catalog)
    gc.collect()
    before = _rss()
    syn = synthetic(bank, n_cand, rng)
    res["synthetic_index_mb"] = syn.joint.nbytes / 2**20
    syn.topk_batch(qd[:8], qk[:8], k=5)  # warm the threads
    t = time.perf_counter()
    idx, _ = syn.topk_batch(qd, qk, k=5, mask=syn.mask(kind="event"))
    res["synthetic_search_s"] = time.perf_counter() - t
    res["synthetic_peak_rss_delta_mb"] = _rss() - before
    res["synthetic_candidates"] = n_cand
    t = time.perf_counter()
    idx_nomask, _ = syn.topk_batch(qd, qk, k=5)
    res["synthetic_search_nomask_s"] = time.perf_counter() - t
    # Baseline: a plain Python loop over candidates for a few queries, per-query time scaled.
    t = time.perf_counter()
    loop = python_loop(syn, qd[:loop_queries], qk[:loop_queries])
    per_q = (time.perf_counter() - t) / loop_queries
    res["python_loop_s_per_query"] = per_q
    res["python_loop_est_s_1000q"] = per_q * n_queries
    res["ratio_vectorised_vs_loop"] = per_q * n_queries / res["synthetic_search_nomask_s"]
    res["loop_agrees_with_vectorised_top1"] = all(
        lp[0] == int(i[0]) for lp, i in zip(loop, idx_nomask[:loop_queries])
    )
    return res


if __name__ == "__main__":
    import sys

    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))
