"""`python -m harness [run] --model NAME --tasks all ...`: the flags, then `simple_evaluate`, then the
tables and the summary lines on the terminal."""

from __future__ import annotations

import argparse
import json
import sys

from harness.cli.common import (
    EXIT_CODES,
    EXIT_HUB,
    EXIT_OK,
    EXIT_SAMPLE_ERRORS,
    EXIT_UNPARSED,
    ArgumentParser,
    HelpFormatter,
    error_line,
    int_at_least,
)
from harness.cli.listing import print_tasks
from harness.config import AUTO_CPU_BATCH, AUTO_CUDA_START


def _limit(text: str):
    from harness.config import parse_limit

    try:
        return parse_limit(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--limit ")) from None


def _batch_size(text: str):
    from harness.config import is_auto

    return text if is_auto(text) else int_at_least(1)(text)


def _seeds(text: str) -> list[int | None]:
    """lm-eval's --seed: one value for all four seeds, or python,numpy,torch[,fewshot], each an integer
    >= 0 or None (that generator is not seeded)."""
    from harness.config import UsageError, parse_seed

    try:
        return parse_seed(text)
    except UsageError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--seed ")) from None


def set_cli_verbosity(level: str) -> None:
    from harness.api import set_verbosity

    set_verbosity(level)
    from casu_dataset.core.redact import guard_logging

    guard_logging()  # never the HTTP clients' raw headers and bodies, at any verbosity


def _run_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m harness",
        description="Evaluate an audio language model on CASU tasks. Subcommands: list, validate, table, "
        "push, pr-eval-results (`python -m harness list`).",
        epilog=EXIT_CODES,
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--config",
        "-C",
        default=None,
        metavar="YAML",
        help="a run's settings in a YAML file (keys: these flags' names, e.g. `model: random`, `limit: 32`); "
        "flags given beside it win",
    )
    p.add_argument(
        "--model", "-M", default=None, help="adapter name (see `python -m harness list`); required"
    )
    p.add_argument(
        "--model_args",
        "-a",
        default="",
        help="k=v,k2=v2 passed to the adapter, e.g. pretrained=PATH,dtype=bfloat16",
    )
    p.add_argument(
        "--tasks",
        "-t",
        default="all",
        help="all, a tag (casu), or a comma list of task names; 'list' prints the tasks and exits",
    )
    p.add_argument(
        "--include_path",
        action="append",
        default=None,
        help="extra folder of task YAMLs, added to the built-in tasks (repeatable)",
    )
    p.add_argument(
        "--dataset",
        default=None,
        help="a built dataset folder or a Hub dataset repo id; it overrides the tasks' dataset_path "
        "(default: the one dataset_path the tasks name, else casu_mini)",
    )
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
        "-b",
        type=_batch_size,
        default=1,
        help="requests per model call, or 'auto': the largest that fits (CUDA: starts at "
        f"{AUTO_CUDA_START} and halves on out-of-memory; CPU/API: {AUTO_CPU_BATCH}); lm-eval's 'auto:N' "
        "is auto (the size halves on out-of-memory as the run goes, so N re-detections are not "
        "needed); results do not depend on it",
    )
    p.add_argument(
        "--max_batch_size",
        type=int_at_least(1),
        default=None,
        metavar="N",
        help="lm-eval's: the largest size --batch_size auto may choose",
    )
    p.add_argument(
        "--limit",
        "-L",
        type=_limit,
        default=None,
        help="first N samples per task, or a fraction in (0, 1) of each task (whole contrast families "
        "only, at least one); for quick checks only: the run is marked limited and cannot be pushed",
    )
    p.add_argument(
        "--gen_kwargs",
        nargs="+",
        default=None,
        metavar="K=V",
        help="k=v,... (or lm-eval's k=v k2=v2, or a JSON object) merged over each task's generation "
        "settings (max_new_tokens/max_gen_toks, do_sample, temperature, until, top_p, top_k); values are "
        'typed as lm-eval types them (until=["\\n"] is a list holding a newline)',
    )
    p.add_argument(
        "--hf_hub_log_args",
        default="",
        help="lm-eval's k=v,... for the Hub: hub_results_org, results_repo_name, public_repo, ... "
        "(recorded with the results; `push` uses them when --repo / --public are not given)",
    )
    p.add_argument(
        "--verbosity",
        "-v",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        default="WARNING",
        help="log level of the harness and the libraries it calls",
    )
    p.add_argument(
        "--output_path", "-o", default="results", help="folder for results JSON, sample logs, tables, plots"
    )
    p.add_argument(
        "--log_samples",
        "-s",
        action="store_true",
        help="write every sample's prompt, output and score as JSONL",
    )
    p.add_argument(
        "--seed",
        type=_seeds,
        default=None,
        metavar="RANDOM[,NUMPY,TORCH[,FEWSHOT]]",
        help="lm-eval's seeds (default 0,1234,1234,1234; one value sets all four; None leaves one "
        "unseeded): python random, numpy, torch and few-shot, seeded as lm-eval seeds them and "
        "recorded; the first is also CASU's seed (masking noise, bootstrap, random baseline, cache keys)",
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
        "-f",
        type=int_at_least(0),
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
        type=int_at_least(0),
        default=None,
        metavar="N",
        help="lm-eval's: resamples of every 95%% interval (default 1000); 0 computes none (stderr N/A)",
    )
    p.add_argument(
        "--predict_only",
        "-x",
        action="store_true",
        help="lm-eval's: the model's outputs and sample logs (implies --log_samples), no metrics",
    )
    p.add_argument("--write_out", "-w", action="store_true", help="lm-eval's: print each task's first prompt")
    p.add_argument(
        "--cache_requests",
        choices=["true", "refresh", "delete"],
        default=None,
        help="lm-eval's: true uses the response cache (as without the flag), refresh asks the model "
        "again and overwrites the cached answers, delete removes the cache file before the run",
    )
    p.add_argument(
        "--check_integrity",
        action="store_true",
        help="lm-eval's: before the run, hash every file of the --dataset folder against its build record",
    )
    p.add_argument(
        "--trust_remote_code",
        action="store_true",
        help="lm-eval's: the adapter may run the checkpoint's own code from the Hub (adds "
        "trust_remote_code=true to --model_args; refused for an adapter without that argument)",
    )
    p.add_argument(
        "--show_config",
        action="store_true",
        help="lm-eval's: after the results, print the run's full config (every task's resolved YAML)",
    )
    p.add_argument(
        "--samples",
        "-E",
        default=None,
        metavar="JSON",
        help="lm-eval's; refused: CASU scores contrast families as wholes, use --limit N (whole families)",
    )
    p.add_argument(
        "--wandb_args",
        default=None,
        metavar="K=V,...",
        help="lm-eval's: wandb.init keywords (project=..., name=..., mode=offline); the finished run's "
        "config, metrics, results table, samples (with --log_samples) and results JSON are logged "
        "there (needs `pip install 'casu[wandb]'`; WANDB_MODE=offline writes a local run folder)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 7 when more than half of a task's answers could not be parsed (lm-eval, and CASU "
        "without this flag, exit 0 and say so in one line)",
    )
    p.add_argument(
        "--use_cache",
        "-c",
        default=None,
        metavar="PATH",
        help="lm-eval's name for --cache: the response cache file",
    )
    return p


def _yaml_defaults(path: str) -> dict:
    """A --config file's settings as the parser's defaults (flag names: `no_probe`, `quiet`)."""
    from harness.config import CLI_ONLY, read_yaml

    values = read_yaml(path)  # UsageError names the file and the key
    for flag, field in CLI_ONLY.items():  # `probe: false` is `no_probe: true`
        if field in values:
            values[flag] = not values.pop(field)
    return values


def _samples_file(results_path, task: str):
    """CASU's sample log of `task` beside the results JSON a run wrote."""
    from harness.output.writer import CASU_RESULTS, CASU_SAMPLES

    stamp = results_path.stem.removeprefix(CASU_RESULTS)
    return results_path.parent / f"{CASU_SAMPLES}{task}_{stamp}.jsonl"


def cmd_run(argv: list[str]) -> int:
    """Parse the flags, call `harness.simple_evaluate`, print the table (its errors: see main)."""
    if argv and argv[0] == "ls":  # lm-eval's `ls tasks|groups|subtasks|tags` (main dispatches the rest here)
        from harness.cli.listing import cmd_ls

        return cmd_ls(argv[1:])
    parser = _run_parser()
    args = parser.parse_args(argv)
    if args.config is not None:  # the file's settings, then the flags typed beside it win
        parser.set_defaults(**_yaml_defaults(args.config))
        args = parser.parse_args(argv)
    if args.tasks == "list":  # lm-eval's `--tasks list`
        return print_tasks(args.include_path)
    if not args.model:
        parser.error("the following arguments are required: --model")
    set_cli_verbosity(args.verbosity)
    from harness.api import simple_evaluate
    from harness.config import EvalConfig

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
    config = EvalConfig.from_cli(args)
    res = simple_evaluate(
        config, on_cleaned=lambda f: print(f"removed {f} (left by a killed run)", file=sys.stderr)
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
    if config.limit is not None:
        print(
            "\n"
            + "!" * 78
            + f"\nWARNING: --limit {config.limit}: a SUBSET of each task was evaluated. These numbers are "
            "for quick checks,\nnot for reporting (n and 95% CIs are in the table; `push` refuses this "
            "run).\n" + "!" * 78,
            file=sys.stderr,
        )
    print(res.table())
    from harness.output.tables import ablation_table, conditions_ran, status_table, unparsed_alarms

    if conditions_ran(doc):
        print("\nTable 2: accuracy / family accuracy (%) per layer condition\n" + ablation_table(doc))
    if doc.get("robustness"):
        from harness.output.tables import robustness_table

        print("\n" + robustness_table(doc))
    print("\n" + status_table(doc))
    alarms = unparsed_alarms(doc)
    for a in alarms:
        where = (
            f"the answers are in {_samples_file(res.path, a['task'])}"
            if res.path is not None and config.log_samples
            else "rerun with --log_samples to see them (cached answers are not asked again)"
        )
        print(
            f"WARNING: {a['task']}: {100 * a['unparsed']:.0f}% of {a['n']} answers could not be parsed "
            f"({a['condition']}); its scores say little about the model; {where}",
            file=sys.stderr,
        )
    if args.show_config:  # lm-eval's --show_config: the run's full config, every task's YAML
        import yaml

        print("\n--- config ---\n" + yaml.safe_dump(json.loads(json.dumps(doc["config"])), sort_keys=False))
    t = doc["timing"]
    print(
        f"\nresults: {res.path}  ({t['units']} requests, {t['cache_hits']} from cache, model "
        f"{t['model_s']:.1f} s, harness overhead {t['overhead_ms_per_unit']:.2f} ms/request)"
    )
    n = doc["evaluated"]
    rows = sum(c["rows"] for c in n["per_task"].values())
    cut = f" (--limit: {n['samples']} of {rows} rows)" if n["samples"] != rows else ""
    print(
        f"evaluated {n['requests']} requests over {n['samples']} samples from {doc['dataset']['path']} "
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
        error_line(res.pushed["error"])  # one line: the repo, why, and the command that sends the saved run
        return EXIT_HUB
    if doc["errors"]:
        return EXIT_SAMPLE_ERRORS
    if config.strict and alarms:
        error_line(f"--strict: {', '.join(sorted({a['task'] for a in alarms}))}: most answers unparsed")
        return EXIT_UNPARSED
    return EXIT_OK
