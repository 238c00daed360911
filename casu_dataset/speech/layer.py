"""The speech layer of a scene: voices for its speakers and one cached audio file per turn.

Voices are assigned deterministically from (seed, scene id): a speaker's fixed `voice` wins;
otherwise a voice of the speaker's gender and age group (a child role gets a child voice).
The two speakers of a conversation never share a base voice unless the pool forces it, and
then their measured median pitch must differ by at least MIN_SEMITONES.
Synthesised turns are cached on disk by a hash of text, voice and engine version.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import soundfile as sf

from casu_dataset.core import atomic, cache_layout
from casu_dataset.core.audio_io import wav_bytes
from casu_dataset.core.content_key import content_key
from casu_dataset.core.errors import InputError
from casu_dataset.core.rng import derive_rng
from casu_dataset.script.schema import SceneScript, Speaker
from casu_dataset.speech.engines import EngineError, get_engine
from casu_dataset.speech.pitch import median_f0, semitones
from casu_dataset.speech.voices import Voice, VoiceRegistry, speak

MIN_SEMITONES = 3.0
PITCH_PROBE = "The weather today is calm and clear, and the market opens at nine."
SPEECH_CACHE_VERSION = 2  # 2: deterministic WAV bytes


class VoiceAssignmentError(InputError, ValueError):
    pass


class TurnTooLongError(InputError, ValueError):
    pass


def clean_speech_cache(d: Path) -> list[Path]:
    """Remove the temp files of turn and pitch writes whose writer was killed before its rename."""
    return atomic.clean_stale(d.glob("*/" + atomic.TMP_GLOB))


class SpeechSynth:
    """Synthesise and cache turns; also measures (and caches) each voice's median pitch."""

    def __init__(self, cache_dir: str | Path | None = None):
        self.dir = cache_layout.speech_dir(cache_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        clean_speech_cache(self.dir)
        self._pitch: dict[str, float] = {}
        self.hits = 0
        self.misses = 0

    def turn_path(self, text: str, voice: Voice) -> Path:
        k = content_key(
            [SPEECH_CACHE_VERSION, text.strip(), voice.to_dict(), get_engine(voice.engine).version()]
        )
        return self.dir / k[:2] / f"{k}.wav"

    def synthesize(self, text: str, voice: Voice, where: str = "turn") -> Path:
        """Path of a float32 WAV of `text` in `voice`, synthesising it on a cache miss."""
        p = self.turn_path(text, voice)
        if p.is_file():
            self.hits += 1
            return p
        self.misses += 1
        audio, sr = speak(text, voice, where)
        # Our WAV writer, not libsndfile's: its PEAK chunk holds a timestamp, and the file's
        # hash is recorded in every annotation that uses the turn. Atomic: a killed build never
        # leaves a half-written turn.
        atomic.write_bytes(p, wav_bytes(audio, sr))
        return p

    def voice_pitch(self, voice: Voice) -> float:
        """Median f0 (Hz) of the voice on a fixed probe sentence; cached on disk."""
        if voice.id in self._pitch:
            return self._pitch[voice.id]
        p = self.turn_path(PITCH_PROBE, voice).with_suffix(".f0.json")
        if p.is_file():
            f0 = json.loads(p.read_text())["f0"]
        else:
            audio, sr = sf.read(self.synthesize(PITCH_PROBE, voice, "pitch probe"), dtype="float32")
            f0 = median_f0(audio, sr)
            atomic.write_text(p, json.dumps({"f0": f0, "voice": voice.id}))  # a kill never leaves half a file
        self._pitch[voice.id] = f0
        return f0


def candidates(speaker: Speaker, registry: VoiceRegistry) -> list[Voice]:
    age = "child" if speaker.age == "child" else "adult"
    pool = [v for v in registry.voices if v.gender == speaker.gender and v.age == age]
    if not pool and age == "child":
        pool = [v for v in registry.voices if v.age == "child"]
    return pool


def assign_voices(
    script: SceneScript,
    registry: VoiceRegistry,
    seed: int,
    synth: SpeechSynth | None = None,
    exclude: dict[str, set[str]] | None = None,
    rng_key: str | None = None,
) -> dict[str, Voice]:
    """speaker id -> Voice, deterministic from (seed, scene id). `exclude` removes voice ids
    per speaker (used when a voice failed the intelligibility check).

    Two speakers are drawn as a pair, uniformly among the valid pairs: pairs with distinct
    base voices when any exist, otherwise same-base pairs at least MIN_SEMITONES apart in
    measured median pitch."""
    # rng_key: a contrast family's variants share one, so their speakers get the same voices.
    rng = derive_rng(seed, rng_key or script.id, 0x70CE, nbytes=4, byteorder="big")
    exclude = exclude or {}
    pools = []
    for sp in script.speakers:
        if sp.voice:
            if sp.voice not in registry:
                raise VoiceAssignmentError(f"scene {script.id}: speaker {sp.id}: unknown voice {sp.voice!r}")
            pools.append([registry[sp.voice]])
            continue
        pool = [v for v in candidates(sp, registry) if v.id not in exclude.get(sp.id, set())]
        if not pool:
            raise VoiceAssignmentError(
                f"scene {script.id}: speaker {sp.id}: no {sp.age} {sp.gender} voice left in the pool"
            )
        pools.append(pool)
    ids = [sp.id for sp in script.speakers]
    if len(pools) == 1:
        return {ids[0]: pools[0][int(rng.integers(len(pools[0])))]}
    pairs = [(a, b) for a in pools[0] for b in pools[1] if a.base_id != b.base_id]
    if not pairs:
        # The pool forces a shared base: only pairs far enough apart in pitch qualify.
        if synth is None:
            raise VoiceAssignmentError(f"scene {script.id}: shared base voice needs a pitch check (no synth)")
        pairs = [
            (a, b)
            for a in pools[0]
            for b in pools[1]
            if a.id != b.id and semitones(synth.voice_pitch(a), synth.voice_pitch(b)) >= MIN_SEMITONES
        ]
        if not pairs:
            raise VoiceAssignmentError(
                f"scene {script.id}: speakers {ids[0]} and {ids[1]}: every pair of candidate voices is "
                f"within {MIN_SEMITONES} semitones ({', '.join(v.id for v in pools[0])} / "
                f"{', '.join(v.id for v in pools[1])})"
            )
    a, b = pairs[int(rng.integers(len(pairs)))]
    return {ids[0]: a, ids[1]: b}


def cached_check(checker, path: Path, text: str) -> dict:
    """The clean-turn Whisper check, stored beside the turn's WAV (whose name is a hash of text,
    voice and engine) and keyed on the checker's model: contrast-family variants share their
    turns, so each turn is transcribed once however many variants use it."""
    mid = getattr(checker, "model_id", None)
    if not isinstance(mid, str):
        return checker.check_file(path, text)
    side = Path(path).with_suffix(f".check-{hashlib.sha256((mid + text).encode()).hexdigest()[:16]}.json")
    if side.is_file():
        try:
            return json.loads(side.read_text())
        except (OSError, ValueError):
            pass  # a damaged side file is recomputed
    res = checker.check_file(path, text)
    atomic.write_text(side, json.dumps(res))
    return res


@dataclass
class SpeechLayer:
    voices: dict[str, Voice]
    turn_paths: list[Path]
    checks: list[dict]  # per turn: transcript, wer, flagged
    attempts: int

    def annotation(self) -> dict:
        return {
            "voices": {k: v.to_dict() for k, v in self.voices.items()},
            "intelligibility": self.checks,
            "voice_attempts": self.attempts,
        }


def build_speech_layer(
    script: SceneScript,
    registry: VoiceRegistry,
    seed: int,
    synth: SpeechSynth,
    checker=None,
    max_wer: float = 0.5,
    max_attempts: int = 3,
    rng_key: str | None = None,
) -> SpeechLayer:
    """Synthesise every turn; with a checker, a speaker whose turn exceeds max_wer gets
    another voice (whole speaker, so one person keeps one voice) up to max_attempts, after
    which the turn is flagged in the annotation."""
    exclude: dict[str, set[str]] = {}
    for attempt in range(1, max_attempts + 1):
        voices = assign_voices(script, registry, seed, synth, exclude, rng_key)
        paths = []
        for i, t in enumerate(script.turns):
            try:
                paths.append(synth.synthesize(t.text, voices[t.speaker], f"scene {script.id} turns[{i}]"))
            except EngineError as err:
                raise EngineError(
                    f"scene {script.id}: turns[{i}] ({t.speaker}, {voices[t.speaker].id}): {err}"
                ) from None
            dur = sf.info(str(paths[-1])).duration
            if dur > script.max_duration:
                raise TurnTooLongError(
                    f"scene {script.id}: turns[{i}]: synthesised speech is {dur:.1f} s, "
                    f"longer than the {script.max_duration:g} s scene"
                )
        checks = []
        if checker is not None:
            checks = [cached_check(checker, p, t.text) for p, t in zip(paths, script.turns)]
            for c in checks:
                c["flagged"] = c["wer"] > max_wer
            bad = {t.speaker for t, c in zip(script.turns, checks) if c["flagged"]}
            fixable = {s for s in bad if not script.speaker(s).voice}
            if fixable and attempt < max_attempts:
                try:
                    for s in fixable:
                        exclude.setdefault(s, set()).add(voices[s].id)
                    assign_voices(script, registry, seed, synth, exclude, rng_key)
                    continue
                except VoiceAssignmentError:
                    pass  # no other voice: keep this one and flag the turns
        return SpeechLayer(voices, paths, checks, attempt)
    raise AssertionError("unreachable")
