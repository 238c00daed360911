"""What the builder builds from: a compiled scene (its script, description, layer types and
questions) and a compiled multiple-choice question, whichever library format they came from
(contrast families, `casu_dataset.families`; v1 scenes, `casu_dataset.legacy`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator

from casu_dataset.contract import mcq_tasks
from casu_dataset.core.errors import InputError
from casu_dataset.scenarios import FAMILY_LIBRARY_DIR, SCENE_LIBRARY_DIR
from casu_dataset.script.schema import SceneScript

LAYER_NAMES = ("speech", "event", "background")


def check_task(v: str) -> str:
    """A pydantic validator: a multiple-choice task of the registry (casu_dataset.contract)."""
    if v not in mcq_tasks():
        raise ValueError(f"unknown task {v!r}; tasks: {', '.join(mcq_tasks())}")
    return v


TaskName = Annotated[str, AfterValidator(check_task)]


class LibraryError(InputError, ValueError):
    """A scenario file that cannot be used; the message names the file and scenario."""


@dataclass
class Question:
    id: str  # "<scene id>/<question id>"
    scene_id: str
    task: str
    question: str
    options: list[str]
    answer: str  # "A".."D"
    rationale: str
    layers: list[str]
    minimal_pair_id: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Scene:
    script: SceneScript
    description: str
    types: dict[str, str]
    questions: list[Question] = field(default_factory=list)
    variant_of: str | None = None
    source: str = ""


def library_name(folder: str | Path) -> str:
    """The dataset name a scenario set is built under: CASU-mini for the shipped library,
    otherwise the folder's name (or the file's stem)."""
    p = Path(folder)
    if p.resolve() == SCENE_LIBRARY_DIR.resolve():
        return "CASU-mini"
    if p.resolve() == FAMILY_LIBRARY_DIR.resolve():
        return "CASU-mini v2"
    return (p.resolve().name if p.is_dir() else p.stem) or "CASU"


def all_questions(scenes: list[Scene]) -> list[Question]:
    return [q for sc in scenes for q in sc.questions]
