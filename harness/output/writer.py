"""A run's files on disk: CASU's document and sample logs, lm-eval's results and sample lines, the
Markdown report and the plots, written crash-safe under one stamp."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from harness.output.files import run_key
from harness.output.lmeval import sample_lines, view
from harness.output.plots import plots
from harness.output.tables import markdown
from harness.scoring.records import ScoredRecord, as_rows

if TYPE_CHECKING:
    from harness.run.schema import ResultsDocument

CASU_RESULTS = "casu_results_"  # CASU's own document; lm-eval's tools glob `/results_` and `/samples_`
CASU_SAMPLES = "casu_samples_"


def write_outputs(
    doc: ResultsDocument, samples: dict[str, list[ScoredRecord]] | None, out_root: Path
) -> Path:
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


def _write_stamped(
    doc: ResultsDocument, samples: dict[str, list[ScoredRecord]] | None, d: Path, stamp: str
) -> Path:
    from casu_dataset.core.atomic import atomic_open
    from harness.output.files import atomic_write, file_record

    logs, lm_logs = {}, {}
    for task, recs in (samples or {}).items():
        rows = as_rows(recs)
        p = d / f"{CASU_SAMPLES}{task}_{stamp}.jsonl"
        with atomic_open(p) as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        logs[task] = file_record(p)
        p = d / f"samples_{task}_{stamp}.jsonl"  # lm-eval's sample lines
        with atomic_open(p) as f:
            for line in sample_lines(task, rows, (doc.get("generation") or {}).get(task)):
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
