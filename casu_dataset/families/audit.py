"""Honest-reader audits of contrast families: packets that show a reader ONE view of each question
(only one speech version, only the sounds, or the whole scene, never the keys), and a scorer that
checks the reader's answers against what the family design requires.

A question-only reader cannot beat chance on a family by construction, so what a reader can
still find is a broken item:
- speech view (a crossed family's version): exactly the two options of that version's two
  variants must stay plausible. One option means the line contradicts a fill (or gives the key
  away); a missing own key means a line contradicts that variant. Slot families: all four options
  must stay plausible without the slot ("no absurd option").
- sounds view (crossed families): exactly the two options of that fill's two variants.
- scene view (every variant): the reader must pick the variant's key, and not find a second
  option as defensible.

`python -m casu_dataset audit packets --out DIR` writes `packet_*.md` (give each to a reader who
opens nothing else), `READER_views.md` / `READER_scene.md` (their instructions) and
`keys.json` (for the scorer only); the readers write `answers_<packet>.jsonl`;
`python -m casu_dataset audit score DIR` prints the report (exit 1 naming each broken item).
Items are described from the compiled scene scripts (fills by their descriptions, speakers as
voices with gender and age, never their role labels), so a reader sees what a listener hears."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from casu_dataset.core.errors import Field, FieldError, InputError
from casu_dataset.families.compile import FamilyScene, families_of

READER_VIEWS = """You are an honest reader for a listening-comprehension benchmark. \
Read ONLY your packet file.
Do NOT open any other file (not the repository, not other packets, not keys.json).

Each item says what a listener heard: only PART of an audio scene (only the speech, or only the
non-speech sounds; the rest was inaudible to them), then a 4-option question about the whole scene.
For each item, as a careful, strong reader:
1. "plausible": EVERY option that could reasonably be correct given only what was heard (the
   unheard part could be anything natural); exclude an option only if what was heard makes it
   wrong or clearly unlikely.
2. "pick": the single option you would bet on if forced.
Write one JSON object per line, for every item, to answers_<packet name>.jsonl beside the packet:
{"id": "<item id>", "plausible": ["A", "C"], "pick": "A", "note": "<optional, <= 20 words>"}
"""

READER_SCENE = """You are an honest reader for a listening-comprehension benchmark. \
Read ONLY your packet file.
Do NOT open any other file (not the repository, not other packets, not keys.json).

Each item describes everything a listener heard in a short audio scene (background, speech lines in
order, sound events), then a 4-option question. For each item:
1. "pick": the single best answer.  2. "also": any OTHER option about as defensible (usually none).
3. "odd": true if anything in the scene is unnatural or contradictory, else false.
Write one JSON object per line, for every item, to answers_<packet name>.jsonl beside the packet:
{"id": "<item id>", "pick": "B", "also": [], "odd": false, "note": "<optional, <= 20 words>"}
"""


class AuditError(InputError, FieldError, ValueError):
    """A packet folder or answers file that cannot be scored; the message names the file and line."""


@dataclass
class Item:
    id: str
    view: str  # speech | sounds | scene
    family: str
    task: str
    shows: str  # the speech version, the fill, or the variant shown
    heard: list[str]
    question: str
    options: list[str]
    expect: list[str] = field(default_factory=list)  # letters a reader must keep (or pick, for scene)

    def markdown(self) -> str:
        opts = "\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(self.options))
        return (
            f"## item {self.id}\nWhat the listener heard:\n"
            + "\n".join(f"- {h}" for h in self.heard)
            + f"\n\nQuestion: {self.question}\n{opts}\n"
        )


def _voices(sc: FamilyScene) -> dict[str, str]:
    return {
        s.id: f"Voice {i + 1} ({s.gender}{'' if s.age == 'adult' else ', ' + s.age})"
        for i, s in enumerate(sc.script.speakers)
    }


def _where(anchor) -> str:
    t = anchor.type
    return {
        "after_turn": f" (after line {getattr(anchor, 'turn', 0) + 1})",
        "during_turn": f" (during line {getattr(anchor, 'turn', 0) + 1})",
        "start": " (at the start)",
    }.get(t, f" (at {getattr(anchor, 'time', 0):.1f} s)")


def speech_lines(sc: FamilyScene) -> list[str]:
    v = _voices(sc)
    return [f'{v[t.speaker]}: "{t.text}"' for t in sc.script.turns]


def sound_lines(sc: FamilyScene) -> list[str]:
    return [f"Background throughout: {sc.script.background.description}"] + [
        f"Sound event{_where(e.anchor)}: {e.description}" for e in sc.script.events
    ]


def scene_lines(sc: FamilyScene) -> list[str]:
    """Background, then the turns in order with each event where its anchor puts it."""
    before: dict[int, list[str]] = {}
    during: dict[int, list[str]] = {}
    after: dict[int, list[str]] = {}
    other: list[str] = []
    for e in sc.script.events:
        a = e.anchor
        if a.type == "after_turn" or a.type == "during_turn":
            (after if a.type == "after_turn" else during).setdefault(a.turn, []).append(e.description)
        elif a.type == "start":
            before.setdefault(0, []).append(e.description)
        else:
            other.append(f"[sound at {a.time:.1f} s] {e.description}")
    out = [f"Background throughout: {sc.script.background.description}"]
    for i, line in enumerate(speech_lines(sc)):
        out += [f"[sound] {d}" for d in before.get(i, [])]
        out.append(line + "".join(f"   [during this line: {d}]" for d in during.get(i, [])))
        out += [f"[sound] {d}" for d in after.get(i, [])]
    return out + other


def _iid(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:10]


def family_items(variants: list[FamilyScene]) -> list[Item]:
    """Every view of every question of one family (its four compiled variant scenes)."""
    fam = variants[0]
    items: list[Item] = []
    for qi, q in enumerate(fam.questions):
        key = {sc.variant: sc.questions[qi].answer for sc in variants}
        base: dict[str, Any] = dict(
            family=fam.family_id, task=q.task, question=q.question, options=list(q.options)
        )
        groups: dict[str, list[FamilyScene]] = {}
        for sc in variants:
            groups.setdefault(sc.speech_group, []).append(sc)
        for grp in groups.values():  # one speech view per speech version (slot: one for all four)
            shows = grp[0].speech_version or "slot"
            items.append(
                Item(
                    _iid("speech", fam.family_id, q.task, shows),
                    "speech",
                    shows=shows,
                    heard=speech_lines(grp[0]),
                    expect=sorted(key[s.variant] for s in grp),
                    **base,
                )
            )
        if fam.shape == "crossed":  # a slot family's sounds decide its key by design
            fills: dict[str, list[FamilyScene]] = {}
            for sc in variants:
                fills.setdefault(sc.fill_group, []).append(sc)
            for grp in fills.values():
                items.append(
                    Item(
                        _iid("sounds", fam.family_id, q.task, grp[0].fill),
                        "sounds",
                        shows=grp[0].fill,
                        heard=sound_lines(grp[0]),
                        expect=sorted(key[s.variant] for s in grp),
                        **base,
                    )
                )
        for sc in variants:
            items.append(
                Item(
                    _iid("scene", fam.family_id, q.task, sc.variant),
                    "scene",
                    shows=sc.variant,
                    heard=scene_lines(sc),
                    expect=[key[sc.variant]],
                    **base,
                )
            )
    return items


def write_packets(
    scenes: list[FamilyScene],
    out: str | Path,
    per_packet: int = 200,
    seed: int = 0,
    families: list[str] | None = None,
) -> dict[str, int]:
    """Packets of at most `per_packet` items per view (shuffled, so a family's items are not
    adjacent), the reader instructions and keys.json; returns {packet name: items}."""
    out = Path(out)
    fams = families_of(scenes)
    if families:
        missing = sorted(set(families) - set(fams))
        if missing:
            raise AuditError(Field("families"), f": not in the library: {', '.join(missing)}")
        fams = {f: fams[f] for f in families}
    by_view: dict[str, list[Item]] = {"speech": [], "sounds": [], "scene": []}
    for fid in sorted(fams):
        for it in family_items(fams[fid]):
            by_view[it.view].append(it)
    out.mkdir(parents=True, exist_ok=True)
    (out / "READER_views.md").write_text(READER_VIEWS)
    (out / "READER_scene.md").write_text(READER_SCENE)
    counts, keys = {}, {}
    for view, its in by_view.items():
        random.Random(f"{seed}/{view}").shuffle(its)
        n = max(1, -(-len(its) // per_packet)) if its else 0
        size = -(-len(its) // n) if n else 0
        for k in range(n):
            name = f"{view}{k + 1}"
            part = its[k * size : (k + 1) * size]
            (out / f"packet_{name}.md").write_text("\n".join(i.markdown() for i in part))
            counts[name] = len(part)
            keys.update(
                {i.id: {k2: v for k2, v in asdict(i).items() if k2 not in ("heard", "options")} for i in part}
            )
    (out / "keys.json").write_text(json.dumps(keys, indent=1, sort_keys=True))
    return counts


def view_breaks(plausible: list[str], expect: list[str]) -> tuple[bool, list[str]]:
    """How a one-view answer breaks the design: (a single option kept where the design keeps more,
    the design letters it dropped). The audit scorer and the agent panel's views critics share it."""
    pl = set(plausible)
    return len(pl) == 1 and len(expect) > 1, sorted(set(expect) - pl)


def read_answers(folder: str | Path) -> dict[str, dict]:
    answers = {}
    for f in sorted(Path(folder).glob("answers_*.jsonl")):
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                a = json.loads(line)
                answers[str(a["id"])] = a
            except (json.JSONDecodeError, KeyError, TypeError):
                raise AuditError(f"{f}:{n}: not a JSON object with an 'id'") from None
    return answers


def score(folder: str | Path) -> dict:
    """Per view: items answered, exact (the plausible set is the design's), single-option
    (a leak or a contradiction), own key missing; scene: key picked, second option defensible,
    odd; and every broken item by family, task and view."""
    folder = Path(folder)
    kf = folder / "keys.json"
    if not kf.is_file():
        raise AuditError(f"{folder}: no keys.json (write the packets with `audit packets --out {folder}`)")
    keys = json.loads(kf.read_text())
    answers = read_answers(folder)
    res: dict = {v: {"items": 0, "answered": 0} for v in ("speech", "sounds", "scene")}
    problems: list[str] = []  # broken items: the audit fails
    warnings: list[str] = []  # close calls worth a look
    for iid, k in sorted(keys.items(), key=lambda kv: (kv[1]["family"], kv[1]["task"], kv[1]["view"])):
        r = res[k["view"]]
        r["items"] += 1
        a = answers.get(iid)
        if a is None:
            continue
        r["answered"] += 1
        where = f"{k['family']} {k['task']} {k['view']}:{k['shows']}"
        if k["view"] == "scene":
            ok = a.get("pick") == k["expect"][0]
            r["key_picked"] = r.get("key_picked", 0) + ok
            r["also"] = r.get("also", 0) + bool(a.get("also"))
            r["odd"] = r.get("odd", 0) + bool(a.get("odd"))
            if not ok:
                problems.append(
                    f"{where}: picked {a.get('pick')}, key {k['expect'][0]} ({a.get('note', '')})"
                )
            elif a.get("also") or a.get("odd"):
                warnings.append(
                    f"{where}: key picked but "
                    f"{'also ' + ','.join(a.get('also') or []) if a.get('also') else 'odd'} "
                    f"({a.get('note', '')})"
                )
            continue
        pl = sorted(set(a.get("plausible") or []))
        r["exact"] = r.get("exact", 0) + (pl == k["expect"])
        single, missing = view_breaks(pl, k["expect"])
        r["single"] = r.get("single", 0) + single
        r["own_key_missing"] = r.get("own_key_missing", 0) + bool(missing)
        if single or missing:
            problems.append(f"{where}: plausible {pl}, design {k['expect']} ({a.get('note', '')})")
        elif pl != k["expect"]:
            warnings.append(
                f"{where}: plausible {pl}, design {k['expect']} (does not narrow; {a.get('note', '')})"
            )
    res["unanswered"] = sum(r["items"] - r["answered"] for r in list(res.values()))
    if res["unanswered"]:
        problems.append(f"{res['unanswered']} items have no answer (answers_*.jsonl in {folder})")
    res["problems"], res["warnings"] = problems, warnings
    return res


def format_score(res: dict) -> str:
    lines = [
        "| view | items | answered | exact design set | single option | own key missing | key picked | "
        "second option defensible | odd |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in ("speech", "sounds", "scene"):
        r = res[v]
        lines.append(
            f"| {v} | {r['items']} | {r['answered']} | {r.get('exact', '-')} | {r.get('single', '-')} | "
            f"{r.get('own_key_missing', '-')} | {r.get('key_picked', '-')} | {r.get('also', '-')} | "
            f"{r.get('odd', '-')} |"
        )
    lines += ["", f"broken items ({len(res['problems'])}):"] + [f"- {p}" for p in res["problems"]]
    lines += ["", f"close calls ({len(res['warnings'])}):"] + [f"- {w}" for w in res["warnings"]]
    return "\n".join(lines)
