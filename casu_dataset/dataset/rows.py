"""A dataset row has one home: what a built scene becomes in each config (the scenes config and one
per task), and the family columns every row carries. The build's driver and its workers (which
measure the cues from the rows they made) both make rows here."""

from __future__ import annotations

import json

from casu_dataset.contract import DESCRIPTION_TASK, FAMILY_FIELDS, SCENES_CONFIG, dataset_configs
from casu_dataset.families.compile import FamilyScene
from casu_dataset.mix.cue_checks import measure_rows


def family_fields(scene) -> dict:
    """The dataset's family columns: null for a scene outside any contrast family (v1)."""
    if not isinstance(scene, FamilyScene):
        return dict.fromkeys(FAMILY_FIELDS)
    return {
        "family_id": scene.family_id or None,
        "variant": scene.variant or None,
        "family_shape": scene.shape or None,
        "slot_kind": scene.slot_kind or None,
        "speech_version": scene.speech_version or None,
        "fill": scene.fill or None,
        "speech_group": scene.speech_group or None,
        "fill_group": scene.fill_group or None,
    }


def scene_rows(scene, built: dict) -> dict[str, list[dict]]:
    """A built scene's rows, per config: its scenes row (the mixture and the three stems) and a row
    per question, with the audio as FLAC bytes; `built` is build_unit's {annotation, flac}."""
    ann, flac = built["annotation"], built["flac"]
    s = scene.script
    sid = s.id

    def audio(k):
        return {"bytes": flac[k], "path": f"{sid}/{k}.flac"}

    rows: dict[str, list[dict]] = {c: [] for c in dataset_configs()}
    fam = family_fields(scene)
    rows[SCENES_CONFIG].append(
        {
            "scene_id": sid,
            "place": s.place,
            "speech_type": s.speech_type,
            "description": scene.description,
            "audio": audio("mixture"),
            "background": audio("background"),
            "speech": audio("speech"),
            "events": audio("events"),
            "script": s.dump_json(indent=None),
            "annotation": json.dumps(ann, sort_keys=True),
            "variant_of": scene.variant_of,
            **fam,
        }
    )
    for q in scene.questions:
        rows[q.task].append(
            {
                "id": q.id,
                "scene_id": sid,
                "task": q.task,
                "audio": audio("mixture"),
                "question": q.question,
                "options": q.options,
                "answer": q.answer,
                "rationale": q.rationale,
                "layers": q.layers,
                "minimal_pair_id": q.minimal_pair_id,
                "place": s.place,
                "speech_type": s.speech_type,
                **fam,
            }
        )
    if not scene.variant_of:
        rows[DESCRIPTION_TASK].append(
            {
                "id": f"{sid}/description",
                "scene_id": sid,
                "audio": audio("mixture"),
                "reference": scene.description,
                "event_descriptions": [e.description for e in s.events],
                "turns": [t.text for t in s.turns],
                "place": s.place,
                "speech_type": s.speech_type,
                **fam,
            }
        )
    return rows


def unit_cues(unit: list, built: dict | None) -> dict:
    """A built unit's cues (cue_checks.measure_rows of its scenes rows), measured by the pool
    worker or Ray actor that built it, where the stems are; {} when it was not built or measuring
    failed (the driver then measures the rows itself and reports why)."""
    if built is None:
        return {}
    try:
        return measure_rows([scene_rows(s, built[s.script.id][0])[SCENES_CONFIG][0] for s in unit])
    except Exception:  # noqa: BLE001
        return {}


def delivered(built: dict | None, cues: dict) -> tuple[dict, dict] | None:
    """A unit a worker built, as the driver takes it: every scene counted as a cache hit (as when
    it was read back from the cache the worker filled), with its cues; None: the worker failed it
    (the driver builds it itself and reports the same reason)."""
    if built is None:
        return None
    return {sid: (b, True) for sid, (b, _) in built.items()}, cues
