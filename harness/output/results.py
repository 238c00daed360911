"""Results on disk: the JSON document (schema in harness/RESULTS.md), per-task sample logs,
Markdown tables shaped like the paper's tables 1-2, and PNG plots."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from importlib import metadata
from pathlib import Path

from casu_dataset import contract
from casu_dataset.contract import DESCRIPTION_TASK, FULL_CONDITION
from harness.output.files import checkpoint, run_key
from harness.output.lmeval import group_scores, sample_lines, task_hash, view
from harness.scoring.metrics import MCQ, METRICS, TEXT, Metric
from harness.scoring.records import as_dict

SCHEMA_VERSION = 2  # 2: complete, sample_logs, evaluated


def mcq_order() -> tuple[str, ...]:
    """Table columns: the registry's multiple-choice tasks, in registry order."""
    return contract.mcq_tasks()


def short(task: str, *docs: dict) -> str:
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


def task_kind(task: str, *docs: dict) -> str:
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


def other_tasks(kind: str, *docs: dict) -> list[str]:
    """The tasks of `kind` in the documents that the tables' fixed columns do not hold (tasks
    added with --include_path; any free-text task but scene description), sorted by name."""
    fixed = set(mcq_order()) | {DESCRIPTION_TASK}
    present = {t for d in docs for t in d["results"]} - fixed
    return sorted(t for t in present if task_kind(t, *docs) == kind)


def mcq_tasks_in(*docs: dict) -> list[str]:
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


def display_name(doc: dict) -> str:
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
    ev: dict,
    model: dict,
    config: dict,
    dataset: dict,
    date: str | None = None,
    run_times: dict | None = None,
    groups: list[dict] | None = None,
) -> dict:
    """Everything but the per-sample logs, in the documented schema. `run_times`: {start, end}
    UNIX times of the evaluation (lm-eval's date, start_time, end_time); `groups`: the run's lm-eval
    group files (run_groups), scored as lm-eval scores a group (lmeval.group_scores)."""
    status = "errors" if ev["errors"] else "ok"
    hashes = {
        t: task_hash(sample_lines(t, recs, (ev.get("generation") or {}).get(t)))
        for t, recs in (ev.get("samples") or {}).items()
    }
    return {
        "schema_version": SCHEMA_VERSION,
        "date": date or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_hash": git_hash(),
        "versions": versions(),
        "model": model,
        "config": config,
        "dataset": dict(dataset, fingerprint=ev["dataset_fingerprint"], identity=ev.get("dataset_identity")),
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


def _pct(m: dict | None) -> str:
    if not m or m.get("value") is None:
        return "-"
    return f"{100 * m['value']:.2f}"


def _columns(kind: str) -> list:
    """The registered metrics of a task kind that have a table column, in registry order."""
    return [m for m in METRICS.values() if kind in m.kinds and m.label]


def _description_columns() -> list:
    """Table 1's scene-description block: the free-text metrics with a column there."""
    return [m for m in _columns(TEXT) if m.description_column]


def _acc_fam(m: dict | None) -> str:
    """Accuracy, and for contrast-family data ' / family accuracy' (all four variants right)."""
    m = m or {}
    fam = m.get("family_accuracy")
    return _pct(m.get("accuracy")) + (f" / {_pct(fam)}" if fam else "")


def _n_ci(m: dict | None) -> str:
    """' [lo, hi] n=N' after a limited run's accuracy: a subset's number needs its uncertainty."""
    a = (m or {}).get("accuracy") or {}
    if m is None or a.get("value") is None:
        return ""
    ci = f" [{100 * a['ci95'][0]:.1f}, {100 * a['ci95'][1]:.1f}]" if a.get("ci95") else ""
    return f"{ci} n={m.get('n', '?')}"


def has_families(*docs: dict) -> bool:
    return any("family_accuracy" in m for d in docs for c in d["results"].values() for m in c.values())


def _text_columns(*docs: dict) -> list[tuple[str, Metric]]:
    """(task, metric) of the free-text tasks besides scene description: each metric with a column
    that the task has in some document, in registry order."""
    return [
        (t, m)
        for t in other_tasks(TEXT, *docs)
        for m in _columns(TEXT)
        if any(m.name in c for d in docs for c in (d["results"].get(t) or {}).values())
    ]


def _table1_row(doc: dict, full: str = FULL_CONDITION, mark: str = "", others: tuple = ((), ())) -> str:
    r = doc["results"]
    sd = r.get(DESCRIPTION_TASK, {}).get(full, {})
    name = display_name(doc) + (" (hint)" if doc["config"].get("scene_hint") else "") + mark
    cells = [name, *(m.cell(sd.get(m.name)) for m in _description_columns())]
    limited = bool(doc.get("config", {}).get("limit"))
    mcq, text = [*mcq_order(), *others[0]], others[1]
    cells += [
        _acc_fam(r.get(t, {}).get(full)) + (_n_ci(r.get(t, {}).get(full)) if limited else "") for t in mcq
    ]
    cells += [m.cell((r.get(t, {}).get(full) or {}).get(m.name)) for t, m in text]
    if limited:
        n = sum((r.get(t, {}).get(full) or {}).get("n", 0) for t in mcq)
        cells[0] += f" (--limit {doc['config']['limit']}, n={n})"
    return "| " + " | ".join(cells) + " |"


def table1(*docs: dict, full: str = FULL_CONDITION) -> str:
    """Paper table 1: scene description metrics | the four tasks' accuracy (%), one row per run;
    then a column per other multiple-choice task in the runs (--include_path, by name) and per
    metric of each other free-text task."""
    fam = has_families(*docs)
    others = (other_tasks(MCQ, *docs), _text_columns(*docs))
    heads = [
        "Model",
        *(m.label for m in _description_columns()),
        *(short(t, *docs) + (" acc / fam" if fam else "") for t in (*mcq_order(), *others[0])),
        *(f"{short(t, *docs)} {m.label}" for t, m in others[1]),
    ]
    head = "| " + " | ".join(heads) + " |"
    sep = "|" + "---|" * len(heads)
    marks = other_data(docs)
    lines = [head, sep, *(_table1_row(d, full, marks.get(id(d), ""), others) for d in docs)]
    if marks:
        ref = _identity_of(docs[0])
        lines += [
            "",
            f"† evaluated on other data than the first row (dataset identity differs from "
            f"{(ref or 'none')[:16]}): not comparable.",
        ]
    if fam:
        lines += [
            "",
            "acc: accuracy per variant (%); fam: family accuracy, all four variants of a contrast family "
            "right (%; chance 0.39).",
        ]
    return "\n".join(lines)


def _identity_of(doc: dict) -> str | None:
    return ((doc.get("dataset") or {}).get("identity") or {}).get("sha256")


def other_data(docs) -> dict[int, str]:
    """id(doc) -> "†" for runs whose dataset identity differs from the first run's (the data a table
    compares must be one dataset; a folder without a build record counts as its own identity)."""
    docs = list(docs)
    if not docs:
        return {}
    ref = _identity_of(docs[0])
    return {id(d): "†" for d in docs[1:] if _identity_of(d) != ref}


def latest_documents(output_path: str | Path, skipped: list | None = None) -> list[dict]:
    """The newest complete run of each checkpoint (adapter + pretrained) under an output folder,
    also in folders an older harness keyed by adapter name only; incomplete runs (killed,
    truncated, older harness) are appended to `skipped` as (path, why)."""
    return [doc for _, doc, _ in latest_runs(output_path, skipped)]


def latest_runs(output_path: str | Path, skipped: list | None = None, full_only: bool = False) -> list[tuple]:
    """(results JSON, document, sample logs) of the newest complete run per checkpoint, sorted by
    checkpoint; `full_only`: runs without --limit only."""
    from harness.output.files import complete_runs

    runs, bad = complete_runs(output_path)
    if skipped is not None:
        skipped.extend(bad)
    newest: dict[str, tuple] = {}
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


def table2(doc: dict) -> str:
    """Paper table 2: accuracy (%) per layer condition (P speech, E events, B background), a column
    per multiple-choice task of the run (the registry's, then --include_path's by name)."""
    r = doc["results"]
    conds = doc["config"]["conditions"]
    tasks = mcq_tasks_in(doc)
    head = "| P | E | B | " + " | ".join(short(t) for t in tasks) + " |"
    sep = "|---|---|---|" + "---|" * len(tasks)
    rows = [head, sep]
    for c in conds:
        marks = ["✓" if ch != "_" else "×" for ch in c]
        rows.append("| " + " | ".join(marks + [_acc_fam(r[t].get(c)) for t in tasks]) + " |")
    return "\n".join(rows)


# More than this share of a task's answers unparsed: the scores say little about the model
# (the console says so in one line; --strict fails the run).
UNPARSED_ALARM = 0.5


def task_status(doc: dict) -> list[dict]:
    """Per task and condition: requests scored (n), failed samples, and for multiple choice the
    share of answers parsed and unparsed (None for free text, or when nothing was scored)."""
    out = []
    for task, by_cond in doc["results"].items():
        for cond, m in by_cond.items():
            un = (m.get("unparsed_rate") or {}).get("value")
            out.append(
                {
                    "task": task,
                    "condition": cond,
                    "n": m.get("n", 0),
                    "failed": m.get("n_errors", 0),
                    "unparsed": un,
                    "parsed": None if un is None else 1 - un,
                }
            )
    return out


def _share(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def status_table(doc: dict) -> str:
    """The console's per-task lines: parsed and unparsed answers, failed samples, (PARTIAL) when
    --limit evaluated a subset."""
    partial = doc["config"].get("limit") is not None
    conds = doc["config"].get("conditions") or []
    rows = ["| Task | Condition | n | Parsed | Unparsed | Failed |", "|---|---|---|---|---|---|"]
    for s in task_status(doc):
        name = s["task"] + (" (PARTIAL)" if partial else "")
        cond = s["condition"] if len(conds) > 1 or s["condition"] != FULL_CONDITION else "full"
        shares = f"{_share(s['parsed'])} | {_share(s['unparsed'])}"
        rows.append(f"| {name} | {cond} | {s['n']} | {shares} | {s['failed']} |")
    return "\n".join(rows)


def unparsed_alarms(doc: dict) -> list[dict]:
    """The tasks (and conditions) where more than UNPARSED_ALARM of the answers were unparsed."""
    return [
        s for s in task_status(doc) if s["unparsed"] is not None and s["n"] and s["unparsed"] > UNPARSED_ALARM
    ]


def conditions_ran(doc: dict) -> bool:
    """Whether the run had layer conditions besides the full mixture (Table 2 applies)."""
    return any(c != FULL_CONDITION for c in doc["config"].get("conditions") or [])


def markdown(doc: dict) -> str:
    parts = [
        f"# CASU results: {display_name(doc)}",
        "",
        f"date {doc['date']} · git {doc['git_hash']} · dataset {doc['dataset']['path']} "
        f"({doc['dataset']['fingerprint']}) · status **{doc['status']}** ({doc['n_errors']} errors)",
        "",
    ]
    probe = doc["audio_probe"]
    if doc["config"].get("limit"):
        parts += [
            f"> **--limit {doc['config']['limit']}: a subset of each task; for quick checks, not for "
            "reporting.**",
            "",
        ]
    if probe.get("status") == "unchanged":
        parts += [
            "> **Warning: the audio probe saw no change with silent or swapped audio; the audio is probably "
            "not reaching the model.**",
            "",
        ]
    parts += ["## Table 1 (all layers)", "", table1(doc), ""]
    if doc.get("robustness"):
        parts += ["## Recording robustness", "", robustness_table(doc), ""]
    if len(doc["config"]["conditions"]) > 1:
        parts += ["## Table 2 (layer ablations)", "", table2(doc), ""]
    # The metrics shown with their interval lead, then the family shapes, then the other metrics.
    lead = [m for m in _columns(MCQ) if m.with_ci]
    rest = [m for m in _columns(MCQ) if not m.with_ci]
    heads = [
        "Task",
        "Condition",
        "n",
        *(m.label for m in lead),
        "Slot acc / fam",
        "Crossed acc / fam",
        *(m.label for m in rest),
    ]
    parts += ["## Per task", "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for t, conds in doc["results"].items():
        for c, m in conds.items():
            if "accuracy" not in m:
                continue
            shapes = m.get("by_family_shape") or {}
            cells = [
                t,
                c,
                str(m["n"]),
                *(x.cell(m.get(x.name)) for x in lead),
                _acc_fam(shapes.get("slot")),
                _acc_fam(shapes.get("crossed")),
                *(x.cell(m.get(x.name)) for x in rest),
            ]
            parts.append("| " + " | ".join(cells) + " |")
    return "\n".join(parts) + "\n"


def robustness_table(doc: dict) -> str:
    """Recording robustness (a run with --robustness_dataset): per task and over all tasks, at each
    condition, the share of families answered the same on both realizations beside each
    realization's accuracy and family accuracy."""
    rb = doc.get("robustness")
    if not rb:
        return ""
    r1, r2 = rb["realization1"], rb["realization2"]
    lines = [
        f"Recording robustness: realization 1 {r1['path']} (identity "
        f"{((r1.get('identity') or {}).get('sha256') or 'none')[:16]}) vs realization 2 {r2['path']} "
        f"(identity {((r2.get('identity') or {}).get('sha256') or 'none')[:16]})",
        "",
        "| Task | Condition | Rec. consistency (95% CI) | families (unpaired) | unparsed R1 / R2 "
        "| acc R1 / R2 | family acc R1 / R2 |",
        "|---|---|---|---|---|---|---|",
    ]
    metric = METRICS["recording_consistency"]

    def row(task, cond, rc, a1, a2):
        return (
            f"| {task} | {cond} | {metric.cell(rc)} | {rc['families']} ({rc['families_unpaired']}) | "
            f"{rc['unparsed']['realization1']} / {rc['unparsed']['realization2']} | "
            f"{_pct(a1)} / {_pct(a2)} | "
            f"{_pct({'value': rc['family_accuracy_realization1']})} / "
            f"{_pct({'value': rc['family_accuracy_realization2']})} |"
        )

    for t, conds in doc["results"].items():
        for c, m in conds.items():
            rc = m.get("recording_consistency")
            if rc:
                other = (r2.get("results") or {}).get(t, {}).get(c, {})
                lines.append(row(t, c, rc, m.get("accuracy"), other.get("accuracy")))
    for c, rc in (rb.get("overall") or {}).items():
        lines.append(row("all tasks", c, rc, None, None))
    lines += [
        "",
        "Rec. consistency: share of contrast families whose every question got the same parsed answer on "
        "both realizations (unparsed counts as not the same). Read it beside accuracy: a model that "
        "ignores the audio is consistent at chance accuracy.",
    ]
    return "\n".join(lines)


ONE_FAMILY = "1 family: too few"  # a task whose intervals come from one family: no interval to show
CHANCE = {"accuracy": 25.0, "family_accuracy": 100 / 256}  # %: one of 4 options; all 4 variants by chance


def _families(m: dict | None) -> int | None:
    """The contrast families a task's family accuracy was computed over (None: not family data)."""
    fam = (m or {}).get("family_accuracy") or {}
    if fam.get("value") is None:
        return None
    return fam.get("families", fam.get("n"))


def _top(values: list[float], metric: str) -> float:
    """The top of a plot's y-axis (or colour scale) in %, from the data: the largest value or
    upper interval end and the chance level, with headroom, at least 5%, at most 105%."""
    return min(105.0, max(5.0, 1.15 * max([*values, CHANCE[metric]]) + 1.0))


def _plot_tasks(doc: dict, cond: str) -> tuple[list[str], list[str], list[str]]:
    """The multiple-choice tasks a plot shows (registry order, then --include_path's by name), those
    evaluated on a single contrast family at `cond`, and their tick labels (that one says so)."""
    tasks = mcq_tasks_in(doc)
    too_few = [t for t in tasks if _families(doc["results"][t].get(cond)) == 1]
    labels = [short(t) + (f"\n({ONE_FAMILY})" if t in too_few else "") for t in tasks]
    return tasks, too_few, labels


def _plot_title(doc: dict, cond: str | None) -> str:
    r = doc["results"]
    conds = doc["config"]["conditions"]
    full = FULL_CONDITION if FULL_CONDITION in conds else conds[-1]
    limit = (doc.get("config") or {}).get("limit")
    title = display_name(doc) + (f" ({cond})" if cond else "")
    if limit:
        n = sum((r[t].get(full) or {}).get("n", 0) for t in mcq_tasks_in(doc))
        title = f"PARTIAL (--limit {limit}, n={n}): {title}"
    return title


def accuracy_plot_data(doc: dict) -> dict:
    """What the accuracy plot shows: per multiple-choice task (the registry's, then the others in
    the run by name) at full audio (or the last condition), accuracy and, on contrast-family data,
    family accuracy (the headline metric), each in % with its 95% interval (lo, hi; None for a task
    evaluated on a single family, whose interval is a point: `too_few`, labelled ONE_FAMILY);
    `ylim`: each metric's y-axis top, from the data (family accuracy: from the tasks with more than
    one family); the title names the run and, for a --limit run, says PARTIAL with the limit and n."""
    r = doc["results"]
    conds = doc["config"]["conditions"]
    full = FULL_CONDITION if FULL_CONDITION in conds else conds[-1]
    tasks, too_few, labels = _plot_tasks(doc, full)
    bars = []
    for t in tasks:
        m = r[t].get(full) or {}
        for metric in ("accuracy", "family_accuracy"):
            a = m.get(metric) or {}
            if a.get("value") is None:
                continue
            v = 100 * a["value"]
            ci = a.get("ci95") or [a["value"], a["value"]]
            lo, hi = (None, None) if t in too_few else (100 * ci[0], 100 * ci[1])
            bars.append({"task": t, "metric": metric, "value": v, "lo": lo, "hi": hi})
    # Each axis from its data; a single family's family accuracy (0 or 100%) does not set it (its bar
    # may run off the top, its label says so).
    ylim = {}
    for metric in ("accuracy", "family_accuracy"):
        shown = [b for b in bars if b["metric"] == metric]
        if shown:
            scaled = [b for b in shown if metric == "accuracy" or b["task"] not in too_few] or shown
            ylim[metric] = _top([b["value"] if b["hi"] is None else b["hi"] for b in scaled], metric)
    limit = (doc.get("config") or {}).get("limit")
    return {
        "tasks": [t for t in tasks if any(b["task"] == t for b in bars)],
        "labels": [lab for t, lab in zip(tasks, labels) if any(b["task"] == t for b in bars)],
        "bars": bars,
        "too_few": [t for t in too_few if any(b["task"] == t for b in bars)],
        "ylim": ylim,
        "family": any(b["metric"] == "family_accuracy" for b in bars),
        "partial": bool(limit),
        "title": _plot_title(doc, full),
        "condition": full,
    }


def ablation_plot_data(doc: dict) -> dict | None:
    """What the ablation heatmap shows (None: the run had one condition, or no multiple-choice
    task): per condition (rows) and multiple-choice task (columns), accuracy and, on contrast-family
    data, family accuracy in % (None where not evaluated), each with its colour-scale top (accuracy
    100, family accuracy from the data, so a few % stay visible); tick labels say which tasks had a
    single family."""
    r = doc["results"]
    conds = doc["config"]["conditions"]
    tasks = mcq_tasks_in(doc)
    if len(conds) < 2 or not tasks:
        return None
    full = FULL_CONDITION if FULL_CONDITION in conds else conds[-1]
    _, too_few, labels = _plot_tasks(doc, full)

    def grid(metric: str) -> list[list[float | None]]:
        out: list[list[float | None]] = []
        for c in conds:
            row: list[float | None] = []
            for t in tasks:
                v = ((r[t].get(c) or {}).get(metric) or {}).get("value")
                row.append(None if v is None else 100 * v)
            out.append(row)
        return out

    acc, fam = grid("accuracy"), grid("family_accuracy")
    fam_values = [v for row in fam for v in row if v is not None]
    scaled = [v for row in fam for t, v in zip(tasks, row) if v is not None and t not in too_few]
    return {
        "tasks": tasks,
        "labels": labels,
        "too_few": too_few,
        "conditions": list(conds),
        "accuracy": acc,
        "family_accuracy": fam if fam_values else None,
        "vmax": {
            "accuracy": 100.0,
            "family_accuracy": _top(scaled or fam_values, "family_accuracy") if fam_values else None,
        },
        "partial": bool((doc.get("config") or {}).get("limit")),
        "title": _plot_title(doc, None),
    }


def plots(doc: dict, out_dir: Path, stamp: str = "") -> list[Path]:
    """accuracy_by_task<stamp>.png (accuracy_plot_data: one panel per metric, each y-axis from its
    data) and, for a run with several conditions, ablation_heatmap<stamp>.png (ablation_plot_data:
    accuracy and family accuracy side by side). Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from casu_dataset.core.atomic import atomic_open

    def save(fig, p):
        with atomic_open(p, "wb") as f:
            fig.savefig(f, dpi=120, format="png")
        plt.close(fig)

    def ticks(ax, labels, too_few_flags):
        long = len(labels) > 5 or any(len(x.split("\n")[0]) > 14 for x in labels)
        ax.set_xticks(
            range(len(labels)),
            labels,
            fontsize=7,
            rotation=20 if long else 0,
            ha="right" if long else "center",
        )
        for lab, flag in zip(ax.get_xticklabels(), too_few_flags):
            if flag:
                lab.set_color("#B00020")

    written: list[Path] = []
    data = accuracy_plot_data(doc)
    if not data["bars"]:
        return written
    tasks = data["tasks"]
    flags = [t in data["too_few"] for t in tasks]
    title_color = "#B00020" if data["partial"] else "black"
    panels = [
        ("accuracy", "#4C72B0", "accuracy per variant (%)", "chance per variant (25%)", "--"),
        ("family_accuracy", "#DD8452", "family accuracy, all 4 right (%)", "chance per family (0.39%)", ":"),
    ]
    panels = [pn for pn in panels if pn[0] in data["ylim"]]
    width_in = max(6.4, 1.1 * len(tasks) + 2.0)
    fig, axes = plt.subplots(
        len(panels), 1, sharex=True, figsize=(width_in, 2.4 * len(panels) + 1.2), squeeze=False
    )
    for ax, (metric, color, ylabel, chance_label, ls) in zip(axes[:, 0], panels):
        bars = [b for b in data["bars"] if b["metric"] == metric]
        top = data["ylim"][metric]
        xs = [tasks.index(b["task"]) for b in bars]
        ax.bar(xs, [b["value"] for b in bars], 0.6, color=color)
        with_ci = [(x, b) for x, b in zip(xs, bars) if b["lo"] is not None]
        if with_ci:
            ax.errorbar(
                [x for x, _ in with_ci],
                [b["value"] for _, b in with_ci],
                yerr=[
                    [max(0.0, b["value"] - b["lo"]) for _, b in with_ci],
                    [max(0.0, b["hi"] - b["value"]) for _, b in with_ci],
                ],
                fmt="none",
                ecolor="black",
                capsize=3,
                lw=1,
                label="95% bootstrap interval",
            )
        for x, b in zip(xs, bars):  # the value, also where the bar has no height (a family accuracy of 0)
            above = b["value"] if b["hi"] is None else max(b["value"], b["hi"])
            off_top = b["value"] > top  # a single family's bar, above the axis its data did not set
            ax.text(
                x,
                min(above + 0.01 * top, 0.9 * top),
                f"{b['value']:.1f}" + (" ↑" if off_top else ""),
                ha="center",
                va="bottom",
                fontsize=7,
            )
        ax.axhline(CHANCE[metric], ls=ls, color="grey", lw=1, label=chance_label)
        ax.set_ylim(0, top)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.legend(loc="upper right", fontsize=6)
    ax = axes[-1, 0]
    ax.set_xlim(-0.75, len(tasks) - 0.25)
    ticks(ax, data["labels"], flags)
    axes[0, 0].set_title(data["title"], fontsize=9, color=title_color)
    fig.tight_layout()
    p = out_dir / f"accuracy_by_task{stamp}.png"
    save(fig, p)
    written.append(p)

    heat = ablation_plot_data(doc)
    if heat is None:
        return written
    conds, tasks = heat["conditions"], heat["tasks"]
    flags = [t in heat["too_few"] for t in tasks]
    shown = [("accuracy", "accuracy (%)")] + (
        [("family_accuracy", "family accuracy, all 4 right (%)")] if heat["family_accuracy"] else []
    )
    width_in = max(4.8, 0.9 * len(tasks) + 2.2)
    fig, axes = plt.subplots(
        1, len(shown), figsize=(width_in * len(shown), 0.45 * len(conds) + 1.8), squeeze=False
    )
    for ax, (metric, label) in zip(axes[0], shown):
        grid = np.array([[np.nan if v is None else v for v in row] for row in heat[metric]], dtype=float)
        vmax = heat["vmax"][metric]
        im = ax.imshow(grid, cmap="viridis", vmin=0, vmax=vmax, aspect="auto")
        ticks(ax, heat["labels"], flags)
        ax.set_yticks(range(len(conds)), conds)
        for i in range(len(conds)):
            for j in range(len(tasks)):
                v = grid[i, j]
                text = "-" if np.isnan(v) else f"{v:.1f}"
                dark = np.isnan(v) or v < 0.6 * vmax  # viridis: dark at the bottom, yellow at the top
                ax.text(j, i, text, ha="center", va="center", color="w" if dark else "black", fontsize=8)
        ax.set_title(label, fontsize=8)
        fig.colorbar(im, ax=ax, label="%")
    axes[0, 0].set_ylabel("layers kept (P speech, E events, B background)", fontsize=8)
    fig.suptitle(heat["title"], fontsize=9, color="#B00020" if heat["partial"] else "black")
    fig.tight_layout()
    p = out_dir / f"ablation_heatmap{stamp}.png"
    save(fig, p)
    written.append(p)
    return written


CASU_RESULTS = "casu_results_"  # CASU's own document; lm-eval's tools glob `/results_` and `/samples_`
CASU_SAMPLES = "casu_samples_"


def write_outputs(doc: dict, samples: dict[str, list[dict]] | None, out_root: Path) -> Path:
    """<out>/<adapter>__<checkpoint>/: lm-eval's `results_<date>.json` (and, with samples, its
    `samples_<task>_<date>.jsonl`), CASU's own `casu_results_<date>.json` (and
    `casu_samples_<task>_<date>.jsonl`), `results_<date>.md`, `accuracy_by_task_<date>.png`,
    `ablation_heatmap_<date>.png`: every file of a run carries its stamp, so a run never
    overwrites another's report or leaves a stale plot.

    Each file goes to a temp name and is renamed into place; CASU's JSON comes last and records
    every sample log's SHA-256, so it marks the run complete (see outputs.check_run). Returns it."""
    from harness.output.files import claimed_stamp, set_aside_orphans, writing

    d = Path(out_root) / run_key(doc["model"])
    d.mkdir(parents=True, exist_ok=True)
    base = doc["date"].replace(":", "-").replace("+00-00", "")

    def taken(stamp: str) -> bool:  # two runs in a second: the next free stamp
        return any(
            (d / f"{pre}{stamp}{ext}").exists()
            for pre, ext in ((CASU_RESULTS, ".json"), ("results_", ".json"), ("results_", ".md"))
        )

    with claimed_stamp(d, base, taken) as stamp:  # atomic: concurrent runs never share a name
        set_aside_orphans(d)  # a killed run's sample logs would sit beside these (rows seen twice)
        with writing(d, stamp):
            return _write_stamped(doc, samples, d, stamp)


def _write_stamped(doc: dict, samples, d: Path, stamp: str) -> Path:
    from casu_dataset.core.atomic import atomic_open
    from harness.output.files import atomic_write, file_record

    logs, lm_logs = {}, {}
    for task, recs in (samples or {}).items():
        p = d / f"{CASU_SAMPLES}{task}_{stamp}.jsonl"
        with atomic_open(p) as f:
            for r in recs:
                f.write(json.dumps(as_dict(r), ensure_ascii=False) + "\n")
        logs[task] = file_record(p)
        p = d / f"samples_{task}_{stamp}.jsonl"  # lm-eval's sample lines
        with atomic_open(p) as f:
            for line in sample_lines(task, recs, (doc.get("generation") or {}).get(task)):
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
        lm_logs[task] = file_record(p)
    atomic_write(d / f"results_{stamp}.md", markdown(doc))
    plots(doc, d, f"_{stamp}")
    path = d / f"{CASU_RESULTS}{stamp}.json"
    lm = d / f"results_{stamp}.json"  # lm-eval's schema, for tools that read lm-eval output
    atomic_write(lm, json.dumps(view(dict(doc, casu_document=path.name)), indent=2, ensure_ascii=False))
    atomic_write(
        path,
        json.dumps(
            dict(doc, complete=True, sample_logs=logs, lm_eval_sample_logs=lm_logs, lm_eval_view=lm.name),
            indent=2,
            ensure_ascii=False,
        ),
    )
    return path
