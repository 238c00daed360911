"""PNG plots of a results document: accuracy per task (one panel per metric) and, for a run with
several conditions, the ablation heatmap."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from casu_dataset.contract import FULL_CONDITION
from harness.output.document import display_name, mcq_tasks_in, short

ONE_FAMILY = "1 family: too few"  # a task whose intervals come from one family: no interval to show
CHANCE = {"accuracy": 25.0, "family_accuracy": 100 / 256}  # %: one of 4 options; all 4 variants by chance

if TYPE_CHECKING:
    from harness.run.schema import ResultsDocument


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


def _plot_tasks(doc: ResultsDocument, cond: str) -> tuple[list[str], list[str], list[str]]:
    """The multiple-choice tasks a plot shows (registry order, then --include_path's by name), those
    evaluated on a single contrast family at `cond`, and their tick labels (that one says so)."""
    tasks = mcq_tasks_in(doc)
    too_few = [t for t in tasks if _families(doc["results"][t].get(cond)) == 1]
    labels = [short(t) + (f"\n({ONE_FAMILY})" if t in too_few else "") for t in tasks]
    return tasks, too_few, labels


def _plot_title(doc: ResultsDocument, cond: str | None) -> str:
    r = doc["results"]
    conds = doc["config"]["conditions"]
    full = FULL_CONDITION if FULL_CONDITION in conds else conds[-1]
    limit = (doc.get("config") or {}).get("limit")
    title = display_name(doc) + (f" ({cond})" if cond else "")
    if limit:
        n = sum((r[t].get(full) or {}).get("n", 0) for t in mcq_tasks_in(doc))
        title = f"PARTIAL (--limit {limit}, n={n}): {title}"
    return title


def accuracy_plot_data(doc: ResultsDocument) -> dict:
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


def ablation_plot_data(doc: ResultsDocument) -> dict | None:
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


def plots(doc: ResultsDocument, out_dir: Path, stamp: str = "") -> list[Path]:
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
