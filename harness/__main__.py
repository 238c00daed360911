"""`python -m harness --model NAME --tasks all ...` (and `list`, `validate`, `push`)."""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys

EXIT_OK, EXIT_USAGE, EXIT_MODEL, EXIT_SAMPLE_ERRORS, EXIT_HUB = 0, 2, 3, 4, 5
EXIT_CODES = """exit codes:
  0  success
  2  bad input: a flag, a --model_args value, a task YAML, the dataset, --cache or --output_path
     (the message names which and why); checked before any model loads
  3  the model cannot be loaded or run (unknown --model, missing weights, arguments the adapter refuses,
     an API that refuses the key or model), or more than 25% of at least 20 requests failed (the
     answers received are cached: rerun to resume)
  4  the run finished but some samples failed (listed in the results; the first is printed); they are
     not cached, so the same command again retries only them
  5  push / pr-eval-results, or a run with --hf_hub_log_args push_results_to_hub=true: the Hub could not
     be reached (offline, HF_HUB_OFFLINE=1, no route) or refused the upload (token, permissions, missing
     repo); one line says which (after a run: the results stay on disk, and the line gives the
     `python -m harness push ...` command that sends them)
  6  a resource ran out: no space left, a file size limit, too long a path, no permission, no memory
     (one line names the path; answers already received stay cached)"""


def _error(msg) -> None:
    """One error line on stderr, with any API key or token in it redacted."""
    from casu_dataset.core.redact import redact

    print(f"error: {redact(msg)}", file=sys.stderr)


def _int_at_least(lo: int):
    """argparse type: an integer >= lo (argparse names the flag in its error)."""

    def conv(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {v}")
        return v

    return conv


def _limit(text: str):
    from harness.flags import parse_limit

    try:
        return parse_limit(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--limit ")) from None


def _batch_size(text: str):
    return "auto" if text == "auto" else _int_at_least(1)(text)


def _set_verbosity(level: str) -> None:
    from harness.api import set_verbosity

    set_verbosity(level)
    from casu_dataset.core.redact import guard_logging

    guard_logging()  # never the HTTP clients' raw headers and bodies, at any verbosity


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


from harness.flags import AUTO_CPU_BATCH, AUTO_CUDA_START  # noqa: E402 - the help text names them


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness",
        description="Evaluate an audio language model on CASU tasks. Subcommands: list, validate, table, "
        "push, pr-eval-results (`python -m harness list`).",
        epilog=EXIT_CODES,
        formatter_class=_HelpFormatter,
    )
    p.add_argument("--model", default=None, help="adapter name (see `python -m harness list`); required")
    p.add_argument(
        "--model_args",
        default="",
        help="k=v,k2=v2 passed to the adapter, e.g. pretrained=PATH,dtype=bfloat16",
    )
    p.add_argument(
        "--tasks",
        default="all",
        help="all, a tag (casu), or a comma list of task names; 'list' prints the tasks and exits",
    )
    p.add_argument(
        "--include_path",
        action="append",
        default=None,
        help="extra folder of task YAMLs, added to the built-in tasks (repeatable)",
    )
    p.add_argument("--dataset", default="casu_mini", help="a built dataset folder or a Hub dataset repo id")
    p.add_argument(
        "--robustness_dataset",
        default=None,
        metavar="DATASET",
        help="the second realization of --dataset (`python -m casu_dataset build --realization 2`: the "
        "same questions, other recordings of the same sound types): the model is evaluated on both and "
        "each task gets recording_consistency, the share of contrast families answered the same on both "
        "(with each realization's family accuracy)",
    )
    p.add_argument(
        "--batch_size",
        type=_batch_size,
        default=1,
        help="requests per model call, or 'auto': the largest that fits (CUDA: starts at "
        f"{AUTO_CUDA_START} and halves on out-of-memory; CPU/API: {AUTO_CPU_BATCH}); results do not "
        "depend on it",
    )
    p.add_argument(
        "--limit",
        type=_limit,
        default=None,
        help="first N samples per task, or a fraction in (0, 1) of each task (whole contrast families "
        "only, at least one); for quick checks only: the run is marked limited and cannot be pushed",
    )
    p.add_argument(
        "--gen_kwargs",
        default="",
        help="k=v,... merged over each task's generation settings (max_new_tokens, do_sample, temperature)",
    )
    p.add_argument(
        "--hf_hub_log_args",
        default="",
        help="lm-eval's k=v,... for the Hub: hub_results_org, results_repo_name, public_repo, ... "
        "(recorded with the results; `push` uses them when --repo / --public are not given)",
    )
    p.add_argument(
        "--verbosity",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        default="WARNING",
        help="log level of the harness and the libraries it calls",
    )
    p.add_argument(
        "--output_path", default="results", help="folder for results JSON, sample logs, tables, plots"
    )
    p.add_argument(
        "--log_samples", action="store_true", help="write every sample's prompt, output and score as JSONL"
    )
    p.add_argument(
        "--seed", type=_int_at_least(0), default=0, help="seeds masking noise, bootstrap and random baselines"
    )
    p.add_argument(
        "--conditions",
        default="full",
        help="layer conditions: full, all (the 8 subsets of table 2) or names such as PEB,P__,_E_",
    )
    p.add_argument(
        "--scene_hint", action="store_true", help='prepend "This audio is recorded in a [place]." (table 3)'
    )
    p.add_argument(
        "--scoring",
        choices=["auto", "generate", "loglikelihood"],
        default="auto",
        help="multiple choice by parsing generated text or by option log-likelihood; auto = the "
        "adapter's preference",
    )
    p.add_argument(
        "--circular",
        action="store_true",
        help="CircularEval: ask each question with the options rotated 4 times; correct only if all are",
    )
    p.add_argument(
        "--judge",
        default=None,
        help="LLM judge for unparsed answers and Event Match: 'local' (SmolLM2) or "
        "'openai' (CASU_LLM_BASE_URL/CASU_LLM_MODEL)",
    )
    p.add_argument(
        "--bert_model", default=None, help="BERTScore model path (default: local all-MiniLM-L6-v2)"
    )
    p.add_argument(
        "--cache",
        default=None,
        help="response cache file (default: <output_path>/cache.sqlite); 'off' to disable",
    )
    p.add_argument("--no_probe", action="store_true", help="skip the audio sanity probe")
    p.add_argument(
        "--device",
        default=None,
        help="device for the adapter (cpu, cuda, cuda:1); adds device=... to "
        "--model_args; a GPU that is not there is exit 2 before "
        "anything loads",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--system_instruction",
        default=None,
        metavar="TEXT",
        help="lm-eval's: the system turn of every request (it replaces an adapter's default system "
        "prompt, e.g. Qwen2.5-Omni's); recorded, and part of the response cache key",
    )
    p.add_argument(
        "--apply_chat_template",
        nargs="?",
        const=True,
        default=None,
        metavar="NAME",
        help="lm-eval's: without a value the model's default chat template, with a NAME one of its named "
        "templates (an unknown NAME lists those there are). The audio LMs (their audio placeholder "
        "comes from it), the cascade/blind reasoners, SALMONN and the API adapters always use their "
        "chat template, so without a NAME the flag changes nothing for them; random (and an adapter "
        "that declares no chat_template_use) renders none and refuses it. The effective setting is "
        "recorded (config.apply_chat_template, chat_template_name, chat_template_how)",
    )
    p.add_argument(
        "--num_fewshot",
        type=_int_at_least(0),
        default=None,
        metavar="N",
        help="lm-eval's; only 0: CASU tasks are zero-shot (a question's contrast-family siblings share its "
        "question and options, so shots would give away keys)",
    )
    p.add_argument(
        "--fewshot_as_multiturn",
        action="store_true",
        help="lm-eval's; refused: it needs few-shot examples and CASU tasks are zero-shot",
    )
    p.add_argument(
        "--bootstrap_iters",
        type=_int_at_least(0),
        default=None,
        metavar="N",
        help="lm-eval's: resamples of every 95%% interval (default 1000); 0 computes none (stderr N/A)",
    )
    p.add_argument(
        "--predict_only",
        action="store_true",
        help="lm-eval's: the model's outputs and sample logs (implies --log_samples), no metrics",
    )
    p.add_argument("--write_out", "-w", action="store_true", help="lm-eval's: print each task's first prompt")
    p.add_argument(
        "--use_cache",
        default=None,
        metavar="PATH",
        help="lm-eval's name for --cache: the response cache file",
    )
    return p


def cmd_run(argv: list[str]) -> int:
    """Parse the flags, call `harness.simple_evaluate`, print the table (its errors: see main)."""
    parser = _run_parser()
    args = parser.parse_args(argv)
    if args.tasks == "list":  # lm-eval's `--tasks list`
        return _print_tasks(args.include_path)
    if not args.model:
        parser.error("the following arguments are required: --model")
    _set_verbosity(args.verbosity)
    from harness.api import simple_evaluate

    if args.quiet or not sys.stderr.isatty():
        # the libraries' bars print carriage returns (and escape codes) into a log; the harness's
        # own progress prints plain lines there instead (runner.PlainProgress)
        import datasets

        datasets.disable_progress_bars()
        import huggingface_hub.utils

        huggingface_hub.utils.disable_progress_bars()  # transformers reads this when it is imported
        tlog = sys.modules.get("transformers.utils.logging")
        if tlog is not None:  # already imported (a notebook, the tests): told directly
            tlog.disable_progress_bar()
    res = simple_evaluate(
        args.model,
        args.model_args,
        tasks=args.tasks,
        dataset=args.dataset,
        conditions=args.conditions,
        limit=args.limit,
        output_path=args.output_path,
        log_samples=args.log_samples,
        include_path=args.include_path,
        batch_size=args.batch_size,
        seed=args.seed,
        scene_hint=args.scene_hint,
        scoring=args.scoring,
        circular=args.circular,
        judge=args.judge,
        bert_model=args.bert_model,
        cache=args.cache,
        probe=not args.no_probe,
        device=args.device,
        progress=not args.quiet,
        on_cleaned=lambda f: print(f"removed {f} (left by a killed run)", file=sys.stderr),
        gen_kwargs=args.gen_kwargs,
        hf_hub_log_args=args.hf_hub_log_args,
        system_instruction=args.system_instruction,
        apply_chat_template=args.apply_chat_template,
        num_fewshot=args.num_fewshot,
        fewshot_as_multiturn=args.fewshot_as_multiturn,
        bootstrap_iters=args.bootstrap_iters,
        predict_only=args.predict_only,
        write_out=args.write_out,
        use_cache=args.use_cache,
        robustness_dataset=args.robustness_dataset,
    )
    doc = res.document
    if not res.main_process:
        return EXIT_OK if not doc["errors"] else EXIT_SAMPLE_ERRORS
    if doc["audio_probe"].get("status") == "unchanged":
        print(
            "\n"
            + "!" * 78
            + "\nWARNING: the audio probe got the same outputs with real, silent and swapped audio.\n"
            "The audio is probably NOT reaching the model (check the adapter and its processor).\n"
            + "!"
            * 78,
            file=sys.stderr,
        )
    if args.limit is not None:
        print(
            "\n"
            + "!" * 78
            + f"\nWARNING: --limit {args.limit}: a SUBSET of each task was evaluated. These numbers are "
            "for quick checks,\nnot for reporting (n and 95% CIs are in the table; `push` refuses this "
            "run).\n" + "!" * 78,
            file=sys.stderr,
        )
    print(res.table())
    if doc.get("robustness"):
        from harness.results import robustness_table

        print("\n" + robustness_table(doc))
    t = doc["timing"]
    print(
        f"\nresults: {res.path}  ({t['units']} requests, {t['cache_hits']} from cache, model "
        f"{t['model_s']:.1f} s, harness overhead {t['overhead_ms_per_unit']:.2f} ms/request)"
    )
    n = doc["evaluated"]
    rows = sum(c["rows"] for c in n["per_task"].values())
    cut = f" (--limit: {n['samples']} of {rows} rows)" if n["samples"] != rows else ""
    print(
        f"evaluated {n['requests']} requests over {n['samples']} samples from {args.dataset} "
        f"(fingerprint {doc['dataset']['fingerprint']}){cut}"
    )
    if res.pushed and res.pushed["pushed"]:
        p = res.pushed
        print(
            f"pushed to {'private' if p['private'] else 'public'} datasets/{p['repo']}: "
            f"{len(p['operations'])} files"
            + (f"; sample logs to datasets/{p['details_repo']}" if p["details_repo"] else "")
        )
    if doc["errors"]:
        from casu_dataset.core.redact import redact

        print(
            redact(
                f"{len(doc['errors'])} sample(s) failed; first: {doc['errors'][0]['id']}: "
                f"{doc['errors'][0]['error']}"
            ),
            file=sys.stderr,
        )
    if res.pushed and not res.pushed["pushed"]:
        _error(res.pushed["error"])  # one line: the repo, why, and the command that sends the saved run
        return EXIT_HUB
    return EXIT_SAMPLE_ERRORS if doc["errors"] else EXIT_OK


def _print_tasks(include_path=None) -> int:
    from harness.task_config import load_tasks, with_builtins

    _print_task_table(load_tasks(with_builtins(include_path)))
    return EXIT_OK


def _print_task_table(tasks: dict) -> None:
    """The tasks, then the groups (tags) that `--tasks NAME` selects, as lm-eval's `--tasks list`."""
    print("tasks:")
    for name, t in tasks.items():
        print(f"  {name:28s} v{t.version}  {t.output_type:16s} {t.description}")
    groups: dict[str, list[str]] = {}
    for name, t in tasks.items():
        for tag in t.tags:
            groups.setdefault(tag, []).append(name)
    print("groups (--tasks NAME runs every task of the group; all = every task):")
    for tag, names in sorted(groups.items()):
        print(f"  {tag:28s} {', '.join(names)}")


def cmd_list(argv: list[str]) -> int:
    from harness.conditions import ALL, FULL
    from harness.task_config import load_tasks
    from model_adapters.registry import adapter_names, describe

    _print_task_table(load_tasks())
    print("models:")
    for n in adapter_names():
        print(f"  {n:28s} {describe(n)}")
    print("conditions (P speech, E events, B background; _ = replaced by loudness-matched noise):")
    print("  " + "  ".join(c.name for c in ALL) + f"   (full = {FULL.name}, all = the eight)")
    return EXIT_OK


def cmd_validate(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m harness validate", description="check task YAMLs")
    p.add_argument("paths", nargs="*", help="YAML files or folders (default: tasks/)")
    p.add_argument(
        "--dataset",
        default=None,
        help="also check each task's config, split and columns in this built dataset folder or Hub repo",
    )
    a = p.parse_args(argv)
    from pathlib import Path

    from harness.data import CasuData, DatasetError
    from harness.task_config import (
        TaskConfigError,
        builtin_tasks_dir,
        load_task,
        load_tasks,
    )

    data = CasuData(a.dataset) if a.dataset else None
    bad = 0
    try:
        paths = [Path(x) for x in a.paths] or [builtin_tasks_dir()]
    except TaskConfigError as err:
        print(f"bad {err}", file=sys.stderr)
        return EXIT_USAGE
    for t in paths:
        try:
            cfgs = load_tasks([t]) if t.is_dir() else {"": load_task(t)}
        except TaskConfigError as err:
            print(f"bad {err}", file=sys.stderr)
            bad += 1
            continue
        for cfg in cfgs.values():
            try:
                if data is not None:
                    data.check_all([cfg])  # also: a config with no rows
                    data.samples(cfg.dataset_config, cfg.split)  # every row parses (answers, audio)
                print(f"ok  {cfg.task}")
            except DatasetError as err:
                print(f"bad {cfg.task}: {err}", file=sys.stderr)
                bad += 1
    return EXIT_USAGE if bad else EXIT_OK


def cmd_push(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness push",
        formatter_class=_HelpFormatter,
        epilog=EXIT_CODES,
        description="Push one checkpoint's latest full run (never a --limit run) to a Hub results dataset, "
        "private unless --public, with a results card (README.md with table 1).",
    )
    p.add_argument(
        "--repo",
        default=None,
        help="results dataset ORG/NAME (default: from the run's "
        "--hf_hub_log_args hub_results_org / results_repo_name)",
    )
    p.add_argument("--output_path", default="results", help="folder the evaluation wrote")
    p.add_argument(
        "--checkpoint",
        default=None,
        help="which checkpoint (its results folder name, the pretrained "
        "id or the adapter name) when the folder holds several",
    )
    p.add_argument(
        "--dataset_id",
        default=None,
        help="the benchmark's Hub dataset id, to also print the model-card .eval_results/casu.yaml entries",
    )
    p.add_argument(
        "--public",
        action="store_true",
        help="create the results repo public (default: private, or the run's --hf_hub_log_args public_repo)",
    )
    p.add_argument(
        "--no_samples",
        action="store_true",
        help="leave the sample logs out (default: sent with the run, as lm-eval's push_samples_to_hub=true)",
    )
    p.add_argument("--dry_run", action="store_true", help="print the operations without uploading")
    a = p.parse_args(argv)
    from harness.flags import results_repo
    from harness.push import details_repo, push, select_run

    run = select_run(a.output_path, a.checkpoint)
    log_args = run[1]["config"].get("hf_hub_log_args") or {}
    repo = a.repo or results_repo(log_args)
    public = a.public or bool(log_args.get("public_repo"))
    if not repo:
        _error("push: --repo is required (or run with --hf_hub_log_args hub_results_org=ORG)")
        return EXIT_USAGE
    own = repo == results_repo(log_args)  # the run's own repo: its details_repo_name and gated apply too
    out = push(
        a.output_path,
        repo,
        a.dataset_id,
        token=os.environ.get("HF_TOKEN"),
        dry_run=a.dry_run,
        private=not public,
        checkpoint=a.checkpoint,
        samples=not a.no_samples,
        details_repo=details_repo(log_args) if own else None,
        gated=own and bool(log_args.get("gated")),
    )
    for f, why in out["skipped"]:
        print(f"skipped {f}: {why}", file=sys.stderr)
    print(
        f"run {out['run']} -> {'private' if out['private'] else 'public'}{' gated' if out['gated'] else ''} "
        "results repo"
    )
    print(("would upload" if a.dry_run else "uploaded") + f" to datasets/{repo}:")
    for o in out["operations"]:
        print(f"  {o}")
    if out["details_repo"]:
        print(f"sample logs to datasets/{out['details_repo']}:")
        for o in out["details_operations"]:
            print(f"  {o}")
    if out["eval_results_yaml"]:
        print(
            "\n.eval_results/casu.yaml for the model card (or `python -m harness pr-eval-results`):\n"
            + out["eval_results_yaml"]
        )
    return EXIT_OK


def cmd_pr_eval_results(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness pr-eval-results",
        formatter_class=_HelpFormatter,
        epilog=EXIT_CODES,
        description="Open a pull request adding .eval_results/casu.yaml (one checkpoint's latest full run, "
        "values 0-100, settings in notes) to a model repo, so its results show on the benchmark's "
        "leaderboard.",
    )
    p.add_argument("--model_repo", required=True, help="the model repo ORG/MODEL")
    p.add_argument("--dataset_id", required=True, help="the benchmark's Hub dataset id ORG/NAME")
    p.add_argument("--output_path", default="results", help="folder the evaluation wrote")
    p.add_argument("--checkpoint", default=None, help="which checkpoint when the folder holds several")
    p.add_argument(
        "--source_url", default=None, help="where the results can be checked (e.g. the results dataset)"
    )
    p.add_argument("--dry_run", action="store_true", help="print the YAML without opening the pull request")
    p.add_argument(
        "--allow_other_checkpoint",
        action="store_true",
        help="propose a run whose checkpoint is not --model_repo (the same weights under another name or "
        "a local copy); said in every entry's notes. Without it such a run is refused",
    )
    a = p.parse_args(argv)
    from harness.push import pr_eval_results

    out = pr_eval_results(
        a.output_path,
        a.model_repo,
        a.dataset_id,
        source_url=a.source_url,
        checkpoint=a.checkpoint,
        token=os.environ.get("HF_TOKEN"),
        dry_run=a.dry_run,
        allow_other_checkpoint=a.allow_other_checkpoint,
    )
    print(out["yaml"])
    print(f"would open a pull request on {a.model_repo}" if a.dry_run else f"pull request: {out['pr_url']}")
    return EXIT_OK


def cmd_table(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness table", description="table 1 over every model's newest results in a folder"
    )
    p.add_argument("output_path", nargs="?", default="results")
    a = p.parse_args(argv)
    from harness.results import latest_documents, table1

    skipped: list = []
    docs = latest_documents(a.output_path, skipped) if os.path.isdir(a.output_path) else []
    for f, why in skipped:
        print(f"skipped {f}: {why}", file=sys.stderr)
    if not docs:
        _error(f"{a.output_path}: no complete results (casu_results_*.json) found")
        return EXIT_USAGE
    print(table1(*docs))
    return EXIT_OK


def _flag_value(argv: list[str], flag: str) -> str | None:
    """'FLAG VALUE' as typed (`FLAG VALUE` or `FLAG=VALUE`), or None."""
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return f"{flag} {argv[i + 1]}"
        if a.startswith(flag + "="):
            return f"{flag} {a.split('=', 1)[1]}"
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from casu_dataset.core.redact import guard_logging

    guard_logging()  # push and pr-eval-results talk to the Hub with a token too
    cmds = {
        "list": cmd_list,
        "validate": cmd_validate,
        "push": cmd_push,
        "run": cmd_run,
        "table": cmd_table,
        "pr-eval-results": cmd_pr_eval_results,
    }
    from casu_dataset.core.errors import CasuError

    try:
        if argv and argv[0] in cmds:
            return cmds[argv[0]](argv[1:])
        return cmd_run(argv)
    except CasuError as err:  # an expected failure (bad input 2, the model 3, the Hub 5): one line, its code
        _error(err)
        return err.exit_code
    except (OSError, MemoryError, sqlite3.Error) as err:  # a full disk, a size limit, no memory: exit 6
        from casu_dataset.core.errors import EXIT_RESOURCE, resource_message

        msg = resource_message(err, _flag_value(argv, "--output_path"))
        if msg is None:
            raise
        _error(msg)
        return EXIT_RESOURCE
    finally:
        # Free Arrow objects held in reference cycles while Arrow is still alive: left to the
        # interpreter's final teardown, a parquet reader's native thread is destroyed after its
        # pool and the process aborts after its work is done ("terminate called without an
        # active exception", exit -6; apache/arrow#34314), seen here under load.
        import gc

        gc.collect()


if __name__ == "__main__":
    sys.exit(main())
