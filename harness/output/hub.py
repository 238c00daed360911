"""The leaderboard path.

`push`: one checkpoint's latest FULL run (never a --limit run) to a Hub results dataset, in
lm-eval's tracker layout (`<checkpoint>/results_<date>.json` and `samples_<task>_<date>.jsonl` in
lm-eval's schema, CASU's `casu_results_<date>.json` and `casu_samples_<task>_<date>.jsonl` beside
them), private unless --public, with a results card (README.md: table 1 of the latest full run of
every checkpoint under the output folder).

`push_after_run`: lm-eval's `--hf_hub_log_args push_results_to_hub=true`: the run just written,
pushed as `push` does, checked up front by `check_auto_push`.

`pr_eval_results`: a pull request adding `.eval_results/casu.yaml` to a model repo
(https://huggingface.co/docs/hub/eval-results): one entry per task, every value on one 0-100
scale, the settings in `notes`.

The token comes from HF_TOKEN (or the huggingface_hub login) and is never printed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from casu_dataset.contract import (
    DESCRIPTION_TASK,
    EVAL_FRAMEWORK,
    FULL_CONDITION,
    LEADERBOARD_METRIC,
)
from casu_dataset.core import hub

if TYPE_CHECKING:
    from harness.run.schema import ResultsDocument


def runs(
    output_path: str | Path, skipped: list | None = None
) -> list[tuple[Path, ResultsDocument, list[Path]]]:
    """The complete runs under an output folder (results JSON, document, its sample logs);
    incomplete ones (killed, truncated, older harness) go to `skipped` as (path, why)."""
    from harness.output.files import complete_runs

    root = Path(output_path)
    good, bad = complete_runs(root)
    if skipped is not None:
        skipped.extend(bad)
    if not good:
        why = "; ".join(f"{f.relative_to(root)}: {w}" for f, w in bad)
        raise hub.PushError(
            f"--output_path {root}: no complete results (casu_results_*.json) under it "
            f"({'skipped ' + why if why else 'run an evaluation first'})"
        )
    return good


def select_run(output_path: str | Path, checkpoint: str | None = None, skipped: list | None = None) -> tuple:
    """(results JSON, document, sample logs) of one checkpoint's latest full run.

    `checkpoint`: the results folder name (`qwen2.5-omni__Qwen__Qwen2.5-Omni-7B`), the checkpoint
    (`Qwen/Qwen2.5-Omni-7B`) or the adapter name; needed when the folder holds several."""
    from harness.output.document import latest_runs
    from harness.output.files import checkpoint as ck_of
    from harness.output.files import run_key

    runs(output_path, skipped)  # PushError when there is no complete run at all
    full = latest_runs(output_path, full_only=True)
    latest = latest_runs(output_path)

    def matches(doc):
        return checkpoint in (run_key(doc["model"]), ck_of(doc["model"]), doc["model"]["name"])

    if checkpoint:
        full = [r for r in full if matches(r[1])]
        latest = [r for r in latest if matches(r[1])]
        if not latest:
            raise hub.PushError(
                f"--checkpoint {checkpoint!r}: no complete run of it under --output_path {output_path}"
            )
    if not full:
        lim = latest[0][1]["config"].get("limit")
        raise hub.PushError(
            f"--output_path {output_path}: refusing to push a --limit run ({latest[0][0].name} evaluated "
            f"--limit {lim}, a subset of each task); rerun without --limit to push"
        )
    if len(full) > 1:
        names = ", ".join(run_key(r[1]["model"]) for r in full)
        raise hub.PushError(
            f"--output_path {output_path} holds several checkpoints; choose one with --checkpoint ({names})"
        )
    return full[0]


def _check_repo(repo: str | None, flag: str = "--repo") -> str:
    return hub.check_repo_id(repo, flag)  # PushError naming `flag`


def plan_push(
    output_path: str | Path,
    repo: str,
    skipped: list | None = None,
    checkpoint: str | None = None,
    samples: bool = True,
    run: tuple | None = None,
) -> list:
    """The commit operations: the run's files (default: the chosen checkpoint's latest full run;
    its sample logs unless `samples` is false) under `<checkpoint folder>/`, and the card."""
    from huggingface_hub import CommitOperationAdd

    _check_repo(repo)
    f, doc, logs = run or select_run(output_path, checkpoint, skipped)
    files = [f, *(logs if samples else [])]
    lm = f.parent / (doc.get("lm_eval_view") or "")
    if doc.get("lm_eval_view") and lm.is_file():
        files.append(lm)
    # the run's files sit under the name of its checkpoint folder, as written, also for old folders
    from harness.output.files import run_key

    ops = hub.folder_operations(f.parent, files, prefix=f"{run_key(doc['model'])}/")
    ops.append(
        CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=results_card(output_path, repo).encode())
    )
    return ops


def plan_details(run: tuple, details_repo: str, repo: str) -> list:
    """The sample logs of a run for a separate details repo (lm-eval's details_repo_name), with a card."""
    from huggingface_hub import CommitOperationAdd

    from harness.output.files import run_key

    f, doc, logs = run
    ops = hub.folder_operations(f.parent, logs, prefix=f"{run_key(doc['model'])}/")
    card = "\n".join(
        [
            "---",
            "pretty_name: CASU sample logs",
            "tags:",
            "- casu",
            "- evaluation",
            "---",
            "",
            f"# CASU sample logs ({details_repo})",
            "",
            "Every sample's prompt, output and score (`<checkpoint>/samples_<task>_<date>.jsonl` in "
            "lm-eval's schema, `casu_samples_<task>_<date>.jsonl` CASU's records) of the "
            f"runs whose results are in [{repo}](https://huggingface.co/datasets/{repo}).",
            "",
        ]
    )
    ops.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card.encode()))
    return ops


def results_card(output_path: str | Path, repo: str) -> str:
    """README.md of the results dataset: table 1 of each checkpoint's latest full run."""
    from harness.output.document import latest_runs
    from harness.output.tables import main_table

    docs = [d for _, d, _ in latest_runs(output_path, full_only=True)]
    return "\n".join(
        [
            "---",
            "pretty_name: CASU results",
            "tags:",
            "- casu",
            "- evaluation",
            "- audio",
            "---",
            "",
            f"# CASU results ({repo})",
            "",
            "Results of the CASU harness (`python -m harness`), one folder per checkpoint "
            "(`<adapter>__<checkpoint>/results_<date>.json` and `samples_<task>_<date>.jsonl` in lm-eval's "
            "schema, CASU's own `casu_results_<date>.json` and `casu_samples_<task>_<date>.jsonl`). Only "
            "full runs are pushed (never `--limit` subsets).",
            "",
            "## Table 1 (all layers, each checkpoint's latest full run)",
            "",
            main_table(*docs),
            "",
            "BLEU-4 on 0-100; BERTScore F1, Event Match and 1 - WER on 0-1; accuracies in %.",
            "",
        ]
    )


def push(
    output_path,
    repo: str,
    dataset_id: str | None = None,
    token: str | None = None,
    dry_run: bool = False,
    private: bool = True,
    checkpoint: str | None = None,
    api=None,
    samples: bool = True,
    details_repo: str | None = None,
    gated: bool = False,
    run: tuple | None = None,
    flag: str = "--repo",
) -> dict:
    """Push a run (default: the checkpoint's latest full run) to `repo`: its sample logs too
    unless `samples` is false, and to `details_repo` instead when that is another repo; each repo
    created private unless `private=False`, and gated (access requests, approved automatically) with
    `gated`."""
    skipped: list = []
    _check_repo(repo, flag)
    # the repo the sample logs go to when it is not `repo` (None: they go with the results)
    split_repo = details_repo if samples and details_repo and details_repo != repo else None
    split = split_repo is not None
    if split_repo is not None:
        _check_repo(split_repo, "--hf_hub_log_args details_repo_name")
    if gated:
        _check_can_gate()
    run = run or select_run(output_path, checkpoint, skipped)
    f, doc, _ = run
    ops = plan_push(output_path, repo, samples=samples and not split, run=run)
    details = plan_details(run, split_repo, repo) if split_repo is not None else []
    url = f"https://huggingface.co/datasets/{repo}"
    entries = eval_results_entries(doc, dataset_id, url) if dataset_id else []
    if not dry_run:
        message = f"CASU results: {f.parent.name} {doc['date']}"
        hub.commit(repo, ops, message, api=api, token=token, private=private, gated=gated, flag=flag)
        if split_repo is not None and details:
            hub.commit(
                split_repo,
                details,
                f"CASU sample logs: {f.parent.name} {doc['date']}",
                api=api,
                token=token,
                private=private,
                gated=gated,
                flag="--hf_hub_log_args details_repo_name",
            )
    return {
        "repo": repo,
        "operations": [o.path_in_repo for o in ops],
        "run": str(f),
        "private": private,
        "gated": gated,
        "details_repo": split_repo,
        "details_operations": [o.path_in_repo for o in details],
        "eval_results_yaml": yaml.safe_dump(entries, sort_keys=False) if entries else "",
        "skipped": [(str(p), why) for p, why in skipped],
    }


# -- lm-eval's push at the end of a run (--hf_hub_log_args push_results_to_hub=true) ---------------


def details_repo(log_args: dict) -> str | None:
    """ORG/NAME of lm-eval's separate details (sample logs) repo: details_repo_name in hub_results_org."""
    org, name = log_args.get("hub_results_org"), log_args.get("details_repo_name")
    return f"{org}/{name}" if org and name else None


def check_auto_push(log_args: dict, *, limit, output_path, log_samples: bool) -> None:
    """Before the dataset or the model loads: PushError (a ValueError naming --hf_hub_log_args)
    when the push the flags ask for could not happen at the end of the run."""
    if not (log_args.get("push_results_to_hub") or log_args.get("push_samples_to_hub")):
        return
    if not log_args.get("push_results_to_hub"):
        raise hub.PushError(
            "--hf_hub_log_args push_samples_to_hub=true: also set push_results_to_hub=true (the sample "
            "logs are sent with their run)"
        )
    flag = "--hf_hub_log_args push_results_to_hub=true"
    if not log_args.get("hub_results_org"):
        raise hub.PushError(f"{flag}: needs hub_results_org=ORG (the owner of the results repo)")
    if limit is not None:
        raise hub.PushError(
            f"{flag}: a --limit run is never pushed (--limit {limit} evaluates a subset of each task); "
            "drop --limit or the push"
        )
    if output_path is None:
        raise hub.PushError(
            f"{flag}: needs --output_path (output_path= from Python): the run is pushed from the files "
            "written there"
        )
    if log_args.get("push_samples_to_hub") and not log_samples:
        raise hub.PushError(
            "--hf_hub_log_args push_samples_to_hub=true: needs --log_samples (the sample logs it sends)"
        )
    own_details = details_repo(log_args)
    if log_args.get("push_samples_to_hub") and own_details:
        _check_repo(own_details, "--hf_hub_log_args details_repo_name")
    if log_args.get("gated"):
        _check_can_gate()


def _check_can_gate() -> None:
    if not hub.can_gate():
        import huggingface_hub

        raise hub.PushError(
            f"--hf_hub_log_args gated=true: huggingface_hub {huggingface_hub.__version__} cannot gate a "
            "repo (no HfApi.update_repo_settings(gated=...)); upgrade it or drop gated"
        )


def retry_command(path: Path, repo: str, public: bool, samples: bool) -> str:
    """The `python -m harness push` line that sends the run at `path` as the run's own push would
    (the details repo and gated come from the run's recorded --hf_hub_log_args)."""
    import shlex

    return shlex.join(
        [
            "python",
            "-m",
            "harness",
            "push",
            "--output_path",
            str(path.parent.parent),
            "--checkpoint",
            path.parent.name,
            "--repo",
            repo,
            *(["--public"] if public else []),
            *([] if samples else ["--no_samples"]),
        ]
    )


def push_after_run(path: str | Path, log_args: dict, token: str | None = None, api=None) -> dict | None:
    """Push the run written at `path` (its results JSON) when --hf_hub_log_args asks for it
    (push_results_to_hub=true; sample logs with push_samples_to_hub=true, to details_repo_name's
    repo when set; private unless public_repo=true; gated=true gates the repos). None when no push
    was asked for; else push's dict with `pushed` True, or `pushed` False with `error` (one line:
    the repo, why, where the results are and `retry`, the command that sends them). A Hub failure
    never raises: the results are already on disk."""
    from harness.config import results_repo
    from harness.output.files import check_run

    if not log_args.get("push_results_to_hub"):
        return None
    path = Path(path)
    repo = results_repo(log_args)
    public, samples = bool(log_args.get("public_repo")), bool(log_args.get("push_samples_to_hub"))
    # no hub_results_org (refused earlier on the CLI): shlex writes None and "" alike, as ''
    retry = retry_command(path, repo or "", public, samples)
    doc, logs, why = check_run(path)
    try:
        if why:
            raise hub.PushError(f"{path}: {why}")
        out = push(
            path.parent.parent,
            _check_repo(repo, "--hf_hub_log_args hub_results_org"),  # (push checks it first, as here)
            token=token,
            private=not public,
            api=api,
            samples=samples,
            details_repo=details_repo(log_args),
            gated=bool(log_args.get("gated")),
            run=(path, doc, logs),
            flag="--hf_hub_log_args hub_results_org",
        )
    except (hub.HubError, hub.PushError) as err:
        return {
            "repo": repo,
            "pushed": False,
            "retry": retry,
            "error": f"push after the run failed: {err}; the results are saved in {path}; retry: {retry}",
        }
    return dict(out, pushed=True, retry=retry)


# -- .eval_results/casu.yaml for a model repo ----------------------------------------------


def _metric(task: str, m: dict) -> tuple[str, float] | None:
    """(metric name, value 0-100) of a task's headline number: accuracy, or for scene
    description BERTScore F1 (0-1 in the results, x100 here so every entry is on one scale)."""
    if "accuracy" in m:
        v = (m.get("accuracy") or {}).get("value")
        return None if v is None else (LEADERBOARD_METRIC["multiple_choice"][0], round(100 * v, 2))
    if task == DESCRIPTION_TASK or "bertscore" in m:
        v = (m.get("bertscore") or {}).get("value")
        return None if v is None else (LEADERBOARD_METRIC["open"][0], round(100 * v, 2))
    return None


def eval_results_entries(
    doc: dict, dataset_id: str, source_url: str, proposed_for: str | None = None
) -> list[dict]:
    """One entry per task at full audio, on a 0-100 scale, with the settings in `notes` and the
    same `evaluation_framework` as the dataset's eval.yaml; `proposed_for`: the model repo a run of
    another checkpoint is proposed for by explicit override (said in every entry's notes)."""
    from harness.output.files import checkpoint

    cfg = doc.get("config") or {}
    ck = checkpoint(doc["model"])
    override = (
        f"; OVERRIDE: checkpoint {ck or '(none)'} proposed for {proposed_for} with --allow_other_checkpoint"
        if proposed_for
        else ""
    )
    out = []
    for task, conds in doc["results"].items():
        m = conds.get(FULL_CONDITION)
        got = _metric(task, m) if m else None
        if not got:
            continue
        metric, value = got
        notes = (
            f"{metric} x100 (0-100); adapter {doc['model']['name']}"
            + (f", checkpoint {ck}" if ck else "")
            + f"; scoring {(doc.get('scoring') or {}).get(task)}; generation "
            f"{(doc.get('generation') or {}).get(task)}; conditions full ({FULL_CONDITION}); "
            f"scene_hint {cfg.get('scene_hint')}; circular {cfg.get('circular')}; seed {cfg.get('seed')}; "
            f"n {m.get('n')}; dataset fingerprint {doc['dataset']['fingerprint']}; git {doc.get('git_hash')}"
            + override
        )
        out.append(
            {
                "dataset": {"id": dataset_id, "task_id": task},
                "value": value,
                "date": doc["date"][:10],
                "source": {"url": source_url, "name": "CASU harness"},
                "evaluation_framework": EVAL_FRAMEWORK,
                "notes": notes,
            }
        )
    return out


def same_repo(checkpoint: str | None, repo: str) -> bool:
    """Whether a run's checkpoint (--model_args pretrained=) is the Hub repo `repo` (repo ids are
    case-insensitive on the Hub); a local path or no checkpoint never is."""
    if not checkpoint:
        return False
    return checkpoint.strip().strip("/").lower() == repo.lower()


def pr_eval_results(
    output_path,
    model_repo: str,
    dataset_id: str,
    source_url: str | None = None,
    checkpoint: str | None = None,
    token: str | None = None,
    dry_run: bool = False,
    api=None,
    allow_other_checkpoint: bool = False,
) -> dict:
    """Open a pull request on `model_repo` adding `.eval_results/casu.yaml` for one checkpoint's
    latest full run (default: the run of `model_repo` itself); returns {"yaml", "pr_url"}.

    A run whose checkpoint is not `model_repo` (another repo, a local folder, a baseline without
    one) is refused unless `allow_other_checkpoint` (the same weights under another name), which
    every entry's notes record."""
    from huggingface_hub import CommitOperationAdd

    from harness.output.files import checkpoint as ck_of

    hub.check_repo_id(model_repo, "--model_repo")  # PushError naming the flag
    hub.check_repo_id(dataset_id, "--dataset_id")
    if checkpoint is None:  # the target repo's own run, when the folder has one
        from harness.output.document import latest_runs
        from harness.output.files import run_key

        own = [r for r in latest_runs(output_path) if same_repo(ck_of(r[1]["model"]), model_repo)]
        checkpoint = run_key(own[0][1]["model"]) if len(own) == 1 else None
    f, doc, _ = select_run(output_path, checkpoint)
    ck = ck_of(doc["model"])
    mismatch = not same_repo(ck, model_repo)
    if mismatch and not allow_other_checkpoint:
        what = f"checkpoint {ck!r}" if ck else "no checkpoint (a baseline)"
        raise hub.PushError(
            f"--model_repo {model_repo}: the run {f} evaluated --model {doc['model']['name']} with {what}, "
            f"not {model_repo}; its scores are not {model_repo}'s. Evaluate --model_args "
            f"pretrained={model_repo}, or pass --allow_other_checkpoint if these are the same weights "
            "(recorded in the notes)"
        )
    entries = eval_results_entries(
        doc,
        dataset_id,
        source_url or f"https://huggingface.co/datasets/{dataset_id}",
        proposed_for=model_repo if mismatch else None,
    )
    if not entries:
        raise hub.PushError(f"{f}: no task has a full-audio result to report")
    text = yaml.safe_dump(entries, sort_keys=False)
    pr_url = None
    if not dry_run:
        op = CommitOperationAdd(path_in_repo=".eval_results/casu.yaml", path_or_fileobj=text.encode())
        info = hub.commit(
            model_repo,
            [op],
            f"Add CASU evaluation results ({f.parent.name})",
            api=api,
            token=token,
            repo_type="model",
            create_pr=True,
            flag="--model_repo",
            description=f"CASU results of {f.parent.name}, run {doc['date']} "
            f"(values 0-100; settings in each entry's notes).",
        )
        pr_url = getattr(info, "pr_url", None)
    return {"yaml": text, "pr_url": pr_url, "run": str(f), "override": mismatch}
