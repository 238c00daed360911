"""Markdown tables of results documents, shaped like the paper's: the main table (the paper's
table 1: every model, one row each), the ablation table (its table 2: accuracy per layer
condition), the per-task status and the robustness table, and the run's results_<date>.md."""

from __future__ import annotations

from typing import TYPE_CHECKING

from casu_dataset.contract import DESCRIPTION_TASK, FULL_CONDITION
from harness.output.document import display_name, mcq_order, mcq_tasks_in, other_tasks, short
from harness.scoring.metrics import MCQ, METRICS, TEXT, Metric

if TYPE_CHECKING:
    from harness.run.schema import ResultsDocument


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


def has_families(*docs: ResultsDocument) -> bool:
    return any("family_accuracy" in m for d in docs for c in d["results"].values() for m in c.values())


def _text_columns(*docs: ResultsDocument) -> list[tuple[str, Metric]]:
    """(task, metric) of the free-text tasks besides scene description: each metric with a column
    that the task has in some document, in registry order."""
    return [
        (t, m)
        for t in other_tasks(TEXT, *docs)
        for m in _columns(TEXT)
        if any(m.name in c for d in docs for c in (d["results"].get(t) or {}).values())
    ]


def _main_table_row(
    doc: ResultsDocument, full: str = FULL_CONDITION, mark: str = "", others: tuple = ((), ())
) -> str:
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


def main_table(*docs: ResultsDocument, full: str = FULL_CONDITION) -> str:
    """The main table (the paper's table 1): scene description metrics | the four tasks' accuracy
    (%), one row per run; then a column per other multiple-choice task in the runs (--include_path,
    by name) and per metric of each other free-text task."""
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
    lines = [head, sep, *(_main_table_row(d, full, marks.get(id(d), ""), others) for d in docs)]
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


def _identity_of(doc: ResultsDocument) -> str | None:
    return ((doc.get("dataset") or {}).get("identity") or {}).get("sha256")


def other_data(docs) -> dict[int, str]:
    """id(doc) -> "†" for runs whose dataset identity differs from the first run's (the data a table
    compares must be one dataset; a folder without a build record counts as its own identity)."""
    docs = list(docs)
    if not docs:
        return {}
    ref = _identity_of(docs[0])
    return {id(d): "†" for d in docs[1:] if _identity_of(d) != ref}


def ablation_table(doc: ResultsDocument) -> str:
    """The ablation table (the paper's table 2): accuracy (%) per layer condition (P speech, E
    events, B background), a column per multiple-choice task of the run (the registry's, then
    --include_path's by name)."""
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


def task_status(doc: ResultsDocument) -> list[dict]:
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


def status_table(doc: ResultsDocument) -> str:
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


def unparsed_alarms(doc: ResultsDocument) -> list[dict]:
    """The tasks (and conditions) where more than UNPARSED_ALARM of the answers were unparsed."""
    return [
        s for s in task_status(doc) if s["unparsed"] is not None and s["n"] and s["unparsed"] > UNPARSED_ALARM
    ]


def conditions_ran(doc: ResultsDocument) -> bool:
    """Whether the run had layer conditions besides the full mixture (Table 2 applies)."""
    return any(c != FULL_CONDITION for c in doc["config"].get("conditions") or [])


def markdown(doc: ResultsDocument) -> str:
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
    parts += ["## Table 1 (all layers)", "", main_table(doc), ""]
    if doc.get("robustness"):
        parts += ["## Recording robustness", "", robustness_table(doc), ""]
    if len(doc["config"]["conditions"]) > 1:
        parts += ["## Table 2 (layer ablations)", "", ablation_table(doc), ""]
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


def robustness_table(doc: ResultsDocument) -> str:
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
