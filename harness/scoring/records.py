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

from collections.abc import Iterator, MutableMapping
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

    def _keys(self) -> list[str]:
        keys = list(BASE)
        if self.system is not None:
            keys.append("system")
        if self.family_id:
            keys += FAMILY
        if self.error is not None:
            keys += ["error", "correct", "parsed", "method"]
        elif self.multiple_choice:
            keys += ["scores" if self.mode == "loglikelihood" else "response", "parsed", "method", "correct"]
        else:
            keys += ["response", "reference", "event_descriptions", "turns"]
        return keys + [k for k in self.metrics if k not in keys]

    def to_dict(self) -> dict[str, Any]:
        """The record as written (CASU's sample log line), keys in their order."""
        return {k: self[k] for k in self._keys()}

    def __getitem__(self, key: str) -> Any:
        if key in self.metrics:
            return self.metrics[key]
        if key in self._keys():
            return getattr(self, key)
        raise KeyError(key)

    def __setitem__(self, key: str, value: Any) -> None:
        # scoring fills its own fields; anything else is a per-sample metric value
        if key in self._keys() and key not in self.metrics:
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
