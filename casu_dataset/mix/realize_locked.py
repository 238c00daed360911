"""Following a realization lock: one scene rendered from its lock entry (formats/lock.py holds
the lock file), with how far this machine drifted from the reference build.

Sources are the locked clips (checked by hash), TTS output is conformed to the locked sample
count, and the scene is rendered from the locked plan and gains, so decisions, timelines,
questions and keys are identical by construction. Each scene is reported as `reproduced` (all
four stems hash-equal to the reference) or `drifted`; a drift beyond DRIFT_LIMITS is a LockError
with the numbers."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

from casu_dataset.core.audio_io import array_sha256, encode_flac
from casu_dataset.formats.lock import DRIFT_LIMITS, RELOCK, STEMS, LockError, conform_length, stem_lufs
from casu_dataset.mix.mixer import Clip, MixConfig, SceneSources, SourceRef, render_scene

# A followed lock keeps the reference's anti-clipping gain, set on the reference's own peak (at
# the mix config's limit, 0.98): a drift inside DRIFT_LIMITS may raise that peak, which is fine
# until a sample would clip in the FLAC encoder.
FULL_SCALE = 1.0


@dataclass
class Drift:
    """How one scene of a locked build compares with the reference."""

    scene_id: str
    status: str = "reproduced"  # or "drifted"
    stems: dict = field(default_factory=dict)  # drifted stem -> {"lufs_diff": LU}
    turns: list = field(default_factory=list)  # per turn: samples padded (+) or cut (-), pcm equal

    def to_dict(self) -> dict:
        return {"scene_id": self.scene_id, "status": self.status, "stems": self.stems, "turns": self.turns}


def realize_locked(scene, entry: dict, builder) -> tuple[dict, dict[str, bytes], Drift]:
    """One scene from its lock entry: (annotation, FLAC stems, drift). The annotation is the
    reference's, verbatim: every decision in it is the one this build followed."""
    timings = builder.timings
    t0 = time.perf_counter()
    ann = entry["annotation"]
    sid = scene.script.id
    where = f"scene {sid}"
    if ann.get("script") != scene.script.to_dict():
        raise LockError(
            f"{where}: the script differs from the locked one (library edited without ", RELOCK, ")"
        )
    cfg = MixConfig.model_validate(ann["mix_config"])
    cache, catalog = builder.cache, builder.retriever.catalog

    def bank(rec: dict, what: str) -> tuple[SourceRef, Clip]:
        try:
            clip = catalog[rec["clip_id"]]
        except KeyError:
            raise LockError(
                f"{where}: {what}: locked clip {rec['clip_id']} is not in catalog {catalog.name}"
            ) from None
        c = cache.get(clip.path, None)
        if c.sha256 != rec["sha256"]:
            raise LockError(
                f"{where}: {what}: clip {rec['clip_id']} differs from the locked recording "
                f"(sha256 {c.sha256[:12]} != {rec['sha256'][:12]})"
            )
        return SourceRef(clip.path, rec["clip_id"]), c

    bg_ref, bg = bank(ann["background"], "background")
    ev = [bank(e, f"events[{j}]") for j, e in enumerate(ann["events"])]
    voices = ann["extra"]["speech"]["voices"]
    drift = Drift(sid)
    turn_refs, turn_clips = [], []
    for i, (t, locked) in enumerate(zip(ann["turns"], entry["turns"])):
        vid = voices[t["speaker"]]["id"]
        if vid not in builder.registry:
            raise LockError(
                f"{where}: turns[{i}]: locked voice {vid} is not available here "
                f"(install its engine: see README, set-up)"
            )
        path = builder.synth.synthesize(t["text"], builder.registry[vid], f"{where} turns[{i}]")
        x = cache.get(str(path)).audio
        delta = locked["samples"] - x.shape[0]
        if abs(delta) > DRIFT_LIMITS["turn_samples"]:
            raise LockError(
                f"{where}: turns[{i}] ({vid}): the TTS gave {x.shape[0]} samples, the lock "
                f"{locked['samples']} (|diff| > {DRIFT_LIMITS['turn_samples']}): not the same speech"
            )
        x = conform_length(x, locked["samples"])
        same = array_sha256(x) == locked["pcm_sha256"]
        drift.turns.append({"padded": int(delta), "pcm_equal": same})
        turn_refs.append(SourceRef(str(path), t["clip_id"]))
        turn_clips.append(Clip(audio=x, sha256=t["sha256"], lufs=0.0))
    t1 = time.perf_counter()
    sources = SceneSources(bg_ref, turn_refs, [r for r, _ in ev])
    # Keyed by position, not path: two turns may share a file, each conformed alike.
    clips = {
        bg_ref.path: bg,
        **{r.path: c for r, c in ev},
        **{r.path: c for r, c in zip(turn_refs, turn_clips)},
    }
    try:
        mixture, stems, _ = render_scene(
            ann["plan"],
            sources,
            clips,
            cfg,
            ann["gains"],
            cache,
            clip_gain=ann["gains"]["clip_gain"],
            peak_ceiling=FULL_SCALE,
        )
    except ValueError as err:
        pads = [t["padded"] for t in drift.turns]
        raise LockError(
            f"{where}: {err} (full scale): the sources drifted beyond what the locked gain has room "
            f"for (turn samples padded/cut: {pads}, PCM equal: {[t['pcm_equal'] for t in drift.turns]})"
        ) from None
    t2 = time.perf_counter()
    flac = {"mixture": encode_flac(mixture), **{k: encode_flac(v) for k, v in stems.items()}}
    t3 = time.perf_counter()
    for k in STEMS:
        if hashlib.sha256(flac[k]).hexdigest() != entry["stems"][k]["sha256"]:
            d = stem_lufs(flac[k]) - entry["stems"][k]["lufs"]
            if abs(d) > DRIFT_LIMITS["stem_lu"]:
                raise LockError(
                    f"{where}: {k} stem is {d:+.2f} LU from the reference (limit "
                    f"{DRIFT_LIMITS['stem_lu']} LU)"
                )
            drift.stems[k] = {"lufs_diff": round(d, 4)}
    drift.status = "drifted" if drift.stems else "reproduced"
    for k, v in (
        ("sources+tts", t1 - t0),
        ("render", t2 - t1),
        ("flac", t3 - t2),
        ("drift check", time.perf_counter() - t3),
    ):
        timings[k] = timings.get(k, 0.0) + v
    return ann, flac, drift
