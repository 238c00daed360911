"""Approximate candidate search for big catalogs: one faiss IVF index over the joint clip vectors.

Why one index serves every alpha: S = a*qd.cd + (1-a)*qk.ck is the inner product of the query
[a*qd, (1-a)*qk] with the clip's [cd, ck], so an inner-product IVF index over the joint clip
vectors proposes candidates for any alpha (lists are probed by the query's score against their
centroid, the mean clip of the list).

The index only *proposes*: `Retriever` re-scores the proposals exactly (the same float32 bytes as
the exact path) and ranks them by (score desc, clip index asc), so whenever the exact top k are
among the proposals the result, and a seeded draw among near-ties, is the exact one.
Constraints hold exactly: there is one index per clip kind (a kind constraint searches only its
kind's index), and the rest of the mask (duration, exclusions, rejected clips) is a faiss ID
selector, so only clips that satisfy it are proposed; nprobe grows with the share of a kind's
clips the mask removes, so the number of eligible vectors scanned stays about constant. The
Retriever searches a query exactly when fewer than k eligible clips were proposed.

The trained index is cached on disk, keyed on the content it indexes (catalog fingerprint +
embedding model, or the vectors' bytes) and the index parameters.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from casu_dataset.core import atomic, cache_layout
from casu_dataset.core.content_key import content_key
from casu_dataset.core.errors import CasuError

# Below this many clips exact search is the default (and it is always the reference).
ANN_THRESHOLD = 50_000
STORAGES = {"flat": "Flat", "fp16": "SQfp16", "sq8": "SQ8"}


class AnnUnavailable(CasuError, ImportError):
    """faiss is not installed."""


def require_faiss():
    try:
        import faiss
    except ImportError as err:
        raise AnnUnavailable(
            f"retrieval: the approximate index needs faiss-cpu (pip install -e '.[ann]'): {err}"
        ) from None
    return faiss


@dataclass(frozen=True)
class AnnParams:
    nlist: int = 0  # inverted lists; 0: the power of two nearest sqrt(n)
    # lists scanned per query when every clip is eligible: 16 gave 93-95% top-1 agreement with the
    # exact search on tests/test_ann_index.py's 12k set once the bank grew to 244 clips; 32 gives 98.8-100%
    nprobe: int = 32
    storage: str = "fp16"  # flat | fp16 | sq8: the index's own copy (re-ranking uses float32)
    rerank: int = 64  # proposals per query (per kind) that are re-scored exactly
    train_per_list: int = 40
    niter: int = 10
    seed: int = 0

    def __post_init__(self):
        if self.storage not in STORAGES:
            raise ValueError(
                f"retrieval: ann storage {self.storage!r}: expected one of {', '.join(STORAGES)}"
            )
        for f in ("nlist", "nprobe", "rerank", "train_per_list", "niter"):
            if getattr(self, f) < (0 if f == "nlist" else 1):
                raise ValueError(
                    f"retrieval: ann {f} must be >= {0 if f == 'nlist' else 1}, got {getattr(self, f)}"
                )

    def resolved(self, n: int) -> "AnnParams":
        if self.nlist:
            return self
        return replace(self, nlist=int(min(max(2 ** round(math.log2(max(math.sqrt(n), 1))), 16), 65536)))


class AnnIndex:
    """One IVF index per group (clip kind), ids global: a kind constraint costs no filtering."""

    # parts: group -> (faiss IVF index, clip ids); faiss is imported on demand and has no type information
    def __init__(self, parts: dict[str, tuple[Any, np.ndarray]], params: AnnParams, n: int):
        self.parts, self.params, self.n = parts, params, n  # group -> (faiss index, its clip indices)

    @classmethod
    def build(cls, joint: np.ndarray, groups: np.ndarray, params: AnnParams) -> "AnnIndex":
        require_faiss()
        parts = {}
        for g in sorted(set(groups.tolist())):
            ids = np.flatnonzero(groups == g)
            parts[g] = (_build_ivf(joint, ids, params.resolved(len(ids))), ids)
        return cls(parts, params, len(joint))

    @classmethod
    def load_or_build(
        cls,
        joint: np.ndarray,
        groups: np.ndarray,
        content_key: str,
        params: AnnParams,
        cache_dir: str | Path | None,
        name: str = "catalog",
    ) -> "AnnIndex":
        faiss = require_faiss()
        key = index_key(content_key, hashlib.sha256("\0".join(groups.tolist()).encode()).hexdigest(), params)
        path = cache_layout.ann_dir(cache_dir) / f"{name.replace('/', '_')}-{key}.npz"
        if path.is_file():
            with np.load(path) as z:
                names = [str(x) for x in z["groups"]]
                parts = {
                    g: (faiss.deserialize_index(z[f"index{i}"]), z[f"ids{i}"]) for i, g in enumerate(names)
                }
            return cls(parts, params, len(joint))
        ann = cls.build(joint, groups, params)
        arrays: dict[str, np.ndarray] = {"groups": np.array(list(ann.parts))}
        for i, (ix, ids) in enumerate(ann.parts.values()):
            arrays[f"index{i}"], arrays[f"ids{i}"] = faiss.serialize_index(ix), ids
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic.atomic_open(path, "wb") as f:  # a concurrent reader sees no file or the whole file
            # the unpacked names are array names; mypy matches them against savez's allow_pickle too
            np.savez(f, **arrays)  # type: ignore[arg-type]
        return ann

    def describe(self) -> str:
        return ", ".join(
            f"{g}: IVF{ix.nlist},{self.params.storage} ({len(ids)})" for g, (ix, ids) in self.parts.items()
        )

    def nbytes(self) -> int:
        """Bytes of the stored vectors, ids and centroids (what the index holds in memory)."""
        per = {"flat": 4, "fp16": 2, "sq8": 1}[self.params.storage]
        return sum(len(ids) * (ix.d * per + 8) + ix.nlist * ix.d * 4 for ix, ids in self.parts.values())

    def propose(self, q: np.ndarray, r: int, mask: np.ndarray | None = None) -> np.ndarray:
        """(nq, r') clip indices of the nearest eligible clips per query row (-1: none); r' >= r
        when several groups hold eligible clips (each proposes r)."""
        faiss = require_faiss()
        q = np.ascontiguousarray(q, dtype=np.float32)
        bits = None if mask is None else np.packbits(mask.astype(bool), bitorder="little")
        out = []
        for ix, ids in self.parts.values():
            frac = 1.0 if mask is None else float(mask[ids].mean())
            if frac == 0.0:
                continue
            sp = faiss.SearchParametersIVF(nprobe=min(ix.nlist, math.ceil(self.params.nprobe / frac)))
            if mask is not None and frac < 1.0:  # (frac < 1 only with a mask)
                sp.sel = faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(bits))  # `bits` outlives the search
            out.append(ix.search(q, min(r, len(ids)), params=sp)[1])
        return np.concatenate(out, axis=1) if out else np.full((len(q), r), -1, dtype=np.int64)


def _build_ivf(joint: np.ndarray, ids: np.ndarray, p: AnnParams):
    faiss = require_faiss()
    nlist = min(p.nlist, max(1, len(ids) // 4))
    index = faiss.index_factory(
        joint.shape[1], f"IVF{nlist},{STORAGES[p.storage]}", faiss.METRIC_INNER_PRODUCT
    )
    index.cp.niter, index.cp.seed = p.niter, p.seed
    index.cp.max_points_per_centroid = p.train_per_list
    index.cp.min_points_per_centroid = 1  # small groups: no "too few points" warning
    # A seeded sample: the same catalog and params train the same centroids.
    rng = np.random.default_rng(p.seed)
    m = min(len(ids), nlist * p.train_per_list)
    sample = ids if m == len(ids) else np.sort(rng.choice(ids, m, replace=False))
    index.train(np.ascontiguousarray(joint[sample], dtype=np.float32))
    for s in range(0, len(ids), 65536):  # in blocks: no second full copy of the vectors
        index.add_with_ids(
            np.ascontiguousarray(joint[ids[s : s + 65536]], dtype=np.float32), ids[s : s + 65536]
        )
    return index


def index_key(content: str, groups_key: str, params: AnnParams) -> str:
    import faiss

    return content_key([content, groups_key, asdict(params), faiss.__version__], 24)
