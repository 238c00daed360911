"""The critic panel for contrast families, and the run that writes a family file and its report.

Checks, cheapest first; the first that fails rejects the family (later ones are not run, so a
rejected family costs no more calls), and every vote and reason goes into the report:

1. naming (mechanical): `naming_violations` on every question;
2. compile: the library compiler and `family_validity.check_family` on the compiled variants;
3. distinct fills (retrieval, optional): each layer's description retrieves its bank type;
4. naming (critics): no critic may say the question names or describes a varying sound;
5. distinct fills (critics): no critic may name a pair of fills that sound alike;
6. coherence: for each variant (in a crossed family: each speech version with each fill), no
   critic may find a line of speech that contradicts that variant's sound;
7. views: the honest-reader check of `family_audit` run by critics. For each question and each
   single view of `family_audit.family_items` (a speech version, or a slot family's speech; a
   crossed family's fill, its background and events), critics who see only that view list the
   options that stay plausible; no critic may keep a single option where the design expects more
   (the view gives the key away or contradicts a fill) or drop an option the design keeps (a line
   contradicts a variant; a slot family's option absurd without the slot);
8. consensus: for each question and each variant, at least m of k critics answering from that
   variant's description and script pick that variant's key.

A yes/no check also needs at least m valid votes: critics that give no valid JSON cannot pass a
family by silence.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel

from casu_dataset.agents.families import SYSTEM, Brief, brief_dict, pmap, write_family
from casu_dataset.agents.structured import StructuredOutputError, ask_json
from casu_dataset.contract import DATASET_LETTERS as LETTERS
from casu_dataset.families.audit import family_items, view_breaks
from casu_dataset.families.compile import (
    FamilyError,
    Fill,
    compile_family,
    naming_violations,
    parse_family,
)
from casu_dataset.families.validity import check_family


class ConsensusVote(BaseModel):
    answer: str
    reason: str = ""


class CoherenceVote(BaseModel):
    contradiction: bool
    line: int | None = None
    reason: str = ""


class NamingVote(BaseModel):
    names_sound: bool
    reason: str = ""


class DistinctVote(BaseModel):
    confusable: list[list[str]] = []
    reason: str = ""


class ViewsVote(BaseModel):
    plausible: list[str]
    reason: str = ""


@dataclass
class Panel:
    critics: list  # k backends (seats); seats may share a model
    m: int
    retries: int = 2
    retriever: object = None  # a retrieval.Retriever, or None to skip the retrieval check

    def __post_init__(self):
        if not 1 <= self.m <= len(self.critics):
            raise ValueError(f"critic panel: need 1 <= m <= k, got k={len(self.critics)}, m={self.m}")

    @property
    def k(self) -> int:
        return len(self.critics)


def _seat(kind: str, j: int, k: int, extra: str) -> dict:
    return {"role": "system", "content": f"{SYSTEM[kind]} {extra} (Critic {j + 1} of {k}.)"}


def _ask(panel: Panel, j: int, msgs: list[dict], model, what: str, check=None):
    """One critic's validated vote as a dict, or {"error": ...} when it gave no valid JSON."""
    try:
        return ask_json(
            panel.critics[j], msgs, model, what, panel.retries, max_tokens=200, check=check
        ).model_dump()
    except StructuredOutputError as err:
        return {"error": str(err)}


def _speech(scene) -> str:
    roles = {s.id: s.role for s in scene.script.speakers}
    return "\n".join(
        f"{i}. {t.speaker} ({roles[t.speaker]}): {t.text}" for i, t in enumerate(scene.script.turns)
    )


def _sound(scene) -> str:
    s = scene.script
    if scene.slot_kind == "background":
        return f"the background throughout: {s.background.description}"
    ev = next(e for e in s.events if e.id == scene.slot)
    return f"after line {ev.anchor.turn}: {ev.description} (background: {s.background.description})"


def _flag_check(panel: Panel, votes: list[dict], flag) -> tuple[bool, str]:
    """Passed when no valid vote raises the flag and at least m votes are valid."""
    valid = [v for v in votes if "error" not in v]
    flagged = [v for v in valid if flag(v)]
    if flagged:
        return False, f"{len(flagged)} of {panel.k} critics object: {flagged[0].get('reason') or flagged[0]}"
    if len(valid) < panel.m:
        return False, f"only {len(valid)} of {panel.k} critics gave a valid vote (need {panel.m})"
    return True, ""


def critic_naming(panel: Panel, fam: dict) -> dict:
    fills = "\n".join(f"- {n}: {f['description']}" for n, f in fam["fills"].items())
    rows, ok, why = [], True, ""
    for q in fam["questions"]:

        def vote(j, q=q):
            msgs = [
                _seat(
                    "naming",
                    j,
                    panel.k,
                    "A question is asked about several versions of a scene that differ only "
                    "in one sound; it must not name, describe or hint at that sound.",
                ),
                {
                    "role": "user",
                    "content": f"Question: {q['q']}\nThe sound is one of:\n{fills}\nDoes the question "
                    'name, describe or hint at any of these sounds? Answer with JSON: {"names_sound": '
                    'false, "reason": "..."}',
                },
            ]
            return _ask(panel, j, msgs, NamingVote, f"naming critic {j + 1} ({fam['id']}, {q['task']})")

        votes = pmap(vote, range(panel.k))
        passed, reason = _flag_check(panel, votes, lambda v: v["names_sound"])
        rows.append({"task": q["task"], "votes": votes, "passed": passed})
        if not passed and ok:
            ok, why = False, f"questions.{q['task']}: {reason}"
    return {"check": "naming", "by": "critics", "passed": ok, "detail": why, "questions": rows}


def critic_distinct(panel: Panel, fam: dict) -> dict:
    names = list(fam["fills"])
    fills = "\n".join(f"- {n}: {f['description']}" for n, f in fam["fills"].items())

    def check(v: DistinctVote) -> DistinctVote:
        for pair in v.confusable:
            if len(pair) != 2 or not set(pair) <= set(names):
                raise ValueError(f"confusable: {pair} is not a pair of sound names from {names}")
        return v

    def vote(j):
        msgs = [
            _seat("distinct", j, panel.k, "Each sound below will be played as a short recording."),
            {
                "role": "user",
                "content": f"Sounds:\n{fills}\nList every pair that a listener could mistake for each "
                'other by ear (an empty list if none). Answer with JSON: {"confusable": [], "reason": "..."}',
            },
        ]
        return _ask(panel, j, msgs, DistinctVote, f"distinct-fills critic {j + 1} ({fam['id']})", check)

    votes = pmap(vote, range(panel.k))
    passed, reason = _flag_check(panel, votes, lambda v: bool(v["confusable"]))
    return {"check": "distinct_fills", "by": "critics", "passed": passed, "detail": reason, "votes": votes}


def critic_coherence(panel: Panel, scenes: list) -> dict:
    def vote(arg):
        scene, j = arg
        msgs = [
            _seat(
                "coherence",
                j,
                panel.k,
                "A line contradicts a sound when a listener would find it odd or "
                "impossible that the line is said with that sound heard (a siren, then 'walk calmly, finish "
                "the drawing tomorrow').",
            ),
            {
                "role": "user",
                "content": f"Place: {scene.script.place}.\nSound: {_sound(scene)}\nSpeech:\n"
                f"{_speech(scene)}\nDoes any line contradict the sound? Answer with JSON: "
                '{"contradiction": false, "line": null, "reason": "..."}',
            },
        ]
        return _ask(panel, j, msgs, CoherenceVote, f"coherence critic {j + 1} ({scene.script.id})")

    votes = pmap(vote, [(s, j) for s in scenes for j in range(panel.k)])
    rows, ok, why = [], True, ""
    for i, s in enumerate(scenes):
        vs = votes[i * panel.k : (i + 1) * panel.k]
        passed, reason = _flag_check(panel, vs, lambda v: v["contradiction"])
        rows.append({"variant": s.variant, "votes": vs, "passed": passed})
        if not passed and ok:
            ok, why = False, f"variant {s.variant}: {reason}"
    return {"check": "coherence", "by": "critics", "passed": ok, "detail": why, "variants": rows}


_HEARD = {
    "speech": "only the speech; the non-speech sounds were inaudible to them",
    "sounds": "only the non-speech sounds (background and events); the speech was inaudible to them",
}


def _view_break(v: dict, expect: list[str]) -> str:
    """How a valid vote breaks the design ('' when it does not)."""
    pl = v["plausible"]
    single, missing = view_breaks(pl, expect)
    if single:
        return f"keep only {pl} plausible"
    return f"drop {missing} (keep {pl})" if missing else ""


def critic_views(panel: Panel, scenes: list) -> dict:
    items = [it for it in family_items(scenes) if it.view != "scene"]  # a scene view is consensus's job

    def check(v: ViewsVote) -> ViewsVote:
        pl = {x.strip().upper() for x in v.plausible}
        if not pl or not pl <= set(LETTERS):
            raise ValueError(
                f"plausible: a non-empty list of letters from {', '.join(LETTERS)}, got {v.plausible}"
            )
        v.plausible = sorted(pl)
        return v

    def vote(arg):
        it, j = arg
        opts = "\n".join(f"{L}. {o}" for L, o in zip(LETTERS, it.options))
        heard = "\n".join(f"- {h}" for h in it.heard)
        msgs = [
            _seat(
                "views",
                j,
                panel.k,
                "A listener heard only part of a short audio scene; the unheard part "
                "could be anything natural. As a careful, strong reader, list EVERY option that could "
                "reasonably be correct given only what was heard; exclude an option only if what was heard "
                "makes it wrong or clearly unlikely.",
            ),
            {
                "role": "user",
                "content": f"What the listener heard ({_HEARD[it.view]}):\n{heard}\n\n"
                f"Question: {it.question}\n{opts}\nWhich options stay plausible? Answer with JSON: "
                '{"plausible": ["A", "C"], "reason": "..."}',
            },
        ]
        return _ask(
            panel,
            j,
            msgs,
            ViewsVote,
            f"views critic {j + 1} ({it.family}, {it.task}, {it.view} {it.shows})",
            check,
        )

    votes = pmap(vote, [(it, j) for it in items for j in range(panel.k)])
    rows, ok, why = [], True, ""
    for i, it in enumerate(items):
        vs = votes[i * panel.k : (i + 1) * panel.k]
        broken = [(v, b) for v in vs if "error" not in v and (b := _view_break(v, it.expect))]
        passed, reason = _flag_check(panel, vs, lambda v: any(v is x for x, _ in broken))
        breaks = [b for _, b in broken]
        rows.append(
            {
                "id": it.id,
                "task": it.task,
                "view": it.view,
                "shows": it.shows,
                "expect": it.expect,
                "votes": vs,
                "breaks": len(breaks),
                "passed": passed,
            }
        )
        if not passed and ok:
            where = f"questions.{it.task}, {it.view} view '{it.shows}'"
            if breaks:
                first = broken[0][0]
                counts = {b: breaks.count(b) for b in breaks}
                reason = (
                    "; ".join(f"{n} of {panel.k} critics {b}" for b, n in counts.items())
                    + f" (design {it.expect}): {first.get('reason') or first['plausible']}"
                )
            ok, why = False, f"{where}: {reason}"
    return {
        "check": "views",
        "by": "critics",
        "passed": ok,
        "detail": why,
        "k": panel.k,
        "m": panel.m,
        "items": rows,
    }


def critic_consensus(panel: Panel, scenes: list) -> dict:
    items = [(s, q, j) for s in scenes for q in s.questions for j in range(panel.k)]

    def check(v: ConsensusVote) -> ConsensusVote:
        v.answer = v.answer.strip().upper()[:1]
        if v.answer not in LETTERS:
            raise ValueError("answer: one of A, B, C, D")
        return v

    def vote(arg):
        s, q, j = arg
        opts = "\n".join(f"{L}. {o}" for L, o in zip(LETTERS, q.options))
        msgs = [
            _seat("consensus", j, panel.k, "Pick the one option that is right for this scene."),
            {
                "role": "user",
                "content": f"Scene description: {s.description}\nScript: {s.script.dump_json(indent=None)}\n"
                f'Question: {q.question}\n{opts}\nAnswer with JSON: {{"answer": "A", "reason": "..."}}',
            },
        ]
        return _ask(
            panel, j, msgs, ConsensusVote, f"consensus critic {j + 1} ({s.script.id}, {q.task})", check
        )

    votes = pmap(vote, items)
    rows, ok, why = [], True, ""
    for i in range(0, len(items), panel.k):
        s, q, _ = items[i]
        vs = votes[i : i + panel.k]
        agree = sum(v.get("answer") == q.answer for v in vs)
        passed = agree >= panel.m
        rows.append(
            {
                "task": q.task,
                "variant": s.variant,
                "key": q.answer,
                "votes": vs,
                "agree": agree,
                "passed": passed,
            }
        )
        if not passed and ok:
            ok, why = (
                False,
                (
                    f"questions.{q.task}, variant {s.variant}: {agree} of {panel.k} critics picked its key "
                    f"{q.answer} (need {panel.m}); votes {[v.get('answer') for v in vs]}"
                ),
            )
    return {
        "check": "consensus",
        "by": "critics",
        "passed": ok,
        "detail": why,
        "k": panel.k,
        "m": panel.m,
        "rows": rows,
    }


def review_family(panel: Panel, fam: dict) -> tuple[list[dict], bool]:
    """The panel's check records for a full family dict, and whether all passed."""
    checks: list[dict] = []
    fills = {n: Fill.model_validate(f) for n, f in fam["fills"].items()}
    named = [
        f"questions.{q['task']}.q: {', '.join(v)}"
        for q in fam["questions"]
        if (v := naming_violations(q["q"], fills))
    ]
    checks.append({"check": "naming", "by": "mechanical", "passed": not named, "detail": "; ".join(named)})
    if named:
        return checks, False
    try:
        scenes = compile_family(parse_family(fam, "generated"), "generated")
        problems = [str(v) for v in check_family(fam["id"], scenes)]
    except FamilyError as err:
        scenes, problems = [], [str(err)]
    checks.append(
        {"check": "compile", "by": "mechanical", "passed": not problems, "detail": "; ".join(problems)}
    )
    if problems:
        return checks, False
    if panel.retriever is not None:
        from casu_dataset.families.blind import realisability

        bad = realisability(scenes, panel.retriever)
        checks.append(
            {
                "check": "distinct_fills",
                "by": "retrieval",
                "passed": not bad,
                "detail": "; ".join(
                    f"{u['scene']} {u['layer']}: wanted {u['intended']}, retrieved "
                    f"{u['retrieved']} ({u['clip']}, {u['score']})"
                    for u in bad
                ),
            }
        )
        if bad:
            return checks, False
    for stage in (
        lambda: critic_naming(panel, fam),
        lambda: critic_distinct(panel, fam),
        lambda: critic_coherence(panel, scenes),
        lambda: critic_views(panel, scenes),
        lambda: critic_consensus(panel, scenes),
    ):
        checks.append(stage())
        if not checks[-1]["passed"]:
            return checks, False
    return checks, True


def run_family(writer, panel: Panel, brief: Brief, types: dict, tasks, retries: int = 3) -> dict:
    """One family through the agents and the panel: a report row (status kept|rejected|failed)."""
    row = {"id": brief.id, "brief": brief_dict(brief)}
    try:
        fam = write_family(writer, brief, types, tasks, retries)
    except StructuredOutputError as err:
        return {
            **row,
            "status": "failed",
            "rejected_by": "agent",
            "reason": str(err),
            "checks": [],
            "family": None,
        }
    checks, ok = review_family(panel, fam)
    bad = next((c for c in checks if not c["passed"]), None)
    return {
        **row,
        "status": "kept" if ok else "rejected",
        "rejected_by": bad and bad["check"],
        "reason": bad and f"{bad['check']} ({bad['by']}): {bad['detail']}",
        "checks": checks,
        "family": fam,
    }


def generate_families(
    writer,
    panel: Panel,
    briefs: list[Brief],
    types: dict,
    tasks,
    retries: int = 3,
    concurrency: int = 1,
    progress=None,
) -> list[dict]:
    """Report rows in brief order; `concurrency` families are written at once (each fans out its
    critic calls; the backend bounds the requests in flight)."""

    def one(b):
        r = run_family(writer, panel, b, types, tasks, retries)
        if progress:
            progress(r)
        return r

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as ex:
        return list(ex.map(one, briefs))


def _votes_comment(r: dict) -> list[str]:
    lines = [f"# {r['id']}: kept; checks: " + ", ".join(f"{c['check']}/{c['by']}" for c in r["checks"])]
    for c in r["checks"]:
        if c["check"] == "views":  # what each single-view critic kept plausible, against the design
            for row in c["items"]:
                lines.append(
                    f"#   views {row['task']} {row['view']} '{row['shows']}': design {row['expect']}, kept "
                    f"{[v.get('plausible') for v in row['votes']]}"
                )
        if c["check"] == "consensus":
            for row in c["rows"]:
                lines.append(
                    f"#   consensus {row['task']} {row['variant']}: key {row['key']}, votes "
                    f"{[v.get('answer') for v in row['votes']]} ({row['agree']}/{c['k']})"
                )
    return lines


def write_outputs(out: str | Path, rows: list[dict], meta: dict) -> Path:
    """The kept families as a FAMILIES.md YAML list, and every row (votes, reasons) in OUT.report.json."""
    from casu_dataset.core.atomic import write_text

    out = Path(out)
    report = out.with_name(out.stem + ".report.json")
    kept = [r for r in rows if r["status"] == "kept"]
    parts = [
        f"# Contrast families written by `python -m casu_dataset generate` ({len(kept)} kept of "
        f"{len(rows)}).",
        f"# Every vote, reason and rejection: {report.name}. Format: casu_dataset/scenarios/FAMILIES.md.",
    ]
    for r in kept:
        parts += _votes_comment(r)
        parts.append(yaml.safe_dump([r["family"]], sort_keys=False, allow_unicode=True, width=110).rstrip())
    if not kept:
        parts.append("[]")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, "\n".join(parts) + "\n")
    summary = {
        "families": len(rows),
        "kept": len(kept),
        "rejected": {},
        "failed": sum(r["status"] == "failed" for r in rows),
    }
    for r in rows:
        if r["status"] == "rejected":
            summary["rejected"][r["rejected_by"]] = summary["rejected"].get(r["rejected_by"], 0) + 1
    write_text(
        report, json.dumps({**meta, "summary": summary, "families": rows}, indent=1, ensure_ascii=False)
    )
    return report
