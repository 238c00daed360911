"""`python -m harness push` and `pr-eval-results`: a saved run to a Hub results dataset, or to a
model repo's .eval_results as a pull request."""

from __future__ import annotations

import os
import sys

from harness.cli.common import EXIT_CODES, EXIT_OK, EXIT_USAGE, ArgumentParser, HelpFormatter, error_line


def cmd_push(argv: list[str]) -> int:
    p = ArgumentParser(
        prog="python -m harness push",
        formatter_class=HelpFormatter,
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
    from harness.config import results_repo
    from harness.output.hub import details_repo, push, select_run

    run = select_run(a.output_path, a.checkpoint)
    log_args = run[1]["config"].get("hf_hub_log_args") or {}
    repo = a.repo or results_repo(log_args)
    public = a.public or bool(log_args.get("public_repo"))
    if not repo:
        error_line("push: --repo is required (or run with --hf_hub_log_args hub_results_org=ORG)")
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
    p = ArgumentParser(
        prog="python -m harness pr-eval-results",
        formatter_class=HelpFormatter,
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
    from harness.output.hub import pr_eval_results

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
