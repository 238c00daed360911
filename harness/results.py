"""`Results`, what `simple_evaluate` returns: lm-eval's results dict with CASU's document beside it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from harness.run.schema import ResultsDocument, TaskResults
    from harness.scoring.records import ScoredRecord


class Results(dict[str, Any]):
    """What `simple_evaluate` returns: lm-eval's results dict (`res["results"][task]["acc,none"]`,
    `res["config"]`, `res["versions"]`, `res["n-samples"]`, ..., and `res["samples"]` in lm-eval's
    sample schema with `log_samples`; exactly lm-eval's `results_<date>.json`, typed in
    harness/output/lm_eval_schema.py), plus CASU's own, as typed attributes:

    - `document`: CASU's results document (casu_results_<date>.json, harness/run/schema.py's
      `ResultsDocument`; `res.results` is its task -> condition -> metrics);
    - `samples`: CASU's per-task sample records (casu_samples_<task>_<date>.jsonl);
    - `path`: CASU's JSON as written (None without output_path); `pushed`: what the push at the
      end of the run sent (None when none was asked for); `table()`: table 1.

    It stays a dict because lm-eval's `simple_evaluate` returns one (callers `json.dump` it and
    check `isinstance(res, dict)`). A key of CASU's document that lm-eval's view lacks (`model`,
    `timing`, `errors`, ...) reads from the document (`res["model"]` is `res.document["model"]`)."""

    def __init__(
        self,
        document: ResultsDocument,
        samples: Mapping[str, Sequence[ScoredRecord]] | None = None,
        path: Path | None = None,
        main_process: bool = True,
        pushed: dict | None = None,
        log_samples: bool = False,
    ):
        from harness.output.lmeval import sample_lines, view

        super().__init__(view(document))
        self.document: ResultsDocument = document
        # plain dicts, as written to casu_samples_*.jsonl (scoring's ScoredRecords, read out)
        self.samples: dict[str, list[dict[str, Any]]] = {
            t: [r.to_dict() for r in recs] for t, recs in (samples or {}).items()
        }
        self.path = path
        self.main_process = main_process  # False on the non-main ranks of a distributed run (nothing written)
        # --hf_hub_log_args push_results_to_hub=true: what push.push_after_run sent (repo, operations,
        # pushed) or, when the Hub failed, `error` and `retry`; None when no push was asked for
        self.pushed = pushed
        self.wandb: str | None = None  # --wandb_args: the W&B run's URL (or offline folder)
        if log_samples:
            gen = document.get("generation") or {}
            self["samples"] = {t: sample_lines(t, recs, gen.get(t)) for t, recs in self.samples.items()}

    def __missing__(self, key: str) -> Any:
        return self.document[key]  # type: ignore[literal-required]  # CASU's keys lm-eval's view lacks

    def __repr__(self) -> str:
        return (
            f"Results(model={self.get('model_name')!r}, tasks={list(self.get('results', {}))}, "
            f"status={self.document.get('status')!r}, path={str(self.path) if self.path else None!r})"
        )

    @property
    def results(self) -> TaskResults:
        """CASU's task -> condition -> metrics (`res["results"]` is lm-eval's task -> "acc,none")."""
        return self.document["results"]

    @property
    def errors(self) -> list:
        return self.document["errors"]

    def lm_eval_view(self) -> dict[str, Any]:
        """lm-eval's results JSON as written (`results_<date>.json`), without `samples`."""
        return {k: v for k, v in self.items() if k != "samples"}

    def table(self) -> str:
        from harness.output.tables import main_table

        return main_table(self.document)
