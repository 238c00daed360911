"""Scene scripts: the typed blueprint of one scene (paper, Stage 1 output).

A script names the place, the background bed, the speakers, their turns and the discrete
events with a timing anchor each. It is plain data: JSON and YAML round-trip through
`SceneScript.model_validate` / `dump_json` / `dump_yaml`, and every validation error names
the field and the reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from casu_dataset.core import strict_yaml
from casu_dataset.core.errors import InputError
from casu_dataset.core.paths import PathError

MAX_SCENE_SECONDS = 30.0
# Rough speaking rate for the pre-synthesis fit check: 2.6 words/s is a brisk but natural
# TTS pace; the mixer re-checks with the real turn durations.
WORDS_PER_SECOND = 2.6
MIN_TURN_GAP_S = 0.2


class ScriptError(InputError, ValueError):
    """A scene script that cannot be used; the message names the file and field."""


def _nonempty(v: str, what: str) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"{what} is empty")
    return v.strip()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Described(_Strict):
    """A sound layer as retrieval sees it: a description and keywords, both non-empty."""

    description: str
    keywords: list[str] = Field(min_length=1)

    @field_validator("description")
    @classmethod
    def _desc(cls, v: str) -> str:
        return _nonempty(v, f"{cls.__name__.lower()} description")

    @field_validator("keywords")
    @classmethod
    def _kw(cls, v: list[str]) -> list[str]:
        return [_nonempty(k, "keyword") for k in v]


class Background(_Described):
    pass


class Speaker(_Strict):
    id: str
    role: str
    gender: Literal["female", "male"]
    age: Literal["child", "adult", "elderly"] = "adult"
    voice: str | None = None  # a voice id from the registry; None lets the speech layer choose

    @field_validator("id", "role")
    @classmethod
    def _n(cls, v: str, info) -> str:
        return _nonempty(v, f"speaker {info.field_name}")


class Turn(_Strict):
    speaker: str
    text: str

    @field_validator("text")
    @classmethod
    def _t(cls, v: str) -> str:
        return _nonempty(v, "turn text")


class AtTime(_Strict):
    """At an absolute time in the scene (seconds from its start)."""

    type: Literal["at"]
    time: float = Field(ge=0.0, lt=MAX_SCENE_SECONDS)


class AtStart(_Strict):
    """At the start of the scene, before the first turn, plus an offset."""

    type: Literal["start"]
    offset: float = Field(default=0.0, ge=0.0)


class DuringTurn(_Strict):
    """Overlapping turn N (0-based): onset = turn onset + offset."""

    type: Literal["during_turn"]
    turn: int = Field(ge=0)
    offset: float = Field(default=0.5, ge=0.0)


class AfterTurn(_Strict):
    """After turn N (0-based) ends, plus an offset. Speech holds until the event ends when
    `hold_speech` is set, so the next turn reacts to it (the bell rings, then "time to go")."""

    type: Literal["after_turn"]
    turn: int = Field(ge=0)
    offset: float = Field(default=0.3, ge=0.0)
    hold_speech: bool = True


Anchor = Annotated[Union[AtTime, AtStart, DuringTurn, AfterTurn], Field(discriminator="type")]


class Event(_Described):
    id: str
    anchor: Anchor
    max_duration: float | None = Field(default=None, gt=0.0, le=MAX_SCENE_SECONDS)
    # A fixed slot in the timeline: the event occupies exactly `window` seconds whatever its
    # clip's length (cut to it), so the other layers do not move when the clip changes
    # (contrast-family variants keep byte-identical speech).
    window: float | None = Field(default=None, gt=0.0, le=MAX_SCENE_SECONDS)


class SceneScript(_Strict):
    id: str
    place: str
    background: Background
    speakers: list[Speaker] = Field(min_length=1, max_length=2)
    turns: list[Turn] = Field(min_length=1)
    events: list[Event] = Field(default_factory=list)
    speech_type: Literal["monologue", "conversation"]
    max_duration: float = Field(default=MAX_SCENE_SECONDS, gt=0.0, le=MAX_SCENE_SECONDS)

    @field_validator("id", "place")
    @classmethod
    def _n(cls, v: str, info) -> str:
        return _nonempty(v, info.field_name)

    @model_validator(mode="after")
    def _consistent(self) -> "SceneScript":
        ids = [s.id for s in self.speakers]
        if len(set(ids)) != len(ids):
            raise ValueError(f"speakers: duplicate speaker id in {ids}")
        for i, t in enumerate(self.turns):
            if t.speaker not in ids:
                raise ValueError(f"turns[{i}].speaker: unknown speaker {t.speaker!r} (speakers: {ids})")
        used = {t.speaker for t in self.turns}
        if self.speech_type == "monologue" and len(self.speakers) != 1:
            raise ValueError(f"speech_type: a monologue has exactly 1 speaker, got {len(self.speakers)}")
        if self.speech_type == "conversation":
            if len(self.speakers) != 2:
                raise ValueError(
                    f"speech_type: a conversation has exactly 2 speakers, got {len(self.speakers)}"
                )
            if used != set(ids):
                raise ValueError(
                    f"speakers: in a conversation both speakers speak; silent: {sorted(set(ids) - used)}"
                )
        eids = [e.id for e in self.events]
        if len(set(eids)) != len(eids):
            raise ValueError(f"events: duplicate event id in {eids}")
        for j, e in enumerate(self.events):
            a = e.anchor
            if isinstance(a, (DuringTurn, AfterTurn)) and a.turn >= len(self.turns):
                raise ValueError(
                    f"events[{j}].anchor.turn: turn {a.turn} does not exist "
                    f"(the script has {len(self.turns)} turns, numbered from 0)"
                )
            if isinstance(a, AtTime) and a.time >= self.max_duration:
                raise ValueError(
                    f"events[{j}].anchor.time: {a.time} s is past the {self.max_duration} s limit"
                )
        est = self.estimated_speech_seconds()
        if est > self.max_duration:
            raise ValueError(
                f"turns: the timeline cannot fit in {self.max_duration:g} s: about {est:.1f} s of speech "
                f"at {WORDS_PER_SECOND} words/s for {self.word_count()} words"
            )
        return self

    def word_count(self) -> int:
        return sum(len(t.text.split()) for t in self.turns)

    def estimated_speech_seconds(self) -> float:
        return self.word_count() / WORDS_PER_SECOND + MIN_TURN_GAP_S * (len(self.turns) - 1)

    def speaker(self, sid: str) -> Speaker:
        return next(s for s in self.speakers if s.id == sid)

    # --- serialisation -------------------------------------------------------------
    def to_dict(self) -> dict:
        return self.model_dump(mode="json")

    def dump_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def dump_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)


def _format_errors(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(script)"
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"{source}: {loc}: {msg}")
    return "\n".join(lines)


def parse_script(data: dict, source: str = "<script>") -> SceneScript:
    """Validate a dict into a SceneScript, raising ScriptError that names source and field."""
    if not isinstance(data, dict):
        raise ScriptError(f"{source}: a scene script is a mapping, got {type(data).__name__}")
    try:
        return SceneScript.model_validate(data)
    except ValidationError as err:
        raise ScriptError(_format_errors(err, source)) from None


def load_script(path: str | Path) -> SceneScript:
    """Load one script from .json, .yaml or .yml."""
    path = Path(path)
    try:
        text = strict_yaml.read_library_file(path)  # a FIFO or device is named, never waited on
    except OSError as err:
        raise ScriptError(f"{path}: cannot read scene script: {err.strerror}") from None
    except PathError as err:  # missing, a FIFO, a link loop: the same one line, as a script error
        raise ScriptError(f"{path}: cannot read scene script: {str(err).removeprefix(f'{path}: ')}") from None
    except UnicodeDecodeError as err:
        raise ScriptError(
            f"{path}: scene script is not UTF-8 text (byte {err.start}: {err.reason})"
        ) from None
    try:
        data = json.loads(text) if path.suffix == ".json" else strict_yaml.safe_load(text, path)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise ScriptError(
            f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {err}"
        ) from None
    return parse_script(data, str(path))
