"""Precision@k of matching-score retrieval on a query file, across values of alpha.

Query file: TSV rows `description<TAB>keywords (comma-separated)<TAB>kind<TAB>expected type`,
'#' lines are comments. A retrieved clip is relevant when its `type` equals the expected type.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from casu_dataset.sounds.retrieval import Retriever

DEFAULT_QUERIES = Path(__file__).parent / "data" / "retrieval_queries.tsv"


def load_queries(path: str | Path = DEFAULT_QUERIES) -> list[dict]:
    rows = []
    for i, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 4:
            raise ValueError(f"{path}: line {i}: expected 4 tab-separated fields, got {len(parts)}")
        desc, kws, kind, typ = (p.strip() for p in parts)
        if kind not in ("background", "event"):
            raise ValueError(f"{path}: line {i}: kind {kind!r} is not background or event")
        rows.append(
            {
                "description": desc,
                "keywords": [k.strip() for k in kws.split(",") if k.strip()],
                "kind": kind,
                "type": typ,
            }
        )
    return rows


def evaluate(
    retriever: Retriever, queries: list[dict], alphas=(0.0, 0.25, 0.5, 0.75, 1.0), k: int = 5
) -> list[dict]:
    qd, qk = retriever.encode_queries([q["description"] for q in queries], [q["keywords"] for q in queries])
    types = np.array([c.type for c in retriever.catalog.clips])
    out = []
    for a in alphas:
        p1, pk, hit = [], [], []
        for kind in ("background", "event"):
            sel = [i for i, q in enumerate(queries) if q["kind"] == kind]
            if not sel:
                continue
            idx, _ = retriever.topk_batch(qd[sel], qk[sel], k=k, mask=retriever.mask(kind=kind), alpha=a)
            for row, i in zip(idx, sel):
                rel = types[row] == queries[i]["type"]
                p1.append(rel[0])
                pk.append(rel.mean())
                hit.append(rel.any())
        out.append(
            {
                "alpha": a,
                "p@1": float(np.mean(p1)),
                f"p@{k}": float(np.mean(pk)),
                f"hit@{k}": float(np.mean(hit)),
                "n": len(p1),
            }
        )
    return out


def format_table(rows: list[dict]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        lines.append(
            "| " + " | ".join(f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k]) for k in keys) + " |"
        )
    return "\n".join(lines)
