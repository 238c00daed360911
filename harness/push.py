"""The leaderboard path.

`push`: one checkpoint's latest FULL run (never a --limit run) to a Hub results dataset, in
lm-eval's tracker layout (`<checkpoint>/results_<date>.json`, `lm_eval_<date>.json`,
`samples_<task>_<date>.jsonl`), private unless --public, with a results card (README.md: table 1
of the latest full run of every checkpoint under the output folder).

`pr_eval_results`: a pull request adding `.eval_results/casu.yaml` to a model repo
(https://huggingface.co/docs/hub/eval-results): one entry per task, every value on one 0-100
scale, the settings in `notes`.

The token comes from HF_TOKEN (or the huggingface_hub login) and is never printed."""
from __future__ import annotations

from pathlib import Path

import yaml

from casu_dataset import hub
from casu_dataset.contract import DESCRIPTION_TASK, FULL_CONDITION


class PushError(hub.HubError):
    pass


def runs(output_path: str | Path, skipped: list | None = None) -> list[tuple[Path, dict, list[Path]]]:
    """The complete runs under an output folder (results JSON, document, its sample logs);
    incomplete ones (killed, truncated, older harness) go to `skipped` as (path, why)."""
    from .outputs import complete_runs
    root = Path(output_path)
    good, bad = complete_runs(root)
    if skipped is not None:
        skipped.extend(bad)
    if not good:
        why = "; ".join(f"{f.relative_to(root)}: {w}" for f, w in bad)
        raise PushError(f"--output_path {root}: no complete results_*.json under it "
                        f"({'skipped ' + why if why else 'run an evaluation first'})")
    return good


def select_run(output_path: str | Path, checkpoint: str | None = None, skipped: list | None = None) -> tuple:
    """(results JSON, document, sample logs) of one checkpoint's latest full run.

    `checkpoint`: the results folder name (`qwen2.5-omni__Qwen__Qwen2.5-Omni-7B`), the checkpoint
    (`Qwen/Qwen2.5-Omni-7B`) or the adapter name; needed when the folder holds several."""
    from .results import checkpoint as ck_of, latest_runs, run_key
    runs(output_path, skipped)  # PushError when there is no complete run at all
    full = latest_runs(output_path, full_only=True)
    latest = latest_runs(output_path)

    def matches(doc):
        return checkpoint in (run_key(doc["model"]), ck_of(doc["model"]), doc["model"]["name"])
    if checkpoint:
        full = [r for r in full if matches(r[1])]
        latest = [r for r in latest if matches(r[1])]
        if not latest:
            raise PushError(f"--checkpoint {checkpoint!r}: no complete run of it under --output_path {output_path}")
    if not full:
        lim = latest[0][1]["config"].get("limit")
        raise PushError(f"--output_path {output_path}: refusing to push a --limit run ({latest[0][0].name} evaluated "
                        f"--limit {lim}, a subset of each task); rerun without --limit to push")
    if len(full) > 1:
        names = ", ".join(run_key(r[1]["model"]) for r in full)
        raise PushError(f"--output_path {output_path} holds several checkpoints; choose one with --checkpoint "
                        f"({names})")
    return full[0]


def plan_push(output_path: str | Path, repo: str, skipped: list | None = None, checkpoint: str | None = None) -> list:
    """The commit operations: the chosen run's files under `<checkpoint folder>/`, and the card."""
    from huggingface_hub import CommitOperationAdd
    try:
        hub.check_repo_id(repo)
    except hub.HubError as err:
        raise PushError(str(err)) from None
    f, doc, logs = select_run(output_path, checkpoint, skipped)
    files = [f, *logs]
    lm = f.parent / (doc.get("lm_eval_view") or "")
    if doc.get("lm_eval_view") and lm.is_file():
        files.append(lm)
    # the run's files sit under the name of its checkpoint folder, as written, also for old folders
    from .results import run_key
    ops = hub.folder_operations(f.parent, files, prefix=f"{run_key(doc['model'])}/")
    ops.append(CommitOperationAdd(path_in_repo="README.md",
                                  path_or_fileobj=results_card(output_path, repo).encode()))
    return ops


def results_card(output_path: str | Path, repo: str) -> str:
    """README.md of the results dataset: table 1 of each checkpoint's latest full run."""
    from .results import latest_runs, table1
    docs = [d for _, d, _ in latest_runs(output_path, full_only=True)]
    return "\n".join([
        "---", "pretty_name: CASU results", "tags:", "- casu", "- evaluation", "- audio", "---", "",
        f"# CASU results ({repo})", "",
        "Results of the CASU harness (`python -m harness`), one folder per checkpoint "
        "(`<adapter>__<checkpoint>/results_<date>.json`, the lm-eval view `lm_eval_<date>.json`, and "
        "per-sample logs). Only full runs are pushed (never `--limit` subsets).", "",
        "## Table 1 (all layers, each checkpoint's latest full run)", "", table1(*docs), "",
        "BLEU-4 on 0-100; BERTScore F1, Event Match and 1 - WER on 0-1; accuracies in %.", ""])


def push(output_path, repo: str, dataset_id: str | None = None, token: str | None = None, dry_run: bool = False,
         private: bool = True, checkpoint: str | None = None, api=None) -> dict:
    skipped: list = []
    ops = plan_push(output_path, repo, skipped, checkpoint)
    f, doc, _ = select_run(output_path, checkpoint)
    url = f"https://huggingface.co/datasets/{repo}"
    entries = eval_results_entries(doc, dataset_id, url) if dataset_id else []
    if not dry_run:
        try:
            hub.commit(repo, ops, f"CASU results: {f.parent.name} {doc['date']}", api=api, token=token,
                       private=private)
        except hub.HubUploadError:
            raise
        except hub.HubError as err:
            raise PushError(str(err)) from None
    return {"operations": [o.path_in_repo for o in ops], "run": str(f), "private": private,
            "eval_results_yaml": yaml.safe_dump(entries, sort_keys=False) if entries else "",
            "skipped": [(str(p), why) for p, why in skipped]}


# -- .eval_results/casu.yaml for a model repo ----------------------------------------------

def _metric(task: str, m: dict) -> tuple[str, float] | None:
    """(metric name, value 0-100) of a task's headline number: accuracy, or for scene
    description BERTScore F1 (0-1 in the results, x100 here so every entry is on one scale)."""
    if "accuracy" in m:
        v = (m.get("accuracy") or {}).get("value")
        return None if v is None else ("accuracy", round(100 * v, 2))
    if task == DESCRIPTION_TASK or "bertscore" in m:
        v = (m.get("bertscore") or {}).get("value")
        return None if v is None else ("bertscore_f1", round(100 * v, 2))
    return None


def eval_results_entries(doc: dict, dataset_id: str, source_url: str) -> list[dict]:
    """One entry per task at full audio, on a 0-100 scale, with the settings in `notes`."""
    from .results import checkpoint
    cfg = doc.get("config") or {}
    ck = checkpoint(doc["model"])
    out = []
    for task, conds in doc["results"].items():
        m = conds.get(FULL_CONDITION)
        got = _metric(task, m) if m else None
        if not got:
            continue
        metric, value = got
        notes = (f"{metric} x100 (0-100); adapter {doc['model']['name']}" + (f", checkpoint {ck}" if ck else "")
                 + f"; scoring {(doc.get('scoring') or {}).get(task)}; generation "
                 f"{(doc.get('generation') or {}).get(task)}; conditions full ({FULL_CONDITION}); "
                 f"scene_hint {cfg.get('scene_hint')}; circular {cfg.get('circular')}; seed {cfg.get('seed')}; "
                 f"n {m.get('n')}; dataset fingerprint {doc['dataset']['fingerprint']}; git {doc.get('git_hash')}")
        out.append({"dataset": {"id": dataset_id, "task_id": task}, "value": value, "date": doc["date"][:10],
                    "source": {"url": source_url, "name": "CASU harness"}, "notes": notes})
    return out


def pr_eval_results(output_path, model_repo: str, dataset_id: str, source_url: str | None = None,
                    checkpoint: str | None = None, token: str | None = None, dry_run: bool = False, api=None) -> dict:
    """Open a pull request on `model_repo` adding `.eval_results/casu.yaml` for one checkpoint's
    latest full run; returns {"yaml", "pr_url"}."""
    from huggingface_hub import CommitOperationAdd
    try:
        hub.check_repo_id(model_repo, "--model_repo")
        hub.check_repo_id(dataset_id, "--dataset_id")
    except hub.HubError as err:
        raise PushError(str(err)) from None
    f, doc, _ = select_run(output_path, checkpoint)
    entries = eval_results_entries(doc, dataset_id, source_url or f"https://huggingface.co/datasets/{dataset_id}")
    if not entries:
        raise PushError(f"{f}: no task has a full-audio result to report")
    text = yaml.safe_dump(entries, sort_keys=False)
    pr_url = None
    if not dry_run:
        op = CommitOperationAdd(path_in_repo=".eval_results/casu.yaml", path_or_fileobj=text.encode())
        try:
            info = hub.commit(model_repo, [op], f"Add CASU evaluation results ({f.parent.name})", api=api,
                              token=token, repo_type="model", create_pr=True, flag="--model_repo",
                              description=f"CASU results of {f.parent.name}, run {doc['date']} "
                                          f"(values 0-100; settings in each entry's notes).")
        except hub.HubUploadError:
            raise
        except hub.HubError as err:
            raise PushError(str(err)) from None
        pr_url = getattr(info, "pr_url", None)
    return {"yaml": text, "pr_url": pr_url, "run": str(f)}
