"""Review decisions: an append-only JSONL file next to the dataset (`<dataset>.decisions.jsonl`).

One line per decision: {time, reviewer, kind: scene|question, item, action: accept|reject|edit,
comment, edit: {question, options, answer}}. Each line is flushed and fsynced when written,
so closing the browser or killing the server loses nothing. Reading keeps every valid line,
reports corrupt ones by line number, lets the newest decision on an item win, and lists
items on which reviewers disagree."""
from __future__ import annotations

import datetime as dt
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

ACTIONS = ("accept", "reject", "edit")
KINDS = ("scene", "question")
LETTERS = "ABCD"


class DecisionError(ValueError):
    pass


def decisions_path(dataset: str | Path) -> Path:
    d = Path(dataset).resolve()
    return d.with_name(d.name + ".decisions.jsonl")


def validate(rec: dict) -> dict:
    """A clean decision record, or DecisionError naming the bad field."""
    if not isinstance(rec, dict):
        raise DecisionError("a decision must be a JSON object")
    for f in ("reviewer", "kind", "item", "action"):
        if not isinstance(rec.get(f), str) or not rec[f].strip():
            raise DecisionError(f"field {f!r} is missing or empty")
    if rec["kind"] not in KINDS:
        raise DecisionError(f"kind {rec['kind']!r}: use one of {KINDS}")
    if rec["action"] not in ACTIONS:
        raise DecisionError(f"action {rec['action']!r}: use one of {ACTIONS}")
    out = {"time": rec.get("time") or dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds"),
           "reviewer": rec["reviewer"].strip(), "kind": rec["kind"], "item": rec["item"], "action": rec["action"],
           "comment": str(rec.get("comment") or "")}
    if rec["action"] == "edit":
        if rec["kind"] != "question":
            raise DecisionError("only questions can be edited (scenes are accepted or rejected)")
        e = rec.get("edit") or {}
        opts = e.get("options")
        if not isinstance(e.get("question"), str) or not e["question"].strip():
            raise DecisionError("edit.question is missing or empty")
        if not isinstance(opts, list) or len(opts) != 4 or not all(isinstance(o, str) and o.strip() for o in opts):
            raise DecisionError("edit.options must be 4 non-empty strings")
        if len({o.strip().lower() for o in opts}) != 4:
            raise DecisionError("edit.options must be distinct")
        if e.get("answer") not in LETTERS:
            raise DecisionError("edit.answer must be one of A, B, C, D")
        out["edit"] = {"question": e["question"].strip(), "options": [o.strip() for o in opts], "answer": e["answer"]}
    return out


@dataclass
class Review:
    """The state a decisions file describes."""
    final: dict[tuple[str, str], dict] = field(default_factory=dict)  # (kind, item) -> newest decision
    history: dict[tuple[str, str], list[dict]] = field(default_factory=dict)
    bad_lines: list[tuple[int, str]] = field(default_factory=list)

    @property
    def conflicts(self) -> list[dict]:
        """Items where different reviewers reached different outcomes (the newest still wins)."""
        out = []
        for key, recs in sorted(self.history.items()):
            by_reviewer = {}
            for r in recs:
                by_reviewer[r["reviewer"]] = (r["action"], json.dumps(r.get("edit"), sort_keys=True))
            if len(by_reviewer) > 1 and len(set(by_reviewer.values())) > 1:
                out.append({"kind": key[0], "item": key[1], "winner": self.final[key]["reviewer"],
                            "decisions": [{k: r[k] for k in ("time", "reviewer", "action")} for r in recs]})
        return out

    def status(self, kind: str, item: str) -> str:
        d = self.final.get((kind, item))
        return d["action"] if d else "unreviewed"

    def counts(self) -> dict:
        c = {"reviewed": len(self.final), "accepted": 0, "edited": 0, "rejected": 0}
        for d in self.final.values():
            c[{"accept": "accepted", "edit": "edited", "reject": "rejected"}[d["action"]]] += 1
        return c


def load(path: str | Path) -> Review:
    rv = Review()
    path = Path(path)
    if not path.is_file():
        return rv
    order = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = validate(json.loads(line))
        except (json.JSONDecodeError, DecisionError) as err:
            rv.bad_lines.append((n, f"{path}: line {n}: {err}"))
            continue
        order.append((rec["time"], n, rec))
    for _, _, rec in sorted(order, key=lambda x: (x[0], x[1])):  # newest wins; file order breaks ties
        key = (rec["kind"], rec["item"])
        rv.history.setdefault(key, []).append(rec)
        rv.final[key] = rec
    return rv


class DecisionLog:
    """Appends decisions, one fsynced line each; safe across the server's threads."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def append(self, rec: dict) -> dict:
        rec = validate(rec)
        line = json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        return rec

    def review(self) -> Review:
        with self._lock:
            return load(self.path)
