"""Apply review decisions to a build's rows (drop-in for build.apply_review).

A contrast family is all four variants or nothing: a rejected family, or a rejected variant
(kind scene, item a variant's scene id), removes the family's rows from every config. A
family question (FAMILY/TASK) is rejected or edited in all four variants at once; an edit
changes the shared question and option texts, never a variant's key. Scenes outside a family
(v1) are decided one by one: a rejected scene takes its rows, question decisions apply per row."""

from __future__ import annotations

from casu_dataset.contract import dataset_configs, mcq_configs
from casu_dataset.review.decisions import option_moves, variant_question_error


def apply_review(rows: dict[str, list[dict]], review) -> dict:
    """Leave out rejected families, scenes and questions, apply edits (in place); returns the
    review counts plus `applied` (what changed the rows), `edits` (each applied edit, old and new
    text), `conflicts`, `bad_lines`, `refused`
    (decisions that would break a family, not applied, each with its reason) and `unknown`
    (decided items that are not in these rows: not applied, not counted)."""
    final = review.final
    CONFIGS, TASK_CONFIGS = dataset_configs(), mcq_configs()  # noqa: N806  (the registry's, at call time)
    fam_of = {
        r["scene_id"]: r.get("family_id") for c in CONFIGS for r in rows.get(c, []) if r.get("family_id")
    }
    families = set(fam_of.values())
    # Items of this build: a decision on anything else is listed as unknown, never counted.
    known_items = (
        {("scene", r["scene_id"]) for c in CONFIGS for r in rows.get(c, [])}
        | {("family", f) for f in families}
        | {("question", r["id"]) for c in TASK_CONFIGS for r in rows.get(c, [])}
        | {
            ("family_question", f"{r['family_id']}/{r['task']}")
            for c in TASK_CONFIGS
            for r in rows.get(c, [])
            if r.get("family_id")
        }
    )

    def known(kind, item):
        return (kind, item) in known_items

    rejected_scenes = {
        item for (kind, item), d in final.items() if kind == "scene" and d["action"] == "reject"
    }
    gone = {
        item for (kind, item), d in final.items() if kind == "family" and d["action"] == "reject"
    } & families
    gone |= {fam_of[s] for s in rejected_scenes if s in fam_of}  # a rejected variant takes its family
    fq = {
        item: d for (kind, item), d in final.items() if kind == "family_question" and d["action"] != "accept"
    }
    refused: list[str] = []
    # A per-variant question reject of a family question (a hand-written line: the page refuses
    # it) drops the shared question from all four variants; a per-variant edit cannot be shared.
    for (kind, item), d in sorted(final.items()):
        if kind != "question":
            continue
        sid, _, task = item.rpartition("/")
        msg = variant_question_error(d, fam_of.get(sid), task)
        if msg is None or fam_of[sid] in gone:
            continue
        if d["action"] == "reject":
            fq.setdefault(f"{fam_of[sid]}/{task}", d)
        else:
            refused.append(msg)
    applied = {
        "questions_rejected": 0,
        "questions_edited": 0,
        "scenes_rejected": 0,
        "families_rejected": 0,
        "family_questions_rejected": 0,
        "family_questions_edited": 0,
    }
    fq_done: dict[str, str] = {}
    moved: dict[str, str] = {}  # family edits refused: they would move a key between variants
    edits: dict[str, dict] = {}  # every applied edit, old and new text, for the card
    for c in CONFIGS:
        kept = []
        for r in rows.get(c, []):
            fid = r.get("family_id")
            if fid in gone:
                continue
            if r["scene_id"] in rejected_scenes:
                applied["scenes_rejected"] += c == "scenes"
                continue
            if c in TASK_CONFIGS and fid:
                d = fq.get(f"{fid}/{r['task']}")
                if d and d["action"] == "reject":
                    fq_done[f"{fid}/{r['task']}"] = "rejected"
                    continue
                if d and d["action"] == "edit":
                    item = f"{fid}/{r['task']}"
                    why = (
                        option_moves(list(r["options"]), d["edit"]["options"])
                        if "options" in d["edit"]
                        else None
                    )
                    if why:  # a hand-written line the page would have refused: the key would move
                        if item not in moved:
                            moved[item] = f"family_question {item!r}: {why}"
                    else:
                        if item not in edits:
                            edits[item] = _edit_record(item, r, d)
                        r = dict(r, **d["edit"])  # question and/or options; the row's answer stays
                        fq_done[item] = "edited"
            elif c in TASK_CONFIGS:
                d = final.get(("question", r["id"]))
                if d and d["action"] == "reject":
                    applied["questions_rejected"] += 1
                    continue
                if d and d["action"] == "edit":
                    edits[r["id"]] = _edit_record(r["id"], r, d)
                    r = dict(r, **d["edit"])
                    applied["questions_edited"] += 1
            kept.append(r)
        rows[c] = kept
    applied["families_rejected"] = len(gone)
    applied["scenes_rejected"] += sum(1 for s in rejected_scenes if fam_of.get(s) in gone)
    for how in fq_done.values():
        applied[f"family_questions_{how}"] += 1
    refused += [moved[k] for k in sorted(moved)]
    return dict(
        review.counts(known),
        applied=applied,
        edits=[edits[k] for k in sorted(edits)],
        conflicts=len(review.conflicts),
        bad_lines=len(review.bad_lines),
        refused=refused,
        unknown=review.unknown(known),
    )


def _edit_record(item: str, row: dict, d: dict) -> dict:
    """What one edit changed (old -> new), so the card can list every edit, not just count them."""
    e = d["edit"]
    rec = {"item": item, "reviewer": d.get("reviewer", ""), "time": d.get("time", "")}
    if "question" in e and e["question"] != row.get("question"):
        rec["question"] = [row.get("question"), e["question"]]
    if "options" in e:
        rec["options"] = [
            [i, a, b] for i, (a, b) in enumerate(zip(row.get("options") or [], e["options"])) if a != b
        ]
    if "answer" in e and e["answer"] != row.get("answer"):
        rec["answer"] = [row.get("answer"), e["answer"]]
    return rec
