"""`python -m harness --model NAME --tasks all ...` (and `list`, `validate`, `push`)."""
from __future__ import annotations

import argparse
import os
import sys

EXIT_OK, EXIT_USAGE, EXIT_MODEL, EXIT_SAMPLE_ERRORS = 0, 2, 3, 4


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness",
        description="Evaluate an audio language model on CASU tasks. Subcommands: list, validate, table, "
                    "push (`python -m harness list`).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", required=True, help="adapter name (see `python -m harness list`)")
    p.add_argument("--model_args", default="", help="k=v,k2=v2 passed to the adapter, e.g. pretrained=PATH,dtype=bfloat16")
    p.add_argument("--tasks", default="all", help="all, a tag (casu), or a comma list of task names")
    p.add_argument("--include_path", action="append", default=None, help="extra folder of task YAMLs (repeatable)")
    p.add_argument("--dataset", default="casu_mini", help="a built dataset folder or a Hub dataset repo id")
    p.add_argument("--batch_size", type=int, default=1, help="requests per model call (results do not depend on it)")
    p.add_argument("--limit", type=int, default=None,
                   help="first N samples per task (whole contrast families only, at least one); for quick checks or a documented subset")
    p.add_argument("--output_path", default="results", help="folder for results JSON, sample logs, tables, plots")
    p.add_argument("--log_samples", action="store_true", help="write every sample's prompt, output and score as JSONL")
    p.add_argument("--seed", type=int, default=0, help="seeds masking noise, bootstrap and random baselines")
    p.add_argument("--conditions", default="full",
                   help="layer conditions: full, all (the 8 subsets of table 2) or names such as PEB,P__,_E_")
    p.add_argument("--scene_hint", action="store_true", help='prepend "This audio is recorded in a [place]." (table 3)')
    p.add_argument("--scoring", choices=["auto", "generate", "loglikelihood"], default="auto",
                   help="multiple choice by parsing generated text or by option log-likelihood; auto = the "
                        "adapter's preference")
    p.add_argument("--circular", action="store_true", help="CircularEval: ask each question with the options rotated "
                                                           "4 times; correct only if all are")
    p.add_argument("--judge", default=None, help="LLM judge for unparsed answers and Event Match: 'local' (SmolLM2) or "
                                                 "'openai' (CASU_LLM_BASE_URL/CASU_LLM_MODEL)")
    p.add_argument("--bert_model", default=None, help="BERTScore model path (default: local all-MiniLM-L6-v2)")
    p.add_argument("--cache", default=None, help="response cache file (default: <output_path>/cache.sqlite); 'off' "
                                                 "to disable")
    p.add_argument("--no_probe", action="store_true", help="skip the audio sanity probe")
    p.add_argument("--device", default=None, help="device for the adapter (cpu, cuda, cuda:1); adds device=... to "
                                                  "--model_args")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _judge(name):
    if not name:
        return None
    from casu_dataset.llm.backends import LocalBackend, OpenAIBackend
    if name == "local":
        return LocalBackend()
    if name == "openai":
        return OpenAIBackend()
    raise SystemExit(f"--judge {name!r}: use 'local' or 'openai'")


def cmd_run(argv: list[str]) -> int:
    args = _run_parser().parse_args(argv)
    from casu_dataset.llm.cache import ResponseCache
    from model_adapters.base import AdapterError, parse_model_args
    from model_adapters.registry import make_adapter

    from .conditions import parse_conditions
    from .data import CasuData, DatasetError
    from .evaluate import EvalOptions, evaluate
    from .metrics import JudgeEventMatcher
    from .parsing import LLMJudge
    from .results import document, table1, write_outputs
    from .runner import distributed_state
    from .task_config import TaskConfigError, load_tasks, select_tasks
    try:
        tasks = select_tasks(args.tasks, load_tasks(args.include_path))  # checked before any model loads
        conditions = parse_conditions(args.conditions)
        model_args = parse_model_args(args.model_args)
    except (TaskConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    if args.batch_size < 1:
        print("error: --batch_size must be >= 1", file=sys.stderr)
        return EXIT_USAGE
    if args.device:
        model_args["device"] = args.device
    from .data import is_local
    if is_local(args.dataset) and not os.path.isdir(os.path.expanduser(args.dataset)):
        print(f"error: --dataset {args.dataset}: no such folder (build one with `python -m casu_dataset build "
              f"--out {args.dataset}`, or give a Hub repo id ORG/NAME)", file=sys.stderr)
        return EXIT_USAGE
    data = CasuData(args.dataset, seed=args.seed)
    try:  # the data each task reads is checked before any model loads
        for t in tasks:
            data.check(t)
    except DatasetError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    try:
        adapter = make_adapter(args.model, model_args)
    except (AdapterError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_MODEL
    backend = _judge(args.judge)
    os.makedirs(args.output_path, exist_ok=True)
    from .outputs import clean_stale
    for f in clean_stale(args.output_path):
        print(f"removed {f} (left by a killed run)", file=sys.stderr)
    cache = None if args.cache == "off" else ResponseCache(args.cache or os.path.join(args.output_path, "cache.sqlite"))
    opts = EvalOptions(conditions=conditions, batch_size=args.batch_size, limit=args.limit, scene_hint=args.scene_hint,
                       scoring=args.scoring, circular=args.circular, seed=args.seed, probe=not args.no_probe,
                       judge=LLMJudge(backend) if backend else None,
                       event_matcher=JudgeEventMatcher(backend) if backend else None,
                       bert_model=args.bert_model, progress=not args.quiet)
    if args.quiet:
        import datasets
        datasets.disable_progress_bars()
    try:
        ev = evaluate(adapter, tasks, data, opts, cache)
    except AdapterError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_MODEL
    except DatasetError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    dist = distributed_state()
    if dist is not None and not dist.is_main_process:
        return EXIT_OK if not ev["errors"] else EXIT_SAMPLE_ERRORS
    model = {"name": args.model, "args": model_args, "info": adapter.info(), "fingerprint": adapter.fingerprint}
    config = {"tasks": [t.task for t in tasks], "task_versions": {t.task: t.version for t in tasks},
              "conditions": [c.name for c in conditions], "scene_hint": args.scene_hint, "scoring": args.scoring,
              "circular": args.circular, "batch_size": args.batch_size, "limit": args.limit, "seed": args.seed,
              "judge": backend.fingerprint if backend else None,
              "world_size": int(os.environ.get("WORLD_SIZE", "1"))}
    doc = document(ev, model, config, {"path": args.dataset})
    path = write_outputs(doc, ev["samples"] if args.log_samples else None, args.output_path)
    probe = ev["audio_probe"]
    if probe.get("status") == "unchanged":
        print("\n" + "!" * 78 + "\nWARNING: the audio probe got the same outputs with real, silent and swapped audio.\n"
              "The audio is probably NOT reaching the model (check the adapter and its processor).\n" + "!" * 78,
              file=sys.stderr)
    print(table1(doc))
    t = ev["timing"]
    print(f"\nresults: {path}  ({t['units']} requests, {t['cache_hits']} from cache, model {t['model_s']:.1f} s, "
          f"harness overhead {t['overhead_ms_per_unit']:.2f} ms/request)")
    n = ev["evaluated"]
    rows = sum(c["rows"] for c in n["per_task"].values())
    cut = f" (--limit: {n['samples']} of {rows} rows)" if n["samples"] != rows else ""
    print(f"evaluated {n['requests']} requests over {n['samples']} samples from {args.dataset} "
          f"(fingerprint {ev['dataset_fingerprint']}){cut}")
    if ev["errors"]:
        print(f"{len(ev['errors'])} sample(s) failed; first: {ev['errors'][0]['id']}: {ev['errors'][0]['error']}",
              file=sys.stderr)
        return EXIT_SAMPLE_ERRORS
    return EXIT_OK


def cmd_list(argv: list[str]) -> int:
    from model_adapters.registry import adapter_names, describe

    from .conditions import ALL
    from .task_config import load_tasks
    tasks = load_tasks()
    print("tasks:")
    for name, t in tasks.items():
        print(f"  {name:28s} v{t.version}  {t.output_type:16s} {t.description}")
    print("models:")
    for n in adapter_names():
        print(f"  {n:28s} {describe(n)}")
    print("conditions (P speech, E events, B background; _ = replaced by loudness-matched noise):")
    print("  " + "  ".join(c.name for c in ALL) + "   (full = PEB, all = the eight)")
    return EXIT_OK


def cmd_validate(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m harness validate", description="check task YAMLs")
    p.add_argument("paths", nargs="*", help="YAML files or folders (default: tasks/)")
    p.add_argument("--dataset", default=None, help="also check each task's config, split and columns in this "
                                                   "built dataset folder or Hub repo")
    a = p.parse_args(argv)
    from pathlib import Path

    from .data import CasuData, DatasetError
    from .task_config import DEFAULT_TASKS_DIR, TaskConfigError, load_task, load_tasks
    data = CasuData(a.dataset) if a.dataset else None
    bad = 0
    for t in [Path(x) for x in a.paths] or [DEFAULT_TASKS_DIR]:
        try:
            cfgs = load_tasks([t]) if t.is_dir() else {"": load_task(t)}
        except TaskConfigError as err:
            print(f"bad {err}", file=sys.stderr)
            bad += 1
            continue
        for cfg in cfgs.values():
            try:
                if data is not None:
                    data.check(cfg)
                    data.samples(cfg.dataset_config, cfg.split)  # every row parses (answers, audio)
                print(f"ok  {cfg.task}")
            except DatasetError as err:
                print(f"bad {cfg.task}: {err}", file=sys.stderr)
                bad += 1
    return EXIT_USAGE if bad else EXIT_OK


def cmd_push(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m harness push", description="publish results to a Hub dataset")
    p.add_argument("--repo", required=True, help="results dataset ORG/NAME")
    p.add_argument("--output_path", default="results", help="folder the evaluation wrote")
    p.add_argument("--dataset_id", default="casu/casu", help="the benchmark's Hub dataset id for .eval_results")
    p.add_argument("--dry_run", action="store_true", help="print the operations without uploading")
    a = p.parse_args(argv)
    from .push import PushError, push
    try:
        out = push(a.output_path, a.repo, a.dataset_id, token=os.environ.get("HF_TOKEN"), dry_run=a.dry_run)
    except PushError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    for f, why in out["skipped"]:
        print(f"skipped {f}: {why}", file=sys.stderr)
    print(("would upload" if a.dry_run else "uploaded") + f" to datasets/{a.repo}:")
    for o in out["operations"]:
        print(f"  {o}")
    print("\n.eval_results/casu.yaml for a model card:\n" + out["eval_results_yaml"])
    return EXIT_OK


def cmd_table(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m harness table",
                                description="table 1 over every model's newest results in a folder")
    p.add_argument("output_path", nargs="?", default="results")
    a = p.parse_args(argv)
    from .results import latest_documents, table1
    skipped: list = []
    docs = latest_documents(a.output_path, skipped) if os.path.isdir(a.output_path) else []
    for f, why in skipped:
        print(f"skipped {f}: {why}", file=sys.stderr)
    if not docs:
        print(f"error: {a.output_path}: no complete results_*.json found", file=sys.stderr)
        return EXIT_USAGE
    print(table1(*docs))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmds = {"list": cmd_list, "validate": cmd_validate, "push": cmd_push, "run": cmd_run, "table": cmd_table}
    if argv and argv[0] in cmds:
        return cmds[argv[0]](argv[1:])
    return cmd_run(argv)


if __name__ == "__main__":
    sys.exit(main())
