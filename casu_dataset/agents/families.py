"""Contrast-family agents (CASU v2): script agent -> narrator -> question agent.

The script agent writes one family draft (neutral speech, the slot and its fills from the bank's
sound types); the draft is turned into the FAMILIES.md dict and compiled by the library compiler
(with placeholder narration and questions) so every structural error goes back to the agent as
feedback. The narrator writes one reference description per variant, from that variant's
compiled script; the question agent writes one question per task whose options are keyed by
variant. Every reply is JSON validated by pydantic with feedback retries (structured.py).

Each agent's system prompt starts with a fixed text (SYSTEM); `prompt_kind` names the agent of
a request, for replay backends and for the per-kind call counts of the report.
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from casu_dataset.agents.pipeline import DraftSpeaker, task_guide
from casu_dataset.agents.structured import ask_json
from casu_dataset.contract import mcq_tasks
from casu_dataset.families.compile import FamilyScene, compile_family, parse_family

MIN_WORDS, MAX_WORDS = 12, 40  # FAMILIES.md: speech is shared and scenes are <= 30 s
SLOT_EVENT = "cue"

SYSTEM = {
    "script": "You write contrast families for an audio question benchmark, as JSON.",
    "narrator": "You write the reference description of one audio scene, as JSON.",
    "question": "You write one multiple-choice question for a contrast family of audio scenes, as JSON.",
    "consensus": (
        "You answer a multiple-choice question about one audio scene from its description and script."
    ),
    "coherence": "You check whether any line of speech contradicts a sound heard in the same audio scene.",
    "naming": "You check whether a question gives away which sound is heard in an audio scene.",
    "distinct": "You judge whether a listener can tell sounds apart by ear.",
    "views": (
        "You judge which answers to a question stay plausible when only part of an audio scene was heard."
    ),
}

PLACES = [
    "primary school classroom",
    "train station platform",
    "hospital corridor",
    "busy restaurant kitchen",
    "family living room",
    "building site",
    "city street corner",
    "farmyard",
    "harbour quay",
    "office open-plan floor",
    "football pitch touchline",
    "campsite at dusk",
    "airport gate",
    "supermarket checkout",
    "garden on a summer afternoon",
    "hotel lobby",
]


def prompt_kind(messages: list[dict]) -> str | None:
    """The agent or critic that a request comes from (its system prompt's fixed start)."""
    head = messages[0]["content"] if messages and messages[0].get("role") == "system" else ""
    return next((k for k, v in SYSTEM.items() if head.startswith(v)), None)


def pmap(fn, items) -> list:
    """fn over items in threads, results in item order (the backend bounds requests in flight)."""
    items = list(items)
    if len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=len(items)) as ex:
        return list(ex.map(fn, items))


@dataclass
class Brief:
    """What one family should be: the generator varies these so every prompt differs."""

    id: str
    shape: Literal["slot", "crossed"]
    place: str
    speech_type: Literal["monologue", "conversation"]
    slot_hint: Literal["event", "background"]


def make_briefs(
    n: int,
    seed: int = 0,
    places: list[str] | None = None,
    shape: Literal["slot", "crossed", "mixed"] = "mixed",
    speech_type: Literal["monologue", "conversation", "mixed"] = "mixed",
) -> list[Brief]:
    rng = random.Random(seed)
    pool = list(places or PLACES)
    if not places:
        rng.shuffle(pool)
    out = []
    for i in range(n):
        place = pool[i % len(pool)]
        sh: Literal["slot", "crossed"] = shape if shape != "mixed" else ("slot", "crossed")[i % 2]
        sp: Literal["monologue", "conversation"] = (
            speech_type if speech_type != "mixed" else rng.choice(["monologue", "conversation"])
        )
        out.append(
            Brief(
                id=f"gen{seed}_{i:03d}_{sh}",
                shape=sh,
                place=place,
                speech_type=sp,
                slot_hint=("event", "background")[(i // 2) % 2],
            )
        )
    return out


# --- script agent -------------------------------------------------------------------------------


class DraftSound(BaseModel):
    type: str
    description: str = Field(min_length=8)
    keywords: list[str] = Field(min_length=1, max_length=8)


class DraftFamilyTurn(BaseModel):
    speaker: str
    text: str | dict[str, str]


class DraftFamily(BaseModel):
    place: str = Field(min_length=3)
    speech_type: Literal["monologue", "conversation"]
    speakers: list[DraftSpeaker] = Field(min_length=1, max_length=2)
    versions: list[str] | None = None
    turns: list[DraftFamilyTurn] = Field(min_length=2, max_length=4)
    slot: Literal["event", "background"]
    slot_after_turn: int | None = None
    background: DraftSound | None = None
    fills: dict[str, DraftSound]


def bank_types(catalog) -> dict[str, list[str]]:
    """The bank's sound types by kind (what fills and fixed layers may use)."""
    return {k: sorted({c.type for c in catalog.clips if c.kind == k}) for k in ("background", "event")}


def family_from_draft(d: DraftFamily, brief: Brief, types: dict[str, list[str]]) -> dict:
    """The FAMILIES.md dict (no variants or questions yet); ValueError names the draft field."""
    fill_kind = d.slot
    for name, f in d.fills.items():
        if f.type not in types[fill_kind]:
            raise ValueError(
                f"fills.{name}.type: {f.type!r} is not a {fill_kind} sound type of the bank; "
                f"use one of the listed {fill_kind} types"
            )
    script: dict[str, Any] = {
        "place": d.place,
        "speech_type": d.speech_type,
        "speakers": [s.model_dump() for s in d.speakers],
        "turns": [t.model_dump() for t in d.turns],
    }
    if d.slot == "event":
        if d.background is None:
            raise ValueError("background: required when the slot is an event (the fixed background sound)")
        if d.background.type not in types["background"]:
            raise ValueError(
                f"background.type: {d.background.type!r} is not a background sound type of the bank"
            )
        n = d.slot_after_turn
        if n is None or not 0 <= n < len(d.turns):
            raise ValueError(
                f"slot_after_turn: the index of the turn the sound follows, 0..{len(d.turns) - 1}"
            )
        script["background"] = {"description": d.background.description, "keywords": d.background.keywords}
        script["events"] = [{"id": SLOT_EVENT, "anchor": {"type": "after_turn", "turn": n, "offset": 0.3}}]
        layer_types, slot = {"background": d.background.type}, SLOT_EVENT
    else:
        if d.background is not None:
            raise ValueError(
                "background: must be null when the background is the slot (the fills are the backgrounds)"
            )
        layer_types, slot = {}, "background"
    versions = d.versions or [""]
    for v in versions:
        words = sum(len((t.text.get(v, "") if isinstance(t.text, dict) else t.text).split()) for t in d.turns)
        if not MIN_WORDS <= words <= MAX_WORDS:
            raise ValueError(
                f"turns: {words} words{f' in version {v}' if v else ''}; "
                f"keep the speech between {MIN_WORDS} and {MAX_WORDS} words"
            )
    fam: dict[str, Any] = {"id": brief.id, "shape": brief.shape, "slot": slot}
    if d.versions is not None:
        fam["versions"] = list(d.versions)
    fam.update(script=script, types=layer_types, fills={k: f.model_dump() for k, f in d.fills.items()})
    return fam


def keys_of(fam: dict) -> list[str]:
    fills = list(fam["fills"])
    return fills if fam["shape"] == "slot" else [f"{v}.{f}" for v in fam.get("versions") or [] for f in fills]


def compile_structure(fam: dict) -> list[FamilyScene]:
    """Compile a draft with placeholder narration and one placeholder question, so the library
    compiler checks everything the script agent decides (fills, types, versions, turns, anchors)."""
    keys = keys_of(fam)
    probe = dict(
        fam,
        variants={k: "placeholder" for k in keys},
        questions=[
            {
                "task": mcq_tasks()[0],
                "q": "?",
                "options": {k: f"placeholder {i}" for i, k in enumerate(keys)},
                "why": {k: "placeholder" for k in keys},
                "layers": ["speech"],
            }
        ],
    )
    return compile_family(parse_family(probe, "script agent"), "script agent")


_SLOT_EXAMPLE: dict[str, Any] = {
    "place": "primary school classroom",
    "speech_type": "monologue",
    "speakers": [{"id": "teacher", "role": "teacher", "gender": "female", "age": "adult"}],
    "turns": [
        {"speaker": "teacher", "text": "Right, everyone, stop what you're doing."},
        {"speaker": "teacher", "text": "Time to go. Line up by the door, quickly and quietly."},
    ],
    "slot": "event",
    "slot_after_turn": 0,
    "background": {
        "type": "school_playground",
        "description": "Children chatter faintly in a corridor.",
        "keywords": ["children", "chatter"],
    },
    "fills": {
        "bell": {
            "type": "electric_bell_ring",
            "description": "An electric school bell rings loudly.",
            "keywords": ["school bell", "ringing"],
        },
        "alarm": {
            "type": "siren",
            "description": "An emergency siren wails.",
            "keywords": ["siren", "alarm"],
        },
        "thunder": {
            "type": "thunder_clap",
            "description": "A loud clap of thunder.",
            "keywords": ["thunder"],
        },
        "horn": {
            "type": "car_horn",
            "description": "A vehicle horn honks twice outside.",
            "keywords": ["horn", "honk"],
        },
    },
}
_CROSSED_EXAMPLE = dict(
    _SLOT_EXAMPLE,
    versions=["go", "stay"],
    turns=[
        {"speaker": "teacher", "text": "Right, everyone, listen to me."},
        {
            "speaker": "teacher",
            "text": {
                "go": "Time to go, everyone. Coats on, line up by the door.",
                "stay": "Stay where you are, everyone. Stay seated, please.",
            },
        },
    ],
    fills={k: v for k, v in _SLOT_EXAMPLE["fills"].items() if k in ("bell", "alarm")},
)


def script_agent(
    backend, brief: Brief, types: dict[str, list[str]], retries: int = 3
) -> tuple[dict, list[FamilyScene]]:
    """A family draft (FAMILIES.md dict without variants/questions) and its compiled variant scenes."""
    crossed = brief.shape == "crossed"
    shape_rules = (
        "Crossed family: two speech versions (name them in `versions`, two lower-case ids) that differ in at "
        "least one turn (a differing turn's text is {VERSION: text}), and exactly 2 fills; the 4 "
        "combinations version x fill must mean 4 different things."
        if crossed
        else "Slot family: one speech script (every turn text one string) and exactly 4 fills; with each "
        "fill the same words must mean something different."
    )
    msgs = [
        {
            "role": "system",
            "content": SYSTEM["script"] + " A family is 4 variants of one short scene that "
            "differ only in one non-speech sound, the slot: either one event (slot 'event', heard after turn "
            "`slot_after_turn`) or the background (slot 'background'; then `background` is null). The speech "
            "must be neutral: every line must fit every fill naturally and no line may contradict any fill, "
            "yet the meaning of the scene must change with the fill. Fill types come only from the listed "
            "bank types of the right kind; the fills must be 4 (or 2) different types that sound clearly "
            f"different. Speech: 2-4 turns, {MIN_WORDS}-{MAX_WORDS} words in all; a monologue has 1 speaker, "
            "a conversation 2 who both speak. Fill names are short lower-case ids.",
        },
        {
            "role": "user",
            "content": f"Family id: {brief.id}. Place: {brief.place}. Speech type: {brief.speech_type}. "
            f"Preferred slot: {brief.slot_hint}.\n{shape_rules}\n"
            f"Bank event types: {', '.join(types['event'])}.\nBank background types: "
            f"{', '.join(types['background'])}.\nAnswer with JSON shaped like: "
            f"{json.dumps(_CROSSED_EXAMPLE if crossed else _SLOT_EXAMPLE)}",
        },
    ]
    state = {}

    def check(d: DraftFamily):
        fam = family_from_draft(d, brief, types)
        state["scenes"] = compile_structure(fam)  # FamilyError is a ValueError: fed back to the agent
        return fam

    fam = ask_json(
        backend, msgs, DraftFamily, f"script agent ({brief.id})", retries, max_tokens=900, check=check
    )
    return fam, state["scenes"]


# --- narrator and question agent ----------------------------------------------------------------


class Narration(BaseModel):
    description: str = Field(min_length=20)


class DraftQuestion(BaseModel):
    q: str = Field(min_length=5)
    options: dict[str, str]
    why: dict[str, str]
    layers: list[Literal["speech", "event", "background"]] = Field(min_length=1)


def narrator(backend, scene: FamilyScene, retries: int = 3) -> str:
    msgs = [
        {
            "role": "system",
            "content": SYSTEM["narrator"] + " In one short paragraph say where it is, who speaks, "
            "what is said, which sounds occur and when, and what the scene means given those sounds.",
        },
        {
            "role": "user",
            "content": f"Scene script:\n{scene.script.dump_json()}\n"
            'Answer with JSON: {"description": "..."}',
        },
    ]
    return ask_json(
        backend, msgs, Narration, f"narrator ({scene.script.id})", retries, max_tokens=400
    ).description


def _speech_text(fam: dict) -> str:
    speakers = {s["id"]: s["role"] for s in fam["script"]["speakers"]}
    lines = []
    for i, t in enumerate(fam["script"]["turns"]):
        text = (
            t["text"]
            if isinstance(t["text"], str)
            else " / ".join(f"[{v}] {x}" for v, x in t["text"].items())
        )
        lines.append(f"{i}. {t['speaker']} ({speakers.get(t['speaker'], '?')}): {text}")
    return "\n".join(lines)


def question_agent(backend, fam: dict, task: str, retries: int = 3) -> dict:
    """One question for `task`: q, options and why keyed by variant, layers (FAMILIES.md)."""
    guide = task_guide(task)  # unknown task: ValueError before any backend call
    keys = keys_of(fam)
    fills = "\n".join(f"- {n}: {f['description']}" for n, f in fam["fills"].items())
    variants = "\n".join(f"- {k}: {fam['variants'][k]}" for k in keys)
    shape = {
        "q": "...",
        "options": {k: "..." for k in keys},
        "why": {k: "the deciding cue" for k in keys},
        "layers": ["speech", "event" if fam["slot"] != "background" else "background"],
    }
    msgs = [
        {
            "role": "system",
            "content": SYSTEM["question"] + " The question and its four options are the same in "
            "all four variants; each option is correct for exactly one variant (its key). The question must "
            "not name or describe any of the varying sounds, no option may appear inside the question, and "
            "every option must look plausible to a reader who did not hear the sound. Prefer questions "
            "about what was said.",
        },
        {
            "role": "user",
            "content": f"Task: {task}: {guide}.\nPlace: {fam['script']['place']}.\n"
            f"Speech{' (versions in brackets)' if fam['shape'] == 'crossed' else ''}:\n{_speech_text(fam)}\n"
            f"Varying sounds ({'the background' if fam['slot'] == 'background' else 'one event'}):\n{fills}\n"
            f"Variants:\n{variants}\nAnswer with JSON: {json.dumps(shape)}",
        },
    ]

    def check(d: DraftQuestion) -> dict:
        for fld in ("options", "why"):
            got = getattr(d, fld)
            if set(got) != set(keys):
                raise ValueError(f"{fld}: keys {sorted(got)} must be exactly the variant keys {sorted(keys)}")
        return {
            "task": task,
            "q": d.q.strip(),
            "options": {k: d.options[k] for k in keys},
            "why": {k: d.why[k] for k in keys},
            "layers": list(dict.fromkeys(d.layers)),
        }

    return ask_json(
        backend,
        msgs,
        DraftQuestion,
        f"question agent ({fam['id']}, {task})",
        retries,
        max_tokens=700,
        check=check,
    )


def write_family(backend, brief: Brief, types: dict[str, list[str]], tasks, retries: int = 3) -> dict:
    """Script agent -> narrator (per variant) -> question agent (per task): a full family dict.
    Raises StructuredOutputError when an agent gives no valid output within its retries."""
    fam, scenes = script_agent(backend, brief, types, retries)
    descriptions = pmap(lambda s: narrator(backend, s, retries), scenes)
    fam["variants"] = {s.variant: d for s, d in zip(scenes, descriptions)}
    fam["questions"] = pmap(lambda t: question_agent(backend, fam, t, retries), list(tasks))
    return fam


def brief_dict(b: Brief) -> dict:
    return asdict(b)
