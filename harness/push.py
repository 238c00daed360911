"""Publish results to a Hub results dataset in lm-eval's tracker layout, and print the
model-card `.eval_results/casu.yaml` entries (https://huggingface.co/docs/hub/eval-results).

Layout in the results repo: `<model_sanitized>/results_<date>.json` and
`<model_sanitized>/samples_<task>_<date>.jsonl`, as lm-eval's EvaluationTracker writes them.
The token comes from HF_TOKEN (or the huggingface_hub login) and is never printed."""
from __future__ import annotations

from pathlib import Path

import yaml


class PushError(ValueError):
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


def plan_push(output_path: str | Path, repo: str, skipped: list | None = None) -> list:
    from huggingface_hub import CommitOperationAdd
    if repo.count("/") != 1:
        raise PushError(f"--repo {repo!r}: expected ORG/NAME")
    ops = []
    for f, _, logs in runs(output_path, skipped):
        for p in [f, *logs]:  # only the sample logs the run recorded, never stray or partial ones
            ops.append(CommitOperationAdd(path_in_repo=f"{f.parent.name}/{p.name}", path_or_fileobj=str(p)))
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
    skipped: list = []
    ops = plan_push(output_path, repo, skipped)
    docs = [doc for _, doc, _ in runs(output_path)]
    url = f"https://huggingface.co/datasets/{repo}"
    entries = [e for d in docs for e in eval_results_entries(d, dataset_id, url)]
    if not dry_run:
        from huggingface_hub import HfApi
        api = HfApi(token=token)
        api.create_repo(repo, repo_type="dataset", exist_ok=True)
        api.create_commit(repo, ops, commit_message=f"CASU results ({len(docs)} run(s))", repo_type="dataset")
    return {"operations": [o.path_in_repo for o in ops], "eval_results_yaml": yaml.safe_dump(entries, sort_keys=False),
            "skipped": [(str(f), why) for f, why in skipped]}
