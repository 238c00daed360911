"""lm-eval's `--wandb_args`: a finished run logged to Weights & Biases (the optional `wandb`
package, `pip install 'casu[wandb]'`): the run's config, every metric in the run summary, a
results table, each task's samples as a table (with `--log_samples`) and the results JSON as an
artifact. `WANDB_MODE=offline` writes a local run folder (`wandb sync` sends it later)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.run.schema import ResultsDocument

WHY = "--wandb_args: needs the wandb package (pip install 'casu[wandb]')"


def check_available() -> None:
    """ImportError naming the flag when wandb is not installed (checked before any model loads)."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise ImportError(WHY) from None


def _rows(doc: ResultsDocument) -> list[list]:
    rows = []
    for task, by_cond in doc["results"].items():
        for cond, metrics in by_cond.items():
            for name, m in metrics.items():
                if isinstance(m, dict) and isinstance(m.get("value"), (int, float)):
                    lo, hi = (m.get("ci95") or [None, None])[:2]
                    rows.append([task, cond, name, float(m["value"]), lo, hi, m.get("n")])
    return rows


SAMPLE_COLUMNS = ("id", "condition", "rotation", "prompt", "response", "parsed", "answer", "correct", "error")


def log_run(
    doc: ResultsDocument,
    samples: Mapping[str, list[dict[str, Any]]] | None,
    wandb_args: dict,
    results_path: Path | None,
) -> str:
    """Log one finished run (`samples`: CASU's sample lines, Results.samples); returns the W&B
    run's folder (offline) or URL."""
    import wandb

    run = wandb.init(**{"job_type": "eval", **wandb_args}, config=json.loads(json.dumps(doc["config"])))
    try:
        rows = _rows(doc)
        for task, cond, name, value, _, _, _ in rows:
            run.summary[f"{task}/{cond}/{name}"] = value
        run.log(
            {
                "results": wandb.Table(
                    columns=["task", "condition", "metric", "value", "ci_low", "ci_high", "n"], data=rows
                )
            }
        )
        for task, recs in (samples or {}).items():
            data = [
                [
                    json.dumps(r.get(c)) if isinstance(r.get(c), (list, dict)) else r.get(c)
                    for c in SAMPLE_COLUMNS
                ]
                for r in recs
            ]
            run.log({f"{task}_samples": wandb.Table(columns=list(SAMPLE_COLUMNS), data=data)})
        if results_path is not None:
            art = wandb.Artifact(f"casu-results-{run.id}", type="eval_results")
            art.add_file(str(results_path))
            run.log_artifact(art)
        where = run.url or run.dir
    finally:
        run.finish()
    return str(where)
