"""One scored request: the record scoring hands to the metrics and to every writer (CASU's sample
log, lm-eval's sample lines, the results document, the Hub).

A typed dataclass that also reads as the mapping it is written as (`rec["correct"]`,
`"error" in rec`, `dict(rec, ...)`), so writers and metrics share one shape. Which keys a record
has follows from what happened to the request, as in the written sample logs:
- every record: the question's identity and prompt (`id` ... `answer`), `system` when a system
  turn was given, the contrast-family columns when the question belongs to a family;
- a failed request: `error`, `correct` (False), `parsed` (None), `method` ("error");
- a multiple-choice answer: `scores` (log-likelihood mode) or `response`, then `parsed`, `method`,
  `correct`;
- a description: `response`, `reference`, `event_descriptions`, `turns`;
- then the per-sample metric values the metrics add (`bertscore_f1`, `event_match`, ...)."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
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


@dataclass(eq=False)
class ScoredRecord(MutableMapping):
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
    metrics: dict[str, Any] = field(default_factory=dict)  # per-sample metric values, as added

    def _fields(self) -> frozenset[str]:
        """The record's own keys (its fields that are written), for its shape."""
        return _layout(self._shape())[1]

    def _shape(self) -> tuple:
        return (
            self.system is not None,
            bool(self.family_id),
            self.error is not None,
            self.multiple_choice,
            self.mode,
        )

    def _keys(self) -> list[str]:
        keys = _layout(self._shape())[0]
        return [*keys, *(k for k in self.metrics if k not in keys)]

    def to_dict(self) -> dict[str, Any]:
        """The record as written (CASU's sample log line), keys in their order."""
        out = {k: getattr(self, k) for k in _layout(self._shape())[0]}
        out.update((k, v) for k, v in self.metrics.items() if k not in out)
        return out

    def __getitem__(self, key: str) -> Any:
        if key in self.metrics:
            return self.metrics[key]
        if key in self._fields():
            return getattr(self, key)
        raise KeyError(key)

    def __setitem__(self, key: str, value: Any) -> None:
        # scoring fills its own fields; anything else is a per-sample metric value
        if key in self._fields() and key not in self.metrics:
            setattr(self, key, value)
        else:
            self.metrics[key] = value

    def __delitem__(self, key: str) -> None:
        if key not in self.metrics:
            raise KeyError(f"{key}: a scored record's own fields stay")
        del self.metrics[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (ScoredRecord, dict)):
            return self.to_dict() == (other.to_dict() if isinstance(other, ScoredRecord) else other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dict


def as_dict(rec: Mapping) -> dict[str, Any]:
    """A record as a plain dict in its written order (one pass for a ScoredRecord)."""
    return rec.to_dict() if isinstance(rec, ScoredRecord) else dict(rec)
