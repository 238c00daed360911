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

import bisect
import datetime as dt
import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casu_dataset.contract import DATASET_LETTERS, mcq_tasks
from casu_dataset.core.errors import InputError

ACTIONS = ("accept", "reject", "edit")
KINDS = ("scene", "question", "family", "family_question")
LETTERS = DATASET_LETTERS


class DecisionError(InputError, ValueError):
    pass


class DecisionFileError(InputError):
    """The decisions file cannot take a decision (a folder, a FIFO or device in its place, not
    writable, the disk full); the message names the file. Nothing was acknowledged."""


def reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    """`json.loads(..., object_pairs_hook=reject_duplicate_keys)`: a key given twice is an error
    (JSON parsers disagree on which one wins, so a decision must not depend on it)."""
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise DecisionError(f"body: the key {k!r} is given twice")
        out[k] = v
    return out


def decisions_path(dataset: str | Path) -> Path:
    d = Path(dataset).resolve()
    return d.with_name(d.name + ".decisions.jsonl")


def _time(v) -> str:
    """An ISO 8601 time with a UTC offset (what the server writes), kept as written."""
    if v is None or v == "":
        return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")
    if not isinstance(v, str):
        raise DecisionError(f"field 'time': {v!r} is not an ISO 8601 time string")
    try:
        t = dt.datetime.fromisoformat(v)
    except ValueError:
        raise DecisionError(f"field 'time': {v!r} is not an ISO 8601 time") from None
    if t.tzinfo is None:
        raise DecisionError(f"field 'time': {v!r} has no UTC offset (write e.g. 2026-01-01T10:00:00+00:00)")
    return v


def validate(rec: dict) -> dict:
    """A clean decision record, or DecisionError naming the bad field. Types are checked as the
    data's own schema does: strings are strings, an edit is an object, an answer is one letter."""
    if not isinstance(rec, dict):
        raise DecisionError("a decision must be a JSON object")
    for f in ("reviewer", "kind", "item", "action"):
        if f in rec and rec[f] is not None and not isinstance(rec[f], str):
            raise DecisionError(f"field {f!r}: must be a string, got {type(rec[f]).__name__}")
        if not isinstance(rec.get(f), str) or not rec[f].strip():
            raise DecisionError(f"field {f!r} is missing or empty")
    if rec["kind"] not in KINDS:
        raise DecisionError(f"kind {rec['kind']!r}: use one of {KINDS}")
    if rec["action"] not in ACTIONS:
        raise DecisionError(f"action {rec['action']!r}: use one of {ACTIONS}")
    comment = rec.get("comment")
    if comment is not None and not isinstance(comment, str):
        raise DecisionError(f"field 'comment': must be a string, got {type(comment).__name__}")
    if rec.get("edit") is not None and rec["action"] != "edit":
        raise DecisionError(f"field 'edit' given with action {rec['action']!r}: only an edit carries one")
    out = {
        "time": _time(rec.get("time")),
        "reviewer": rec["reviewer"].strip(),
        "kind": rec["kind"],
        "item": rec["item"],
        "action": rec["action"],
        "comment": comment or "",
    }
    if rec["kind"] == "family_question":
        fid, _, task = rec["item"].partition("/")
        if not fid or task not in mcq_tasks():
            raise DecisionError(
                f"item {rec['item']!r}: a family question is FAMILY/TASK, TASK one of {mcq_tasks()}"
            )
    if rec["action"] == "edit":
        e = rec.get("edit")
        if (e is not None or rec["kind"] == "question") and not isinstance(e, dict):
            raise DecisionError(
                f"field 'edit': must be an object with question, options"
                f"{', answer' if rec['kind'] == 'question' else ''}, got {type(e).__name__}"
            )
        if rec["kind"] == "family_question":
            out["edit"] = _family_edit(rec.get("edit"))
        elif rec["kind"] != "question":
            raise DecisionError(f"only questions can be edited ({rec['kind']}s are accepted or rejected)")
        else:
            assert isinstance(e, dict)  # refused above unless an object
            out["edit"] = _question_edit(e)
    return out


def variant_question_error(rec: dict, family_id: str | None, task: str) -> str | None:
    """Why a per-variant decision on a family's question is refused (None when it is not):
    the four variants share the question, so only accepting it alone is harmless."""
    if rec["kind"] != "question" or not family_id or rec["action"] == "accept":
        return None
    return (
        f"question {rec['item']!r} belongs to contrast family {family_id!r}, whose four variants share its "
        f"text and options; a per-variant {rec['action']} would break the family. Decide the family question "
        f"instead: kind 'family_question', item '{family_id}/{task}'"
    )


def _question_text(e: dict) -> str:
    if not isinstance(e.get("question"), str) or not e["question"].strip():
        raise DecisionError("edit.question is missing or empty")
    return e["question"].strip()


def _options(e: dict) -> list[str]:
    opts = e.get("options")
    if (
        not isinstance(opts, list)
        or len(opts) != 4
        or not all(isinstance(o, str) and o.strip() for o in opts)
    ):
        raise DecisionError("edit.options must be 4 non-empty strings")
    if len({" ".join(o.lower().split()) for o in opts}) != 4:
        raise DecisionError("edit.options must be distinct")
    return [o.strip() for o in opts]


def _question_edit(e: dict) -> dict:
    extra = set(e) - {"question", "options", "answer"}
    if extra:
        raise DecisionError(
            f"edit: unknown fields {sorted(extra)} (a question edit has question, options, answer)"
        )
    q, opts = _question_text(e), _options(e)
    a = e.get("answer")
    if not (isinstance(a, str) and a in tuple(LETTERS)):  # a tuple: "AB" in "ABCD" would pass
        raise DecisionError(f"edit.answer {a!r}: must be one of the letters A, B, C, D")
    return {"question": q, "options": opts, "answer": a}


def _family_edit(e) -> dict:
    """The new shared text; the keys stay per variant, so an `answer` is refused, not ignored."""
    if not isinstance(e, dict) or not ({"question", "options"} & set(e)):
        raise DecisionError("edit: a family question edit needs edit.question and/or edit.options")
    if "answer" in e:
        raise DecisionError(
            "edit.answer: a family question's key is per variant and cannot be edited; "
            "edit only the question and the option texts (in the shared order)"
        )
    extra = set(e) - {"question", "options"}
    if extra:
        raise DecisionError(
            f"edit: unknown fields {sorted(extra)} (a family question edit has question, options)"
        )
    out: dict[str, Any] = {}
    if "question" in e:
        out["question"] = _question_text(e)
    if "options" in e:
        out["options"] = _options(e)
    if "question" in out and "options" in out:
        check_no_option_in_question(out["question"], out["options"])
    return out


MOVE_MARGIN = 0.1  # how much closer to another original an edited option must read to count as moved


def option_moves(old: list[str], new: list[str]) -> str | None:
    """Why an edit of option texts moves meaning between options (None when it only rewords).

    In a contrast family each option is the key of one variant, so swapping the texts of A and
    B swaps two variants' keys while every row's answer letter stays: the key changes through
    review with no one deciding it. An edited option must therefore still read closest to its
    own original text (difflib similarity, lower-cased); one that reads clearly closer
    (MOVE_MARGIN) to another option's original is refused, naming both letters."""
    from difflib import SequenceMatcher

    if len(old) != len(new):
        return (
            f"edit.options: {len(new)} options for {len(old)} "
            "(the order and count are shared by the variants)"
        )

    def sim(a: str, b: str) -> float:
        return SequenceMatcher(None, a.lower().strip(), b.lower().strip()).ratio()

    for i, text in enumerate(new):
        if text.strip().lower() == old[i].strip().lower():
            continue
        own = sim(text, old[i])
        j = max(range(len(old)), key=lambda k: sim(text, old[k]))
        if j != i and sim(text, old[j]) > own + MOVE_MARGIN:
            return (
                f"edit.options[{i}] ({DATASET_LETTERS[i]}) {text!r} reads as the original option "
                f"{DATASET_LETTERS[j]} ({old[j]!r}), not as {DATASET_LETTERS[i]} ({old[i]!r}): an edit may "
                f"change wording, never which variant an option is the key of (that would change keys "
                f"through review); reject the family question instead"
            )
    return None


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
    _orders: dict[tuple[str, str], list[tuple[str, int]]] = field(default_factory=dict, repr=False)

    @property
    def conflicts(self) -> list[dict]:
        """Items where different reviewers reached different outcomes (the newest still wins)."""
        out = []
        for key, recs in sorted(self.history.items()):
            by_reviewer = {}
            for r in recs:
                by_reviewer[r["reviewer"]] = (r["action"], json.dumps(r.get("edit"), sort_keys=True))
            if len(by_reviewer) > 1 and len(set(by_reviewer.values())) > 1:
                out.append(
                    {
                        "kind": key[0],
                        "item": key[1],
                        "winner": self.final[key]["reviewer"],
                        "decisions": [{k: r[k] for k in ("time", "reviewer", "action")} for r in recs],
                    }
                )
        return out

    def status(self, kind: str, item: str) -> str:
        d = self.final.get((kind, item))
        return d["action"] if d else "unreviewed"

    def counts(self, known=None) -> dict:
        """Reviewed/accepted/edited/rejected over the items `known(kind, item)` accepts (all
        when None): decisions on items a dataset does not have are never counted."""
        c = {"reviewed": 0, "accepted": 0, "edited": 0, "rejected": 0}
        for (kind, item), d in self.final.items():
            if known is None or known(kind, item):
                c["reviewed"] += 1
                c[{"accept": "accepted", "edit": "edited", "reject": "rejected"}[d["action"]]] += 1
        return c

    def unknown(self, known) -> list[str]:
        """'KIND ITEM' of every decided item that `known(kind, item)` does not accept."""
        return sorted(f"{kind} {item}" for kind, item in self.final if not known(kind, item))

    def add(self, n: int, rec: dict) -> None:
        """Fold in line n; the newest time wins, file order breaks ties (as a full sort would)."""
        key = (rec["kind"], rec["item"])
        order = (rec["time"], n)
        orders = self._orders.setdefault(key, [])
        i = bisect.bisect(orders, order)
        orders.insert(i, order)
        self.history.setdefault(key, []).insert(i, rec)
        self.final[key] = self.history[key][-1]

    def copy(self) -> "Review":
        return Review(
            dict(self.final),
            {k: list(v) for k, v in self.history.items()},
            list(self.bad_lines),
            {k: list(v) for k, v in self._orders.items()},
        )


class _Reader:
    """Reads a decisions file incrementally: each call parses only the bytes appended since the
    last, so the review page's state requests do not re-parse the whole log. A file that shrank
    or was replaced is read again from the start."""

    def __init__(self, path: Path):
        self.path = path
        self._reset()

    def _reset(self):
        self.review, self.offset, self.lineno, self.ident = Review(), 0, 0, None
        self.parsed_lines = 0  # lines parsed in total (tests check the incremental reading)

    def update(self) -> Review:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._reset()
            return self.review
        if (st.st_dev, st.st_ino) != self.ident or st.st_size < self.offset:
            self._reset()
            self.ident = (st.st_dev, st.st_ino)
        if st.st_size > self.offset:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                blob = f.read(st.st_size - self.offset)
            end = blob.rfind(b"\n") + 1  # a line still being written waits for its newline
            for raw in blob[:end].split(b"\n")[:-1]:
                self.lineno += 1
                self._line(self.lineno, raw)
            self.offset += end
        return self.review

    def _line(self, n: int, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace")
        if not line.strip():
            return
        self.parsed_lines += 1
        try:
            rec = validate(json.loads(line))
        except (json.JSONDecodeError, DecisionError) as err:
            self.review.bad_lines.append((n, f"{self.path}: line {n}: {err}"))
            return
        self.review.add(n, rec)

    def snapshot(self) -> Review:
        """The state including a last line without its newline (a cut-off write is reported)."""
        rv = self.review.copy()
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                tail = f.read()
        except FileNotFoundError:
            return rv
        if tail.strip():
            n = self.lineno + 1
            try:
                rv.add(n, validate(json.loads(tail.decode("utf-8", errors="replace"))))
            except (json.JSONDecodeError, DecisionError) as err:
                rv.bad_lines.append((n, f"{self.path}: line {n}: {err}"))
        return rv


def load(path: str | Path) -> Review:
    r = _Reader(Path(path))
    r.update()
    return r.snapshot()


class DecisionLog:
    """Appends decisions, one fsynced line each; safe across the server's threads. `review()`
    reads the file incrementally (only lines appended since the last call are parsed). The file
    is checked when the log opens (a regular file or none; writable), and a decision is
    acknowledged only once its whole line is on disk: a failed write is cut back off the file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._reader = _Reader(self.path)
        self.check()

    def check(self) -> None:
        """DecisionFileError naming the file when it cannot take decisions."""
        import stat

        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self.path.is_symlink():
                raise DecisionFileError(
                    f"{self.path}: a dangling symlink; remove it or point it at a file"
                ) from None
            parent = self.path.parent
            if parent.is_dir() and not os.access(parent, os.W_OK):
                raise DecisionFileError(f"{self.path}: its folder {parent} is not writable") from None
            return
        except OSError as err:  # a symlink loop, a path through a file
            raise DecisionFileError(f"{self.path}: {err.strerror or err}") from None
        if not stat.S_ISREG(st.st_mode):
            what = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, socket or device)"
            raise DecisionFileError(f"{self.path}: is {what}; the decisions log must be a regular file")
        try:  # opening for append writes nothing; an immutable or read-only file fails here
            os.close(os.open(self.path, os.O_WRONLY | os.O_APPEND))
        except OSError as err:
            raise DecisionFileError(f"{self.path}: cannot append to it ({err.strerror or err})") from None

    def append(self, rec: dict) -> dict:
        rec = validate(rec)
        data = (json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")
        with self._lock:
            self.check()  # the file may have been replaced since the server started
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as err:
                raise DecisionFileError(f"{self.path}: cannot open it ({err.strerror or err})") from None
            try:
                start = os.fstat(fd).st_size
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fsync(fd)
                except OSError as err:
                    # Cut the partial line off, so the next decision starts on a line of its own.
                    try:
                        os.ftruncate(fd, start)
                        os.fsync(fd)
                    except OSError:
                        pass
                    raise DecisionFileError(
                        f"{self.path}: the decision was not saved ({err.strerror or err})"
                    ) from None
            finally:
                os.close(fd)
        return rec

    def review(self) -> Review:
        with self._lock:
            self._reader.update()
            return self._reader.snapshot()

    @property
    def parsed_lines(self) -> int:
        return self._reader.parsed_lines
