"""The voice registry: every voice has an engine, a gender, an accent and a stable id.

Derived voices extend the pool: a base voice with a pitch shift (semitones) and a tempo
factor. The shift is done without a vocoder: the engine speaks slower by the pitch ratio r,
and the result is resampled by r, which raises the pitch by r and restores the duration.
`derive(base, seed)` draws a shift in documented ranges from a seed; the default pool below
lists the seeds it used, so every identity is reproducible and stable.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
import soxr

from casu_dataset.core.rng import derive_rng
from casu_dataset.speech.engines import EngineError, check_text, get_engine

PITCH_RANGE_ST = (-3.0, 3.0)  # seeded shifts for derived adult voices
TEMPO_RANGE = (0.92, 1.08)
CHILD_PITCH_ST = (3.0, 8.0)  # a child role gets a clearly higher voice
# Children's voices come mostly from the female base for both genders: before puberty the
# two sound alike, and raising a low male voice by the octave a child needs turns it
# cartoonish (awb, the highest male voice, is the one exception).


@dataclass(frozen=True)
class Voice:
    id: str
    engine: str
    base: str  # engine's own voice name or model path
    gender: str  # "female" | "male"
    accent: str
    age: str = "adult"  # "adult" | "child"
    pitch_st: float = 0.0
    tempo: float = 1.0
    seed: int | None = None  # the seed a derived voice was drawn from

    @property
    def base_id(self) -> str:
        return f"{self.engine}:{self.base}"

    def to_dict(self) -> dict:
        return asdict(self)


def derive(base: Voice, seed: int, age: str | None = None, vid: str | None = None) -> Voice:
    """A new identity from `base`: pitch and tempo drawn from the seed within the ranges above."""
    age = age or base.age
    rng = derive_rng(seed, base.id, nbytes=4, byteorder="big")
    lo, hi = CHILD_PITCH_ST if age == "child" else PITCH_RANGE_ST
    pitch = float(np.round(rng.uniform(lo, hi), 2))
    if age != "child" and abs(pitch) < 1.0:  # too close to the base to be a new identity
        pitch = float(np.copysign(1.0 + abs(pitch), pitch if pitch else 1.0))
    tempo = float(np.round(rng.uniform(*TEMPO_RANGE), 3))
    return replace(base, id=vid or f"{base.id}~{seed}", age=age, pitch_st=pitch, tempo=tempo, seed=seed)


_BASES = [
    Voice("piper-joe", "piper", "joe", "male", "us"),
    Voice("flite-slt", "flite", "slt", "female", "us"),
    Voice("flite-rms", "flite", "rms", "male", "us"),
    Voice("flite-awb", "flite", "awb", "male", "scottish"),
    Voice("flite-kal16", "flite", "kal16", "male", "us"),
]
_B = {v.id: v for v in _BASES}
_DERIVED = [
    # Female adults have one base voice (slt), so their seeds were picked for spread
    # (-2.96, -2.45, -1.45, +1.32, +2.78 st): two women in one scene can be >= 3 st apart.
    derive(_B["flite-slt"], 1, vid="flite-slt-a"),
    derive(_B["flite-slt"], 2, vid="flite-slt-b"),
    derive(_B["flite-slt"], 21, vid="flite-slt-c"),
    derive(_B["flite-slt"], 17, vid="flite-slt-d"),
    derive(_B["flite-slt"], 6, vid="flite-slt-e"),
    derive(_B["piper-joe"], 1, vid="piper-joe-a"),
    derive(_B["piper-joe"], 2, vid="piper-joe-b"),
    derive(_B["flite-rms"], 1, vid="flite-rms-a"),
    # Children: two girls 3.2 st apart on the slt base (seeds 53, 33; +7.8 st failed the
    # WER check) and two boys on
    # different bases (slt seed 5; awb seed 70 at +6.5 st, since +7.9 st made awb
    # unintelligible), so any two children get distinct voices that pass the 3-semitone rule.
    derive(_B["flite-slt"], 53, age="child", vid="child-girl"),
    derive(_B["flite-slt"], 33, age="child", vid="child-girl-b"),
    replace(derive(_B["flite-slt"], 5, age="child", vid="child-boy"), gender="male"),
    derive(_B["flite-awb"], 70, age="child", vid="child-boy-b"),
]
# espeak-ng is kept out of the default pool (robotic); it is there for a forced fallback.
FALLBACK = [
    Voice("espeak-f", "espeak", "en-us+f3", "female", "us"),
    Voice("espeak-m", "espeak", "en-us", "male", "us"),
]
DEFAULT_VOICES: list[Voice] = _BASES + _DERIVED


class VoiceRegistry:
    def __init__(self, voices: list[Voice] | None = None):
        self.voices = list(voices or DEFAULT_VOICES)
        ids = [v.id for v in self.voices]
        if len(set(ids)) != len(ids):
            raise ValueError(
                f"voice registry: duplicate voice ids {sorted({i for i in ids if ids.count(i) > 1})}"
            )
        self._by_id = {v.id: v for v in self.voices}

    def __getitem__(self, vid: str) -> Voice:
        try:
            return self._by_id[vid]
        except KeyError:
            raise KeyError(f"unknown voice {vid!r}; known: {', '.join(sorted(self._by_id))}") from None

    def __contains__(self, vid: str) -> bool:
        return vid in self._by_id

    def available(self) -> "VoiceRegistry":
        """Only voices whose engine can run on this machine."""
        return VoiceRegistry([v for v in self.voices if get_engine(v.engine).available()])

    def without(self, ids: set[str]) -> "VoiceRegistry":
        return VoiceRegistry([v for v in self.voices if v.id not in ids])


def speak(text: str, voice: Voice, where: str = "turn") -> tuple[np.ndarray, int]:
    """Synthesise `text` in `voice` (pitch/tempo applied). Mono float32 and its rate."""
    text = check_text(text, f"{where} ({voice.id})")
    r = float(2.0 ** (voice.pitch_st / 12.0))
    engine = get_engine(voice.engine)
    audio, sr = engine.synthesize(text, voice.base, tempo=voice.tempo / r)
    if r != 1.0:
        audio = soxr.resample(audio, sr * r, sr, quality="HQ").astype(np.float32)
    if audio.size == 0 or not np.all(np.isfinite(audio)) or np.max(np.abs(audio)) < 1e-4:
        raise EngineError(
            f"{where} ({voice.id}): {voice.engine} produced silent or invalid audio for {text!r}"
        )
    return audio.astype(np.float32), sr
