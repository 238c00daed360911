"""Review decisions: an append-only JSONL file next to the dataset (`<dataset>.decisions.jsonl`).

One line per decision: {time, reviewer, kind, item, action: accept|reject|edit, comment, edit}.
Kinds: `scene` (item: a scene id, or a family variant's scene id; accept | reject), `question`
(item: a question id; accept | reject | edit {question, options, answer}), `family` (item: a
contrast family id; accept | reject) and `family_question` (item: FAMILY/TASK; accept | reject |
edit {question and/or options}: the text of the question and of the four options in their
shared order; each variant keeps its own key, so an edit never carries one). Each line is
flushed and fsynced when written, so closing the browser or killing the server loses nothing.
Reading keeps every valid line, reports corrupt ones by line number, lets the newest decision
on an item win, and lists items on which reviewers disagree. Whether a decision fits the
dataset (a known item; no per-variant change to a family's shared question) is checked by
the server when it is made and by review.apply when the build applies it."""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

ACTIONS = ("accept", "reject", "edit")
KINDS = ("scene", "question", "family", "family_question")
LETTERS = "ABCD"
TASKS = ("contextual_reasoning", "entity_extraction", "role_inference", "counterfactual_reasoning")


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
    if rec["kind"] == "family_question":
        fid, _, task = rec["item"].partition("/")
        if not fid or task not in TASKS:
            raise DecisionError(f"item {rec['item']!r}: a family question is FAMILY/TASK, TASK one of {TASKS}")
    if rec["action"] == "edit":
        if rec["kind"] == "family_question":
            out["edit"] = _family_edit(rec.get("edit"))
        elif rec["kind"] != "question":
            raise DecisionError(f"only questions can be edited ({rec['kind']}s are accepted or rejected)")
        else:
            out["edit"] = _question_edit(rec.get("edit"))
    return out


def variant_question_error(rec: dict, family_id: str | None, task: str) -> str | None:
    """Why a per-variant decision on a family's question is refused (None when it is not):
    the four variants share the question, so only accepting it alone is harmless."""
    if rec["kind"] != "question" or not family_id or rec["action"] == "accept":
        return None
    return (f"question {rec['item']!r} belongs to contrast family {family_id!r}, whose four variants share its "
            f"text and options; a per-variant {rec['action']} would break the family. Decide the family question "
            f"instead: kind 'family_question', item '{family_id}/{task}'")


def _question_text(e: dict) -> str:
    if not isinstance(e.get("question"), str) or not e["question"].strip():
        raise DecisionError("edit.question is missing or empty")
    return e["question"].strip()


def _options(e: dict) -> list[str]:
    opts = e.get("options")
    if not isinstance(opts, list) or len(opts) != 4 or not all(isinstance(o, str) and o.strip() for o in opts):
        raise DecisionError("edit.options must be 4 non-empty strings")
    if len({" ".join(o.lower().split()) for o in opts}) != 4:
        raise DecisionError("edit.options must be distinct")
    return [o.strip() for o in opts]


def _question_edit(e) -> dict:
    e = e if isinstance(e, dict) else {}
    q, opts = _question_text(e), _options(e)
    if e.get("answer") not in LETTERS:
        raise DecisionError("edit.answer must be one of A, B, C, D")
    return {"question": q, "options": opts, "answer": e["answer"]}


def _family_edit(e) -> dict:
    """The new shared text; the keys stay per variant, so an `answer` is refused, not ignored."""
    if not isinstance(e, dict) or not ({"question", "options"} & set(e)):
        raise DecisionError("edit: a family question edit needs edit.question and/or edit.options")
    if "answer" in e:
        raise DecisionError("edit.answer: a family question's key is per variant and cannot be edited; "
                            "edit only the question and the option texts (in the shared order)")
    extra = set(e) - {"question", "options"}
    if extra:
        raise DecisionError(f"edit: unknown fields {sorted(extra)} (a family question edit has question, options)")
    out = {}
    if "question" in e:
        out["question"] = _question_text(e)
    if "options" in e:
        out["options"] = _options(e)
    if "question" in out and "options" in out:
        check_no_option_in_question(out["question"], out["options"])
    return out


def check_no_option_in_question(question: str, options: list[str]) -> None:
    """The family rule the validity check enforces: no option text inside the question."""
    def norm(t: str) -> str:  # as scenarios.families normalises, so both checks agree
        return " ".join(re.findall(r"[a-z0-9']+", t.lower()))
    nq = f" {norm(question)} "
    for i, o in enumerate(options):
        if f" {norm(o)} " in nq:
            raise DecisionError(f"edit.options[{i}] ({LETTERS[i]}): the option text appears in the question")


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
