"""CASU's results document (schema in harness/RESULTS.md; typed in harness/run/schema.py): how
one evaluation becomes the document, the task helpers every view of it shares (short names, kinds,
order), and finding the newest complete runs in an output folder."""

from __future__ import annotations

import datetime as dt
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Literal, cast

from casu_dataset import contract
from casu_dataset.contract import DESCRIPTION_TASK
from harness.output.files import checkpoint, run_key
from harness.output.lmeval import group_scores, sample_lines, task_hash
from harness.run.schema import DatasetRecord, Evaluation, ModelRecord, ResultsDocument
from harness.scoring.metrics import MCQ, TEXT
from harness.scoring.records import as_rows

SCHEMA_VERSION = 2  # 2: complete, sample_logs, evaluated


def mcq_order() -> tuple[str, ...]:
    """Table columns: the registry's multiple-choice tasks, in registry order."""
    return contract.mcq_tasks()


def short(task: str, *docs: ResultsDocument) -> str:
    """A task's column label: the registry's short name, else (a task added with --include_path)
    its task_alias as a document recorded it, else its name."""
    spec = contract.registered_task(task)
    if spec is not None:
        return spec.short
    for d in docs:
        alias = (((d.get("config") or {}).get("task_configs") or {}).get(task) or {}).get("alias")
        if alias:
            return alias
    return task


def task_kind(task: str, *docs: ResultsDocument) -> str:
    """MCQ or TEXT: the registry's kind, else the output_type a document recorded for the task
    (`config.task_configs`, its resolved YAML), else multiple choice when its results have an
    accuracy."""
    spec = contract.registered_task(task)
    if spec is not None:
        return MCQ if spec.is_mcq else TEXT
    for d in docs:
        cfg = ((d.get("config") or {}).get("task_configs") or {}).get(task) or {}
        if cfg.get("output_type") in (MCQ, TEXT):
            return cfg["output_type"]
    return (
        MCQ if any("accuracy" in m for d in docs for m in (d["results"].get(task) or {}).values()) else TEXT
    )


def other_tasks(kind: str, *docs: ResultsDocument) -> list[str]:
    """The tasks of `kind` in the documents that the tables' fixed columns do not hold (tasks
    added with --include_path; any free-text task but scene description), sorted by name."""
    fixed = set(mcq_order()) | {DESCRIPTION_TASK}
    present = {t for d in docs for t in d["results"]} - fixed
    return sorted(t for t in present if task_kind(t, *docs) == kind)


def mcq_tasks_in(*docs: ResultsDocument) -> list[str]:
    """The multiple-choice tasks the documents hold: the registry's in registry order, then the
    others (--include_path) sorted by name."""
    present = {t for d in docs for t in d["results"]}
    return [t for t in mcq_order() if t in present] + other_tasks(MCQ, *docs)


PACKAGES = [
    "casu",
    "torch",
    "transformers",
    "datasets",
    "accelerate",
    "numpy",
    "sacrebleu",
    "bert-score",
    "jiwer",
    "sentence-transformers",
    "faster-whisper",
    "mistral-common",
]


def git_hash() -> str | None:
    try:
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return (out.stdout.strip() + ("-dirty" if dirty else "")) if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def versions() -> dict:
    out: dict[str, str | None] = {}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def display_name(doc: ResultsDocument) -> str:
    ck = checkpoint(doc["model"])
    return doc["model"]["name"] + (f" ({ck})" if ck else "")


def env_info() -> dict:
    """lm-eval's environment fields, cheaply: a short `pretty_env_info` (lm-eval runs torch's
    collect_env, which takes seconds and lists every package) and `upper_git_hash` (None: CASU is
    not a submodule)."""
    import platform
    import sys

    torch = sys.modules.get("torch")  # never imported just for this (the baselines run without it)
    cuda = None
    if torch is not None:
        try:
            cuda = bool(torch.cuda.is_available())
        except Exception:  # noqa: BLE001 - informational only
            cuda = None
    v = versions()
    text = "\n".join(
        [
            f"PyTorch version: {v.get('torch')}",
            f"Is CUDA available: {cuda}",
            f"Python version: {sys.version.split()[0]}",
            f"OS: {platform.platform()}",
            f"transformers version: {v.get('transformers')}",
        ]
    )
    return {"pretty_env_info": text, "upper_git_hash": None}


def run_groups(tasks) -> list[dict]:
    """The lm-eval group files (TaskConfig.lmeval_groups) whose every task is in the run, once each."""
    names = {t.task for t in tasks}
    out: dict[str, dict] = {}
    for t in tasks:
        for g in t.lmeval_groups or []:
            if all(m in names for m in g["task"]):
                out.setdefault(g["group"], g)
    return list(out.values())


def document(
    ev: Evaluation,
    model: ModelRecord,
    config: dict,
    dataset: dict,
    date: str | None = None,
    run_times: dict | None = None,
    groups: list[dict] | None = None,
) -> ResultsDocument:
    """Everything but the per-sample logs, in the documented schema. `run_times`: {start, end}
    UNIX times of the evaluation (lm-eval's date, start_time, end_time); `groups`: the run's lm-eval
    group files (run_groups), scored as lm-eval scores a group (lmeval.group_scores)."""
    status: Literal["ok", "errors"] = "errors" if ev["errors"] else "ok"
    hashes = {
        t: task_hash(sample_lines(t, as_rows(recs), (ev.get("generation") or {}).get(t)))
        for t, recs in (ev.get("samples") or {}).items()
    }
    return {
        "schema_version": SCHEMA_VERSION,
        "date": date or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_hash": git_hash(),
        "versions": versions(),
        "model": model,
        "config": config,
        "dataset": cast(
            DatasetRecord,
            dict(dataset, fingerprint=ev["dataset_fingerprint"], identity=ev.get("dataset_identity")),
        ),
        "generation": ev["generation"],
        "scoring": ev["scoring"],
        "audio_probe": ev["audio_probe"],
        "results": ev["results"],
        # lm-eval's groups of the run: tasks, alias, aggregate_metric_list and the group score per
        # condition (empty without an aggregate_metric_list)
        "groups": {
            g["group"]: {
                "alias": g.get("alias"),
                "tasks": list(g["task"]),
                "file": g.get("file"),
                "version": g.get("version"),
                "aggregate_metric_list": g.get("aggregate_metric_list") or [],
                "results": group_scores(g, ev["results"]),
            }
            for g in groups or []
        },
        "n_samples": {t: next(iter(c.values()))["n"] if c else 0 for t, c in ev["results"].items()},
        "evaluated": ev["evaluated"],
        "status": status,
        "n_errors": len(ev["errors"]),
        "errors": ev["errors"],
        "truncated_audio": ev["truncated_audio"],
        "timing": ev["timing"],
        "run_times": run_times or {},
        "env": env_info(),
        "task_hashes": hashes,  # lm-eval's: per task, over its sample lines' doc, prompt and target hashes
    }


def latest_documents(output_path: str | Path, skipped: list | None = None) -> list[ResultsDocument]:
    """The newest complete run of each checkpoint (adapter + pretrained) under an output folder,
    also in folders an older harness keyed by adapter name only; incomplete runs (killed,
    truncated, older harness) are appended to `skipped` as (path, why)."""
    return [doc for _, doc, _ in latest_runs(output_path, skipped)]


def latest_runs(
    output_path: str | Path, skipped: list | None = None, full_only: bool = False
) -> list[tuple[Path, ResultsDocument, list[Path]]]:
    """(results JSON, document, sample logs) of the newest complete run per checkpoint, sorted by
    checkpoint; `full_only`: runs without --limit only."""
    from harness.output.files import complete_runs

    runs, bad = complete_runs(output_path)
    if skipped is not None:
        skipped.extend(bad)
    newest: dict[str, tuple[Path, ResultsDocument, list[Path]]] = {}
    for run in runs:
        doc = run[1]
        if full_only and (doc.get("config") or {}).get("limit"):
            continue
        k = run_key(doc["model"]) + (" (hint)" if (doc.get("config") or {}).get("scene_hint") else "")
        if k not in newest or (doc.get("date") or "", run[0].name) >= (
            newest[k][1].get("date") or "",
            newest[k][0].name,
        ):
            newest[k] = run
    return [newest[k] for k in sorted(newest)]
