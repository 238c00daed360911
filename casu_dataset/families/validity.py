"""Validity of a contrast-family library (CASU v2): the invariants that make every question need
the scene, checked on the compiled variants and on a built dataset, plus blind baselines.

Invariants (each violation names the family and the field):
- every question is asked, with the same text and the same options in the same order, in all
  four variants, and its four keys are a permutation of A-D;
- a slot family has one speech script and varies exactly one non-speech slot over 4 bank types;
- a crossed family has exactly two speech versions and two fills in all four combinations, and
  nothing else differs;
- no option text appears inside its question, and the question names no fill;
- each fill retrieves its intended bank type (with a retriever);
- after the build, speech stems are byte-identical within a speech version, and background and
  event stems within a fill.
"""

from __future__ import annotations

import copy
import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from casu_dataset.contract import DATASET_LETTERS as LETTERS
from casu_dataset.contract import SCENES_CONFIG
from casu_dataset.families.compile import (
    FamilyError,
    FamilyScene,
    compile_families,
    families_of,
    naming_violations,
    normalize_words,
)


class Violation(dict):
    def __str__(self) -> str:
        return f"family {self['family']}: {self['field']}: {self['problem']}"


def _v(family: str, fld: str, problem: str) -> Violation:
    return Violation(family=family, field=fld, problem=problem)


def _without(d: dict, slot: str, slot_kind: str, drop_turns: bool = False) -> dict:
    d = copy.deepcopy(d)
    d.pop("id", None)
    if slot_kind == "background":
        d.pop("background", None)
    else:
        d["events"] = [e for e in d.get("events", []) if e.get("id") != slot]
    if drop_turns:
        d.pop("turns", None)
    return d


def _slot_sound(s) -> tuple:
    if s.slot_kind == "background":
        b = s.script.background
        return (s.types["background"], b.description, tuple(b.keywords))
    e = next(e for e in s.script.events if e.id == s.slot)
    return (s.types[s.slot], e.description, tuple(e.keywords), e.window)


def check_family(fid: str, vs: list) -> list[Violation]:
    out: list[Violation] = []
    if len(vs) != 4:
        return [_v(fid, "variants", f"{len(vs)} variants; a family has exactly 4")]
    shapes = {s.shape for s in vs}
    slots = {(s.slot, s.slot_kind) for s in vs}
    if len(shapes) != 1 or len(slots) != 1:
        return [_v(fid, "shape/slot", f"variants disagree on shape {sorted(shapes)} or slot {sorted(slots)}")]
    shape, (slot, kind) = shapes.pop(), slots.pop()
    # Questions: same text and options per task in all variants, keys a permutation of A-D.
    by_task: dict[str, list] = defaultdict(list)
    for s in vs:
        for q in s.questions:
            by_task[q.task].append(q)
    for task, qs in sorted(by_task.items()):
        f = f"questions.{task}"
        if len(qs) != 4:
            out.append(_v(fid, f, f"asked in {len(qs)} of the 4 variants"))
            continue
        if len({q.question for q in qs}) != 1:
            out.append(_v(fid, f + ".q", "the question text differs between variants"))
        if len({tuple(q.options) for q in qs}) != 1:
            out.append(_v(fid, f + ".options", "the options (or their order) differ between variants"))
        if sorted(q.answer for q in qs) != list(LETTERS):
            out.append(
                _v(fid, f + ".answer", f"keys {sorted(q.answer for q in qs)} are not a permutation of A-D")
            )
        q0 = qs[0]
        nq = f" {normalize_words(q0.question)} "
        for o in q0.options:
            if f" {normalize_words(o)} " in nq:
                out.append(_v(fid, f + ".options", f"option {o!r} appears in the question"))
    # What varies: the slot's sound, and (crossed) the turn texts; nothing else.
    rest = {json.dumps(_without(s.script.to_dict(), slot, kind, drop_turns=True), sort_keys=True) for s in vs}
    if len(rest) != 1:
        out.append(
            _v(
                fid,
                "script",
                "variants differ outside the slot and the speech (place, speakers, other layers)",
            )
        )
    speech = {json.dumps([t.model_dump() for t in s.script.turns], sort_keys=True) for s in vs}
    sounds = [_slot_sound(s) for s in vs]
    n_sounds = len(set(sounds))
    n_types = len({x[0] for x in sounds})
    if shape == "slot":
        if len(speech) != 1:
            out.append(_v(fid, "script.turns", f"a slot family has one speech script; found {len(speech)}"))
        if n_sounds != 4 or n_types != 4:
            out.append(
                _v(
                    fid,
                    "fills",
                    f"a slot family fills its slot with 4 different sounds; found {n_sounds} "
                    f"sounds of {n_types} bank types",
                )
            )
    else:
        if len(speech) != 2:
            out.append(
                _v(
                    fid,
                    "script.turns",
                    f"a crossed family has exactly 2 speech versions; found {len(speech)}",
                )
            )
        if n_sounds != 2 or n_types != 2:
            out.append(
                _v(fid, "fills", f"a crossed family has exactly 2 fills of 2 bank types; found {n_sounds}")
            )
        combos = {
            (json.dumps([t.model_dump() for t in s.script.turns], sort_keys=True), _slot_sound(s)) for s in vs
        }
        if len(combos) != 4:
            out.append(
                _v(
                    fid,
                    "variants",
                    "the 4 variants are not the 4 combinations of 2 speech versions x 2 fills",
                )
            )
    # The question must not name the varied sound.
    fills = {}
    for s in vs:
        snd = _slot_sound(s)
        fills[s.fill or s.variant] = type("F", (), {"type": snd[0], "keywords": list(snd[2])})()
    for task, qs in sorted(by_task.items()):
        named = naming_violations(qs[0].question, fills)
        if named:
            out.append(_v(fid, f"questions.{task}.q", f"the question names a fill ({', '.join(named)})"))
    return out


def check_scenes(scenes: list) -> list[Violation]:
    out: list[Violation] = []
    for s in scenes:
        if not (isinstance(s, FamilyScene) and s.family_id):
            out.append(_v(s.script.id, "family_id", "a question outside any contrast family"))
    for fid, vs in sorted(families_of(scenes).items()):
        out.extend(check_family(fid, vs))
    return out


def check_retrieval(scenes: list, retriever) -> list[Violation]:
    from casu_dataset.families.blind import realisability

    by_id = {s.script.id: s for s in scenes}
    return [
        _v(
            by_id[u["scene"]].family_id,
            f"{u['scene']}.{u['layer']}",
            f"retrieves {u['retrieved']} ({u['clip']}), intended {u['intended']}",
        )
        for u in realisability(scenes, retriever)
    ]


def check_type_truth(scenes: list, retriever) -> dict:
    """Is every recording a slot fill's bank type holds true to the fill's words? Realization 1
    plays the best-scoring recording and realization 2 the next (both checked on the built audio by
    cue_checks), but a larger bank or another realization may play any of them. The similarity of
    the fill's description with each usable recording's caption (MiniLM cosine, cue_checks' truth
    measure): the pairs below TRUE_MIN are listed for an honest reader (MiniLM misses synonyms: "a
    squeezebox" is an accordion), with the pair counts. Findings for the bank, not violations: the
    recordings the shipped realizations play are held to TRUE_MIN by the cue checks."""
    from casu_dataset.mix.cue_checks import TRUE_MIN, TRUE_READ

    # one check per (kind, slot type, description): the variants of a fill share it
    items = sorted({(s.slot_kind, *_slot_sound(s)[:2]) for s in scenes})
    qd = retriever.embedder.encode([desc for *_, desc in items]) if items else np.zeros((0, 0))
    below: dict[str, dict] = {}
    sims: list[float] = []
    for (kind, t, desc), q in zip(items, qd):
        idx = np.flatnonzero((retriever.types == t) & (retriever.kinds == kind) & retriever.usable)
        for i, v in zip(idx, (retriever.desc[idx] @ q).tolist()):
            sims.append(v)
            if v < TRUE_MIN:
                c = retriever.catalog.clips[i]
                b = below.setdefault(c.id, {"type": t, "caption": c.caption, "fills": []})
                b["fills"].append((round(v, 3), desc))
    return {
        "fills": len(items),
        "pairs": len(sims),
        "below_min": sum(v < TRUE_MIN for v in sims),
        "to_read": sum(TRUE_MIN <= v < TRUE_READ for v in sims),
        "lowest": min(sims, default=1.0),
        "below": below,
    }


def check_built(folder: str | Path) -> tuple[list[Violation], dict]:
    """Stem identity in a built dataset (read from its parquet files, never from a cache)."""
    from casu_dataset.core.audio_io import decode_bytes
    from casu_dataset.formats.reader import BuiltDataset, LoadError

    ds = BuiltDataset(folder, full=True)  # validity reads every stem anyway: check every file's hash
    cols = ["scene_id", "family_id", "speech_group", "fill_group", "speech", "background", "events"]
    try:
        t = ds.table(SCENES_CONFIG)
    except LoadError as err:
        return [_v("-", str(folder), str(err))], {}
    missing = [c for c in cols if c not in t.columns]
    if missing:
        return [
            _v(
                "-",
                f"{folder}/{SCENES_CONFIG}",
                f"columns {missing} missing: built without contrast families",
            )
        ], {}
    rows = t.arrow.select(cols).to_pylist()
    out: list[Violation] = []
    stats = {"speech_groups": 0, "fill_groups": 0}
    for group, layers in (("speech_group", ["speech"]), ("fill_group", ["background", "events"])):
        groups: dict[str, list] = defaultdict(list)
        for r in rows:
            if r[group]:
                groups[r[group]].append(r)
        stats[group + "s"] = len(groups)
        for g, members in sorted(groups.items()):
            for layer in layers:
                ref = decode_bytes(members[0][layer]["bytes"], f"{members[0]['scene_id']} {layer}")
                for m in members[1:]:
                    x = decode_bytes(m[layer]["bytes"], f"{m['scene_id']} {layer}")
                    if x.shape != ref.shape or not np.array_equal(x, ref):
                        out.append(
                            _v(
                                m["family_id"],
                                f"{m['scene_id']}.{layer}",
                                f"{layer} stem differs from {members[0]['scene_id']} (same {group} {g})",
                            )
                        )
    return out, stats


def check_coverage(folder: str | Path, scenes: list) -> list[Violation]:
    """Every variant of the library in the built dataset and nothing else: a family the build
    skipped (its reason from build_report.json when recorded), or a scene the library does not
    have, is a violation naming it."""
    from casu_dataset.formats.reader import BuiltDataset, LoadError

    try:
        built = set(BuiltDataset(folder).table(SCENES_CONFIG).arrow.column("scene_id").to_pylist())
    except (LoadError, KeyError) as err:
        return [_v("-", str(folder), f"cannot read its scene ids ({err})")]
    reasons = {}
    report = Path(folder) / "build_report.json"
    if report.is_file():
        try:
            reasons = {s["scene_id"]: s["reason"] for s in json.loads(report.read_text()).get("skipped", [])}
        except (ValueError, KeyError, TypeError):
            reasons = {}
    out = []
    for fam, variants in sorted(families_of(scenes).items()):
        gone = [v.script.id for v in variants if v.script.id not in built]
        if gone:
            why = next((reasons[g] for g in gone if g in reasons), None)
            out.append(
                _v(
                    fam,
                    "dataset",
                    f"{len(gone)} of {len(variants)} variants not in {folder} ({', '.join(gone)})"
                    + (f": skipped at build: {why}" if why else ""),
                )
            )
    known = {s.script.id for s in scenes}
    extra = sorted(built - known)
    if extra:
        out.append(_v("-", "dataset", f"{len(extra)} scenes not in the library: {', '.join(extra[:5])}"))
    return out


def counts(scenes: list) -> dict:
    fams = families_of(scenes)
    first = [v[0] for v in fams.values()]
    qs = [q for s in scenes for q in s.questions]
    return {
        "families": len(fams),
        "scenes": len(scenes),
        "questions": len(qs),
        "per_shape": dict(Counter(s.shape for s in first)),
        "per_slot_kind": dict(Counter(s.slot_kind for s in first)),
        "families_per_task": dict(Counter(q.task for v in fams.values() for q in v[0].questions)),
        "crossed_families_per_task": dict(
            Counter(q.task for v in fams.values() if v[0].shape == "crossed" for q in v[0].questions)
        ),
        "questions_per_task": dict(Counter(q.task for q in qs)),
        "per_speech_type": dict(Counter(s.script.speech_type for s in first)),
        "places": len({s.script.place for s in first}),
        "per_answer_letter": dict(sorted(Counter(q.answer for q in qs).items())),
        "slot_types": len(
            {t for s in scenes for t in [s.types[s.slot if s.slot_kind == "event" else "background"]]}
        ),
    }


# --- blind baselines --------------------------------------------------------------------------


def _family_acc(questions: list, correct: np.ndarray) -> float:
    groups: dict[tuple, list[bool]] = defaultdict(list)
    for q, c in zip(questions, correct):
        groups[(q.family_id, q.task)].append(bool(c))
    return float(np.mean([all(v) for v in groups.values()])) if groups else 0.0


def _score(questions, choice) -> dict:
    gold = np.array([LETTERS.index(q.answer) for q in questions])
    ok = gold == np.asarray(choice)
    return {"accuracy": float(ok.mean()), "family_accuracy": _family_acc(questions, ok)}


def _by_shape(items: list[tuple], choice) -> dict:
    """{all, slot, crossed} scores of (scene, question) items."""
    choice = np.asarray(choice)
    row = {"all": _score([q for _, q in items], choice)}
    for shape in ("slot", "crossed"):
        idx = [i for i, (s, _) in enumerate(items) if s.shape == shape]
        if idx:
            row[shape] = _score([items[i][1] for i in idx], choice[idx])
    return row


def contexts(scene, reader: str) -> str:
    """What a reader of one kind knows of a variant: nothing, its speech, its sounds, or all."""
    s = scene.script
    speech = " ".join(f'"{t.text}"' for t in s.turns)
    sounds = " ".join([s.background.description] + [e.description for e in s.events])
    return {
        "question only": "",
        "speech only": speech,
        "sounds only": sounds,
        "full script": f"{s.place}. {sounds} {speech}",
    }[reader]


READERS = ("question only", "speech only", "sounds only", "full script")


def embedding_readers(scenes: list, embedder) -> dict:
    """Embedding chooser (option closest to context + question) per reader and family shape."""
    items = [(s, q) for s in scenes for q in s.questions]
    opts = embedder.encode([o for _, q in items for o in q.options]).reshape(len(items), 4, -1)
    res = {}
    for reader in READERS:
        qv = embedder.encode([f"{contexts(s, reader)} {q.question}".strip() for s, q in items])
        choice = np.einsum("nd,nkd->nk", qv, opts).argmax(axis=1)
        res[reader] = _by_shape(items, choice)
    return res


def lm_question_only(scenes: list, lm) -> dict:
    """SmolLM2 option log-likelihood from the question alone, scored once per distinct question."""
    from casu_dataset.families.blind import BLIND_SYSTEM

    pairs = [(s, q) for s in scenes for q in s.questions]
    memo: dict[tuple, tuple[int, int]] = {}
    mean, total = [], []
    for _, q in pairs:
        k = (q.question, tuple(q.options))
        if k not in memo:
            msgs = [{"role": "system", "content": BLIND_SYSTEM}, {"role": "user", "content": q.question}]
            lps = lm.option_logprobs(msgs, q.options)
            memo[k] = (int(np.argmax([lp / n for lp, n in lps])), int(np.argmax([lp for lp, _ in lps])))
        mean.append(memo[k][0])
        total.append(memo[k][1])
    return {
        "SmolLM2-135M (mean/token)": _by_shape(pairs, mean),
        "SmolLM2-135M (sum)": _by_shape(pairs, total),
    }


def length_readers(scenes: list) -> dict:
    from casu_dataset.families.blind import length_heuristics

    pairs = [(s, q) for s in scenes for q in s.questions]
    return {k: _by_shape(pairs, v) for k, v in length_heuristics([q for _, q in pairs]).items()}


def format_report(
    cov: dict,
    violations: list,
    blind: dict | None,
    built: tuple | None,
    truth: dict | None = None,
    *,
    dataset_version: str,
) -> str:
    """The report's markdown; `dataset_version`: the card's (dataset/card.py), passed by the caller
    because the dataset stage sits above the families."""
    lines = [
        f"# CASU-mini validity report (contrast families; dataset {dataset_version})",
        "",
        f"families {cov['families']} ({', '.join(f'{k} {v}' for k, v in cov['per_shape'].items())}; slot "
        f"kind {', '.join(f'{k} {v}' for k, v in cov['per_slot_kind'].items())}), scenes {cov['scenes']}, "
        f"questions {cov['questions']}, places {cov['places']}, slot sound types {cov['slot_types']}",
        "",
        "| task | families | crossed families | questions |",
        "|---|---|---|---|",
    ]
    for t in sorted(cov["families_per_task"]):
        lines.append(
            f"| {t} | {cov['families_per_task'][t]} | {cov['crossed_families_per_task'].get(t, 0)} | "
            f"{cov['questions_per_task'][t]} |"
        )
    lines += ["", "| speech type | families |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(cov["per_speech_type"].items())]
    n = sum(cov["per_answer_letter"].values()) or 1
    lines += [
        "",
        "answer letters: " + ", ".join(f"{k} {v / n:.1%}" for k, v in cov["per_answer_letter"].items()),
    ]
    if truth is not None:
        lines += [
            "",
            f"fill truth over every recording of its type (cue checks hold the played ones): "
            f"{truth['fills']} slot fills, {truth['pairs']} fill/recording pairs, {truth['to_read']} "
            f"to read (0.5-0.7), {truth['below_min']} below 0.5 on {len(truth['below'])} recordings "
            f"(for a reader: MiniLM misses synonyms), lowest {truth['lowest']:.3f}",
        ]
        for cid, b in sorted(truth["below"].items()):
            worst = min(b["fills"])
            lines.append(
                f"- {cid} ({b['type']}: {b['caption']!r}): {len(b['fills'])} fills, lowest "
                f"{worst[0]:.3f} {worst[1]!r}"
            )
    lines += ["", f"invariant violations: {len(violations)}"] + [f"- {v}" for v in violations]
    if built is not None:
        bv, stats = built
        lines += [
            "",
            f"built dataset: {stats.get('speech_groups', 0)} speech versions and "
            f"{stats.get('fill_groups', 0)} fills checked; {len(bv)} stems differ where they must be "
            "identical",
        ] + [f"- {v}" for v in bv]
    if blind:
        lines += [
            "",
            "| reader (no audio) | accuracy per variant | family accuracy | slot fam. acc | crossed acc | "
            "crossed fam. acc |",
            "|---|---|---|---|---|---|",
        ]
        for name, row in blind.items():
            a = row.get("all", row)
            sl, cr = row.get("slot", {}), row.get("crossed", {})
            lines.append(
                f"| {name} | {a['accuracy']:.1%} | {a['family_accuracy']:.1%} | "
                f"{sl.get('family_accuracy', float('nan')):.1%} | {cr.get('accuracy', float('nan')):.1%} | "
                f"{cr.get('family_accuracy', float('nan')):.1%} |"
            )
        lines += [
            "",
            "Question-only readers sit at 25% per variant and 0% family accuracy by construction (every "
            "option is the key of exactly one variant); speech-only readers likewise on slot families. On "
            "crossed families a speech-only or a sounds-only reader can reach at most 50% per variant and "
            "never a whole family: only the two layers together single out each key.",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`python -m casu_dataset.families.validity check FILE...`: compile family files and check them."""
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m casu_dataset.families.validity",
        description="check contrast-family files (format, invariants, retrieval)",
    )
    p.add_argument("cmd", choices=["check"])
    p.add_argument("path", nargs="+", help="family YAML files or folders")
    p.add_argument(
        "--retrieval", action="store_true", help="also check that every layer retrieves its bank type"
    )
    a = p.parse_args(argv)
    rc = 0
    for path in a.path:
        skipped: list[dict] = []
        try:
            scenes = compile_families(path, skipped)
        except FamilyError as err:
            print(f"ERROR {err}")
            rc = 1
            continue
        for s in skipped:
            print(f"ERROR {s['reason']}")
        rc |= bool(skipped)
        print(json.dumps(counts(scenes), indent=1))
        if a.retrieval and scenes:
            from casu_dataset.sounds.catalog import Catalog
            from casu_dataset.sounds.retrieval import Retriever

            bad = check_retrieval(scenes, Retriever(Catalog.embedded()))
            for b in bad:
                print(f"RETRIEVAL {b}")
            print(f"retrieval: {len(bad)} layers retrieve another type")
            rc |= bool(bad)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
