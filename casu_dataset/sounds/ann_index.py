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
embedding model, or the vectors' bytes) and the index parameters: a folder with one faiss file per
group (written by faiss.write_index, streamed, no in-memory copy) and its clip ids. Loading maps the
files (faiss IO_FLAG_MMAP): the inverted lists are read from the page cache as searches probe them,
so a 1M-clip index (1.5 GB of fp16 codes) opens in milliseconds instead of being copied into memory.

Memory while building: the IVF is trained on a seeded sample, the vectors are assigned to their
lists in chunks and added in list order, chunk by chunk (one float32 chunk at a time; the vectors
may be a read-only np.memmap), so each list is allocated once at its final size (adding in clip
order grows every list's buffer geometrically, ~1.3x the codes). Within a list the clips stay in
id order, so the index is the same as one `add_with_ids` of all the vectors.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from casu_dataset.core import atomic, cache_layout
from casu_dataset.core.content_key import content_key
from casu_dataset.core.errors import InputError

# Below this many clips exact search is the default (and it is always the reference).
ANN_THRESHOLD = 50_000
STORAGES = {"flat": "Flat", "fp16": "SQfp16", "sq8": "SQ8"}
# 2: nlist rule n / LIST_SIZE (was sqrt(n)), list-order adds, mmap-loaded folder (was one .npz).
# A field of AnnParams, so it keys the index cache and, through Retriever.index_settings, the scene cache.
INDEX_VERSION = 2
LIST_SIZE = 64  # clips per inverted list that nlist=0 aims at (below MAX_AUTO_NLIST lists)
MAX_AUTO_NLIST = 1024  # training costs ~ nlist^2 * train_per_list, assigning n * nlist
ADD_CHUNK = 65536  # vectors per add: one float32 chunk (192 MiB at 768-d) beside the index


MANIFEST = "groups.json"


class AnnUnavailableError(InputError, ImportError):
    """faiss is not installed."""


def require_faiss():
    try:
        import faiss
    except ImportError as err:
        raise AnnUnavailableError(
            f"retrieval: the approximate index needs faiss-cpu (pip install -e '.[ann]'): {err}"
        ) from None
    return faiss


@dataclass(frozen=True)
class AnnParams:
    # inverted lists; 0: the power of two nearest n / LIST_SIZE, from 16 to MAX_AUTO_NLIST. The old
    # sqrt(n) rule gave a 100k set 256 lists of ~310 clips, so a query scanned 1/8 of it (1.03 s for
    # 1,000 queries); lists of ~64 clips scan ~2k (1/32 at 100k), and keep the 12k tests' agreement.
    nlist: int = 0
    # lists scanned per query when every clip is eligible: 16 gave 93-95% top-1 agreement with the
    # exact search on tests/test_ann_index.py's 12k set once the bank grew to 244 clips; 32 gives 98.8-100%
    nprobe: int = 32
    storage: str = "fp16"  # flat | fp16 | sq8: the index's own copy (re-ranking uses float32)
    rerank: int = 64  # proposals per query (per kind) that are re-scored exactly
    train_per_list: int = 40
    niter: int = 10
    seed: int = 0
    version: int = INDEX_VERSION  # the nlist rule and layout (see INDEX_VERSION)

    def __post_init__(self):
        if self.version != INDEX_VERSION:
            raise ValueError(f"retrieval: ann index version {self.version}: only {INDEX_VERSION} is built")
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
        best = max(n / LIST_SIZE, 1)
        return replace(self, nlist=int(min(max(2 ** round(math.log2(best)), 16), MAX_AUTO_NLIST)))


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
        require_faiss()
        key = index_key(content_key, hashlib.sha256("\0".join(groups.tolist()).encode()).hexdigest(), params)
        folder = cache_layout.ann_dir(cache_dir) / f"{name.replace('/', '_')}-{key}"
        if (folder / MANIFEST).is_file():
            return cls.load(folder, params, len(joint))
        ann = cls.build(joint, groups, params)
        ann.save(folder)
        return ann

    def save(self, folder: Path) -> None:
        """One faiss file and one ids file per group, and a manifest, written under a temp name
        and renamed into place: a concurrent reader sees no folder or the whole folder."""
        faiss = require_faiss()
        folder = Path(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        atomic.clean_stale(folder.parent.glob(atomic.TMP_GLOB))  # killed writers' temps
        tmp = atomic.tmp_path(folder)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            for i, (ix, ids) in enumerate(self.parts.values()):
                faiss.write_index(ix, str(tmp / f"index{i}.faiss"))  # streamed to the file
                np.save(tmp / f"ids{i}.npy", ids)
            (tmp / MANIFEST).write_text(json.dumps({"groups": list(self.parts), "n": self.n}))
            atomic.fsync_tree(tmp)
            try:
                os.replace(tmp, folder)
            except OSError:  # another process wrote the same index first: keep its folder
                if not (folder / MANIFEST).is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @classmethod
    def load(cls, folder: Path, params: AnnParams, n: int) -> "AnnIndex":
        """Maps the saved index: faiss reads the inverted lists from the file as searches probe them."""
        faiss = require_faiss()
        folder = Path(folder)
        groups = json.loads((folder / MANIFEST).read_text())["groups"]
        parts = {}
        for i, g in enumerate(groups):
            ix = faiss.read_index(str(folder / f"index{i}.faiss"), faiss.IO_FLAG_MMAP)
            lists = faiss.downcast_InvertedLists(ix.invlists)
            if hasattr(lists, "prefetch_nthread"):  # mapped lists: no prefetch thread pool per search
                lists.prefetch_nthread = 0
            parts[g] = (ix, np.load(folder / f"ids{i}.npy"))
        return cls(parts, params, n)

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


def _build_ivf(joint: np.ndarray, ids: np.ndarray, p: AnnParams, chunk: int = ADD_CHUNK):
    """An IVF index over joint[ids] (ids ascending; `joint` may be a read-only memmap of any float
    dtype): trained on a seeded sample, filled in list order, `chunk` vectors at a time."""
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
    # Each vector's list, in chunks; then the vectors in (list, id) order, so every list's buffer
    # is allocated once (at most one list per chunk boundary grows twice).
    lists = np.empty(len(ids), dtype=np.int64)
    for s in range(0, len(ids), chunk):
        x = np.ascontiguousarray(joint[ids[s : s + chunk]], dtype=np.float32)
        lists[s : s + chunk] = index.quantizer.assign(x, 1)[:, 0]
    order = np.argsort(lists, kind="stable")
    for s in range(0, len(ids), chunk):
        o = order[s : s + chunk]
        x = np.ascontiguousarray(joint[ids[o]], dtype=np.float32)
        xids, xlists = np.ascontiguousarray(ids[o], dtype=np.int64), np.ascontiguousarray(lists[o])
        index.add_core(len(o), faiss.swig_ptr(x), faiss.swig_ptr(xids), faiss.swig_ptr(xlists))
    return index


def index_key(content: str, groups_key: str, params: AnnParams) -> str:
    import faiss

    return content_key([content, groups_key, asdict(params), faiss.__version__], 24)
