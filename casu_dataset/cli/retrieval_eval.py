"""`retrieval-eval`: precision@1/@5 of retrieval on a query file."""

from __future__ import annotations

from casu_dataset.cli.common import dashed_flag, float_in


def _alphas(text: str) -> list[float]:
    return [float_in(0.0, 1.0)(a) for a in text.split(",") if a.strip()]


def add(sub) -> None:
    p = sub.add_parser("retrieval-eval", help="precision@1/@5 of retrieval on a query file")
    p.add_argument("--queries", default=None, help="TSV query file (default: the shipped 160 queries)")
    p.add_argument(
        "--alphas", type=_alphas, default="0,0.25,0.5,0.6,0.75,1", help="comma list of alphas in 0..1"
    )
    p.add_argument("--cache", default=None)
    p.add_argument("--embedding-model", default=None)
    p.set_defaults(fn=run, flag=dashed_flag)


def run(args) -> int:
    from casu_dataset.sounds.catalog import Catalog
    from casu_dataset.sounds.retrieval import Embedder, Retriever
    from casu_dataset.sounds.retrieval_eval import (
        DEFAULT_QUERIES,
        evaluate,
        format_table,
        load_queries,
    )

    r = Retriever(Catalog.embedded(), Embedder(args.embedding_model), cache_dir=args.cache)
    queries = load_queries(args.queries or DEFAULT_QUERIES)
    print(
        f"{len(queries)} queries against {r.catalog.name} ({len(r.catalog)} clips), model "
        f"{r.embedder.model_name}"
    )
    print(format_table(evaluate(r, queries, args.alphas)))
    return 0
