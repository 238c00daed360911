"""The metric registry: every metric is declared once, here (`Metric`, `METRICS`): evaluate
computes the registered metrics, the results tables, lm-eval's view and the task YAML validation
read them from there, so adding a metric is one `register_metric(...)`. Each registered metric
reads one task's scored records under one condition (`Scored`).

What they compute lives by family: bootstrap intervals (harness.scoring.bootstrap), the
multiple-choice statistics (harness.scoring.choice_metrics) and the scene-description metrics
(harness.scoring.text_metrics); their public names are re-exported here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable

from harness.scoring.bootstrap import (
    BOOTSTRAP,
    BOOTSTRAP_ITERS,
    bootstrap_ci,
    mean_with_ci,
)
from harness.scoring.choice_metrics import (
    FAMILY_SIZE,
    breakdown,
    family_bootstrap,
    paired_accuracy,
    recording_consistency,
)
from harness.scoring.records import ScoredRecord, as_rows
from harness.scoring.text_metrics import (
    BERT_LAYERS,
    EmbeddingEventMatcher,
    EventMatcher,
    JudgeEventMatcher,
    bertscore_f1,
    bleu4,
    bleu4_ci,
    default_bert_model,
    exact_match,
    one_minus_wer,
    quoted_speech,
    split_clauses,
)

__all__ = [
    "BERT_LAYERS",
    "BOOTSTRAP",
    "BOOTSTRAP_ITERS",
    "EmbeddingEventMatcher",
    "EventMatcher",
    "FAMILY_SIZE",
    "JudgeEventMatcher",
    "MCQ",
    "METRICS",
    "Metric",
    "Scored",
    "ScoringContext",
    "TEXT",
    "bertscore_f1",
    "bleu4",
    "bleu4_ci",
    "bootstrap_ci",
    "breakdown",
    "compute_metrics",
    "default_bert_model",
    "exact_match",
    "family_bootstrap",
    "listable",
    "mean_with_ci",
    "one_minus_wer",
    "paired_accuracy",
    "quoted_speech",
    "recording_consistency",
    "register_metric",
    "split_clauses",
    "unregister_metric",
]


# -- the registry -------------------------------------------------------------------------------

MCQ, TEXT = "multiple_choice", "generate_until"  # the task kinds (a task YAML's output_type)


@dataclass(frozen=True)
class ScoringContext:
    """The run's settings that metrics read (from its EvalConfig), and what scoring was given."""

    seed: int = 0  # every bootstrap interval's seed
    circular: bool = False  # --circular: circular_accuracy over the rotations
    bert_model: str | None = None  # --bert_model (None: the local MiniLM)
    event_matcher: EventMatcher | None = None  # --judge: Event Match by the LLM judge
    # --robustness_dataset: the second realization's scored records by (task, condition), for
    # recording_consistency (None: no second realization)
    robustness: dict | None = None


@dataclass
class Scored:
    """What a metric is computed from: one task's scored records under one condition (a peer's
    per-sample items are read in with ScoredRecord.from_row)."""

    records: Sequence[ScoredRecord]  # all rotations, failed requests included
    ok: Sequence[ScoredRecord]  # the records scored: rotation 0, no error
    context: ScoringContext

    @property
    def family(self) -> list[dict]:
        """Rotation-0 contrast-family records as written lines, a failed request counting as wrong
        (a family is right only if all four variants are)."""
        return [
            {**r.to_dict(), "correct": r.method != "error" and r.correct}
            for r in self.records
            if r.rotation == 0 and r.family_id
        ]


@dataclass(frozen=True)
class Metric:
    """One metric. `compute` gives its aggregate over a task's records ({"value", "ci95", "n",
    ...}; None: not computed for this run) and may write a per-sample value under `sample_key` on
    each scored record."""

    name: str  # the key in results, and in a task YAML's `metrics:`
    kinds: tuple[str, ...]  # the task kinds (output_type) it applies to
    compute: Callable[[Scored], dict | None]
    higher_is_better: bool = True
    always: bool = False  # computed for every task of its kinds, listed in its YAML or not
    listable: bool = True  # may be named in a task YAML (False: a property of the data)
    lmeval: str | None = None  # its name in lm-eval's results and sample lines (None: not there)
    sample_key: str | None = None  # the per-sample value compute writes on each scored record
    label: str | None = None  # its table column (None: no column)
    percent: bool = True  # shown x100 (a 0-1 share) or as is (e.g. BLEU-4, already 0-100)
    with_ci: bool = False  # shown with its 95% interval in the per-task table
    # a column of table 1's scene-description block (the paper's); False: a column only beside the
    # other free-text tasks that list it
    description_column: bool = True

    def cell(self, m: dict | None) -> str:
        """How a result of this metric is shown in a table."""
        if not m or m.get("value") is None:
            return "-"
        scale = 100 if self.percent else 1
        ci = m.get("ci95") if self.with_ci else None
        return f"{scale * m['value']:.2f}" + (f" [{scale * ci[0]:.1f}, {scale * ci[1]:.1f}]" if ci else "")


METRICS: dict[str, Metric] = {}  # name -> metric, in registration order (the order of results and tables)


def register_metric(metric: Metric, replace: bool = False) -> Metric:
    unknown = sorted(set(metric.kinds) - {MCQ, TEXT})
    if not metric.kinds or unknown:
        raise ValueError(f"metric {metric.name!r}: kinds {list(metric.kinds)} must be among {[MCQ, TEXT]}")
    if metric.name in METRICS and not replace:
        raise ValueError(f"metric {metric.name!r} is already registered")
    METRICS[metric.name] = metric
    return metric


def unregister_metric(name: str) -> None:
    METRICS.pop(name, None)


def listable(kind: str | None = None) -> list[str]:
    """The metric names a task YAML may list (for one kind, or any)."""
    return [m.name for m in METRICS.values() if m.listable and (kind is None or kind in m.kinds)]


def compute_metrics(kind: str, listed: list[str], scored: Scored) -> dict:
    """Every registered metric of `kind` the task lists (or that is always computed), in registry order."""
    out = {}
    for m in METRICS.values():
        if kind in m.kinds and (m.always or m.name in listed):
            v = m.compute(scored)
            if v is not None:
                out[m.name] = v
    return out


def _accuracy(s: Scored) -> dict:
    acc = mean_with_ci([r.correct for r in s.ok], seed=s.context.seed)
    fam = s.family
    if fam:  # contrast families: the interval resamples families, not questions
        acc = dict(
            acc,
            ci95=family_bootstrap(fam, seed=s.context.seed)["accuracy"]["ci95"],
            ci95_resampled="families",
        )
    return acc


def _family_accuracy(s: Scored) -> dict | None:
    fam = s.family
    return family_bootstrap(fam, seed=s.context.seed)["family_accuracy"] if fam else None


def _circular_accuracy(s: Scored) -> dict | None:
    if not s.context.circular:
        return None
    groups: dict[str, list[bool]] = {}
    for r in s.records:
        groups.setdefault(r.id, []).append(r.right)
    return mean_with_ci([all(v) for v in groups.values()], seed=s.context.seed)


def _unparsed_rate(s: Scored) -> dict:
    return {
        "value": (sum(r.method == "unparsed" for r in s.ok) / len(s.ok)) if s.ok else None,
        "n": len(s.ok),
    }


def _recording_consistency(s: Scored) -> dict | None:
    """With a second realization evaluated (`--robustness_dataset`): its records of this task and
    condition are in `context.robustness`."""
    other = s.context.robustness
    if other is None or not s.records:
        return None
    key = (s.records[0].task, s.records[0].condition)
    return recording_consistency(as_rows(s.records), as_rows(other.get(key, [])), seed=s.context.seed)


# A scored description has its response, reference, events and turns (runner.score_unit); one read
# from a row without some of them (ScoredRecord.from_row, a peer's item) reads each missing one as
# empty: an empty description, no reference, no events or turns (which Event Match and 1 - WER skip).
def _descriptions(s: Scored) -> tuple[list[str], list[str]]:
    """The scored descriptions and their references, in order."""
    return [r.response or "" for r in s.ok], [r.reference or "" for r in s.ok]


def _bleu4(s: Scored) -> dict | None:
    if not s.ok:
        return None
    hyps, refs = _descriptions(s)
    return {
        "value": bleu4(hyps, refs),
        "ci95": bleu4_ci(hyps, refs, seed=s.context.seed),
        "n": len(s.ok),
        "scale": "0-100",
    }


def _bertscore(s: Scored) -> dict | None:
    if not s.ok:
        return None
    model = s.context.bert_model or default_bert_model()
    f1 = bertscore_f1(*_descriptions(s), model=model)
    for r, v in zip(s.ok, f1):
        r.metrics["bertscore_f1"] = v
    return dict(mean_with_ci(f1, seed=s.context.seed), model=model, num_layers=BERT_LAYERS, rescaled=False)


def _event_match(s: Scored) -> dict | None:
    if not s.ok:
        return None
    matcher = s.context.event_matcher or EmbeddingEventMatcher()
    vals = []
    for r in s.ok:
        v = r.metrics["event_match"] = matcher.share(r.response or "", r.event_descriptions or [])
        if v is not None:
            vals.append(v)
    return dict(mean_with_ci(vals, seed=s.context.seed), matcher=matcher.describe())


def _one_minus_wer(s: Scored) -> dict | None:
    if not s.ok:
        return None
    vals = []
    for r in s.ok:
        v = r.metrics["one_minus_wer"] = one_minus_wer(r.response or "", r.turns or [])
        if v is not None:
            vals.append(v)
    return mean_with_ci(vals, seed=s.context.seed)


def _exact_match(s: Scored) -> dict | None:
    if not s.ok:
        return None
    vals = []
    for r in s.ok:
        v = r.metrics["exact_match"] = exact_match(r.response, r.reference)
        vals.append(v)
    return mean_with_ci(vals, seed=s.context.seed)


# Registration order is the order of results, lm-eval's results and table columns.
register_metric(
    Metric("accuracy", (MCQ,), _accuracy, always=True, lmeval="acc", label="Accuracy (95% CI)", with_ci=True)
)
register_metric(
    Metric(
        "family_accuracy",
        (MCQ,),
        _family_accuracy,
        always=True,
        listable=False,
        lmeval="family_acc",
        label="Family acc. (95% CI)",
        with_ci=True,
    )
)
register_metric(
    Metric("unparsed_rate", (MCQ,), _unparsed_rate, higher_is_better=False, always=True, label="Unparsed")
)
register_metric(
    Metric(
        "paired_accuracy",
        (MCQ,),
        lambda s: paired_accuracy(as_rows(s.ok)),
        lmeval="paired_acc",
        label="Paired",
    )
)
register_metric(
    Metric("circular_accuracy", (MCQ,), _circular_accuracy, lmeval="circular_acc", label="Circular")
)
register_metric(
    Metric(
        "recording_consistency",
        (MCQ,),
        _recording_consistency,
        always=True,  # computed whenever a second realization was evaluated (--robustness_dataset)
        listable=False,
        lmeval="recording_consistency",
        label="Rec. consistency (95% CI)",
        with_ci=True,
    )
)
register_metric(Metric("bleu4", (TEXT,), _bleu4, lmeval="bleu", label="BLEU-4", percent=False))
register_metric(
    Metric(
        "bertscore",
        (TEXT,),
        _bertscore,
        lmeval="bertscore",
        sample_key="bertscore_f1",
        label="BERTScore",
        percent=False,
    )
)
register_metric(
    Metric(
        "event_match",
        (TEXT,),
        _event_match,
        lmeval="event_match",
        sample_key="event_match",
        label="Event Match",
        percent=False,
    )
)
register_metric(
    Metric(
        "one_minus_wer",
        (TEXT,),
        _one_minus_wer,
        lmeval="one_minus_wer",
        sample_key="one_minus_wer",
        label="1 - WER",
        percent=False,
    )
)
register_metric(
    Metric(
        "exact_match",
        (TEXT,),
        _exact_match,
        lmeval="exact_match",
        sample_key="exact_match",
        label="Exact match",
        description_column=False,
    )
)
