"""Script agent -> narrator -> question agent -> critic panel (paper, figure 2c).

Every agent asks its backend for JSON validated with pydantic (see structured.py). The
critic panel has k independent critics answer each candidate from the description and the
script; a question is kept only when at least m of them pick the proposed key. All votes,
rejections and failures are recorded in the result, so a run explains what it dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

from casu_dataset.agents.structured import StructuredOutputError, ask_json
from casu_dataset.contract import DATASET_LETTERS as LETTERS
from casu_dataset.contract import get_task, mcq_tasks
from casu_dataset.script.schema import SceneScript, ScriptError, parse_script


def task_guide(task: str) -> str:
    """What the question agent is told a task asks (the registry's guide)."""
    if task not in mcq_tasks():
        raise ValueError(f"question agent: unknown task {task!r} (tasks: {', '.join(mcq_tasks())})")
    return get_task(task).guide


class DraftAnchor(BaseModel):
    type: Literal["at", "start", "during_turn", "after_turn"]
    turn: int | None = None
    time: float | None = None
    offset: float | None = None


class DraftEvent(BaseModel):
    id: str
    description: str
    keywords: list[str] = Field(min_length=1)
    anchor: DraftAnchor


class DraftSpeaker(BaseModel):
    id: str
    role: str
    gender: Literal["female", "male"]
    age: Literal["child", "adult", "elderly"] = "adult"


class DraftTurn(BaseModel):
    speaker: str
    text: str


class DraftBackground(BaseModel):
    description: str
    keywords: list[str] = Field(min_length=1)


class DraftScript(BaseModel):
    place: str
    speech_type: Literal["monologue", "conversation"]
    background: DraftBackground
    speakers: list[DraftSpeaker]
    turns: list[DraftTurn]
    events: list[DraftEvent]


class Narration(BaseModel):
    description: str = Field(min_length=20)


class Candidate(BaseModel):
    question: str
    options: list[str] = Field(min_length=4, max_length=4)
    answer: Literal["A", "B", "C", "D"]
    rationale: str
    layers: list[Literal["speech", "event", "background"]] = Field(min_length=1)


class Candidates(BaseModel):
    questions: list[Candidate] = Field(min_length=1)


class Vote(BaseModel):
    answer: Literal["A", "B", "C", "D"]


@dataclass
class PipelineResult:
    script: SceneScript | None = None
    description: str | None = None
    kept: list[dict] = field(default_factory=list)
    rejected: list[dict] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "script": self.script.to_dict() if self.script else None,
            "description": self.description,
            "kept": self.kept,
            "rejected": self.rejected,
            "failures": self.failures,
        }


def _script_from_draft(draft: DraftScript, scene_id: str) -> SceneScript:
    d = draft.model_dump()
    for e in d["events"]:
        e["anchor"] = {k: v for k, v in e["anchor"].items() if v is not None}
    try:
        return parse_script({"id": scene_id, **d}, f"script agent ({scene_id})")
    except ScriptError as err:
        raise ValueError(str(err)) from None


def script_agent(
    backend, scene_id: str, place: str, sound_types: dict[str, list[str]], speech_type: str, retries: int = 3
) -> SceneScript:
    """A schema-valid scene script for `place` using sounds the catalog has."""
    example = {
        "place": place,
        "speech_type": speech_type,
        "background": {"description": "one sentence", "keywords": ["k1", "k2"]},
        "speakers": [{"id": "A", "role": "role", "gender": "female", "age": "adult"}],
        "turns": [{"speaker": "A", "text": "a short line"}],
        "events": [
            {
                "id": "e1",
                "description": "one sentence",
                "keywords": ["k"],
                "anchor": {"type": "after_turn", "turn": 0, "offset": 0.3},
            }
        ],
    }
    msgs = [
        {
            "role": "system",
            "content": "You write short audio scene scripts as JSON. Speech must fit in 30 "
            "seconds (at most 60 words in total). Events and the background must be "
            "chosen from the available sound types.",
        },
        {
            "role": "user",
            "content": f"Place: {place}. Speech type: {speech_type} "
            f"({'one speaker' if speech_type == 'monologue' else 'two speakers'}). "
            f"Available background types: {', '.join(sound_types['background'])}. "
            f"Available event types: {', '.join(sound_types['event'])}. "
            "Write a scene where an event changes the meaning of what is said. "
            f"Answer with JSON shaped like: {json.dumps(example)}",
        },
    ]
    return ask_json(
        backend,
        msgs,
        DraftScript,
        f"script agent ({scene_id})",
        retries,
        max_tokens=700,
        check=lambda d: _script_from_draft(d, scene_id),
    )


def narrator(backend, script: SceneScript, retries: int = 3) -> str:
    msgs = [
        {
            "role": "system",
            "content": "You describe audio scenes in a short narrative paragraph: what is said, "
            "which sounds occur, the background, and their order and causes.",
        },
        {
            "role": "user",
            "content": "Scene script:\n" + script.dump_json() + '\nAnswer with JSON: {"description": "..."}',
        },
    ]
    return ask_json(backend, msgs, Narration, f"narrator ({script.id})", retries, max_tokens=400).description


def question_agent(
    backend, script: SceneScript, description: str, task: str, n: int = 2, retries: int = 3
) -> list[Candidate]:
    guide = task_guide(task)  # unknown task: ValueError before any backend call
    shape = {
        "questions": [
            {
                "question": "...",
                "options": ["...", "...", "...", "..."],
                "answer": "B",
                "rationale": "cites the deciding sound",
                "layers": ["speech", "event"],
            }
        ]
    }
    msgs = [
        {
            "role": "system",
            "content": "You write 4-option multiple-choice questions about audio scenes. Each "
            "question must need the audio to answer; all options must look plausible "
            "from the question text alone.",
        },
        {
            "role": "user",
            "content": f"Task: {task}: {guide}.\nScene description: {description}\n"
            f"Script: {script.dump_json(indent=None)}\nWrite {n} questions. "
            f"Answer with JSON: {json.dumps(shape)}",
        },
    ]
    return ask_json(
        backend, msgs, Candidates, f"question agent ({script.id}, {task})", retries, max_tokens=800
    ).questions


def critic_votes(
    critics: list, script: SceneScript, description: str, cand: Candidate, retries: int = 2
) -> list[str | None]:
    """Each critic's letter for the candidate, answering from the description and script
    (None: no valid vote)."""
    opts = "\n".join(f"{L}. {o}" for L, o in zip(LETTERS, cand.options))
    msgs = [
        {
            "role": "system",
            "content": "You answer multiple-choice questions about an audio scene from its "
            "description and script.",
        },
        {
            "role": "user",
            "content": f"Scene description: {description}\nScript: {script.dump_json(indent=None)}\n"
            f'Question: {cand.question}\n{opts}\nAnswer with JSON: {{"answer": "A"}}',
        },
    ]
    votes = []
    for c in critics:
        try:
            votes.append(ask_json(c, msgs, Vote, f"critic ({script.id})", retries, max_tokens=20).answer)
        except StructuredOutputError:
            votes.append(None)
    return votes


def run_pipeline(
    backend,
    scene_id: str,
    place: str,
    sound_types: dict[str, list[str]],
    speech_type: str,
    critics: list | None = None,
    k: int = 3,
    m: int = 2,
    tasks=None,
    per_task: int = 1,
    retries: int = 3,
) -> PipelineResult:
    """Script, description and consensus-filtered questions for one scene; failures are recorded."""
    if not 1 <= m <= k:
        raise ValueError(f"critic panel: need 1 <= m <= k, got k={k}, m={m}")
    critics = critics or [backend] * k
    if len(critics) != k:
        raise ValueError(f"critic panel: {len(critics)} critics given for k={k}")
    res = PipelineResult()
    try:
        res.script = script_agent(backend, scene_id, place, sound_types, speech_type, retries)
        res.description = narrator(backend, res.script, retries)
    except StructuredOutputError as err:
        res.failures.append(str(err))
        return res
    for task in tasks or mcq_tasks():
        try:
            cands = question_agent(backend, res.script, res.description, task, per_task, retries)
        except StructuredOutputError as err:
            res.failures.append(str(err))
            continue
        for cand in cands:
            votes = critic_votes(critics, res.script, res.description, cand)
            agree = sum(v == cand.answer for v in votes)
            row = {"task": task, **cand.model_dump(), "votes": votes, "agree": agree, "k": k, "m": m}
            (res.kept if agree >= m else res.rejected).append(row)
    return res
