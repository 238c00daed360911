"""Another recording of each sound: the second realization of a scene, which measures whether a
model answers from the kind of sound or from one recording of it.

Realization 2 of a scene keeps everything of realization 1 that is not a recording: the speech
(voices, TTS turns, their gains), the timeline (every turn and event onset, the event windows, the
scene length), the random draws and the anti-clipping gain. Every non-speech layer (the
background and each event, the slot fill and the other layers alike) gets the best-scoring clip of
the SAME bank type other than the clip realization 1 uses for that layer, restricted as realization
1's retrieval is (kind, bed length, no clip twice in a scene). So a model that heard *the kind of
sound*, not one recording, answers both realizations alike.

How the layers are redone from realization 1's annotation (from its lock, or from its build in the
same run):
- plan: realization 1's, verbatim, except the bed offset (drawn from its own stream, keyed on the
  family) and each event's audible length: the new clip, cut to realization 1's slot (its window,
  or the span realization 1's clip took), so the timeline and the scene length do not move;
- gains: realization 1's speech gains; the background and events measured on the new clips against
  the same targets (same SNR draws);
- anti-clipping: realization 1's gain, forced, so the speech stem is byte-identical. Where the new
  recordings would clip under it, the background and events (not the speech) are attenuated by the
  family's smallest `nonspeech_headroom` factor (recorded in the annotation, and their targets
  lowered to match, so the recorded expected loudness stays true).
  Where no such factor exists (realization 1's speech stem reaches the peak limit on its own: its
  gain was set by that stem, where its bed cancelled the speech), the family takes the anti-clipping
  rule of realization 1 instead: the smallest gain over its variants that brings every variant's
  new mixture and stems under the limit, the layers' balance untouched (`nonspeech_headroom` 1).
  Its speech stem is then realization 1's scaled by `speech_scale` (< 1, recorded in the
  annotation; absent means 1): the same samples, a few dB quieter, the same in every variant.

A layer whose bank type has no other usable recording cannot vary: `variation_problems` lists
every such (family, layer, type) before anything is built (see api.build), and building one is a
`SecondRealizationError` naming it; a recording is never silently reused.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from casu_dataset.core.errors import RunError
from casu_dataset.core.loudness import peak_abs
from casu_dataset.core.rng import derive_rng
from casu_dataset.mix.mixer import (
    Clip,
    MixResult,
    SceneSources,
    SourceRef,
    load_clips,
    measure_gains,
    render_scene,
    scene_annotation,
    sum_placed,
    top_peak,
    unit_layers,
)

REALIZATION = 2
# The new mixture's peak is kept this far under realization 1's limit (float32 sums vs float64).
_PEAK_MARGIN = 1e-4


class SecondRealizationError(RunError, RuntimeError):
    """A scene whose realization 2 cannot be built (a layer with no other recording of its bank
    type, a mixture that cannot fit realization 1's anti-clipping gain); the message names the
    family, the scene, the layer and the bank type."""


def where(scene, layer: str | None = None) -> str:
    fam = getattr(scene, "family_id", "")
    out = (f"family {fam}: " if fam else "") + f"scene {scene.script.id}"
    return out + (f", layer {layer}" if layer else "")


def layers(scene):
    """(layer key, kind, description, keywords, retrieval constraints) of the non-speech layers in
    realization 1's retrieval order: the background, the events without a window, then the slots."""
    s = scene.script
    yield "background", "background", s.background, {"min_duration": s.max_duration, "allow_loop": True}
    order = sorted(range(len(s.events)), key=lambda j: s.events[j].window is not None)
    for j in order:
        yield j, "event", s.events[j], {}


def layer_name(scene, key) -> str:
    return "background" if key == "background" else f"events.{scene.script.events[key].id}"


def bank_type(scene, key, catalog, reference_clip: str | None = None) -> str:
    """The layer's bank type: the family's (or v1 scene's) `types` entry, else the type of the
    clip realization 1 used; '' when neither says (a catalog without types)."""
    types = getattr(scene, "types", None) or {}
    name = "background" if key == "background" else scene.script.events[key].id
    t = types.get(name)
    if not t and reference_clip:
        try:
            t = catalog[reference_clip].type
        except KeyError:
            t = ""
    return t or ""


def variation_problems(scenes: list, retriever) -> list[tuple[Any, str]]:
    """(scene, message) for every layer realization 2 cannot vary: its bank type has fewer than
    two usable recordings of its kind in the catalog, or it has no bank type. Checked before any
    scene is built; the message names the family, the layer and the type."""
    cat = retriever.catalog
    ok = retriever.usable
    counts = Counter(zip(retriever.kinds[ok].tolist(), retriever.types[ok].tolist()))
    out = []
    for sc in scenes:
        for key, kind, _, _ in layers(sc):
            t = bank_type(sc, key, cat)
            name = layer_name(sc, key)
            fam, slot = getattr(sc, "family_id", ""), getattr(sc, "slot", "")
            if fam:  # one line per family and layer, whichever variants share it
                is_slot = slot == ("background" if key == "background" else sc.script.events[key].id)
                at = f"family {fam}, layer {name}" + (f" (fill {sc.fill!r})" if is_slot else "")
            else:
                at = where(sc, name)
            if not t:
                out.append(
                    (
                        sc,
                        f"{at}: no bank type (the scene's `types` has none and realization "
                        "1's clip is not known yet): realization 2 cannot pick another recording of the "
                        "same type",
                    )
                )
                continue
            n = counts.get((kind, t), 0)
            if n < 2:
                out.append(
                    (
                        sc,
                        f"{at}: bank type {t!r} has {n} usable {kind} recording"
                        f"{'' if n == 1 else 's'} in catalog {cat.name}; realization 2 needs another "
                        "one (add a recording of that type to the bank)",
                    )
                )
    return out


def reference_clips(ann1: dict) -> dict:
    """Realization 1's clip of each non-speech layer: {"background": id, events index: id}."""
    out: dict = {"background": ann1["background"]["clip_id"]}
    for j, e in enumerate(ann1["events"]):
        out[j] = e["clip_id"]
    return out


def retrieve_other(builder, scene, ann1: dict) -> dict:
    """{"background": Match, "events": [Match]}: per layer, the best clip of the layer's bank type
    other than realization 1's, never one clip twice in the scene. Deterministic: the best score,
    ties by clip index (no tie draw), so a family's shared layers get the same clip in every variant."""
    from casu_dataset.sounds.retrieval import RetrievalError

    r = builder.retriever
    ref = reference_clips(ann1)
    used: set[str] = set()
    found: dict = {"background": None, "events": [None] * len(scene.script.events)}
    for key, kind, item, constraints in layers(scene):
        t = bank_type(scene, key, r.catalog, ref[key])
        name = layer_name(scene, key)
        if not t:
            raise SecondRealizationError(
                f"{where(scene, name)}: no bank type: realization 2 cannot pick another recording of "
                "the same type"
            )
        try:
            m = r.search(
                item.description,
                item.keywords,
                k=1,
                kind=kind,
                bank_type=t,
                exclude=used | {ref[key]},
                **constraints,
            )[0]
        except RetrievalError:
            raise SecondRealizationError(
                f"{where(scene, name)}: no usable {kind} recording of bank type {t!r} other than "
                f"realization 1's {ref[key]}"
                + (f" and this scene's {', '.join(sorted(used))}" if used else "")
                + f" in catalog {r.catalog.name}: realization 2 cannot vary this layer"
            ) from None
        used.add(m.clip.id)
        if key == "background":
            found["background"] = m
        else:
            found["events"][key] = m
    return found


@dataclass
class Prepared:
    """One variant of realization 2 before its non-speech headroom is known."""

    scene: Any  # a Scene (a FamilyScene for a family variant)
    ann1: dict
    found: dict
    speech: Any  # speech.layer's SpeechLayer
    sources: SceneSources
    clips: dict
    plan: dict
    gains: dict
    clip_gain: float
    headroom: tuple[float, float] = (-math.inf, 1.0)  # the feasible range of the non-speech factor
    top: float = 0.0  # the new mixture's (or a stem's) peak before any anti-clipping gain
    types: dict = field(default_factory=dict)


@dataclass(frozen=True)
class FamilyGain:
    """How a family's realization 2 fits the peak limit (the same for all its variants)."""

    nonspeech: float  # the factor on the background and events (`nonspeech_headroom`)
    clip_gain: float  # the anti-clipping gain: realization 1's, or lower (see the module docstring)
    speech_scale: float = 1.0  # clip_gain / realization 1's: the speech stem's factor


def _plan(ann1: dict, scene, seed: int, sources: SceneSources, clips: dict, sr: int) -> dict:
    """Realization 1's plan with this realization's bed offset and event lengths."""
    p1 = ann1["plan"]
    plan = copy.deepcopy(p1)
    n = p1["num_samples"]
    bed_len = clips[sources.background.path].audio.shape[0]
    rng = derive_rng(seed, f"{p1['rng_key']}/realization{REALIZATION}/background")
    plan["background"] = {
        "offset_samples": int(rng.integers(0, bed_len - n + 1)) if bed_len >= n else 0,
        "looped": bed_len < n,
    }
    events = []
    for e, src, ep in zip(scene.script.events, sources.events, p1["events"]):
        d = clips[src.path].audio.shape[0] / sr
        if e.max_duration:
            d = min(d, e.max_duration)
        # The slot realization 1 reserved: the window, or the span its clip took.
        d = min(d, e.window) if e.window else min(d, ep["offset"] - ep["onset"])
        off = min(ep["onset"] + d, p1["duration"])
        events.append(
            {
                "onset_samples": ep["onset_samples"],
                "onset": ep["onset"],
                "offset": off,
                "length_samples": int(round((off - ep["onset"]) * sr)),
            }
        )
    plan["events"] = events
    return plan


def _headroom(p: Prepared, cfg) -> tuple[tuple[float, float], float]:
    """The range [lo, hi] (hi <= 1) of factors on the background and events that keeps the mixture
    under realization 1's anti-clipping gain, the speech untouched; and the peak (mixture or stem,
    mixer.top_peak's rule) of the new mixture before any gain."""
    n = p.plan["num_samples"]
    bed, placed = unit_layers(p.plan, p.sources, p.clips, cfg)
    g = p.gains
    sp = sum_placed(placed["speech"], [s * g["speech"]["stem"] for s in g["speech"]["sources"]], n)
    ev = sum_placed(placed["events"], [s * g["events"]["stem"] for s in g["events"]["sources"]], n)
    s = sp.astype(np.float64)
    b = (bed * np.float32(g["background"]["stem"])).astype(np.float64)
    x = b + ev
    m = cfg.peak_limit / p.clip_gain * (1 - _PEAK_MARGIN)
    pos, neg, zero = x > 0, x < 0, x == 0
    # Each scaled stem must fit the limit on its own as well (mixer.render_scene's rule).
    stem_peaks = [peak_abs(b), peak_abs(ev)]
    hi = min(
        1.0,
        float(((m - s[pos]) / x[pos]).min(initial=math.inf)),
        float(((-m - s[neg]) / x[neg]).min(initial=math.inf)),
        *(m / v for v in stem_peaks if v > 0),
    )
    lo = max(
        float(((-m - s[pos]) / x[pos]).max(initial=-math.inf)),
        float(((m - s[neg]) / x[neg]).max(initial=-math.inf)),
    )
    if np.any(np.abs(s[zero]) > m):
        lo = math.inf
    return (lo, hi), top_peak(s + x, {"speech": s, "background": b, "events": ev})


def prepare(builder, scene, seed: int, ann1: dict, turn_samples: list[int] | None = None) -> Prepared:
    """Retrieve the other recordings, take realization 1's speech, plan and gains, measure the new
    layers. `turn_samples`: realization 1's locked turn lengths (its lock), to which the TTS output
    is conformed as a locked build conforms it."""
    script = scene.script
    cfg = builder.mix_config
    sr = cfg.sample_rate
    p1 = ann1["plan"]
    rng_key = p1["rng_key"] if p1["rng_key"] != script.id else None
    found = retrieve_other(builder, scene, ann1)
    speech = builder.speech(script, seed, rng_key)
    sources = SceneSources(
        SourceRef(found["background"].clip.path, found["background"].clip.id),
        [SourceRef(str(p), f"tts:{p.stem[:16]}") for p in speech.turn_paths],
        [SourceRef(m.clip.path, m.clip.id) for m in found["events"]],
    )
    clips = load_clips(sources, builder.cache)
    if turn_samples is not None:
        for tref, n in zip(sources.turns, turn_samples):
            c = clips[tref.path]
            x = c.audio[:n] if c.audio.shape[0] >= n else np.pad(c.audio, (0, n - c.audio.shape[0]))
            clips[tref.path] = Clip(audio=x.astype(np.float32), sha256=c.sha256, lufs=c.lufs)
    plan = _plan(ann1, scene, seed, sources, clips, sr)
    bed, placed = unit_layers(plan, sources, clips, cfg)
    gains = measure_gains(plan, clips[sources.background.path], placed, cfg, builder.cache)
    g1 = ann1["gains"]
    gains["speech"] = copy.deepcopy(g1["speech"])  # the speech stem is realization 1's, byte for byte
    gains = {k: gains[k] for k in ("background", "speech", "events")}
    ref = reference_clips(ann1)
    types = {
        layer_name(scene, k): bank_type(scene, k, builder.retriever.catalog, ref[k])
        for k, _, _, _ in layers(scene)
    }
    p = Prepared(scene, ann1, found, speech, sources, clips, plan, gains, float(g1["clip_gain"]), types=types)
    p.headroom, p.top = _headroom(p, cfg)
    return p


def family_headroom(prepared: list[Prepared], peak_limit: float) -> FamilyGain:
    """The one gain setting of a family, so the variants that share a fill keep byte-identical
    non-speech stems and those that share a speech version byte-identical speech stems: realization
    1's anti-clipping gain with the smallest of the variants' largest non-speech factors (1.0 unless
    a variant would clip); or, where some variant has no such factor, a lower anti-clipping gain
    on the whole mixture (see the module docstring)."""
    g1 = prepared[0].clip_gain
    if any(p.clip_gain != g1 for p in prepared):  # realization 1 shares one gain per family
        raise SecondRealizationError(
            f"{where(prepared[0].scene)}: realization 1's variants do not share one anti-clipping gain"
        )
    if all(p.headroom[0] <= p.headroom[1] and p.headroom[1] > 0 for p in prepared):
        a = min(p.headroom[1] for p in prepared)
        if all(a >= p.headroom[0] for p in prepared):
            return FamilyGain(nonspeech=a, clip_gain=g1)
    # Realization 1's speech stem leaves the new recordings no room under its gain (it reaches the
    # limit on its own where its bed cancelled the speech): realization 1's rule on the new mix.
    top = max(p.top for p in prepared)
    g = min(g1, peak_limit / top * (1 - _PEAK_MARGIN)) if top > 0 else g1
    return FamilyGain(nonspeech=1.0, clip_gain=g, speech_scale=g / g1)


def render(builder, p: Prepared, fam: FamilyGain) -> MixResult:
    """The variant's mixture, stems and annotation; its speech checked in the mixture as
    realization 1's (MixIntelligibilityError fails the scene)."""
    from casu_dataset.mix.realize import match_record, portable_paths
    from casu_dataset.speech.mix_check import check_mix, transcript_cache

    cfg = builder.mix_config
    gains = copy.deepcopy(p.gains)
    if fam.nonspeech < 1.0:
        db = 20 * math.log10(fam.nonspeech)
        for layer in ("background", "events"):
            gains[layer]["stem"] *= fam.nonspeech
            gains[layer]["target_lufs"] += db
    mixture, stems, gains = render_scene(p.plan, p.sources, p.clips, cfg, gains, builder.cache, fam.clip_gain)
    r = builder.retriever
    ref = reference_clips(p.ann1)
    extra = {
        "retrieval": {
            "alpha": r.alpha,
            "model": r.embedder.model_name,
            "catalog": r.catalog.name,
            "catalog_fingerprint": r.catalog.fingerprint(),
            "background": match_record(p.found["background"]),
            "events": [match_record(m) for m in p.found["events"]],
        },
        "speech": p.speech.annotation(),
        "realization": {
            "index": REALIZATION,
            "rule": "best-scoring clip of the same bank type other than realization 1's; realization "
            "1's speech, timeline, draws and anti-clipping gain",
            "bank_types": p.types,
            "realization1_clips": {
                "background": ref["background"],
                "events": [ref[j] for j in range(len(p.ann1["events"]))],
            },
            "nonspeech_headroom": fam.nonspeech,
        },
    }
    if fam.speech_scale != 1.0:  # absent where the speech stem is realization 1's byte for byte
        extra["realization"]["speech_scale"] = fam.speech_scale
    ann = scene_annotation(
        p.scene.script, p.sources, p.clips, p.ann1["seed"], cfg, p.plan, gains, stems, extra
    )
    res = MixResult(mixture, stems, portable_paths(ann, {"{speech_cache}": builder.synth.dir}))
    res.annotation["extra"]["mix_intelligibility"] = check_mix(
        res, builder.checker, builder.max_wer, cache=transcript_cache(builder.synth.dir.parent / "mixcheck")
    )
    return res


def check_same_timeline(ann1: dict, ann2: dict) -> None:
    """Realization 2 keeps realization 1's timeline (a guard: true by construction)."""
    p1, p2 = ann1["plan"], ann2["plan"]
    same = (
        p1["num_samples"] == p2["num_samples"]
        and [t["onset_samples"] for t in p1["turns"]] == [t["onset_samples"] for t in p2["turns"]]
        and [e["onset_samples"] for e in p1["events"]] == [e["onset_samples"] for e in p2["events"]]
    )
    if not same:
        raise SecondRealizationError(
            f"scene {ann1['scene_id']}: realization 2's timeline differs from realization 1's"
        )
