"""One scored request: the record scoring hands to the metrics and to every writer (CASU's sample
log, lm-eval's sample lines, the results document, the Hub).

A plain dataclass: scoring sets its fields, the metrics add their per-sample values to `metrics`,
and `to_dict()` is the line written to casu_samples_<task>_<date>.jsonl (the form every writer and
the lm-eval view read). Which keys that line has follows from what happened to the request:
- every record: the question's identity and prompt (`id` ... `answer`), `system` when a system
  turn was given, the contrast-family columns when the question belongs to a family;
- a failed request: `error`, `correct` (False), `parsed` (None), `method` ("error");
- a multiple-choice answer: `scores` (log-likelihood mode) or `response`, then `parsed`, `method`,
  `correct`;
- a description: `response`, `reference`, `event_descriptions`, `turns`;
- then the per-sample metric values the metrics add (`bertscore_f1`, `event_match`, ...)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

BASE = (
    "id",
    "task",
    "condition",
    "rotation",
    "scene_id",
    "place",
    "speech_type",
    "layers",
    "minimal_pair_id",
    "mode",
    "question",
    "prompt",
    "options",
    "answer",
)
FAMILY = ("family_id", "variant", "family_shape", "slot_kind")


@functools.lru_cache(maxsize=64)
def _layout(shape: tuple) -> tuple[tuple[str, ...], frozenset[str]]:
    """The written keys, in order, of a record of this shape (ScoredRecord._shape): one rule, worked
    out once per shape, since every metric reads records key by key."""
    has_system, in_family, failed, multiple_choice, mode = shape
    keys = list(BASE)
    if has_system:
        keys.append("system")
    if in_family:
        keys += FAMILY
    if failed:
        keys += ["error", "correct", "parsed", "method"]
    elif multiple_choice:
        keys += ["scores" if mode == "loglikelihood" else "response", "parsed", "method", "correct"]
    else:
        keys += ["response", "reference", "event_descriptions", "turns"]
    return tuple(keys), frozenset(keys)


@dataclass
class ScoredRecord:
    id: str
    task: str
    condition: str
    rotation: int
    scene_id: str
    place: str
    speech_type: str
    layers: list[str]
    minimal_pair_id: str
    mode: str  # "generate" or "loglikelihood"
    question: str
    prompt: str
    options: list[str]
    answer: str  # the key's letter ("" for a description)
    multiple_choice: bool = field(default=True, repr=False)  # the task's kind (not written)
    system: str | None = None
    family_id: str = ""
    variant: str = ""
    family_shape: str = ""
    slot_kind: str = ""
    error: str | None = None  # the request failed (the model, or the sample's audio)
    scores: list[float] | None = None  # option log-likelihoods (loglikelihood mode)
    response: str | None = None
    reference: str | None = None
    event_descriptions: list[str] | None = None
    turns: list[str] | None = None
    parsed: str | None = None  # the letter the parser read (None: unparsed)
    method: str | None = None  # how it was read: a parser stage, "loglikelihood", "unparsed", "error"
    correct: bool | None = None
    # per-sample metric values the metrics add (bertscore_f1, event_match, ...), written after the fields
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """The request failed (no answer to score)."""
        return self.error is not None

    @property
    def right(self) -> bool:
        """Answered right; a failed request counts as wrong."""
        return self.method != "error" and bool(self.correct)

    def _shape(self) -> tuple:
        return (
            self.system is not None,
            bool(self.family_id),
            self.error is not None,
            self.multiple_choice,
            self.mode,
        )

    def written_keys(self) -> list[str]:
        """The written line's keys, in order: the fields of this record's shape, then its metrics."""
        keys = _layout(self._shape())[0]
        return [*keys, *(k for k in self.metrics if k not in keys)]

    def to_dict(self) -> dict[str, Any]:
        """The record as written (CASU's sample log line), keys in their order."""
        out = {k: getattr(self, k) for k in _layout(self._shape())[0]}
        out.update((k, v) for k, v in self.metrics.items() if k not in out)
        return out

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ScoredRecord:
        """A record from a written line (or a peer's per-sample item, which has only some of the
        fields: the others take empty values). Keys that are not fields go to `metrics`."""
        own = {k: row[k] for k in FIELDS if k in row}
        for k, empty in _EMPTY.items():
            own.setdefault(k, empty() if callable(empty) else empty)
        own.setdefault("multiple_choice", "reference" not in row)
        return cls(**own, metrics={k: v for k, v in row.items() if k not in FIELDS})


def as_rows(records: Sequence[ScoredRecord]) -> list[dict[str, Any]]:
    """Records as the lines written for them (ScoredRecord.to_dict), for the writers and the
    metrics that read written lines."""
    return [r.to_dict() for r in records]


# Written fields (multiple_choice and metrics are not written as such).
FIELDS = frozenset(f.name for f in fields(ScoredRecord)) - {"metrics"}
# The empty value of each field that has no default, for a row that lacks it (ScoredRecord.from_row).
_EMPTY: dict[str, Any] = {
    **{k: "" for k in ("id", "task", "condition", "scene_id", "place", "speech_type", "minimal_pair_id")},
    **{k: "" for k in ("question", "prompt", "answer")},
    "mode": "generate",
    "rotation": 0,
    "layers": list,
    "options": list,
}
