"""Publish results to a Hub results dataset in lm-eval's tracker layout, and print the
model-card `.eval_results/casu.yaml` entries (https://huggingface.co/docs/hub/eval-results).

Layout in the results repo: `<model_sanitized>/results_<date>.json` and
`<model_sanitized>/samples_<task>_<date>.jsonl`, as lm-eval's EvaluationTracker writes them.
The token comes from HF_TOKEN (or the huggingface_hub login) and is never printed."""
from __future__ import annotations

import json
from pathlib import Path

import yaml


class PushError(ValueError):
    pass


def result_files(output_path: str | Path) -> list[Path]:
    root = Path(output_path)
    files = sorted(root.glob("*/results_*.json"))
    if not files:
        raise PushError(f"--output_path {root}: no results_*.json under it (run an evaluation first)")
    return files


def plan_push(output_path: str | Path, repo: str) -> list:
    from huggingface_hub import CommitOperationAdd
    if repo.count("/") != 1:
        raise PushError(f"--repo {repo!r}: expected ORG/NAME")
    ops = []
    for f in result_files(output_path):
        model_dir = f.parent
        stamp = f.stem[len("results_"):]
        ops.append(CommitOperationAdd(path_in_repo=f"{model_dir.name}/{f.name}", path_or_fileobj=str(f)))
        for s in sorted(model_dir.glob(f"samples_*_{stamp}.jsonl")):
            ops.append(CommitOperationAdd(path_in_repo=f"{model_dir.name}/{s.name}", path_or_fileobj=str(s)))
    return ops


def eval_results_entries(doc: dict, dataset_id: str, source_url: str) -> list[dict]:
    """One entry per task (accuracy in %, or BERTScore F1 for scene description), full audio."""
    out = []
    for task, conds in doc["results"].items():
        m = conds.get("PEB")
        if not m:
            continue
        metric = "accuracy" if "accuracy" in m else "bertscore"
        v = (m.get(metric) or {}).get("value")
        if v is None:
            continue
        out.append({"dataset": {"id": dataset_id, "task_id": task},
                    "value": round(100 * v, 2) if metric == "accuracy" else round(v, 4),
                    "date": doc["date"][:10],
                    "source": {"url": source_url, "name": "CASU harness"},
                    "notes": f"{metric}; {doc['model']['name']}; scoring {doc['scoring'].get(task)}; "
                             f"dataset fingerprint {doc['dataset']['fingerprint']}"})
    return out


def push(output_path, repo: str, dataset_id: str, token: str | None = None, dry_run: bool = False) -> dict:
    ops = plan_push(output_path, repo)
    docs = [json.loads(f.read_text()) for f in result_files(output_path)]
    url = f"https://huggingface.co/datasets/{repo}"
    entries = [e for d in docs for e in eval_results_entries(d, dataset_id, url)]
    if not dry_run:
        from huggingface_hub import HfApi
        api = HfApi(token=token)
        api.create_repo(repo, repo_type="dataset", exist_ok=True)
        api.create_commit(repo, ops, commit_message=f"CASU results ({len(docs)} run(s))", repo_type="dataset")
    return {"operations": [o.path_in_repo for o in ops], "eval_results_yaml": yaml.safe_dump(entries, sort_keys=False)}
