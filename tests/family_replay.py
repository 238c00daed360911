"""Canned replies for the family agents, keyed by prompt kind (agents/family_agents.prompt_kind).

The answers come from two hand-written CASU-mini v2 families (one slot, one crossed): the script
agent gets the library family back as a draft, the narrator its variant description, the
question agent its question, the consensus critics answer with the key of the variant they
read, and the views critics keep plausible exactly the options the design keeps for the view they
read (matched by option text, since the generated family's letters differ from the library's).
`overrides[kind](messages, reply) -> reply` changes one kind's reply for a failure test.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter

import yaml

from casu_dataset.agents.families import prompt_kind
from casu_dataset.families.compile import DEFAULT_FAMILY_LIBRARY

LIBRARY = {f["id"]: f for f in yaml.safe_load((DEFAULT_FAMILY_LIBRARY / "01_home_school.yaml").read_text())}
SOURCE = {"slot": LIBRARY["hs_catch_everyone_inside"], "crossed": LIBRARY["hs_gate_mum_or_miss"]}
TASK = "counterfactual_reasoning"  # both source families have a question for it
_SCENE_ID = re.compile(r'"id": ?"([a-z0-9_]+)\.([a-z0-9_.]+)"')


def draft_of(lib: dict) -> dict:
    """A library family as the script agent's draft JSON."""
    s = lib["script"]
    ev = next((e for e in s.get("events", []) if e["id"] == lib["slot"]), None)
    return {
        "place": s["place"],
        "speech_type": s["speech_type"],
        "speakers": s["speakers"],
        "versions": lib.get("versions"),
        "turns": s["turns"],
        "slot": "event" if ev else "background",
        "slot_after_turn": ev["anchor"]["turn"] if ev else None,
        "background": {"type": lib["types"]["background"], **s["background"]} if ev else None,
        "fills": lib["fills"],
    }


def _source(messages: list[dict]) -> dict:
    text = " ".join(m["content"] for m in messages)
    if (
        "Crossed family:" in text
        or re.search(r'"id": ?"[a-z0-9_]+\.[a-z0-9_]+\.[a-z0-9_]+"', text)
        or "(versions in brackets)" in text
    ):
        return SOURCE["crossed"]
    return SOURCE["slot"]


def options_by_text(user: str) -> dict[str, str]:
    """The prompt's lettered options: {option text: letter}."""
    return {t: L for L, t in re.findall(r"^([ABCD])\. (.*)$", user, re.M)}


def view_design(user: str) -> tuple[dict, list[str]]:
    """The source question of a views prompt (found by its text) and the variant keys that stay
    plausible for the view shown: a fill's two (its description is in the prompt), a speech
    version's two (its own turn texts are), or all four of a slot family's speech."""
    question = re.search(r"^Question: (.*)$", user, re.M).group(1)
    src, q = next((f, q) for f in SOURCE.values() for q in f["questions"] if q["q"] == question)
    fills = [f for f, d in src["fills"].items() if d["description"] in user]
    versions = [
        v
        for v in src.get("versions") or []
        if all(t["text"][v] in user for t in src["script"]["turns"] if isinstance(t["text"], dict))
    ]
    if fills:
        keys = [k for k in q["options"] if k.split(".")[-1] == fills[0]]
    elif versions:
        keys = [k for k in q["options"] if k.split(".")[0] == versions[0]]
    elif src["shape"] == "slot":
        keys = list(src["fills"])
    else:
        raise AssertionError(f"views prompt shows neither a fill nor a speech version of {src['id']}")
    return q, keys


def default_reply(messages: list[dict]) -> str:
    kind = prompt_kind(messages)
    user = messages[1]["content"]
    src = _source(messages)
    if kind == "script":
        return json.dumps(draft_of(src))
    if kind == "narrator":
        return json.dumps({"description": src["variants"][_SCENE_ID.search(user).group(2)]})
    if kind == "question":
        task = re.search(r"Task: (\w+):", user).group(1)
        q = next(q for q in src["questions"] if q["task"] == task)
        return json.dumps({k: q[k] for k in ("q", "options", "why", "layers")})
    if kind == "naming":
        return json.dumps({"names_sound": False, "reason": "it asks about what was said"})
    if kind == "distinct":
        return json.dumps({"confusable": [], "reason": "all clearly different"})
    if kind == "coherence":
        return json.dumps({"contradiction": False, "line": None, "reason": "every line fits"})
    if kind == "consensus":
        key = _SCENE_ID.search(user).group(2)
        question = re.search(r"Question: (.*)\n", user).group(1)
        q = next(q for q in src["questions"] if q["q"] == question)
        return json.dumps(
            {"answer": options_by_text(user)[q["options"][key]], "reason": "the deciding sound"}
        )
    if kind == "views":
        q, keys = view_design(user)
        letters = options_by_text(user)
        return json.dumps(
            {
                "plausible": sorted(letters[q["options"][k]] for k in keys),
                "reason": "the unheard part decides between these",
            }
        )
    raise AssertionError(f"unexpected prompt kind {kind!r}: {messages[0]['content'][:80]}")


def seat(messages: list[dict]) -> int:
    """The critic seat (1-based) of a critic request, 0 for agents."""
    m = re.search(r"\(Critic (\d+) of \d+\.\)", messages[0]["content"])
    return int(m.group(1)) if m else 0


class ReplayBackend:
    """A thread-safe backend that answers by prompt kind and counts calls per kind."""

    fingerprint = "replay-families"

    def __init__(self, overrides: dict | None = None):
        self.overrides = overrides or {}
        self.calls: Counter = Counter()
        self.log: list[tuple[str, list[dict]]] = []
        self._lock = threading.Lock()

    def complete(self, messages, schema=None, max_tokens=512, temperature=0.0) -> str:
        kind = prompt_kind(messages)
        with self._lock:
            self.calls[kind] += 1
            self.log.append((kind, messages))
        reply = default_reply(messages)
        if kind in self.overrides:
            reply = self.overrides[kind](messages, reply)
        return reply
