"""The curated scenario library (CASU-mini): scene scripts with descriptions, questions and
minimal pairs, authored in YAML (see README.md beside this file).

Authoring keeps the correct option apart from the distractors; `compile_library` places the
options so answer letters are balanced per task (a deterministic rotation over questions
sorted by id), and expands each `pair` into a variant scene whose one non-speech layer is
swapped and whose shared question keeps the same options with a different key.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from casu_dataset.contract import DATASET_LETTERS, mcq_tasks
from casu_dataset.core import strict_yaml
from casu_dataset.scenarios import SCENE_LIBRARY_DIR
from casu_dataset.script.scenes import LAYER_NAMES, LibraryError, Question, Scene, TaskName
from casu_dataset.script.schema import SceneScript, ScriptError, parse_script


def __getattr__(name):  # TASKS: the registry's multiple-choice tasks at the time of the lookup
    if name == "TASKS":
        return mcq_tasks()
    raise AttributeError(name)


DEFAULT_DIR = SCENE_LIBRARY_DIR
LETTERS = DATASET_LETTERS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AuthoredQuestion(_Strict):
    id: str
    task: TaskName
    q: str
    correct: str
    distractors: list[str] = Field(min_length=3, max_length=3)
    why: str
    layers: list[Literal[LAYER_NAMES]] = Field(min_length=1)  # type: ignore[valid-type]

    @field_validator("q", "correct", "why")
    @classmethod
    def _nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("empty text")
        return v.strip()


class Swap(_Strict):
    event: str | None = None  # id of the event whose sound is replaced
    description: str | None = None
    keywords: list[str] | None = None
    background: dict | None = None  # {description, keywords} for a background swap
    type: str  # bank type the new layer should retrieve


class Pair(_Strict):
    id: str
    swap: Swap
    description: str
    question: str  # id of the shared question
    correct: str  # its key in the variant: one of that question's options
    why: str


class Scenario(_Strict):
    id: str
    types: dict[str, str]  # "background" and each event id -> intended bank type
    script: dict
    description: str
    questions: list[AuthoredQuestion]
    pair: Pair | None = None


def _load_file(path: Path) -> list[Scenario]:
    try:
        data = strict_yaml.load_library_text(strict_yaml.read_library_file(path), path)
    except UnicodeDecodeError as err:
        raise LibraryError(f"{path}: not UTF-8 text (byte {err.start}: {err.reason})") from None
    except OSError as err:
        raise LibraryError(f"{path}: cannot read it ({err.strerror or err})") from None
    except yaml.YAMLError as err:
        raise LibraryError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(data, list):
        raise LibraryError(f"{path}: a scenario file is a YAML list of scenarios")
    out = []
    for i, item in enumerate(data):
        sid = item.get("id", f"#{i}") if isinstance(item, dict) else f"#{i}"
        try:
            out.append(Scenario.model_validate(item))
        except ValidationError as err:
            first = err.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise LibraryError(f"{path}: scenario {sid}: {loc}: {first['msg']}") from None
    return out


def _arrange(correct: str, distractors: list[str], letter: str) -> list[str]:
    opts = list(distractors)
    opts.insert(LETTERS.index(letter), correct)
    return opts


def compile_library(folder: str | Path = DEFAULT_DIR, skipped: list[dict] | None = None) -> list[Scene]:
    """Every scenario and pair variant in `folder`, validated, with options placed.

    With `skipped` (a list), a scenario that fails validation is left out and recorded there
    as {scene_id, reason} instead of stopping the whole library."""
    folder = Path(folder)
    files = strict_yaml.yaml_files(folder) if folder.is_dir() else [folder]
    if not files:
        raise LibraryError(f"{folder}: no scenario files (*.yaml, *.yml)")
    authored: list[tuple[Path, Scenario]] = [(f, s) for f in files for s in _load_file(f)]
    seen: dict[str, Path] = {}
    for f, s in authored:
        for sid in [s.id] + ([s.pair.id] if s.pair else []):
            if sid in seen:
                raise LibraryError(f"{f}: scenario id {sid!r} is also used in {seen[sid]}")
            seen[sid] = f
    # Balanced letters: per task, questions sorted by a hash of their id take A, B, C, D in turn.
    letters: dict[str, str] = {}
    for task in mcq_tasks():
        qids = sorted(
            (f"{s.id}/{q.id}" for _, s in authored for q in s.questions if q.task == task),
            key=lambda k: hashlib.sha256(k.encode()).hexdigest(),
        )
        for k, qid in enumerate(qids):
            letters[qid] = LETTERS[k % 4]
    scenes: list[Scene] = []
    for f, s in authored:
        try:
            scenes.extend(_compile_one(f, s, letters))
        except LibraryError as err:
            if skipped is None:
                raise
            skipped.append({"scene_id": s.id, "reason": str(err)})
    return scenes


def _compile_one(f: Path, s: Scenario, letters: dict[str, str]) -> list[Scene]:
    where = f"{f}: scenario {s.id}"
    try:
        script = parse_script({**s.script, "id": s.id}, where)
    except ScriptError as err:
        raise LibraryError(str(err)) from None
    _check_types(where, s, script)
    # A scenario may ask any subset of the tasks; letters stay balanced per task (compile_library).
    qs, by_id = [], {}
    for q in s.questions:
        if q.id in by_id:
            raise LibraryError(f"{where}: questions: duplicate id {q.id!r}")
        opts = [q.correct, *q.distractors]
        if len({o.strip().lower() for o in opts}) != 4:
            raise LibraryError(f"{where}: question {q.id}: options are not distinct")
        letter = letters[f"{s.id}/{q.id}"]
        qq = Question(
            f"{s.id}/{q.id}",
            s.id,
            q.task,
            q.q,
            _arrange(q.correct, q.distractors, letter),
            letter,
            q.why,
            list(q.layers),
        )
        by_id[q.id] = qq
        qs.append(qq)
    out = [Scene(script, s.description.strip(), dict(s.types), qs, None, str(f))]
    if s.pair:
        out.append(_variant(where, s, s.pair, script, by_id))
    return out


def _check_types(where: str, s: Scenario, script: SceneScript) -> None:
    want = {"background"} | {e.id for e in script.events}
    if set(s.types) != want:
        raise LibraryError(
            f"{where}: types: keys {sorted(s.types)} must be 'background' and the event ids "
            f"{sorted(want - {'background'})}"
        )


def _variant(where: str, s: Scenario, p: Pair, script: SceneScript, by_id: dict[str, Question]) -> Scene:
    w = f"{where}: pair {p.id}"
    if p.question not in by_id:
        raise LibraryError(f"{w}: question: no question {p.question!r} in the scenario")
    base_q = by_id[p.question]
    if p.correct not in base_q.options:
        raise LibraryError(f"{w}: correct: {p.correct!r} is not one of question {p.question}'s options")
    new_letter = LETTERS[base_q.options.index(p.correct)]
    if new_letter == base_q.answer:
        raise LibraryError(f"{w}: correct: the variant must change the answer of question {p.question}")
    d = script.to_dict()
    types = dict(s.types)
    sw = p.swap
    if (sw.event is None) == (sw.background is None):
        raise LibraryError(f"{w}: swap: give exactly one of event or background")
    if sw.event is not None:
        ev = next((e for e in d["events"] if e["id"] == sw.event), None)
        if ev is None:
            raise LibraryError(f"{w}: swap.event: no event {sw.event!r}")
        if not sw.description or not sw.keywords:
            raise LibraryError(f"{w}: swap: an event swap needs description and keywords")
        ev["description"], ev["keywords"] = sw.description, sw.keywords
        types[sw.event] = sw.type
    else:
        d["background"] = sw.background
        types["background"] = sw.type
    d["id"] = p.id
    try:
        vscript = parse_script(d, w)
    except ScriptError as err:
        raise LibraryError(str(err)) from None
    pair_id = f"{s.id}~{p.id}"
    base_q.minimal_pair_id = pair_id
    vq = Question(
        f"{p.id}/{p.question}",
        p.id,
        base_q.task,
        base_q.question,
        list(base_q.options),
        new_letter,
        p.why,
        list(base_q.layers),
        pair_id,
    )
    return Scene(vscript, p.description.strip(), types, [vq], s.id, where.split(": ")[0])
