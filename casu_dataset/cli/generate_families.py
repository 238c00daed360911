"""`python -m casu_dataset generate --families N`: backends, panel and outputs from the CLI flags."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter

from casu_dataset.agents.families import bank_types, make_briefs, prompt_kind
from casu_dataset.agents.panel import Panel, generate_families, write_outputs
from casu_dataset.contract import mcq_tasks
from casu_dataset.core import cache_layout


class KindCounter:
    """Counts the requests that reach the backend (cache misses), by agent or critic kind."""

    def __init__(self, backend):
        self.backend = backend
        self.fingerprint = backend.fingerprint
        self.counts: Counter = Counter()
        self._lock = threading.Lock()

    def complete(self, messages, **kw) -> str:
        with self._lock:
            self.counts[prompt_kind(messages) or "other"] += 1
        return self.backend.complete(messages, **kw)


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def generate_main(args) -> int:
    from casu_dataset.core.llm.backends import (
        BackendError,
        LocalBackend,
        OpenAIBackend,
        Tuned,
    )
    from casu_dataset.core.llm.cache import CachedBackend, ResponseCache
    from casu_dataset.sounds.catalog import Catalog

    if args.families < 1:
        return _fail(f"--families {args.families}: must be >= 1")
    if args.concurrency < 1:
        return _fail(f"--concurrency {args.concurrency}: must be >= 1")
    if not 1 <= args.m <= args.k:
        return _fail(f"--k {args.k} --m {args.m}: need 1 <= m <= k")
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    bad = [t for t in tasks if t not in mcq_tasks()]
    if bad or not tasks:
        return _fail(f"--tasks {args.tasks!r}: unknown {bad or 'empty'} (tasks: {', '.join(mcq_tasks())})")
    critic_models = [m for spec in (args.critic_llm_model or []) for m in spec.split(",") if m.strip()]
    slots: dict[str, threading.Semaphore] = {}  # one request budget per server

    def make(model, base_url):
        if args.backend == "local":
            return LocalBackend(model or "smollm2")
        b = OpenAIBackend(base_url, model, concurrency=args.concurrency)
        b.slots = slots.setdefault(b.base_url, b.slots)
        return b

    try:
        writer_raw = make(args.llm_model, args.base_url)
        critic_raws = [make(m, args.critic_base_url or args.base_url) for m in critic_models] or [writer_raw]
    except BackendError as err:
        return _fail(str(err))
    cache_dir = cache_layout.cache_root(args.cache)
    cache = ResponseCache(cache_layout.llm_responses_file(cache_dir))
    counted = {id(b): KindCounter(b) for b in [writer_raw, *critic_raws]}
    cached = {i: CachedBackend(c, cache) for i, c in counted.items()}
    writer = Tuned(cached[id(writer_raw)], temperature=0.0, max_tokens=args.max_tokens)
    critics = [
        Tuned(
            cached[id(critic_raws[j % len(critic_raws)])],
            temperature=args.critic_temperature,
            max_tokens=args.max_tokens,
        )
        for j in range(args.k)
    ]
    catalog = Catalog.embedded()
    retriever = None
    if args.retrieval:
        from casu_dataset.sounds.retrieval import Retriever

        retriever = Retriever(catalog, cache_dir=cache_dir)
    panel = Panel(critics, args.m, retries=args.retries, retriever=retriever)
    briefs = make_briefs(args.families, args.seed, args.place, args.shape, args.speech_type)

    def progress(r):
        print(
            f"{r['id']} ({r['brief']['shape']}): {r['status']}"
            + (f" - {r['reason'][:200]}" if r["reason"] else ""),
            flush=True,
        )

    t = time.perf_counter()
    rows = generate_families(
        writer, panel, briefs, bank_types(catalog), tasks, args.retries, args.concurrency, progress
    )
    calls = sum((c.counts for c in counted.values()), Counter())
    meta = {
        "settings": {
            "backend": args.backend,
            "writer": writer_raw.fingerprint,
            "critics": [b.fingerprint for b in critic_raws],
            "k": args.k,
            "m": args.m,
            "tasks": tasks,
            "retries": args.retries,
            "seed": args.seed,
            "concurrency": args.concurrency,
            "critic_temperature": args.critic_temperature,
            "retrieval": bool(args.retrieval),
        },
        "cache": {"hits": cache.hits, "misses": cache.misses},
        "backend_calls_by_kind": dict(sorted(calls.items())),
        "seconds": round(time.perf_counter() - t, 1),
    }
    report = write_outputs(args.out, rows, meta)
    kept = sum(r["status"] == "kept" for r in rows)
    print(
        f"wrote {args.out} ({kept} of {len(rows)} families kept) and {report}; backend calls "
        f"{sum(calls.values())}, cache hits {cache.hits}"
    )
    return 0
