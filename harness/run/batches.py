"""The units of work, the model's reply to each, and forming batches and their requests: the types
and the one loop step that the sequential runner and the concurrent one (requests in flight) share."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from casu_dataset.formats.reader import Row
from harness.run.conditions import Condition
from harness.task.config import TaskConfig
from model_adapters.base import Request


@dataclass
class Unit:
    """One request to make: a task's row under one condition and option rotation."""

    task: TaskConfig
    sample: Row
    condition: Condition
    rotation: int
    mode: str  # "generate" or "loglikelihood"
    prompt: str
    options: list[str]
    answer: str
    key: str = ""
    system: str | None = None  # --system_instruction: the request's system turn
    reference: str | None = None  # an lm-eval-style text task's doc_to_target (None: the row's)
    audio_override: object = None  # the audio probe: "silence", or another Row whose audio is played


@dataclass(frozen=True)
class ModelOutput:
    """The model's reply to one unit, exactly one of: `response` (generated text), `scores` (one
    log-likelihood per option) or `error` (the request failed: a failed sample, never cached).
    Cached as the JSON object of its one key (`{"response": ...}`), the cache's format."""

    response: str | None = None
    scores: list[float] | None = None
    error: str | None = None

    @classmethod
    def failed(cls, err: BaseException) -> ModelOutput:
        return cls(error=f"{type(err).__name__}: {err}")

    def to_json(self) -> str:
        if self.error is not None:
            return json.dumps({"error": self.error})
        if self.scores is not None:
            return json.dumps({"scores": self.scores})
        return json.dumps({"response": self.response})

    def answers(self, mode: str) -> bool:
        """A reply of this scoring mode: text for "generate", option scores for "loglikelihood"."""
        return isinstance(self.scores, list) if mode == "loglikelihood" else isinstance(self.response, str)

    @classmethod
    def from_json(cls, text: str) -> ModelOutput:
        """A cached reply (`{"response": TEXT}` or `{"scores": [...]}`); an entry that is not a JSON
        object reads as no reply (`answers` is False for it: it is asked again)."""
        try:
            obj = json.loads(text)
        except ValueError:
            return cls()
        if not isinstance(obj, dict):
            return cls()
        return cls(response=obj.get("response"), scores=obj.get("scores"), error=obj.get("error"))


def next_batch(
    todo: list[Unit], start: int, group: Callable[[Unit], Hashable], batch_size: int
) -> list[Unit]:
    """Up to `batch_size` neighbouring units from `todo[start]` on, all of one group (one scoring
    mode and one set of generation settings)."""
    batch = [todo[start]]
    while (
        len(batch) < batch_size
        and start + len(batch) < len(todo)
        and group(todo[start + len(batch)]) == group(batch[0])
    ):
        batch.append(todo[start + len(batch)])
    return batch


def requests_for(
    batch: list[Unit], prepare_audio: Callable[[Unit], np.ndarray | None], out: dict[str, ModelOutput]
) -> tuple[list[Unit], list[Request]]:
    """The batch's requests and the units they are for. A unit whose audio cannot be prepared is
    a failed sample (its error in `out`), and the rest of the batch goes on."""
    units, reqs = [], []
    for u in batch:
        try:
            reqs.append(
                Request(
                    prompt=u.prompt,
                    audio=prepare_audio(u),
                    options=u.options,
                    system=u.system,
                    id=u.sample.id,
                    task=u.task.task,
                    kind="answer" if u.task.output_type == "multiple_choice" else "describe",
                )
            )
            units.append(u)
        except Exception as err:  # noqa: BLE001 - bad audio in one sample: recorded, the rest go on
            out[u.key] = ModelOutput.failed(err)
    return units, reqs
