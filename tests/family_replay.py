"""Canned replies for the family agents, keyed by prompt kind (agents/family_agents.prompt_kind).

The answers come from two hand-written CASU-mini v2 families (one slot, one crossed): the script
agent gets the library family back as a draft, the narrator its variant description, the
question agent its question, and the consensus critics answer with the key of the variant they
read. `overrides[kind](messages, reply) -> reply` changes one kind's reply for a failure test.
"""
from __future__ import annotations

import json
import re
import threading
from collections import Counter

import yaml

from casu_dataset.agents.family_agents import prompt_kind
from casu_dataset.scenarios.families import DEFAULT_V2_DIR

LIBRARY = {f["id"]: f for f in yaml.safe_load((DEFAULT_V2_DIR / "01_home_school.yaml").read_text())}
SOURCE = {"slot": LIBRARY["hs_catch_everyone_inside"], "crossed": LIBRARY["hs_gate_mum_or_miss"]}
TASK = "counterfactual_reasoning"   # both source families have a question for it
_SCENE_ID = re.compile(r'"id": ?"([a-z0-9_]+)\.([a-z0-9_.]+)"')


def draft_of(lib: dict) -> dict:
    """A library family as the script agent's draft JSON."""
    s = lib["script"]
    ev = next((e for e in s.get("events", []) if e["id"] == lib["slot"]), None)
    return {"place": s["place"], "speech_type": s["speech_type"], "speakers": s["speakers"],
            "versions": lib.get("versions"), "turns": s["turns"], "slot": "event" if ev else "background",
            "slot_after_turn": ev["anchor"]["turn"] if ev else None,
            "background": {"type": lib["types"]["background"], **s["background"]} if ev else None,
            "fills": lib["fills"]}


def _source(messages: list[dict]) -> dict:
    text = " ".join(m["content"] for m in messages)
    if "Crossed family:" in text or re.search(r'"id": ?"[a-z0-9_]+\.[a-z0-9_]+\.[a-z0-9_]+"', text) \
            or "(versions in brackets)" in text:
        return SOURCE["crossed"]
    return SOURCE["slot"]


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
        letters = dict((t, L) for L, t in re.findall(r"^([ABCD])\. (.*)$", user, re.M))
        return json.dumps({"answer": letters[q["options"][key]], "reason": "the deciding sound"})
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
