"""Script -> layers -> mix for one scene: retrieve the bed and events, synthesise the speech,
compose. Every choice is drawn from (seed, scene id) and written to the annotation."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from casu_dataset.core.rng import derive_rng
from casu_dataset.mix.mixer import (
    ClipCache,
    MixConfig,
    MixResult,
    SceneSources,
    SourceRef,
    compose,
)
from casu_dataset.script.schema import SceneScript
from casu_dataset.sounds.retrieval import Match, Retriever
from casu_dataset.speech.layer import SpeechSynth, build_speech_layer
from casu_dataset.speech.voices import VoiceRegistry


@dataclass
class SceneBuilder:
    retriever: Retriever
    synth: SpeechSynth
    registry: VoiceRegistry
    mix_config: MixConfig
    checker: object | None = None  # WhisperChecker, or None to skip the intelligibility check
    max_wer: float = 0.5
    min_score: float | None = None  # refuse matches below this score
    tie_margin: float = 0.02
    cache: ClipCache | None = None
    lock: object | None = None  # a lock.Lock to follow: every scene realized from it
    realization: int = 1  # 2: every non-speech layer on another recording (mix/second_realization.py)
    reference: object | None = None  # realization 2: realization 1's lock.Lock (None: decided in the run)

    def __post_init__(self):
        self.cache = self.cache or ClipCache(self.mix_config.sample_rate)
        self.timings = {"retrieve": 0.0, "speech+check": 0.0, "mix": 0.0}

    def retrieve(self, script: SceneScript, seed: int, rng_key: str | None = None) -> dict:
        """Bed and event clips. Each layer draws its tie-breaks from its own stream keyed on
        (seed, rng_key, layer id), and windowed (slot) events are chosen last, so a contrast
        family's shared layers get the same clips whichever fill its slot has."""
        key = rng_key or script.id

        def rng_for(layer: str) -> np.random.Generator:
            return derive_rng(seed, f"{key}/{layer}", 0x5EED, nbytes=4, byteorder="big")

        bed = self.retriever.choose(
            script.background.description,
            script.background.keywords,
            rng_for("background"),
            tie_margin=self.tie_margin,
            min_score=self.min_score,
            kind="background",
            min_duration=script.max_duration,
            allow_loop=True,
        )
        used = {bed.clip.id}
        events: list[Match | None] = [None] * len(script.events)  # filled in `order`
        order = sorted(range(len(script.events)), key=lambda j: script.events[j].window is not None)
        for j in order:
            e = script.events[j]
            m = self.retriever.choose(
                e.description,
                e.keywords,
                rng_for(f"event:{e.id}"),
                tie_margin=self.tie_margin,
                min_score=self.min_score,
                kind="event",
                exclude=used,
            )
            used.add(m.clip.id)
            events[j] = m
        return {"background": bed, "events": events}

    def speech(self, script: SceneScript, seed: int, rng_key: str | None = None):
        """The synthesised (and checked) speech layer; cached per turn, so cheap to repeat."""
        return build_speech_layer(
            script, self.registry, seed, self.synth, self.checker, self.max_wer, rng_key=rng_key
        )

    def build(
        self,
        script: SceneScript,
        seed: int,
        rng_key: str | None = None,
        turn_reserve: list[float] | None = None,
        clip_gain: float | None = None,
    ) -> MixResult:
        """One scene. Contrast-family variants pass the family's `rng_key`, the crossed family's
        `turn_reserve` and the family-wide `clip_gain` (see mixer.compose)."""
        import time

        t0 = time.perf_counter()
        found = self.retrieve(script, seed, rng_key)
        t1 = time.perf_counter()
        speech = self.speech(script, seed, rng_key)
        t2 = time.perf_counter()
        self.timings["retrieve"] += t1 - t0
        self.timings["speech+check"] += t2 - t1
        sources = SceneSources(
            SourceRef(found["background"].clip.path, found["background"].clip.id),
            [SourceRef(str(p), f"tts:{p.stem[:16]}") for p in speech.turn_paths],
            [SourceRef(m.clip.path, m.clip.id) for m in found["events"]],
        )
        retrieval = {
            "alpha": self.retriever.alpha,
            "model": self.retriever.embedder.model_name,
            "catalog": self.retriever.catalog.name,
            "catalog_fingerprint": self.retriever.catalog.fingerprint(),
            "background": match_record(found["background"]),
            "events": [match_record(m) for m in found["events"]],
        }
        res = compose(
            script,
            sources,
            seed,
            self.mix_config,
            self.cache,
            extra={"retrieval": retrieval, "speech": speech.annotation()},
            rng_key=rng_key,
            turn_reserve=turn_reserve,
            clip_gain=clip_gain,
        )
        res.annotation = portable_paths(res.annotation, {"{speech_cache}": self.synth.dir})
        self.timings["mix"] += time.perf_counter() - t2
        # Each turn checked in the mixture too (raises MixIntelligibilityError: the scene is skipped).
        from casu_dataset.speech.mix_check import check_mix, transcript_cache

        t3 = time.perf_counter()
        res.annotation["extra"]["mix_intelligibility"] = check_mix(
            res, self.checker, self.max_wer, cache=transcript_cache(self.synth.dir.parent / "mixcheck")
        )
        self.timings["mix check"] = self.timings.get("mix check", 0.0) + time.perf_counter() - t3
        return res


def portable_paths(ann: dict, roots: dict) -> dict:
    """Source paths relative to named roots ({bank}, {speech_cache}), so an annotation, and
    the dataset holding it, is the same on every machine; `regenerate` expands them back."""
    from casu_dataset.sounds.bank import bank_dir

    roots = {"{bank}": bank_dir(), **roots}

    def rel(path: str) -> str:
        for token, root in roots.items():
            root = str(Path(root).resolve())
            if path.startswith(root + "/"):
                return token + path[len(root) :]
        return path

    for entry in [ann["background"], *ann["turns"], *ann["events"]]:
        entry["path"] = rel(str(Path(entry["path"]).resolve()))
    return ann


def match_record(m) -> dict:
    c = m.clip
    return {
        "clip_id": c.id,
        "score": round(m.score, 6),
        "desc_sim": round(m.desc_sim, 6),
        "kw_sim": round(m.kw_sim, 6),
        "caption": c.caption,
        "license": c.license,
        "author": c.author,
        "source": c.source,
    }


def make_builder(spec: dict) -> SceneBuilder:
    """A SceneBuilder from plain settings (picklable, so worker processes can build their own)."""
    from pathlib import Path

    from casu_dataset.sounds.retrieval import Embedder
    from casu_dataset.speech.voices import VoiceRegistry

    cache = Path(spec["cache"]) if spec.get("cache") else None
    names = spec.get("catalogs") or ["embedded"]
    catalog = load_catalog(names[0])
    for c in names[1:]:
        catalog = catalog.merged(load_catalog(c))
    retriever = Retriever(
        catalog, Embedder(spec.get("embedding_model")), alpha=spec.get("alpha", 0.6), cache_dir=cache
    )
    checker = None
    if spec.get("check_speech", True):
        from casu_dataset.speech.intelligibility import WhisperChecker

        checker = WhisperChecker(cpu_threads=spec.get("threads"))
    cfg = MixConfig(fixed_duration=spec["duration"]) if spec.get("duration") else MixConfig()
    lock = None
    if spec.get("lock"):
        from casu_dataset.formats.lock import read_lock

        lock = read_lock(spec["lock"])  # checked against the library by the parent already
    reference = None
    if spec.get("reference_lock"):
        from casu_dataset.formats.lock import read_lock

        reference = read_lock(spec["reference_lock"])
    return SceneBuilder(
        retriever,
        SpeechSynth(cache),
        VoiceRegistry().available(),
        cfg,
        checker,
        lock=lock,
        realization=spec.get("realization", 1),
        reference=reference,
    )


def load_catalog(spec: str):
    """'embedded', a manifest.json path, or KIND:CSV:AUDIO_DIR[:META] for the real corpora
    (clotho:captions.csv:audio/[:metadata.csv], fsd50k:dev.csv:audio/, arca23k:train.csv:audio/)."""
    from casu_dataset.core.errors import Field
    from casu_dataset.sounds.catalog import Catalog, CatalogError

    if spec == "embedded":
        return Catalog.embedded()
    kind, _, rest = spec.partition(":")
    parts = rest.split(":") if rest else []
    if kind == "clotho" and len(parts) in (2, 3):
        return Catalog.from_clotho(*parts)
    if kind in ("fsd50k", "arca23k") and len(parts) == 2:
        return getattr(Catalog, f"from_{kind}")(*parts)
    if spec.endswith(".json"):
        return Catalog.from_manifest(spec)
    raise CatalogError(
        Field("catalogs"),
        f" {spec!r}: expected embedded, a manifest.json, clotho:CSV:AUDIO[:META], "
        "fsd50k:CSV:AUDIO or arca23k:CSV:AUDIO",
    )
