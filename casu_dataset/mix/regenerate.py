"""Scaper-style regeneration: a scene rebuilt bit for bit from its stored annotation (the full
spec `compose` wrote) and the source files alone. Every field the annotation gives is checked
first (AnnotationError naming it), so an edited annotation cannot render something other than
what it describes; the rendering itself is the mixer's `render_scene`, shared with `compose`."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from casu_dataset.contract import ANNOTATION_FORMAT, ANNOTATION_VERSION, AnnotationError
from casu_dataset.core import cache_layout
from casu_dataset.core.audio_io import AudioError
from casu_dataset.mix.mixer import (
    ClipCache,
    MixConfig,
    MixResult,
    SceneSources,
    SourceRef,
    load_clips,
    render_scene,
)


def resolve_source_path(path: str, search_dirs: list[Path]) -> str:
    if path.startswith("{"):
        from casu_dataset.sounds.bank import bank_dir

        token, _, rest = path.partition("}/")
        roots = {"{bank": bank_dir(), "{speech_cache": cache_layout.speech_dir()}
        if token in roots and (roots[token] / rest).is_file():
            return str(roots[token] / rest)
        path = rest  # fall through: look for the file name in the search folders
    if Path(path).is_file():
        return path
    for d in search_dirs:
        cand = d / Path(path).name
        if cand.is_file():
            return str(cand)
    return path


def _check_sources(ann: dict, where: str) -> None:
    """The fields regenerate reads, each of the right shape (AnnotationError naming the field)."""

    def entry(name: str, e) -> None:
        if not isinstance(e, dict) or not all(
            isinstance(e.get(k), str) for k in ("path", "clip_id", "sha256")
        ):
            raise AnnotationError(
                f"{where}: {name}: not a source entry with path, clip_id and sha256 strings"
            )

    entry("background", ann.get("background"))
    for key in ("turns", "events"):
        if not isinstance(ann.get(key), list):
            raise AnnotationError(f"{where}: {key}: expected a list of source entries")
        for i, e in enumerate(ann[key]):
            entry(f"{key}[{i}]", e)
    if not isinstance(ann.get("plan"), dict):
        raise AnnotationError(f"{where}: plan: expected an object")
    if not isinstance(ann.get("gains"), dict):
        raise AnnotationError(f"{where}: gains: expected an object")


# What an annotation may ask regenerate to render: a scene of at most this long (a hand-edited
# num_samples of 1e12 would allocate terabytes), at a rate a WAV and the mixer can hold.
MAX_REGEN_SECONDS = 600.0
SAMPLE_RATES = (8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000)


def _check_plan(ann: dict, cfg: MixConfig, where: str) -> None:
    """The numbers regenerate renders from: whole, in range, finite (AnnotationError naming the
    field), so an edited annotation cannot write an unreadable WAV or ask for unbounded memory."""

    def whole(name: str, v, lo: int, hi: int) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise AnnotationError(f"{where}: {name}: {v!r} is not a whole number in [{lo}, {hi}]")
        return v

    def finite(name: str, v, positive: bool = False) -> None:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if not ok or (positive and v <= 0):
            raise AnnotationError(
                f"{where}: {name}: {v!r} is not a finite{' positive' if positive else ''} number"
            )

    if cfg.sample_rate not in SAMPLE_RATES or ann.get("sample_rate") != cfg.sample_rate:
        raise AnnotationError(
            f"{where}: sample_rate: {ann.get('sample_rate')!r} (mix_config {cfg.sample_rate!r}); "
            f"expected one of {', '.join(map(str, SAMPLE_RATES))}, the same in both"
        )
    plan, gains = ann["plan"], ann["gains"]
    n = whole("plan.num_samples", plan.get("num_samples"), 1, int(MAX_REGEN_SECONDS * cfg.sample_rate))
    bg = plan.get("background")
    if not isinstance(bg, dict):
        raise AnnotationError(f"{where}: plan.background: expected an object")
    whole("plan.background.offset_samples", bg.get("offset_samples"), 0, 2**40)
    for key in ("turns", "events"):
        items = plan.get(key)
        if not isinstance(items, list) or len(items) != len(ann[key]):
            raise AnnotationError(f"{where}: plan.{key}: expected one entry per {key[:-1]} ({len(ann[key])})")
        for i, e in enumerate(items):
            if not isinstance(e, dict):
                raise AnnotationError(f"{where}: plan.{key}[{i}]: expected an object")
            whole(f"plan.{key}[{i}].onset_samples", e.get("onset_samples"), 0, n)
            if key == "events":
                whole(f"plan.{key}[{i}].length_samples", e.get("length_samples"), 0, n)
    for layer in ("background", "speech", "events"):
        g = gains.get(layer)
        if not isinstance(g, dict):
            raise AnnotationError(f"{where}: gains.{layer}: expected an object")
        finite(f"gains.{layer}.stem", g.get("stem"))
        if layer != "background":
            src = g.get("sources")
            want = len(ann["turns" if layer == "speech" else "events"])
            if not isinstance(src, list) or (src and len(src) != want):
                raise AnnotationError(f"{where}: gains.{layer}.sources: expected {want} gains")
            for i, v in enumerate(src):
                finite(f"gains.{layer}.sources[{i}]", v)
    if gains.get("clip_gain_forced") or "clip_gain" in gains:
        finite("gains.clip_gain", gains.get("clip_gain"), positive=True)
    _check_described_times(ann, n, cfg.sample_rate, where, finite)


def _check_described_times(ann: dict, n: int, sr: int, where: str, finite) -> None:
    """The times the annotation states for a reader (seconds, sample counts beside the plan) agree
    with the plan it renders from: an edited number there (a NaN onset, a length of 1e12) would
    otherwise describe a scene other than the one regenerated."""

    def same(name: str, v, want) -> None:
        if v != want:
            raise AnnotationError(f"{where}: {name}: {v!r} disagrees with the plan ({want!r})")

    def seconds(name: str, v, samples: int) -> None:
        finite(name, v)
        if abs(v * sr - samples) > 1.0:  # the plan's samples are these seconds rounded
            raise AnnotationError(
                f"{where}: {name}: {v!r} s disagrees with the plan ({samples} samples at {sr} Hz)"
            )

    plan = ann["plan"]
    same("num_samples", ann.get("num_samples"), n)
    seconds("duration", ann.get("duration"), n)
    seconds("plan.duration", plan.get("duration"), n)
    for key in ("turns", "events"):
        for i, (e, p) in enumerate(zip(ann[key], plan[key])):
            for name, v in (("onset", e.get("onset")), ("offset", e.get("offset"))):
                finite(f"{key}[{i}].{name}", v)
                finite(f"plan.{key}[{i}].{name}", p.get(name))
            same(f"{key}[{i}].onset_samples", e.get("onset_samples"), p["onset_samples"])
            seconds(f"{key}[{i}].onset", e.get("onset"), p["onset_samples"])
            seconds(f"plan.{key}[{i}].onset", p.get("onset"), p["onset_samples"])
            if key == "events":
                same(f"{key}[{i}].length_samples", e.get("length_samples"), p["length_samples"])


def regenerate(
    annotation: dict | str | Path, search_dirs: Sequence[str | Path] = (), cache: ClipCache | None = None
) -> MixResult:
    """Rebuild a scene from its annotation and the source files; checks every source hash."""
    where = "<annotation>"
    if not isinstance(annotation, dict):
        where = str(annotation)
        try:
            annotation = json.loads(Path(annotation).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise AnnotationError(f"{where}: cannot read annotation: {err}") from None
    ann = annotation
    if not isinstance(ann, dict) or ann.get("format") != ANNOTATION_FORMAT:
        raise AnnotationError(f"{where}: format: not a CASU scene annotation")
    if ann.get("version") != ANNOTATION_VERSION:
        raise AnnotationError(
            f"{where}: version: {ann.get('version')} is not supported (expected {ANNOTATION_VERSION})"
        )
    _check_sources(ann, where)
    try:
        cfg = MixConfig.model_validate(ann.get("mix_config"))
    except ValueError as err:  # pydantic's ValidationError names the bad field
        raise AnnotationError(f"{where}: mix_config: {err}") from None
    _check_plan(ann, cfg, where)
    cache = cache or ClipCache(cfg.sample_rate)
    dirs = [Path(d) for d in search_dirs]

    def ref(entry) -> SourceRef:
        return SourceRef(resolve_source_path(entry["path"], dirs), entry["clip_id"])

    sources = SceneSources(
        ref(ann["background"]), [ref(t) for t in ann["turns"]], [ref(e) for e in ann["events"]]
    )
    clips = load_clips(sources, cache)
    recorded = [ann["background"], *ann["turns"], *ann["events"]]
    for entry, r in zip(recorded, [sources.background, *sources.turns, *sources.events]):
        if clips[r.path].sha256 != entry["sha256"]:
            raise AudioError(
                f"{r.path}: content differs from the annotation (sha256 mismatch for {entry['clip_id']})"
            )
    mixture, stems, _ = render_scene(ann["plan"], sources, clips, cfg, ann["gains"], cache)
    return MixResult(mixture, stems, ann)
