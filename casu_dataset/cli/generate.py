"""`generate`: the LLM agent pipeline (contrast families with --families N, or v1 scenes)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from casu_dataset.cli.common import error
from casu_dataset.contract import AGENT_DEFAULT_TASKS


def add(sub) -> None:
    p = sub.add_parser(
        "generate",
        help="LLM agent pipeline: contrast families (--families N) or v1 scenes, checked by a critic panel",
    )
    p.add_argument(
        "--families",
        type=int,
        default=None,
        help="write N contrast families (FAMILIES.md YAML at --out, votes in OUT.report.json)",
    )
    p.add_argument(
        "--place",
        action="append",
        default=None,
        help="place of the scene (repeat for several; families: default a built-in list)",
    )
    p.add_argument(
        "--shape", default="mixed", choices=["slot", "crossed", "mixed"], help="family shape (--families)"
    )
    p.add_argument(
        "--tasks",
        default=",".join(AGENT_DEFAULT_TASKS),
        help="comma-separated tasks, one question each per family (--families)",
    )
    p.add_argument("--n", type=int, default=1, help="v1 scenes to generate (without --families)")
    p.add_argument("--speech-type", default="mixed", choices=["monologue", "conversation", "mixed"])
    p.add_argument(
        "--backend",
        default="local",
        choices=["local", "openai"],
        help="local: a transformers model (default SmolLM2-135M); openai: any OpenAI-compatible server",
    )
    p.add_argument("--llm-model", default=None, help="model name or path (openai: also CASU_LLM_MODEL)")
    p.add_argument(
        "--base-url",
        default=None,
        help="OpenAI-compatible base URL (or CASU_LLM_BASE_URL); key from CASU_LLM_API_KEY",
    )
    p.add_argument("--k", type=int, default=3, help="critics in the panel")
    p.add_argument("--m", type=int, default=2, help="critics that must agree with the proposed key")
    p.add_argument("--retries", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--critic-llm-model",
        action="append",
        default=None,
        help="critic model(s), comma-separated or repeated; seat j uses model j mod count "
        "(default: the writer's model)",
    )
    p.add_argument(
        "--critic-base-url",
        default=None,
        help="OpenAI-compatible base URL of the critics (default --base-url)",
    )
    p.add_argument(
        "--critic-temperature",
        type=float,
        default=0.7,
        help="critics sample, so seats that share a model vote independently",
    )
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight per server (--families)")
    p.add_argument(
        "--max-tokens", type=int, default=None, help="cap on every reply's tokens (default: per agent)"
    )
    p.add_argument(
        "--retrieval",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="check that each fill retrieves its bank type (--families)",
    )
    p.add_argument(
        "--out",
        required=True,
        help="families: YAML file (+ OUT.report.json); v1: JSON file of scenes, "
        "kept/rejected questions and votes",
    )
    p.add_argument("--cache", default=None, help="folder of the LLM response cache (resume after a kill)")
    p.set_defaults(fn=run)


def run(args) -> int:
    from casu_dataset.core.llm.backends import BackendError

    try:
        return _generate(args)
    except BackendError as err:  # the message says what a rerun does: replies received are cached
        raise BackendError(
            f"generate: the LLM server refused the requests or kept failing (replies received "
            f"stay cached; rerun to resume): {err}"
        ) from err


def _generate(args) -> int:
    """Agent pipeline: contrast families (--families N; casu_dataset/agents/README.md), or v1
    scenes (--n): script agent -> narrator -> questions -> critic panel."""
    if args.families is not None:
        from casu_dataset.cli.generate_families import generate_main

        return generate_main(args)
    if not args.place:
        error("--place is required without --families")
        return 2
    args.place = args.place[0]
    from casu_dataset.agents.pipeline import run_pipeline
    from casu_dataset.core.cache_layout import llm_responses_file
    from casu_dataset.core.llm.backends import LocalBackend, OpenAIBackend
    from casu_dataset.core.llm.cache import CachedBackend, ResponseCache
    from casu_dataset.sounds.catalog import Catalog

    inner: LocalBackend | OpenAIBackend
    if args.backend == "local":
        inner = LocalBackend(args.llm_model or "smollm2")
    else:
        inner = OpenAIBackend(args.base_url, args.llm_model)
    backend = CachedBackend(inner, ResponseCache(llm_responses_file(args.cache)))
    cat = Catalog.embedded()
    types = {k: sorted({c.type for c in cat.clips if c.kind == k}) for k in ("background", "event")}
    out = []
    for i in range(args.n):
        sid = f"gen_{args.place.replace(' ', '_')}_{args.seed}_{i}"
        speech = args.speech_type if args.speech_type != "mixed" else ("monologue", "conversation")[i % 2]
        r = run_pipeline(backend, sid, args.place, types, speech, k=args.k, m=args.m, retries=args.retries)
        out.append({"id": sid, **r.to_dict()})
        print(
            f"{sid}: script {'ok' if r.script else 'failed'}, kept {len(r.kept)}, rejected "
            f"{len(r.rejected)}, failures {len(r.failures)}"
        )
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}; cache hits {backend.cache.hits}, misses {backend.cache.misses}")
    return 0
